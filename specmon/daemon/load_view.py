"""A window's load-aware figures, for the views: live load and speed from the engine's own
counters, and, with a baseline, the realized speed-up, the measured draft cost, the verdict at
that cost, the crossover concurrency and the best chain length per load level. Pure: the
arithmetic is :mod:`specmon.load`'s and :mod:`specmon.report`'s; nothing here is I/O.

The baseline is a twin target (``baseline: NAME``: its buckets of the same concurrency, like
with like) or a profile (``cost_profile: FILE``: interpolated between its levels, never past
them). Without either, the load figures are there and the verdict stays on the configured c.
"""

from __future__ import annotations

from functools import partial

from specmon import arithmetic
from specmon.engines import SpecCounters
from specmon.load import (
    DEFAULT_SCHEME,
    BucketVerdict,
    CompareMemo,
    Crossover,
    LoadWindow,
    Profile,
    Speeds,
    compare_with_profile,
    compare_with_twin,
    crossover_at_acceptance,
    measured_costs,
)
from specmon.load import curve as cost_curve
from specmon.load.compare import WITHHELD, BucketComparison
from specmon.records import record
from specmon.report import best_chain, report_from_counters

__all__ = [
    "HISTORY",
    "PROFILE",
    "BucketFigures",
    "LoadFigures",
    "live_load_figures",
    "load_figures",
    "read_concurrency",
]

#: The ``baseline`` label of figures measured against a ``cost_profile``.
PROFILE = "profile"
#: The ``baseline`` of figures read against the server's own past (specmon.daemon.epoch_curves).
HISTORY = "history"
#: Mean drafted tokens per draft this far below k means the engine varies its draft length.
_VARIABLE_DRAFT = 0.95


@record
class BucketFigures:
    """One concurrency bucket of a window against the baseline (None: not measured yet)."""

    label: str
    low: float
    high: float
    #: The target's mean concurrency in the bucket.
    concurrency: float | None
    realized_speedup: float | None
    draft_cost: float | None
    best_chain_length: int | None
    best_speedup: float | None
    #: Why there are no figures ("too little data: ...", "no matching baseline bucket yet").
    reason: str | None


@record
class LoadFigures:
    """What a window says about load and speed, and, with a baseline, about the verdict."""

    concurrency: float | None
    step_seconds: float | None
    time_per_output_token_seconds: float | None
    #: Drafted tokens per draft; below the chain length when the engine varies k.
    mean_draft_length: float | None
    #: The twin's name, "profile", or None (no baseline: the configured c decides).
    baseline: str | None
    #: The bucket of the window's concurrency and its figures.
    bucket: str | None = None
    realized_speedup: float | None = None
    measured_draft_cost: float | None = None
    measured_breakeven_alpha: float | None = None
    measured_alpha_margin: float | None = None
    #: Why the current bucket has no figures.
    reason: str | None = None
    crossover: Crossover | None = None
    buckets: tuple[BucketFigures, ...] = ()
    notes: tuple[str, ...] = ()
    #: Why the configured twin is not compared with (specmon.daemon.twins), or None.
    baseline_refused: str | None = None
    #: Why a bucket's figures were withheld (a bound of specmon.bounds broken: the first
    #: such bucket), counted as ``speedup_above_bound``; None when none was.
    withheld: str | None = None
    #: The 95 % interval of ``realized_speedup`` (specmon.load.curve).
    speedup_interval: tuple[float, float] | None = None
    #: How the speed-up was read: "measured" (this window's bucket against the baseline's,
    #: or for ``history`` a bucket both epochs measured), "interpolated" (the cost curve,
    #: inside the loads measured), "extrapolated" (the next bucket past them). The one word
    #: every surface shows (API, status page, target page, terminal).
    read: str | None = None
    #: The load the figures are for (the latest interval's) and its bucket's time per
    #: output token (this window's bucket when measured, else the curve's at that load).
    read_concurrency: float | None = None
    read_time_per_output_token_seconds: float | None = None
    #: The ``history`` basis: the epoch compared, in words (specmon.daemon.epoch_curves).
    against: str | None = None


def read_concurrency(*, latest: float | None, window: float | None) -> float | None:
    """ "At this load": the concurrency every basis (twin, profile, history) reads its verdict
    at, and the one place that decides it. The latest interval's (the window's mean can fall
    between the loads the window saw), else, when that interval decoded nothing (the server
    idle) or its engine counts no steps, the window's."""
    return latest if latest is not None else window


