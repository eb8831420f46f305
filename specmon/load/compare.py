"""A target against its baseline, bucket by bucket: the realized speed-up and the measured
draft cost c = (T_step(target) / T_step(baseline) - 1) / k̄, against a twin target's bucket or a
profile's level at the same concurrency."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specmon.bounds import chain_bound, draft_cost_refusal, speedup_refusal
from specmon.engines.model import SpecCounters
from specmon.load.buckets import DEFAULT_THRESHOLDS, Bucket, BucketTotals, Thresholds
from specmon.load.interval import LoadInterval
from specmon.records import record


@record
class BaselinePoint:
    """The baseline's speed at one concurrency: a twin's bucket, or a profile's level(s)."""

    concurrency: float
    step_seconds: float
    time_per_output_token_seconds: float
    #: "twin" (another target), "profile level", "profile, interpolated".
    source: str


class BaselineSource(Protocol):
    """What a comparison reads from a profile: the baseline's speed at a concurrency."""

    def baseline_at(self, concurrency: float) -> BaselinePoint | None: ...


@dataclass(frozen=True)
class BucketComparison:
    """The target against its baseline in one bucket (the figures at its c are the
    answer's: :mod:`specmon.answer`)."""

    bucket: Bucket
    concurrency: float
    baseline: BaselinePoint
    target_step_seconds: float
    target_time_per_output_token_seconds: float
    #: TPOT(baseline) / TPOT(target).
    realized_speedup: float
    #: T_step(target) / T_step(baseline).
    step_ratio: float
    tokens_per_step: float
    drafted_per_step: float
    #: c = (step_ratio - 1) / k̄; None without drafted tokens.
    draft_cost: float | None
    notes: tuple[str, ...] = ()
    #: The bucket's speculative counters and the configured chain length.
    counters: SpecCounters | None = field(default=None, repr=False, compare=False)
    chain_length: int | None = None


def compare(
    target: LoadInterval,
    baseline: BaselinePoint,
    *,
    bucket: Bucket,
    chain_length: int | None = None,
) -> BucketComparison | None:
    """The target's totals (one bucket) against the baseline's speed at that concurrency.

    None when the target has no step time or TPOT (the caller checks :class:`Thresholds`)."""
    step = target.step_seconds
    tpot = target.time_per_output_token_seconds
    concurrency = target.concurrency
    per_step = target.tokens_per_step
    drafted = target.drafted_per_step
    if step is None or tpot is None or per_step is None or drafted is None:
        return None
    # A figure that cannot be computed is absent: no division by a time of 0 (the laws of
    # specmon.load.laws leave such intervals out; this holds whatever reaches here).
    if not (step > 0 and tpot > 0 and math.isfinite(step) and math.isfinite(tpot)):
        return None
    if not (baseline.step_seconds > 0 and baseline.time_per_output_token_seconds > 0):
        return None
    notes: list[str] = []
    if drafted <= 0 and target.drafts > 0 and target.draft_tokens == 0 and chain_length:
        # TGI counts no drafted tokens (its drafts are steps): each drafts k, its speculate.
        drafted = chain_length * target.drafts / target.request_steps
        notes.append(
            f"the engine counts no drafted tokens: c assumes each draft carried k = "
            f"{chain_length} tokens"
        )
    ratio = step / baseline.step_seconds
    cost = (ratio - 1.0) / drafted if drafted > 0 else None
    if cost is not None and target.drafts > 0:
        if cost < 0:
            notes.append(
                f"the speculative step is faster than the baseline's (c = {cost:.3f}): noise or "
                "a difference between the servers beyond the draft; figures use c = 0"
            )
    elif cost is None:
        notes.append("no drafted tokens in this bucket: no draft cost")
    return BucketComparison(
        bucket=bucket,
        concurrency=concurrency if concurrency is not None else baseline.concurrency,
        baseline=baseline,
        target_step_seconds=step,
        target_time_per_output_token_seconds=tpot,
        realized_speedup=baseline.time_per_output_token_seconds / tpot,
        step_ratio=ratio,
        tokens_per_step=per_step,
        drafted_per_step=drafted,
        draft_cost=cost,
        notes=tuple(notes),
        counters=target.counters if target.drafts > 0 else None,
        chain_length=chain_length,
    )


#: The start of a :class:`BucketVerdict`'s reason when its figures broke a bound.
WITHHELD = "withheld: "


def withheld(comparison: BucketComparison) -> str | None:
    """Why a bucket's comparison must not be shown (:mod:`specmon.bounds`): a realized
    speed-up outside (0, (k + 1) x 1.1] (k: the chain length, else the largest any adapter
    reads), or a draft cost that is not finite; None when it may."""
    k = chain_bound(configured=comparison.chain_length)
    problem = speedup_refusal(comparison.realized_speedup, chain_length=k, measured=True)
    if problem is None and comparison.draft_cost is not None:
        problem = draft_cost_refusal(comparison.draft_cost)
    return problem


def _verdict(bucket: Bucket, result: BucketComparison | None) -> BucketVerdict:
    """A bucket's verdict from its comparison: withheld (with the reason) when it breaks a
    bound, "no step time" when there is none."""
    if result is None:
        return BucketVerdict(bucket, None, "no step time")
    problem = withheld(result)
    if problem is not None:
        return BucketVerdict(bucket, None, WITHHELD + problem)
    return BucketVerdict(bucket, result, None)


