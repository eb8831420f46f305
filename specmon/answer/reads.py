"""A window read against a baseline at the load it runs at now: the one place that decides
whether the speed-up there is measured, read off the cost curve, or not known yet. Pure.

The baseline's speed per concurrency bucket comes as a :class:`~specmon.load.LoadWindow` (a
twin's window, or a past configuration epoch's sums laid out the same way: its buckets and
its cost-curve accumulator) or a :class:`~specmon.load.Profile`. The window's buckets are
compared with it bucket by bucket (:mod:`specmon.load.compare`: like with like), the cost
curve is fitted to both sides (:mod:`specmon.load.curve`), and at the load the answer is read
at (:func:`read_concurrency`):

- ``measured``: the window's own bucket there has enough data on both sides: its realized
  speed-up, with the 95 % interval of both sides' spread;
- ``interpolated``: it has not, but the cost curve's last hour measured that bucket on both
  sides: the curve's speed-up at that load, with the curve's interval;
- ``measuring``: neither: a load no evidence has measured. No number, and never a figure
  from another load or a guessed cost in its place: a curve that has never seen a load can
  be wrong there by far more than its interval says (the demo's first visits to 16 and 32
  requests read 2.43x and 0.36x for a truth near 0.7x). The bucket's progress is said.
"""

from __future__ import annotations

import math

from specmon.answer.crossover import Crossover, crossover_at_acceptance, curve_crossover
from specmon.answer.model import PerLoad
from specmon.bounds import chain_bound, draft_cost_refusal, speedup_refusal
from specmon.engines import SpecCounters
from specmon.load import (
    DEFAULT_SCHEME,
    BucketVerdict,
    CompareMemo,
    LoadInterval,
    LoadWindow,
    Profile,
    compare_with_profile,
    compare_with_twin,
    measured_costs,
)
from specmon.load import curve as cost_curve
from specmon.load.compare import BucketComparison
from specmon.load.curve_sums import CurveAccumulator, SlotWalk
from specmon.load.slot_drift import SlotDrift
from specmon.records import record
from specmon.report import best_chain

__all__ = ["CurveReading", "Read", "read_comparison", "read_concurrency", "read_curve"]

#: No spread known yet (fewer than 2 intervals retained): 5 %, not certainty.
_UNKNOWN_SPREAD = 0.05


def read_concurrency(*, latest: float | None, window: float | None) -> float | None:
    """ "At this load": the concurrency every basis reads its answer at. The latest
    interval's (the window's mean can fall between the loads the window saw), else, when that
    interval decoded nothing (the server idle) or its engine counts no steps, the window's."""
    return latest if latest is not None else window


@record
class Read:
    """A window against its baseline at the load it runs at now."""

    #: "measured", "interpolated" or "measuring" (:class:`~specmon.answer.ReadState`'s values).
    state: str
    at: float | None
    bucket: str | None
    speedup: float | None = None
    interval: tuple[float, float] | None = None
    #: The draft cost measured there (None: none usable: no drafted tokens, or below 0 / not
    #: finite, :mod:`specmon.bounds`); ``raw_cost``: as measured, for the note on a c below 0.
    draft_cost: float | None = None
    time_per_output_token_seconds: float | None = None
    crossover: Crossover | None = None
    per_load: tuple[PerLoad, ...] = ()
    #: While measuring: what the bucket still lacks, or why nothing can be read.
    progress: str | None = None
    notes: tuple[str, ...] = ()