def load_figures(
    window: LoadWindow,
    *,
    acceptance: SpecCounters,
    chain_length: int | None,
    baseline: str | None = None,
    twin: LoadWindow | None = None,
    profile: Profile | None = None,
    memo: CompareMemo | None = None,
    note: str | None = None,
) -> LoadFigures | None:
    """The figures of one window of a speculating target compared with its baseline (None
    when the window has no load data at all); a window with nothing to compare it with is
    :func:`live_load_figures`' (the caller decides, once).

    ``acceptance``: the window's speculative counters. ``twin``: the baseline target's same
    window; ``profile``: the cost profile (one of the two is given); ``memo``: the window's
    comparison memo (the same figures, each bucket compared once per change of its sums).
    """
    totals = window.totals
    if totals is None:
        return None
    concurrency = totals.concurrency
    if concurrency is None:
        concurrency = window.requests_running_mean
    step_seconds = totals.step_seconds
    tpot = totals.time_per_output_token_seconds
    mean_draft, notes = _draft_length(acceptance, chain_length)
    if note is not None:
        notes = (*notes, note)
    name = baseline if twin is not None else PROFILE
    if twin is not None:
        verdicts = compare_with_twin(
            window.buckets, twin.buckets, chain_length=chain_length, memo=memo
        )
    else:
        assert profile is not None
        verdicts = compare_with_profile(
            window.buckets, profile, chain_length=chain_length, memo=memo
        )
    now = read_concurrency(
        latest=window.latest.concurrency if window.latest is not None else None,
        window=concurrency,
    )
    current = DEFAULT_SCHEME.bucket_of(now) if now is not None else None
    survival = arithmetic.survival(acceptance.accepted_per_position, acceptance.drafts) or []
    buckets = tuple(_bucket(v, survival, chain_length) for v in verdicts)
    mine = next((v for v in verdicts if current is not None and v.bucket == current), None)
    curve = _curve(window, twin, profile)
    per_step = totals.tokens_per_step
    draft_length = mean_draft if mean_draft is not None else float(chain_length or 1)
    sd = cost_curve.acceptance_log_sd(acceptance, tokens_per_draft=draft_length)
    crossing = None
    if curve is not None and per_step is not None:
        crossing = curve.crossover(
            tokens_per_step=per_step, acceptance_sd=sd or 0.0, chain_length=chain_length
        )
    elif curve is None:
        crossing = crossover_at_acceptance(measured_costs(verdicts), acceptance)
    comparison = mine.comparison if mine is not None else None
    withheld = next(
        (v.reason[len(WITHHELD) :] for v in verdicts if v.reason and v.reason.startswith(WITHHELD)),
        None,
    )
    # The figures every branch below shares (made once, not made and then replaced: this
    # runs for every window of a compared target at every scrape).
    figures = partial(
        LoadFigures, concurrency, step_seconds, tpot, mean_draft, name,
        bucket=current.label if current else None, crossover=crossing,
        buckets=buckets, notes=notes, read_concurrency=now, withheld=withheld,
    )  # fmt: skip
    if comparison is None:
        reason = mine.reason if mine is not None else "no data at this concurrency yet"
        read = (
            curve.read(
                now, tokens_per_step=per_step, acceptance_sd=sd or 0.0, chain_length=chain_length
            )
            if curve is not None and now is not None and per_step is not None
            else None
        )
        if isinstance(read, cost_curve.CurveRead):
            cost = _exported_cost(read.draft_cost)
            report = report_from_counters(
                acceptance, draft_cost=max(read.draft_cost or 0.0, 0.0),
                configured_chain_length=chain_length,
            ) if read.draft_cost is not None and acceptance.drafts > 0 else None  # fmt: skip
            lo, hi = read.between
            where = f"between buckets {lo} and {hi}" if lo != hi else f"next to bucket {lo}"
            assert curve is not None and now is not None and per_step is not None
            return figures(
                realized_speedup=read.speedup, measured_draft_cost=cost,
                measured_breakeven_alpha=report.breakeven_alpha if report else None,
                measured_alpha_margin=report.alpha_margin if report else None,
                reason=f"{read.how} on the cost curve ({where}): this window's bucket: {reason}",
                speedup_interval=read.interval, read=read.how,
                read_time_per_output_token_seconds=curve.tpot_at(now, per_step),
            )  # fmt: skip
        if isinstance(read, str):
            reason = f"{reason}; {read}"
        return figures(reason=reason)
    report = comparison.report
    return figures(
        realized_speedup=comparison.realized_speedup,
        measured_draft_cost=_exported_cost(comparison.draft_cost),
        measured_breakeven_alpha=report.breakeven_alpha if report else None,
        measured_alpha_margin=report.alpha_margin if report else None,
        bucket=comparison.bucket.label, notes=(*notes, *comparison.notes),
        speedup_interval=_measured_interval(comparison, window, twin, draft_length),
        read="measured",
        read_time_per_output_token_seconds=comparison.target_time_per_output_token_seconds,
    )  # fmt: skip


def _curve(
    window: LoadWindow, twin: LoadWindow | None, profile: Profile | None
) -> cost_curve.Curve | None:
    """The target's cost curve against its twin's or its profile (None: not enough yet)."""
    if window.curve is None:
        return None
    if twin is not None:
        if twin.curve is None:
            return None
        return cost_curve.twin_curve(window.curve, twin.curve)
    return cost_curve.profile_curve(window.curve, profile) if profile is not None else None


