"""The answer of one window: the one place that decides what "is speculation paying now?"
rests on, and every figure beside it. Pure: the window's figures in, an :class:`Answer` out.

The evidence, best first (:class:`Evidence`):

1. ``twin``, 2. ``canary`` (:mod:`specmon.answer.canary`), 3. ``profile``, 4. ``history``: the
   window compared with a baseline's step times at the load it runs at now
   (:func:`specmon.answer.reads.read_comparison`): measured there, read off the cost curve in
   a bucket it measured, or ``measuring`` (a new load: no number);
5. ``engine``: the draft cost the engine measures (TensorRT-LLM), applied to the window's
   acceptance by the cost model;
6. ``configured`` and 7. ``default``: the configured (or specmon's default) draft cost: a
   guess, for a target where nothing was ever measured.

A target that has measured evidence never falls back to a guessed cost: when its comparison
cannot read the load it runs at now, the answer is ``measuring``, with the last answer that
had a number and its load. The break-even alpha, the margin and the best chain length are
always at the answer's own c.
"""

from __future__ import annotations

from specmon import arithmetic
from specmon.answer.model import (
    Answer,
    Earlier,
    Evidence,
    ReadState,
    Refusal,
    Standing,
)
from specmon.answer.reads import Read
from specmon.engines import SpecCounters
from specmon.load.curve import acceptance_log_sd, speedup_interval
from specmon.records import record
from specmon.report import AcceptanceReport, best_chain

__all__ = [
    "NEAR_MARGIN",
    "NEAR_SPEEDUP",
    "AtCost",
    "Comparison",
    "Setting",
    "at_cost",
    "best_at_cost",
    "decide",
    "standing",
]

#: A margin (alpha minus break-even, at the answer's c) below this is "near break-even".
NEAR_MARGIN = 0.05
#: A speed-up below this is "near break-even" (5 %: within what a shift of the request mix
#: moves it).
NEAR_SPEEDUP = 1.05


@record
class Setting:
    """What the configuration and the engine say of one model's draft cost."""

    #: The configured ``draft_cost``, else specmon's default (a guess).
    draft_cost: float
    draft_cost_configured: bool
    #: The draft cost the engine measured (TensorRT-LLM's draft overhead), or None.
    engine_draft_cost: float | None = None


@record
class Comparison:
    """The window against a baseline: which, and how it read at the current load."""

    basis: Evidence
    #: The twin's name, "canary", "profile" or "history".
    name: str
    read: Read
    #: The compared epoch in words (``history``), the canary in words (``canary``), or None.
    detail: str | None = None
    #: What the answer should say of the baseline (a twin whose model could not be checked).
    notes: tuple[str, ...] = ()


def decide(
    report: AcceptanceReport | None,
    *,
    setting: Setting,
    comparison: Comparison | None = None,
    refused: tuple[Refusal, ...] = (),
    measured_before: Earlier | None = None,
    mean_concurrency: float | None = None,
    at: float | None = None,
    notes: tuple[str, ...] = (),
    cut: str | None = None,
    counts: SpecCounters | None = None,
) -> Answer | None:
    """The answer of one window (None: nothing to judge: no acceptance and no comparison).

    ``report``: the window's acceptance figures; ``comparison``: against the twin, the
    profile or the server's own past (None: none to compare with); ``refused``: better
    bases that could not be used, best first; ``measured_before``: the last answer of this
    window with a number on a comparison basis (the daemon keeps it), which also says that
    this target has measured evidence: it never falls to a guess while a comparison is
    configured; ``mean_concurrency``: the window's time-averaged load; ``at``: the load it
    runs at now (when there is no comparison); ``cut``: the configuration change the window
    is cut at, in words; ``counts``: the window's counters the report was made from (the
    interval's draft counts; None: read back from the report)."""
    if comparison is not None:
        return _compared(report, comparison, refused=refused, earlier=measured_before,
                         mean=mean_concurrency, notes=notes, cut=cut)  # fmt: skip
    if report is None:
        return None
    if measured_before is not None and refused:
        # Compared before, not now (the twin refused or silent): no guess in its place.
        return Answer(
            refused[0].basis, ReadState.MEASURING, None, None, None, None, None, None, None,
            Standing.MEASURING, concurrency=at, mean_concurrency=mean_concurrency,
            refused=refused, earlier=measured_before, progress=refused[0].reason,
            notes=notes, cut=cut,
        )  # fmt: skip
    engine = setting.engine_draft_cost
    if engine is not None:
        basis, state, cost = Evidence.ENGINE, ReadState.MODELLED, engine
    else:
        cost = report.draft_cost
        basis = Evidence.CONFIGURED if setting.draft_cost_configured else Evidence.DEFAULT
        state = ReadState.GUESS
    figures = at_cost(report, cost)
    return Answer(
        basis, state, figures.speedup, _acceptance_interval(report, figures.speedup, counts), cost,
        figures.breakeven_alpha, figures.alpha_margin, figures.best_chain_length,
        figures.best_speedup, standing(figures.speedup, figures.alpha_margin),
        concurrency=at, mean_concurrency=mean_concurrency, refused=refused, notes=notes,
        cut=cut,
    )  # fmt: skip