def read_comparison(
    window: LoadWindow,
    *,
    base: LoadWindow | Profile,
    acceptance: SpecCounters,
    survival: tuple[float, ...],
    drafted_per_draft: float | None,
    chain_length: int | None,
    at: float | None,
    memo: CompareMemo | None = None,
) -> Read:
    """The window compared with ``base`` bucket by bucket, and read at ``at``.

    ``acceptance``: the window's speculative counters; ``survival``: its per-position
    survival (empty: no best chain length per load); ``drafted_per_draft``: its drafted
    tokens per draft (None: the chain length); ``memo``: the window's comparison memo (each
    bucket compared once per change of its sums)."""
    if isinstance(base, Profile):
        verdicts = compare_with_profile(window.buckets, base, chain_length=chain_length, memo=memo)
    else:
        verdicts = compare_with_twin(
            window.buckets, base.buckets, chain_length=chain_length, memo=memo
        )
    curve = _curve(window, base)
    current = DEFAULT_SCHEME.bucket_of(at) if at is not None else None
    draft_length = drafted_per_draft if drafted_per_draft is not None else float(chain_length or 1)
    totals = window.totals
    per_step = totals.tokens_per_step if totals is not None else None
    sd = cost_curve.acceptance_log_sd(acceptance, tokens_per_draft=draft_length)
    crossing = None
    if curve is not None and per_step is not None:
        crossing = curve_crossover(
            curve, tokens_per_step=per_step, acceptance_sd=sd or 0.0, chain_length=chain_length
        )
    elif curve is None:
        crossing = crossover_at_acceptance(measured_costs(verdicts), acceptance)
    per_load = tuple(_per_load(v, survival, chain_length, drafted_per_draft) for v in verdicts)
    mine = next((v for v in verdicts if current is not None and v.bucket == current), None)
    label = current.label if current is not None else None
    comparison = mine.comparison if mine is not None else None
    bridged = _bridge(comparison, curve) if comparison is not None and not isinstance(
        base, Profile) else (1.0, 0.0)  # fmt: skip
    if comparison is not None and isinstance(bridged, str):
        return Read("measuring", at, comparison.bucket.label, crossover=crossing,
                    per_load=per_load, progress=bridged)  # fmt: skip
    if comparison is not None:
        assert not isinstance(bridged, str)
        factor, bridge_sd = bridged
        cost = comparison.draft_cost
        notes = comparison.notes
        if factor != 1.0:
            # c = (T_spec / T_base - 1) / k̄ with T_base read at the target's load too.
            drafted = comparison.drafted_per_step
            cost = None if cost is None or drafted <= 0 else (
                (1 + cost * drafted) / factor - 1) / drafted  # fmt: skip
            notes = (*notes, _bridged_note(comparison))
        return Read(
            "measured", at, comparison.bucket.label, comparison.realized_speedup * factor,
            _measured_interval(comparison, window, base, draft_length, sd, bridge_sd,
                               factor),
            cost if cost is not None and cost >= 0 else None,
            comparison.target_time_per_output_token_seconds, crossing, per_load,
            notes=notes,
        )  # fmt: skip
    short = mine.reason if mine is not None else "no data at this load in the window yet"
    if at is None:
        return Read("measuring", None, None, crossover=crossing, per_load=per_load,
                    progress="no load figures yet")  # fmt: skip
    if curve is not None and per_step is not None:
        read = read_curve(curve, at, tokens_per_step=per_step, acceptance_sd=sd or 0.0,
                          chain_length=chain_length,
                          drafted_per_step=_assumed_drafted(window, chain_length),
                          drift_variance=_curve_drift(window, base,
                                                      curve.scheme.index_of(at)))  # fmt: skip
        if read is not None:
            cost = read.draft_cost
            return Read(
                "interpolated", at, label, read.speedup, read.interval,
                cost if cost is not None and cost >= 0 else None,
                curve.tpot_at(at, per_step), crossing, per_load,
                progress=f"this window's bucket {label}: {short}",
            )  # fmt: skip
    return Read("measuring", at, label, crossover=crossing, per_load=per_load,
                progress=short)  # fmt: skip


#: How far past the curve's measured loads a bridge may reach (relative).
_SAME_LOAD = 0.02
#: Loads this close (relative, in log) are read as they are where no curve bridges them, the
#: gap added as a standard deviation: the baseline's step time moves less than that between
#: them (it grows at most in proportion to the load).
_UNBRIDGED = 0.05


