"""The best-evidence verdict: one answer per target, model and window to "is speculation paying
now?", with what it rests on. Pure: the figures are the window's report and load figures.

The evidence, best first:

1. ``twin``: the speed-up realized against the baseline twin at the current load (its buckets
   of the same concurrency), with the draft cost measured there;
2. ``profile``: the same against the cost profile (``specmon measure --profile-out``);
3. ``history``: the speed-up realized against this server's own epoch without speculation at
   the same load (configuration epochs, kept across restarts: docs/history.md);
4. ``engine``: the draft cost the engine measures itself (TensorRT-LLM's draft overhead),
   applied to the window's acceptance by the cost model (docs/background.md);
5. ``configured``: the configured ``draft_cost``, applied the same way;
6. ``default``: no draft cost configured anywhere: ``DEFAULT_DRAFT_COST``, a guess.

The margin and the break-even alpha are on the same basis as the speed-up. The configured-cost
figures (``specmon_expected_speedup_ratio``, ``specmon_alpha_margin_ratio``, ...) stay as they
are; this is the headline beside them.
"""

from __future__ import annotations

from enum import StrEnum

from specmon import arithmetic
from specmon.daemon.load_view import HISTORY, PROFILE, LoadFigures
from specmon.engines import SpecCounters
from specmon.load.curve import acceptance_log_sd, speedup_interval
from specmon.records import record
from specmon.report import AcceptanceReport, best_chain

__all__ = ["MEASURED_C", "Evidence", "Verdict", "at_cost", "best_at_cost", "verdict"]


class Evidence(StrEnum):
    """What a verdict rests on: the ``basis`` label of ``specmon_verdict_info``, best first."""

    TWIN = "twin"
    PROFILE = "profile"
    HISTORY = "history"
    ENGINE = "engine"
    CONFIGURED = "configured"
    DEFAULT = "default"


@record
class Verdict:
    basis: Evidence
    #: The speed-up believed now (tokens/s with speculation over without); None when the
    #: evidence gives none yet (then the margin may still say which side of break-even).
    speedup: float | None
    #: The draft cost c on this basis (None: the twin or profile measured none usable).
    draft_cost: float | None
    breakeven_alpha: float | None
    alpha_margin: float | None
    #: One line for an operator: what the answer rests on, and how to get better evidence.
    detail: str
    #: The 95 % interval of ``speedup`` (specmon.load.curve): on a twin or profile, the
    #: acceptance, the step times' spread and (read off the cost curve) its fit; on the
    #: engine's, configured or default c, the acceptance alone (the guessed c has none).
    speedup_interval: tuple[float, float] | None = None
    #: How a twin or profile verdict was read: "measured" (this window's bucket),
    #: "interpolated" (the cost curve, inside the loads measured), "extrapolated".
    read: str | None = None


def at_cost(
    report: AcceptanceReport, draft_cost: float
) -> tuple[float | None, float | None, float | None]:
    """The window's expected speed-up, break-even alpha and margin at ``draft_cost`` instead of
    the report's own: the cost model's S = L / (1 + c d), with L the mean acceptance length
    and d the tokens drafted per draft (k when the engine counts only one of the two)."""
    k = report.chain_length
    drafted = report.mean_draft_length
    if drafted is None and k:
        drafted = float(k)
    speedup: float | None = None
    if report.mean_acceptance_length is not None and drafted is not None:
        speedup = arithmetic.speedup_from_length(report.mean_acceptance_length, draft_cost, drafted)
    elif report.alpha is not None and k:
        speedup = arithmetic.speedup(report.alpha, k, draft_cost)
    breakeven = arithmetic.breakeven_alpha(k, draft_cost) if k else None
    margin = (
        report.alpha - breakeven if report.alpha is not None and breakeven is not None else None
    )
    return speedup, breakeven, margin


#: The bases whose verdict carries a draft cost that was measured, not configured or guessed.
MEASURED_C = (Evidence.TWIN, Evidence.PROFILE, Evidence.HISTORY, Evidence.ENGINE)