def _compared(
    report: AcceptanceReport | None,
    comparison: Comparison,
    *,
    refused: tuple[Refusal, ...],
    earlier: Earlier | None,
    mean: float | None,
    notes: tuple[str, ...],
    cut: str | None,
) -> Answer:
    read = comparison.read
    state = ReadState(read.state)
    measuring = state is ReadState.MEASURING
    cost = None if measuring else read.draft_cost
    figures = (
        at_cost(report, cost)
        if report is not None and cost is not None
        else AtCost(None, None, None, None, None)
    )
    if (
        report is not None
        and cost is not None
        and figures.best_chain_length
        and read.speedup is not None
        and read.speedup < 1.0
    ):
        figures = _best_that_pays(report, figures, cost, read.speedup, read.interval)
    return Answer(
        comparison.basis, state, read.speedup, read.interval, cost, figures.breakeven_alpha,
        figures.alpha_margin, figures.best_chain_length, figures.best_speedup,
        Standing.MEASURING if measuring else standing(read.speedup, figures.alpha_margin),
        crossover=read.crossover, per_load=read.per_load, against=comparison.name,
        against_detail=comparison.detail, concurrency=read.at, bucket=read.bucket,
        time_per_output_token_seconds=read.time_per_output_token_seconds,
        mean_concurrency=mean, refused=refused, earlier=earlier if measuring else None,
        progress=read.progress, notes=(*notes, *comparison.notes, *read.notes), cut=cut,
    )  # fmt: skip


def _best_that_pays(
    report: AcceptanceReport,
    figures: AtCost,
    cost: float,
    speedup: float | None,
    interval: tuple[float, float] | None,
) -> AtCost:
    """For a window whose chain runs slower than without speculation: ``figures`` with the
    best chain length 0 ("off") unless some shorter chain pays at the measured c's
    pessimistic end, the c that the speed-up's 95 % lower bound implies by the cost model's
    S = L / (1 + c d): 1 + c_hi d = (1 + c d) S / S_low. A shorter chain that pays is then
    the cost model's extrapolation from the k that was measured (its c linear in k, where
    an engine's need not be), from a c that a few intervals into a new load is noisy: the
    demo at 32 requests (c 0.98, k 1 at 0.96x) read k 1 from a c of 0.87 (bench/RESULTS.md,
    "The demo's answer"). Where the chain pays (S >= 1) some chain does by measure, and the
    best is the point c's (a wide interval must not say "off" beside a verdict of 1.3x).
    No interval: unchanged."""
    if speedup is None or interval is None or speedup <= 0 or interval[0] <= 0:
        return figures
    drafted = report.mean_draft_length or float(report.chain_length or 1)
    pessimistic = ((1.0 + cost * drafted) * speedup / interval[0] - 1.0) / drafted
    if pessimistic <= cost:
        return figures
    chosen = best_at_cost(report, pessimistic)
    if chosen is None or chosen.chain_length > 0:
        return figures
    return AtCost(figures.speedup, figures.breakeven_alpha, figures.alpha_margin, 0, 1.0)