def _measured_interval(
    comparison: BucketComparison,
    window: LoadWindow,
    twin: LoadWindow | None,
    draft_length: float,
) -> tuple[float, float] | None:
    """The 95 % interval of a speed-up measured in this window's bucket: the bucket's
    acceptance (binomial from its draft counts), and its step times' spread per interval
    (read off the cost curve's bucket) over the window's intervals there, on both sides."""
    index = comparison.bucket.index
    sd = cost_curve.acceptance_log_sd(comparison.counters, tokens_per_draft=draft_length)
    variance = (sd or 0.0) ** 2
    sides = [(window, True)] + ([(twin, False)] if twin is not None else [])
    for side, speculative in sides:
        assert side is not None
        here = next((b.totals.intervals for b in side.buckets if b.bucket.index == index), 1)
        spread = cost_curve.interval_spread(side.curve, index, here) if side.curve else None
        # No spread known yet (fewer than 2 intervals retained): 5 %, not certainty.
        variance += (spread if spread is not None else 0.05) ** 2
        if speculative and sd is None and side.curve is not None:
            tokens = cost_curve.interval_spread(side.curve, index, here, tokens=True)
            variance += (tokens if tokens is not None else 0.05) ** 2
    return cost_curve.speedup_interval(
        comparison.realized_speedup, variance**0.5, chain_length=comparison.chain_length
    )


def live_load_figures(
    speeds: Speeds | None,
    *,
    acceptance: SpecCounters | None,
    chain_length: int | None,
    baseline: str | None = None,
    refused: str | None = None,
    latest: float | None = None,
) -> LoadFigures | None:
    """The figures of a window with nothing to compare it with (no twin's window, no profile,
    or a server that does not speculate: ``acceptance`` None), from what
    :meth:`LoadHistory.speeds <specmon.load.LoadHistory.speeds>` reads off its sums: the live
    load and speed, and, for a target configured with a baseline that has no data yet, the
    reason; ``refused``: why the twin is not compared with (its check); ``latest``: the latest
    interval's concurrency (the figures' ``read_concurrency``: :func:`read_concurrency`).
    None when the window has no load data."""
    if speeds is None:
        return None
    concurrency, step_seconds, tpot = speeds
    mean_draft, notes = _draft_length(acceptance, chain_length)
    now = read_concurrency(latest=latest, window=concurrency)
    if baseline is not None and acceptance is not None:
        return LoadFigures(
            concurrency, step_seconds, tpot, mean_draft, baseline,
            reason=refused or "no data from the baseline yet",
            notes=notes if refused is None else (*notes, refused),
            baseline_refused=refused, read_concurrency=now,
        )  # fmt: skip
    return LoadFigures(
        concurrency, step_seconds, tpot, mean_draft, None, notes=notes, read_concurrency=now
    )


def _draft_length(
    acceptance: SpecCounters | None, chain_length: int | None
) -> tuple[float | None, tuple[str, ...]]:
    """Drafted tokens per draft, and the note when it is below k (the engine varies it)."""
    if acceptance is None or acceptance.drafts <= 0 or not acceptance.knows("draft_tokens"):
        return None, ()
    mean_draft = acceptance.draft_tokens / acceptance.drafts
    if chain_length and mean_draft < _VARIABLE_DRAFT * chain_length:
        return mean_draft, (
            f"drafts carry {mean_draft:.2f} tokens on average with k = {chain_length}: the "
            "engine varies its draft length (n-gram misses, dynamic speculation), so "
            "survival at deep positions understates their conditional acceptance; the "
            "expected speed-up charges the drafted tokens, not k",
        )
    return mean_draft, ()


def _bucket(
    verdict: BucketVerdict, survival: list[float], chain_length: int | None
) -> BucketFigures:
    """A bucket's figures; ``survival``: the window's per-position survival (empty without
    drafts or position series: no best chain length), cut at the configured chain length."""
    c = verdict.comparison
    best_k = best_speed = None
    if c is not None and c.draft_cost is not None and survival:
        best = best_chain(draft_cost=c.draft_cost, chain_length=chain_length, survival=survival)
        if best is not None:
            best_k, best_speed = best.chain_length, best.speedup
    return BucketFigures(
        label=verdict.bucket.label,
        low=verdict.bucket.low,
        high=verdict.bucket.high,
        concurrency=c.concurrency if c is not None else None,
        realized_speedup=c.realized_speedup if c is not None else None,
        draft_cost=_exported_cost(c.draft_cost) if c is not None else None,
        best_chain_length=best_k,
        best_speedup=best_speed,
        reason=verdict.reason,
    )


def _exported_cost(cost: float | None) -> float | None:
    """A measured draft cost as exported: a cost below zero (the speculative step measured
    faster than the baseline's: noise, or servers that differ beyond the draft) is no cost,
    and the comparison's notes say so; the figures computed from it use 0."""
    return cost if cost is not None and cost >= 0 else None