def _bridge(
    comparison: BucketComparison, curve: cost_curve.Curve | None
) -> tuple[float, float] | str:
    """The baseline's time per output token read at the target's concurrency, not at its own
    in the same bucket (a bucket spans 2x: a twin behind a balancer at 9 requests against a
    target at 7 read +10 %): the factor to multiply the bucket's speed-up by and the standard
    deviation of its log, off the baseline's side of the cost curve (its shape between the
    loads, doubted by a quarter of the step it bridges, or by the shape's disagreement with
    straight lines between the measured buckets, whichever is larger); or why the read is
    withheld: loads more than 5 % apart that the curve cannot bridge (it has fewer than 2
    baseline buckets, or one of the loads lies outside the ones it measured; closer, they
    are read as they are, the gap their standard deviation)."""
    target, twin = comparison.concurrency, comparison.baseline.concurrency
    if target <= 0 or twin <= 0:
        return 1.0, 0.0
    apart = abs(math.log(target / twin))
    points = curve.base_points if curve is not None else ()
    if curve is not None and len(points) >= 2:
        lo, hi = points[0].concurrency, points[-1].concurrency
        if lo * (1 - _SAME_LOAD) <= min(target, twin) and max(target, twin) <= hi * (
            1 + _SAME_LOAD
        ):
            there, here = curve.base.at(target), curve.base.at(twin)
            if there > 0 and here > 0:
                step = math.log(there / here)
                lines = curve.base.lines(target), curve.base.lines(twin)
                disagree = abs(math.log(lines[0] / lines[1]) - step) if min(lines) > 0 else 0.0
                return math.exp(step), max(0.25 * abs(step), disagree)
    if apart <= _UNBRIDGED:
        return 1.0, apart
    return (
        f"the baseline ran at {twin:.1f} requests in bucket {comparison.bucket.label}, this "
        f"target at {target:.1f} ({100 * (math.exp(apart) - 1):.0f} % apart): more than its "
        "cost curve can bridge yet (it needs 2 measured baseline loads around both)"
    )


def _bridged_note(comparison: BucketComparison) -> str:
    return (
        f"the baseline ran at {comparison.baseline.concurrency:.1f} requests in this bucket, "
        f"this target at {comparison.concurrency:.1f}: its time per output token is read at "
        "the target's load off its cost curve"
    )


def _curve(window: LoadWindow, base: LoadWindow | Profile) -> cost_curve.Curve | None:
    """The window's cost curve against the baseline's (None: not enough yet)."""
    if window.curve is None:
        return None
    if isinstance(base, Profile):
        return cost_curve.profile_curve(window.curve, base)
    if base.curve is None:
        return None
    return cost_curve.twin_curve(window.curve, base.curve)


@record
class CurveReading:
    """The cost curve at one load: the speed-up, its 95 % interval and the draft cost there."""

    speedup: float
    interval: tuple[float, float] | None
    draft_cost: float | None


def read_curve(
    curve: cost_curve.Curve,
    at: float,
    *,
    tokens_per_step: float,
    acceptance_sd: float,
    chain_length: int | None = None,
    drafted_per_step: float | None = None,
    drift_variance: float = 0.0,
) -> CurveReading | None:
    """The curve's speed-up, interval and draft cost at ``at``, only in a bucket both sides'
    retained hour measured (None elsewhere: the shape is not believed where nothing was
    measured, between buckets or past them; nor where the speed-up breaks a bound).
    ``drafted_per_step``: the drafted tokens per step to charge where the curve counted none
    (an engine that counts no drafted tokens: TGI); ``drift_variance``: what the two sides'
    drifts add to log(speed-up) there (:func:`_curve_drift`)."""
    index = curve.scheme.index_of(at)
    if not any(p.bucket == index for p in curve.measured) or not any(
        p.bucket == index for p in curve.base_points
    ):
        return None
    speedup = curve.speedup_at(at, tokens_per_step)
    if speedup is None:
        return None
    k = chain_bound(configured=chain_length)
    if speedup_refusal(speedup, chain_length=k, measured=True) is not None:
        return None
    log_sd = math.sqrt(curve.log_sd(at, acceptance_sd) ** 2 + drift_variance)
    interval = cost_curve.speedup_interval(speedup, log_sd, chain_length=chain_length)
    cost = None
    drafted = curve.drafted_per_step or drafted_per_step
    if drafted:
        cost = (curve.spec.at(at) / curve.base.at(at) - 1.0) / drafted
        if draft_cost_refusal(cost) is not None:
            cost = None
    return CurveReading(speedup, interval, cost)