def standing(speedup: float | None, margin: float | None) -> Standing:
    """Slower when the speed-up is below 1; below break-even on a negative margin; near
    within ``NEAR_MARGIN`` / ``NEAR_SPEEDUP``; unjudged with neither figure; else fine."""
    if speedup is not None and speedup < 1.0:
        return Standing.SLOWER
    if margin is not None and margin < 0.0:
        return Standing.BELOW
    if speedup is None and margin is None:
        return Standing.UNJUDGED
    if (margin is not None and margin < NEAR_MARGIN) or (
        speedup is not None and speedup < NEAR_SPEEDUP
    ):
        return Standing.NEAR
    return Standing.FINE


def _acceptance_interval(
    report: AcceptanceReport, speedup: float | None, counts: SpecCounters | None = None
) -> tuple[float, float] | None:
    """The 95 % interval of a speed-up at a fixed c: the acceptance's alone (from the
    window's draft counts and per-position survival); None without counted drafts.
    ``counts``: the counters the report was made from, else its counts are read back from
    it (survival x drafts: the same integers, the survival being count / drafts)."""
    if speedup is None or not report.drafts or report.accepted_tokens is None:
        return None
    if counts is None:
        d = report.drafts
        positions = tuple(round((p.survival or 0.0) * d) for p in report.positions)
        counts = SpecCounters(drafts=d, draft_tokens=report.draft_tokens or 0,
                              accepted_tokens=report.accepted_tokens,
                              accepted_per_position=positions)  # fmt: skip
    drafted = report.mean_draft_length or float(report.chain_length or 1)
    sd = acceptance_log_sd(counts, tokens_per_draft=drafted)
    if sd is None:
        return None
    return speedup_interval(speedup, sd, chain_length=report.chain_length, measured=False)


# -- a window's figures at one draft cost ----------------------------------------------------


@record
class AtCost:
    """The window's figures at one draft cost."""

    speedup: float | None
    breakeven_alpha: float | None
    alpha_margin: float | None
    best_chain_length: int | None
    best_speedup: float | None


def at_cost(report: AcceptanceReport, draft_cost: float, *, best: bool = True) -> AtCost:
    """The window's expected speed-up, break-even alpha, margin and (with ``best``) best
    chain length at ``draft_cost`` (below 0 counts as 0) instead of the report's own c: the
    cost model's S = L / (1 + c d), with L the mean acceptance length and d the tokens
    drafted per draft (k when the engine counts only one of the two). At the report's own c
    these are the report's figures."""
    cost = max(draft_cost, 0.0)
    if cost == report.draft_cost:
        return AtCost(report.expected_speedup, report.breakeven_alpha, report.alpha_margin,
                      report.best_chain_length, report.best_speedup)  # fmt: skip
    k = report.chain_length
    drafted = report.mean_draft_length
    if drafted is None and k:
        drafted = float(k)
    speedup: float | None = None
    if report.mean_acceptance_length is not None and drafted is not None:
        speedup = arithmetic.speedup_from_length(report.mean_acceptance_length, cost, drafted)
    elif report.alpha is not None and k:
        speedup = arithmetic.speedup(report.alpha, k, cost)
    breakeven = arithmetic.breakeven_alpha(k, cost) if k else None
    margin = (
        report.alpha - breakeven if report.alpha is not None and breakeven is not None else None
    )
    chosen = best_at_cost(report, cost) if best else None
    return AtCost(speedup, breakeven, margin,
                  chosen.chain_length if chosen else None, chosen.speedup if chosen else None)  # fmt: skip


def best_at_cost(report: AcceptanceReport, draft_cost: float) -> arithmetic.BestChain | None:
    """The window's best chain length at ``draft_cost`` (as :func:`at_cost` for its
    speed-up): from its per-position survival, else its alpha as independent acceptance,
    the way the report chose its own."""
    survival = [p.survival for p in report.positions if p.survival is not None]
    if survival and len(survival) == len(report.positions):
        drafted = report.mean_draft_length
        if drafted is None and report.draft_tokens is not None and report.drafts:
            drafted = report.draft_tokens / report.drafts
        return best_chain(
            draft_cost=draft_cost, chain_length=report.chain_length, survival=survival,
            drafted_per_draft=drafted,
        )  # fmt: skip
    if report.alpha is None or report.chain_length is None:
        return None
    return best_chain(draft_cost=draft_cost, chain_length=report.chain_length, alpha=report.alpha)