def best_at_cost(report: AcceptanceReport, draft_cost: float) -> arithmetic.BestChain | None:
    """The window's best chain length at ``draft_cost`` instead of the report's own c (as
    :func:`at_cost` for its speed-up): from its per-position survival, else its alpha as
    independent acceptance, the way the report chose its own."""
    survival = [p.survival for p in report.positions if p.survival is not None]
    if survival and len(survival) == len(report.positions):
        return best_chain(
            draft_cost=draft_cost, chain_length=report.chain_length, survival=survival
        )
    if report.alpha is None or report.chain_length is None:
        return None
    return best_chain(draft_cost=draft_cost, chain_length=report.chain_length, alpha=report.alpha)


def verdict(
    report: AcceptanceReport | None,
    load: LoadFigures | None,
    *,
    engine_draft_cost: float | None,
    draft_cost_configured: bool,
) -> Verdict | None:
    """The best-evidence verdict of one window (None: nothing to judge, no report and no
    comparison)."""
    figures: tuple[float | None, float | None, float | None, float | None]
    history = load is not None and load.baseline == HISTORY
    if load is not None and history and load.realized_speedup is not None:
        basis = Evidence.HISTORY
        figures = (load.realized_speedup, load.measured_draft_cost,
                   load.measured_breakeven_alpha, load.measured_alpha_margin)  # fmt: skip
        detail = f"realized {load.against}"
    elif load is not None and load.baseline is not None and load.realized_speedup is not None:
        twin = load.baseline != PROFILE
        basis = Evidence.TWIN if twin else Evidence.PROFILE
        against = f"the twin {load.baseline}" if twin else "the cost profile"
        figures = (
            load.realized_speedup,
            load.measured_draft_cost,
            load.measured_breakeven_alpha,
            load.measured_alpha_margin,
        )
        how = "" if load.read in (None, "measured") else f", {load.read} on the cost curve"
        detail = f"realized against {against} at this load (bucket {load.bucket}{how})"
    elif report is None:
        return None
    elif engine_draft_cost is not None:
        basis = Evidence.ENGINE
        speedup, breakeven, margin = at_cost(report, engine_draft_cost)
        figures = (speedup, engine_draft_cost, breakeven, margin)
        detail = f"at the draft cost the engine measures (c = {engine_draft_cost:.3g})"
    else:
        basis = Evidence.CONFIGURED if draft_cost_configured else Evidence.DEFAULT
        figures = (
            report.expected_speedup,
            report.draft_cost,
            report.breakeven_alpha,
            report.alpha_margin,
        )
        cost = f"c = {report.draft_cost:g}"
        detail = (
            f"at the configured draft cost {cost}; "
            if draft_cost_configured
            else f"at the default draft cost {cost}, a guess (no draft_cost configured); "
        ) + (
            "a baseline twin (baseline:) or a cost profile (specmon measure --profile-out) "
            "would measure it at this load"
        )
    speedup, cost_c, breakeven, margin = figures
    if load is not None and load.baseline_refused is not None:  # the twin was refused
        detail = f"{load.baseline_refused}; {detail}"
    if basis in (Evidence.TWIN, Evidence.PROFILE, Evidence.HISTORY):
        assert load is not None
        return Verdict(basis, speedup, cost_c, breakeven, margin, detail,
                       load.speedup_interval, load.read)  # fmt: skip
    if load is not None and load.baseline is not None and load.reason:
        # Compared, but nothing measured at this load, nor on the curve near it: say why.
        detail = f"no measured speed-up at this load ({load.reason}); {detail}"
    return Verdict(basis, speedup, cost_c, breakeven, margin, detail,
                   _acceptance_interval(report, speedup))  # fmt: skip


def _acceptance_interval(
    report: AcceptanceReport | None, speedup: float | None
) -> tuple[float, float] | None:
    """The 95 % interval of a speed-up at a fixed c: the acceptance's alone (binomial from
    the window's draft counts and per-position survival); None without counted drafts."""
    if report is None or speedup is None or not report.drafts or report.accepted_tokens is None:
        return None
    d = report.drafts
    positions = tuple(round((p.survival or 0.0) * d) for p in report.positions)
    drafted = report.mean_draft_length or float(report.chain_length or 1)
    counters = SpecCounters(drafts=d, draft_tokens=report.draft_tokens or 0,
                            accepted_tokens=report.accepted_tokens,
                            accepted_per_position=positions)  # fmt: skip
    sd = acceptance_log_sd(counters, tokens_per_draft=drafted)
    if sd is None:
        return None
    return speedup_interval(speedup, sd, chain_length=report.chain_length, measured=False)
