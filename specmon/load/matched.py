"""Two configuration epochs of one server compared at matched load: per concurrency bucket
both measured, the speed-up of the newer configuration over the older (the ratio of their
times per output token there) and the change in draft acceptance, each with its 95 %
interval; and a read at any load, through the cost curve where a bucket is thin. Pure: the
epochs' sums are :class:`~specmon.load.curve.CurveAccumulator` s (issue 55: the epochs are
the curve's accumulators, per configuration).

The interval of a bucket's speed-up is the curve's method (:mod:`specmon.load.curve`): a
normal approximation on log(speed-up), whose variance is the sum over both epochs of the
relative variances of the mean step time and of the mean tokens per step (each from its
per-interval spread over the intervals summed, never below the curve's floor). The
acceptance change's is the difference of two proportions, each with a chain's variance per
draft (from the per-position survival; binomial per drafted token without it), or the
spread of tokens per step between intervals where that is larger (overdispersed acceptance).
"""

from __future__ import annotations

import math

from specmon.bounds import speedup_refusal
from specmon.load.buckets import DEFAULT_THRESHOLDS, Thresholds
from specmon.load.curve import (
    COLUMNS,
    Z95,
    BucketSums,
    CurveAccumulator,
    SidePoint,
    side_points,
    speedup_interval,
)
from specmon.records import record

__all__ = [
    "MatchedBucket",
    "bucket_from_row",
    "bucket_row",
    "loads_seen",
    "matched_buckets",
]

_FLOOR = 0.005
_T1, _T2 = COLUMNS.index("step_sum"), COLUMNS.index("step_squares")
_K1, _K2 = COLUMNS.index("tokens_per_step_sum"), COLUMNS.index("tokens_per_step_squares")
_DT, _DS = COLUMNS.index("decode_tokens"), COLUMNS.index("decode_seconds")
_DTK, _AC = COLUMNS.index("draft_tokens"), COLUMNS.index("accepted")
_DR, _I = COLUMNS.index("drafts"), COLUMNS.index("intervals")
_RS = COLUMNS.index("request_steps")


@record
class MatchedBucket:
    """One bucket both epochs measured enough of."""

    bucket: int
    label: str
    #: Each epoch's mean concurrency there (older, newer).
    concurrency: tuple[float, float]
    #: Time per output token older / newer: above 1, the change made the server faster.
    speedup: float
    #: Its 95 % interval (None: an end broke the bound on a speed-up, specmon.bounds).
    interval: tuple[float, float] | None
    #: Draft acceptance (accepted / drafted tokens) of each epoch there (None: no drafts).
    acceptance: tuple[float | None, float | None]
    #: Newer minus older and its 95 % interval (None unless both drafted).
    acceptance_change: float | None
    acceptance_interval: tuple[float, float] | None


