"""Several servers' windows pooled into one (issue 64: the members of a group still on the old
configuration, a live twin for a canary on the new one): their sums added bucket by bucket,
and their cost-curve accumulators slot by slot. Pure.

Sums, not means: a member that decoded twice the tokens weighs twice as much, as its
intervals would in one server's window; each bucket's figures (step time, time per output
token, concurrency) are ratios of the pooled sums, so members at matched load give their
common speed, and the spread between them shows in the pooled curve's slot drift.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from specmon.load.buckets import BucketTotals
from specmon.load.curve import CurveAccumulator, SlotSums
from specmon.load.history import LoadWindow
from specmon.load.interval import LoadInterval

__all__ = ["pool_curves", "pool_windows"]


def pool_windows(windows: Sequence[LoadWindow]) -> LoadWindow:
    """The windows' sums added per bucket (the totals too), the mean of their running
    gauges, and their curves pooled (None when any has none: a pooled curve missing a
    member would read another load mix than the buckets). No latest interval: a pooled
    window is a baseline, read at the comparing window's load."""
    if not windows:
        raise ValueError("no windows to pool")
    totals: LoadInterval | None = None
    buckets: dict[int, BucketTotals] = {}
    running: list[float] = []
    for window in windows:
        if window.totals is not None:
            totals = window.totals if totals is None else totals + window.totals
        for item in window.buckets:
            have = buckets.get(item.bucket.index)
            buckets[item.bucket.index] = (
                item if have is None else BucketTotals(item.bucket, have.totals + item.totals)
            )
        if window.requests_running_mean is not None:
            running.append(window.requests_running_mean)
    curves = [w.curve for w in windows]
    curve = None
    if all(c is not None for c in curves):
        curve = pool_curves([c for c in curves if c is not None])
    return LoadWindow(
        totals,
        tuple(buckets[i] for i in sorted(buckets)),
        sum(running) / len(running) if running else None,
        None,
        curve,
    )


def pool_curves(curves: Sequence[CurveAccumulator]) -> CurveAccumulator:
    """One accumulator holding every one of ``curves``' sums, added slot by slot (the slots
    are aligned to the same grid: each starts at a multiple of the slot's length). The
    first's retention and slot length; its version the sum of theirs, so a curve fitted
    against the pool is made again as theirs move on."""
    if not curves:
        raise ValueError("no curves to pool")
    sums: dict[tuple[float, int], list[float]] = {}
    for curve in curves:
        for slot in curve.state().slots:
            have = sums.setdefault((slot.start, slot.bucket), [])
            if len(have) < len(slot.values):
                have.extend([0.0] * (len(slot.values) - len(have)))
            for i, value in enumerate(slot.values):
                have[i] += value
    first = curves[0].state()
    state = replace(
        first, slots=tuple(SlotSums(s, b, tuple(v)) for (s, b), v in sorted(sums.items()))
    )
    pooled = CurveAccumulator.from_state(state)
    pooled.version = sum(c.version for c in curves)
    return pooled