def twin_point(totals: BucketTotals) -> BaselinePoint | None:
    """A twin target's bucket as a baseline point."""
    step = totals.totals.step_seconds
    tpot = totals.totals.time_per_output_token_seconds
    concurrency = totals.concurrency
    if step is None or tpot is None or concurrency is None:
        return None
    return BaselinePoint(concurrency, step, tpot, "twin")


@record
class BucketVerdict:
    """One bucket of the target: its comparison with the baseline, or why there is none."""

    bucket: Bucket
    comparison: BucketComparison | None
    #: Why there is no comparison ("too little data: ...", "no matching baseline bucket
    #: yet", "outside the profile's measured concurrencies"); None when there is one.
    reason: str | None = None


class CompareMemo:
    """The verdicts of one window's last comparison, by the identity of the sums they came
    from: a bucket no interval entered or left since the previous scrape keeps its sums
    object (:meth:`LoadHistory.window`), so its comparison (and its report, computed when
    first read) is not made again. Holds only the entries the last call used."""

    __slots__ = ("_entries", "_key")

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], tuple[object, object, BucketVerdict]] = {}
        self._key: tuple[int | None, Thresholds] | None = None

    def verdicts(
        self,
        items: Iterable[tuple[BucketTotals, object]],
        make: Callable[[BucketTotals, Any], BucketVerdict],
        *,
        chain_length: int | None,
        thresholds: Thresholds,
    ) -> tuple[BucketVerdict, ...]:
        """``make(item, other)`` for each (target bucket, what it is compared with), or the
        verdict made last time from the very same two objects."""
        if self._key != (chain_length, thresholds):
            self._key = (chain_length, thresholds)
            self._entries = {}
        previous = self._entries
        entries: dict[tuple[int, int], tuple[object, object, BucketVerdict]] = {}
        out = []
        for item, other in items:
            key = (id(item.totals), id(other))
            entry = previous.get(key)
            if entry is None or entry[0] is not item.totals or entry[1] is not other:
                entry = (item.totals, other, make(item, other))
            entries[key] = entry
            out.append(entry[2])
        self._entries = entries
        return tuple(out)


def compare_with_twin(
    target: Sequence[BucketTotals],
    baseline: Sequence[BucketTotals],
    *,
    chain_length: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    memo: CompareMemo | None = None,
) -> tuple[BucketVerdict, ...]:
    """Each target bucket against the twin's bucket of the same concurrency (like with
    like). A bucket short of data on either side gets a reason instead of figures.
    ``memo``: the window's :class:`CompareMemo` (the same answers, made once per change)."""
    by_index = {b.bucket.index: b.totals for b in baseline}

    def make(item: BucketTotals, twin: LoadInterval | None) -> BucketVerdict:
        short = thresholds.short_of(item.totals, speculative=True)
        if short is not None:
            return BucketVerdict(item.bucket, None, f"too little data: {short}")
        if twin is None:
            return BucketVerdict(item.bucket, None, "no matching baseline bucket yet")
        twin_short = thresholds.short_of(twin, speculative=False)
        point = twin_point(BucketTotals(item.bucket, twin)) if twin_short is None else None
        if point is None:
            why = twin_short or "no step time"
            return BucketVerdict(item.bucket, None, f"baseline bucket: too little data: {why}")
        result = compare(item.totals, point, bucket=item.bucket, chain_length=chain_length)
        return _verdict(item.bucket, result)

    pairs = [(item, by_index.get(item.bucket.index)) for item in target]
    if memo is None:
        return tuple(make(item, twin) for item, twin in pairs)
    return memo.verdicts(pairs, make, chain_length=chain_length, thresholds=thresholds)


def compare_with_profile(
    target: Sequence[BucketTotals],
    profile: BaselineSource,
    *,
    chain_length: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    memo: CompareMemo | None = None,
) -> tuple[BucketVerdict, ...]:
    """Each target bucket against the profile's baseline at the bucket's measured
    concurrency (interpolated between levels; none outside the profile's range)."""

    def make(item: BucketTotals, _: object) -> BucketVerdict:
        short = thresholds.short_of(item.totals, speculative=True)
        concurrency = item.concurrency
        if short is not None or concurrency is None:
            why = short or "no concurrency"
            return BucketVerdict(item.bucket, None, f"too little data: {why}")
        point = profile.baseline_at(concurrency)
        if point is None:
            return BucketVerdict(item.bucket, None, "outside the profile's measured concurrencies")
        result = compare(item.totals, point, bucket=item.bucket, chain_length=chain_length)
        return _verdict(item.bucket, result)

    pairs = [(item, profile) for item in target]
    if memo is None:
        return tuple(make(item, profile) for item, _ in pairs)
    return memo.verdicts(pairs, make, chain_length=chain_length, thresholds=thresholds)


def measured_costs(verdicts: Iterable[BucketVerdict]) -> list[tuple[float, float]]:
    """(concurrency, c) of every bucket that has a measured draft cost."""
    return sorted(
        (v.comparison.concurrency, v.comparison.draft_cost)
        for v in verdicts
        if v.comparison is not None and v.comparison.draft_cost is not None
    )