def loads_seen(
    accumulator: CurveAccumulator,
    *,
    speculative: bool,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[SidePoint, ...]:
    """The buckets an epoch measured enough of (a window's bucket's thresholds)."""
    return side_points(accumulator.buckets(), speculative=speculative, thresholds=thresholds)


def _sums(accumulator: CurveAccumulator, bucket: int) -> BucketSums | None:
    return accumulator.bucket(bucket)


def _log_variance(sums: BucketSums) -> float:
    """The relative variance of one epoch's time per output token in a bucket."""
    total = 0.0
    for first, second in ((_T1, _T2), (_K1, _K2)):
        se = sums.relative_se(first, second)
        total += max(se if se is not None else 0.05, _FLOOR) ** 2
    return total


def _acceptance(sums: BucketSums) -> tuple[float, float] | None:
    """Draft acceptance there and its variance (None without drafted tokens): a draft's
    accepted count is a chain (position i is accepted only if i - 1 was), so from the
    per-position survival s_i, var(a) = sum (2i - 1) s_i - E[a]^2 per draft over D drafts of
    k̄ drafted tokens each: var(p) = var(a) / (D k̄^2) (issue 63: a binomial per drafted
    token was 1.4-1.7 times too narrow); binomial per drafted token without positions. Never
    below a quarter draft's worth."""
    v = sums.values
    drafted = v[_DTK]
    if drafted <= 0:
        return None
    p = min(max(v[_AC] / drafted, 0.0), 1.0)
    drafts, positions = v[_DR], v[len(COLUMNS) :]
    floor = 0.25 / drafted / drafted
    if drafts > 0 and positions and abs(sum(positions) - v[_AC]) <= len(positions):
        mean = v[_AC] / drafts
        second = sum((2 * i + 1) * c / drafts for i, c in enumerate(positions))
        per_draft = drafted / drafts
        variance = max(second - mean * mean, 0.0) / (drafts * per_draft**2)
    else:
        variance = p * (1 - p) / drafted
    # Overdispersed acceptance (request classes that accept differently, coming and going):
    # the spread of tokens per step between intervals, as accepted tokens per drafted token.
    se = sums.relative_se(_K1, _K2)
    if se is not None and v[_RS] > 0:
        tokens = v[_K1] / v[_I] * se
        variance = max(variance, (tokens * v[_RS] / drafted) ** 2)
    return p, max(variance, floor)


def _bucket_speedup(
    old: BucketSums, new: BucketSums, *, bound: int | None, chain_length: int | None
) -> tuple[float, tuple[float, float] | None] | str:
    """One bucket's speed-up of the newer epoch over the older, measured: the ratio of their
    times per output token there, and its 95 % interval; or why not (``bound``: the chain
    length the bound on a speed-up takes)."""
    if old.values[_DT] <= 0 or new.values[_DT] <= 0:
        return "no decoded tokens in the bucket"
    old_tpot = old.values[_DS] / old.values[_DT]
    new_tpot = new.values[_DS] / new.values[_DT]
    if old_tpot <= 0 or new_tpot <= 0:
        return "no decoding time in the bucket"
    speedup = old_tpot / new_tpot
    problem = speedup_refusal(speedup, chain_length=bound, measured=True)
    if problem is not None:
        return f"withheld: the bucket's {problem}"
    sd = math.sqrt(_log_variance(old) + _log_variance(new))
    return speedup, speedup_interval(speedup, sd, chain_length=chain_length)


def matched_buckets(
    older: CurveAccumulator,
    newer: CurveAccumulator,
    *,
    older_speculative: bool,
    newer_speculative: bool,
    chain_length: int | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[MatchedBucket, ...]:
    """Per bucket both epochs measured enough of: the newer's speed-up over the older and
    the change in acceptance (a bucket whose speed-up the bounds refuse is left out)."""
    old_points = {p.bucket: p for p in loads_seen(older, speculative=older_speculative,
                                                  thresholds=thresholds)}  # fmt: skip
    out = []
    for point in loads_seen(newer, speculative=newer_speculative, thresholds=thresholds):
        before = old_points.get(point.bucket)
        old_sums, new_sums = _sums(older, point.bucket), _sums(newer, point.bucket)
        if before is None or old_sums is None or new_sums is None:
            continue
        ratio = _bucket_speedup(old_sums, new_sums, bound=None, chain_length=chain_length)
        if isinstance(ratio, str):
            continue
        speedup, interval = ratio
        a_old, a_new = _acceptance(old_sums), _acceptance(new_sums)
        change = change_interval = None
        if a_old is not None and a_new is not None:
            change = a_new[0] - a_old[0]
            half = Z95 * math.sqrt(a_old[1] + a_new[1])
            change_interval = (max(change - half, -1.0), min(change + half, 1.0))
        out.append(
            MatchedBucket(point.bucket, point.label, (before.concurrency, point.concurrency),
                          speedup, interval, (a_old[0] if a_old else None,
                                              a_new[0] if a_new else None),
                          change, change_interval)
        )  # fmt: skip
    return tuple(out)


def bucket_row(b: MatchedBucket) -> list[object]:
    """A bucket's answer as one JSON array (a kept change's, in the state file)."""
    return [b.bucket, b.label, b.concurrency[0], b.concurrency[1], b.speedup, _row(b.interval),
            b.acceptance[0], b.acceptance[1], b.acceptance_change,
            _row(b.acceptance_interval)]  # fmt: skip


def _row(pair: tuple[float, float] | None) -> list[float] | None:
    return None if pair is None else [pair[0], pair[1]]


def bucket_from_row(raw: object, *, chain_length: int | None) -> MatchedBucket:
    """:func:`bucket_row` read back within the bounds a live answer obeys (ValueError)."""
    if not isinstance(raw, list) or len(raw) != 10:
        raise ValueError("a kept change's bucket is not a list of 10")
    bucket, label, c0, c1, speedup, interval, a0, a1, change, a_interval = raw
    if isinstance(bucket, bool) or not isinstance(bucket, int) or not 0 <= bucket < 64:
        raise ValueError("a kept change's bucket: not a bucket index")
    if not isinstance(label, str) or len(label) > 32:
        raise ValueError("a kept change's bucket: its label is not a short string")
    c0, c1, speedup = (_number(v) for v in (c0, c1, speedup))
    problem = speedup_refusal(speedup, chain_length=chain_length, measured=True)
    if problem is not None:
        raise ValueError(f"a kept change's bucket: {problem}")
    return MatchedBucket(
        bucket, label, (c0, c1), speedup, _pair_from(interval),
        (_maybe(a0), _maybe(a1)), _maybe(change), _pair_from(a_interval),
    )  # fmt: skip


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError("a kept change's bucket: a figure is not a finite number")
    return float(value)


def _maybe(value: object) -> float | None:
    return None if value is None else _number(value)


def _pair_from(value: object) -> tuple[float, float] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a kept change's bucket: an interval is not a pair")
    low, high = _number(value[0]), _number(value[1])
    if low > high:
        raise ValueError("a kept change's bucket: an interval's ends out of order")
    return (low, high)