def _assumed_drafted(window: LoadWindow, chain_length: int | None) -> float | None:
    """Drafted tokens per step where the engine counts none (TGI: its drafts are steps, each
    drafting k, its speculate), from the window's own steps; None elsewhere."""
    totals = window.totals
    if totals is None or not chain_length or totals.draft_tokens or totals.drafts <= 0:
        return None
    return chain_length * totals.drafts / totals.request_steps if totals.request_steps > 0 else None


def _measured_interval(
    comparison: BucketComparison,
    window: LoadWindow,
    base: LoadWindow | Profile,
    draft_length: float,
    acceptance_sd: float | None,
    bridge_sd: float = 0.0,
    factor: float = 1.0,
) -> tuple[float, float] | None:
    """The 95 % interval of a speed-up measured in this window's bucket (docs/load-signals.md,
    "The verdict's interval"). Per side, the larger of two variances of log(its time per
    output token over the window):

    - independent intervals: the bucket's acceptance (from its draft counts) and the spread
      of step times per interval (read off the side's cost-curve accumulator) over the
      window's intervals there;
    - drift (batch means with an AR(1) between them): the spread of the bucket's time per
      output token between the accumulator's minute slots and its lag-1 autocorrelation,
      for a mean over the window's seconds there (:meth:`CurveAccumulator.slot_drift`): step
      times that wander for minutes, and acceptance that moves with the requests running
      (overdispersed against a binomial per draft).

    A past epoch's side (the ``history`` basis: one slot a bucket, no drift of its own to
    read) takes the server's drift as the window's side measures it: the variance of one
    slot about the retention's mean (the past epoch's mean and the window's differ by the
    drift between them, at most that).

    ``bridge_sd``: the uncertainty of reading the baseline at the target's concurrency off
    its curve (:func:`_bridge`)."""
    index = comparison.bucket.index
    sd = cost_curve.acceptance_log_sd(comparison.counters, tokens_per_draft=draft_length)
    variance = bridge_sd**2
    sides: list[tuple[LoadWindow, bool]] = [(window, True)]
    if isinstance(base, LoadWindow):
        sides.append((base, False))
    else:
        variance += 0.01**2  # a profile states no spread: 1 %, as its curve points do
    now = _drift(window.curve, index) if window.curve is not None else None
    for side, speculative in sides:
        mine = next((b.totals for b in side.buckets if b.bucket.index == index), None)
        here = mine.intervals if mine is not None else 1
        spread = cost_curve.interval_spread(side.curve, index, here) if side.curve else None
        independent = (spread if spread is not None else _UNKNOWN_SPREAD) ** 2
        if speculative:
            if sd is not None:
                independent += sd**2
            elif side.curve is not None:
                tokens = cost_curve.interval_spread(side.curve, index, here, tokens=True)
                independent += (tokens if tokens is not None else _UNKNOWN_SPREAD) ** 2
        drift = _drift(side.curve, index) if side.curve is not None else None
        seconds = mine.seconds if mine is not None else None
        wandering = drift.window_log_var(seconds) if drift is not None and seconds else 0.0
        if (
            not speculative
            and now is not None
            and side.curve is not None
            and (side.curve.whole_life)
        ):
            # A past epoch of this server (the history basis): its whole-life mean against a
            # window now differs by the server's own drift in between: its stationary
            # variance, measured by the window's side, or its walk over the gap where larger
            # (a slow drift looks like a walk over the slots since the change; issue 63).
            wandering = now.variance
            walk = window.curve.slot_walk(index) if window.curve is not None else None
            past = _decoding_seconds(mine)
            here_now = next((b.totals for b in window.buckets if b.bucket.index == index), None)
            if walk is not None and past and here_now is not None and here_now.seconds:
                wandering = max(wandering, _walked(walk, here_now.seconds, past))
        variance += max(independent, wandering)
    return cost_curve.speedup_interval(
        comparison.realized_speedup * factor, math.sqrt(variance),
        chain_length=comparison.chain_length,
    )  # fmt: skip


