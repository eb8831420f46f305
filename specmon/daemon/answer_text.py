"""The verdict's answer in words, shared by the status page, the target page and the demo's
terminal view: the crossover with its range, and the best chain length on the verdict's basis
(one answer on every surface, issue 54). Pure."""

from __future__ import annotations

from html import escape

from specmon.daemon.load_view import LoadFigures
from specmon.daemon.verdict import MEASURED_C, Evidence, Verdict, best_at_cost
from specmon.load import Crossover
from specmon.report import AcceptanceReport

__all__ = ["best_on_basis", "crossover_text"]


def crossover_text(crossover: Crossover) -> str:
    """The crossover with its 95 % range ("10.9 (10.2-11.6)"), and its gap note on hover."""
    text = f"{crossover.concurrency:.1f}"
    if crossover.low is not None and crossover.high is not None:
        text += f" ({crossover.low:.1f}&ndash;{crossover.high:.1f})"
    if crossover.note:
        text += f' <span class="muted" title="{escape(crossover.note)}">&#9888; gap</span>'
    return text


def best_on_basis(
    report: AcceptanceReport | None,
    load: LoadFigures | None,
    verdict: Verdict | None,
    *,
    configured: float,
) -> tuple[int | None, float | None, str]:
    """The best chain length on the verdict's basis, and the text saying which c: at the draft
    cost measured in the verdict's bucket when it rests on a twin or profile; else at the
    verdict's own measured c (a twin or profile read off the cost curve, the server's own
    past, TensorRT-LLM's engine-measured c) from the window's acceptance; else at the
    configured (or default) c."""
    if verdict is not None and verdict.basis in (Evidence.TWIN, Evidence.PROFILE) and load:
        mine = next((b for b in load.buckets if b.label == load.bucket), None)
        if mine is not None and mine.best_chain_length is not None:
            return (
                mine.best_chain_length,
                mine.best_speedup,
                f"at measured c {_c(mine.draft_cost)}",
            )
    if (
        verdict is not None
        and verdict.basis in MEASURED_C
        and verdict.draft_cost is not None
        and report is not None
    ):
        best_here = best_at_cost(report, verdict.draft_cost)
        if best_here is not None:
            word = "the engine's" if verdict.basis is Evidence.ENGINE else "measured"
            return (
                best_here.chain_length,
                best_here.speedup,
                f"at {word} c {_c(verdict.draft_cost)}",
            )
    best = report.best_chain_length if report is not None else None
    speed = report.best_speedup if report is not None else None
    which = "default" if verdict is not None and verdict.basis is Evidence.DEFAULT else "configured"
    return best, speed, f"at {which} c {configured:g}"


def _c(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.3f}"