def _decoding_seconds(totals: LoadInterval | None) -> float | None:
    """A bucket's decoding time: its request-seconds over its mean concurrency (an epoch's
    or a curve's sums keep no wall seconds)."""
    n = totals.concurrency if totals is not None else None
    return totals.decode_seconds / n if totals is not None and n else None


def _curve_drift(window: LoadWindow, base: LoadWindow | Profile, index: int) -> float:
    """What both sides' drift adds to the variance of log(speed-up) read off the curve in
    bucket ``index``: per side, its drift (:func:`_drift`) for a mean over the seconds its
    retained hour holds in that bucket (a curve's point is that mean: a drift that outlasts
    them is in the point)."""
    variance = 0.0
    for side in (window, base):
        accumulator = side.curve if isinstance(side, LoadWindow) else None
        if accumulator is None:
            continue
        sums = accumulator.bucket(index)
        drift = _drift(accumulator, index)
        seconds = _decoding_seconds(sums.totals if sums is not None else None)
        if drift is not None and seconds:
            variance += drift.window_log_var(seconds)
    return variance


def _drift(curve: CurveAccumulator, index: int) -> SlotDrift | None:
    """Bucket ``index``'s slot drift, or where it has too few slots of its own (a load that
    cycles visits a bucket once a cycle) the server's drift pooled over its buckets: a
    machine's speed drifts at every load, and a window's mean carries it (issue 63). None
    while no bucket has enough complete slots (a target's first minutes: the independent
    terms alone), and on an epoch's accumulator (the history basis reads the window's).
    An assumed drift until one is measured was tried and not adopted: bench/RESULTS.md."""
    return curve.slot_drift(index) or curve.pooled_drift()


#: How far a walk is carried (slots): past it the drift is taken as stationary at that level.
_MAX_WALK = 60.0


def _walked(walk: SlotWalk, window_seconds: float, past_seconds: float) -> float:
    """The variance between a past epoch's mean (``past_seconds`` in the bucket) and a
    window's (``window_seconds``) when the step time walks at ``walk.slope`` per slot: for a
    walk, slope x (the gap between the two + a third of each's length), the gap the window
    curve's span before the window (the series since the change: its lower bound), the
    distance carried at most :data:`_MAX_WALK` slots."""
    slot = walk.slot_seconds
    after = window_seconds / slot
    gap = max(walk.span - after, 0.0)
    return walk.slope * min(gap + past_seconds / slot / 3 + after / 3, _MAX_WALK)


def _per_load(
    verdict: BucketVerdict,
    survival: tuple[float, ...],
    chain_length: int | None,
    drafted_per_draft: float | None,
) -> PerLoad:
    """A bucket's figures at its own measured c: the best chain length from the window's
    per-position survival (none without it), a chain of k' drafting k' x (drafted / k)
    tokens (as ``specmon recommend`` does)."""
    c = verdict.comparison
    best_k = best_speed = None
    if c is not None and c.draft_cost is not None and survival:
        best = best_chain(draft_cost=c.draft_cost, chain_length=chain_length,
                          survival=survival, drafted_per_draft=drafted_per_draft)  # fmt: skip
        if best is not None:
            best_k, best_speed = best.chain_length, best.speedup
    cost = c.draft_cost if c is not None else None
    return PerLoad(
        label=verdict.bucket.label,
        low=verdict.bucket.low,
        high=verdict.bucket.high,
        concurrency=c.concurrency if c is not None else None,
        speedup=c.realized_speedup if c is not None else None,
        draft_cost=cost if cost is not None and cost >= 0 else None,
        best_chain_length=best_k,
        best_speedup=best_speed,
        reason=verdict.reason,
    )
