"""A bucket's step time between time slots: the slot drift (a window's mean against the
per-slot noise, with the series' lag-1 autocorrelation) and the slot walk (the variance a
random walk gains per slot, for a past epoch against a window now). Pure functions of a
bucket's (slot, log step time, log tokens per step) series, read by
:class:`specmon.load.curve_sums.CurveAccumulator` (issue 63's drift terms)."""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from collections.abc import Sequence

from specmon.records import record

# fmt: off
__all__ = ["MIN_DRIFT_SLOTS", "SlotDrift", "SlotWalk", "ar1_mean_factor", "pooled_drift"]
# fmt: on


#: A slot drift needs at least this many slots with decoded tokens in the bucket.
MIN_DRIFT_SLOTS = 6
#: The largest lag-1 autocorrelation believed between slots (past it a window's mean is as
#: uncertain as one slot: the series is a random walk within the retention).
_MAX_RHO = 0.97
#: The upper point rho is taken at: 1.0 let strong drift (sd 5 %, rho 0.98 per 15 s) fall to
#: 80-88 % coverage in the scenario harness; 1.96 holds it at 97-98 %.
_RHO_Z = 1.96


@record
class SlotDrift:
    """How a bucket's speed moves between time slots, in two parts:

    - the step time (log of decode seconds per request-step): the variance of one slot's
      about the retention's mean (corrected for that mean's own uncertainty under an AR(1))
      and its lag-1 autocorrelation between adjacent slots: the server's own drift;
    - tokens per step (log): a robust variance per slot from the median absolute difference
      between adjacent slots (acceptance that moves with the requests running: request
      classes; a level shift, an acceptance collapse, does not count, the window reads it);

    how many slots, and the slot's length (seconds). What a window's mean there can be off
    by: :meth:`window_log_var`."""

    variance: float
    rho: float
    slots: int
    slot_seconds: float
    tokens_variance: float = 0.0
    tokens_rho: float = 0.0

    def window_log_var(self, seconds: float) -> float:
        """The variance of log(mean time per output token) over a window of ``seconds`` in
        the bucket: the step time's as an AR(1) of the slots' means (at least one slot's
        variance for a window of one slot or less: batch means, a slot is a batch of the
        intervals it holds), and tokens per step's likewise with its own correlation."""
        length = seconds / self.slot_seconds
        return self.variance * ar1_mean_factor(length, self.rho) + (
            self.tokens_variance * ar1_mean_factor(length, self.tokens_rho)
        )


def ar1_mean_factor(length: float, rho: float) -> float:
    """Var(mean of ``length`` steps of an AR(1) with lag-1 correlation ``rho``) over the
    variance of one step: 1 at ``length`` <= 1, 1 / length for rho = 0."""
    if length <= 1.0:
        return 1.0
    if rho <= 0.0:
        return 1.0 / length
    q = 1.0 - rho
    decay: float = rho**length
    factor = (1.0 + rho) / q / length - 2.0 * rho * (1.0 - decay) / (q * q * length * length)
    return min(factor, 1.0)


def _drift(
    series: Sequence[tuple[int, float]], tokens: Sequence[float], slot: float
) -> SlotDrift | None:
    """:class:`SlotDrift` of (slot index, log step time) pairs in time order and the slots'
    log tokens per step."""
    return _drift_of([i for i, _ in series], [x for _, x in series], tokens, slot)


def _drift_of(
    slots: Sequence[int], steps: Sequence[float], tokens: Sequence[float], slot: float
) -> SlotDrift | None:
    """:func:`_drift` of the slot indices, their log step times and log tokens per step as
    three lists (each bucket's read of each scrape: no pairs built)."""
    m = len(steps)
    if m < MIN_DRIFT_SLOTS:
        return None
    # Adjacent slots' differences of log tokens per step: their median absolute value over
    # 0.6745 sqrt(2) is a slot's standard deviation, robust to a few level shifts.
    differences = sorted(abs(b - a) for a, b in itertools.pairwise(tokens))
    middle = differences[len(differences) // 2] if differences else 0.0
    tokens_variance = (middle / (0.6745 * math.sqrt(2.0))) ** 2
    # Requests outlive a slot: their persistence, as an AR(1)'s (its upper point), widens a
    # window's mean of that robust variance as it does the step time's.
    adjacent = [j for j in range(1, m) if slots[j] == slots[j - 1] + 1]
    tokens_rho = _rho_of(tokens, adjacent)
    mean = sum(steps) / m
    total = sum((x - mean) ** 2 for x in steps)
    if total <= 0:
        return SlotDrift(0.0, 0.0, m, slot, tokens_variance, tokens_rho)
    rho = _rho_of(steps, adjacent)
    # The sample variance about the series' own mean misses that mean's variance: under an
    # AR(1) its expectation is variance x (1 - ar1_mean_factor(m, rho)) x m / (m - 1).
    shrink = max(1.0 - ar1_mean_factor(float(m), rho), 0.2)
    return SlotDrift(total / m / shrink, rho, m, slot, tokens_variance, tokens_rho)


#: A series' squared deviations per value below this (logs of O(1) values: 1e-10 is an sd of
#: 0.001 %) read as a flat series (variance 0, no correlation): below, the sums' rounding.
_FLAT = 1e-10


class _Sums:
    """One series' sums about its own mean (m values, their sum and mean, the squared
    deviations' sum; over the adjacent pairs: how many, the sum of the deviations' products
    and of the pairs' deviations), to which a newer value is added in O(1)."""

    __slots__ = ("adjacent", "count", "cross", "ends", "last", "mean", "squares", "total")

    def __init__(self, values: Sequence[float], adjacent: Sequence[int]) -> None:
        self.count = m = len(values)
        self.total = sum(values)
        self.mean = mean = self.total / m if m else 0.0
        dev = [x - mean for x in values]
        self.squares = sum(d * d for d in dev)
        self.adjacent = len(adjacent)
        self.cross = sum(dev[j - 1] * dev[j] for j in adjacent)
        self.ends = sum(dev[j - 1] + dev[j] for j in adjacent)
        self.last = values[-1] if m else 0.0

    def with_value(self, x: float, adjacent: bool) -> tuple[int, float, float, int]:
        """(m, squared deviations about the new mean, the adjacent pairs' products of
        deviations, pairs) with ``x`` added (``adjacent``: its slot follows the last)."""
        m = self.count + 1
        mean = (self.total + x) / m
        shift = mean - self.mean
        squares = self.squares + self.count * shift * shift + (x - mean) ** 2
        cross = self.cross - shift * self.ends + self.adjacent * shift * shift
        pairs = self.adjacent
        if adjacent and self.count:
            cross += (self.last - mean) * (x - mean)
            pairs += 1
        return m, squares, cross, pairs


def _rho_from(m: int, squares: float, cross: float, pairs: int) -> float:
    """:func:`_rho_of` from a series' sums (:class:`_Sums`)."""
    if squares <= 0 or pairs < MIN_DRIFT_SLOTS - 1:
        return 0.0
    rho = min(max(cross / pairs / (squares / m), 0.0), _MAX_RHO)
    return min(rho + _RHO_Z * math.sqrt((1.0 - rho * rho) / pairs), _MAX_RHO)


class _Closed:
    """A bucket's slots before its newest, as :meth:`CurveAccumulator.slot_drift` keeps
    them: their indices and logs, the sums of each series, and the sorted absolute
    differences of adjacent log tokens per step; a read adds the newest slot to them in
    O(1) (the median by bisection) instead of passing over every slot (issue 62's cost)."""

    __slots__ = (
        "differences",
        "last_slot",
        "slots",
        "step_sums",
        "steps",
        "token_sums",
        "tokens",
    )  # fmt: skip

    def __init__(self, slots: array[int], steps: array[float], tokens: array[float]) -> None:
        self.slots, self.steps, self.tokens = slots, steps, tokens
        adjacent = [j for j in range(1, len(slots)) if slots[j] == slots[j - 1] + 1]
        self.step_sums = _Sums(steps, adjacent)
        self.token_sums = _Sums(tokens, adjacent)
        self.differences = sorted(abs(b - a) for a, b in itertools.pairwise(tokens))
        self.last_slot = slots[-1] if slots else None

    def alone(self, slot: float) -> SlotDrift | None:
        """The drift of these slots without a newer one."""
        return _drift_of(self.slots, self.steps, self.tokens, slot)

    def with_newest(self, index: int, step: float, tokens: float, slot: float) -> SlotDrift | None:
        """:func:`_drift_of` of these slots and the newest (slot ``index``, its log step time
        and log tokens per step), from the sums (equal to a few units in the last place; a
        flat series, :data:`_FLAT`, as flat)."""
        m = len(self.steps) + 1
        if m < MIN_DRIFT_SLOTS:
            return None
        differences = self.differences
        new = abs(tokens - self.tokens[-1])
        at = bisect.bisect_right(differences, new)
        middle_at = (len(differences) + 1) // 2
        if middle_at < at:
            middle = differences[middle_at]
        elif middle_at == at:
            middle = new
        else:
            middle = differences[middle_at - 1]
        tokens_variance = (middle / (0.6745 * math.sqrt(2.0))) ** 2
        adjacent = self.last_slot is not None and index == self.last_slot + 1
        by_tokens = self.token_sums.with_value(tokens, adjacent)
        # A flat series (squared deviations at its sums' rounding, as a simulated engine's
        # fixed step time) reads as flat: no variance, no correlation (what the pass's
        # ``total <= 0`` says; its rounding left a variance below 1e-10 a slot).
        tokens_rho = _rho_from(*by_tokens) if by_tokens[1] >= _FLAT * m else 0.0
        m, squares, cross, pairs = self.step_sums.with_value(step, adjacent)
        if squares < _FLAT * m:
            return SlotDrift(0.0, 0.0, m, slot, tokens_variance, tokens_rho)
        rho = _rho_from(m, squares, cross, pairs)
        shrink = max(1.0 - ar1_mean_factor(float(m), rho), 0.2)
        return SlotDrift(squares / m / shrink, rho, m, slot, tokens_variance, tokens_rho)


def _rho(series: Sequence[tuple[int, float]]) -> float:
    """The lag-1 autocorrelation of adjacent slots at its upper 95 % point (the estimate's
    standard error sqrt((1 - rho^2) / pairs)): a short series of a persistent drift reads its
    correlation low, and a window's variance with it; 0 with fewer than 5 adjacent pairs."""
    indices = [i for i, _ in series]
    adjacent = [j for j in range(1, len(series)) if indices[j] == indices[j - 1] + 1]
    return _rho_of([x for _, x in series], adjacent)


def _rho_of(values: Sequence[float], adjacent: Sequence[int]) -> float:
    """:func:`_rho` of ``values``, ``adjacent`` the positions j whose slot follows j - 1's."""
    m = len(values)
    mean = sum(values) / m
    dev = [x - mean for x in values]
    total = sum(d * d for d in dev)
    if total <= 0 or len(adjacent) < MIN_DRIFT_SLOTS - 1:
        return 0.0
    pairs = len(adjacent)
    rho = min(max(sum(dev[j - 1] * dev[j] for j in adjacent) / pairs / (total / m), 0.0), _MAX_RHO)
    return min(rho + _RHO_Z * math.sqrt((1.0 - rho * rho) / pairs), _MAX_RHO)


#: The lags fitted for a walk: up to a third of the series, at most this many slots.
_WALK_LAGS = 10


@record
class SlotWalk:
    """A bucket's step time as a walk between time slots, for the ``history`` basis (a past
    epoch's mean against a window now): ``slope``, the variance of log step time the series
    gains per slot of lag (a least-squares line through the mean squared difference of
    slots h apart, h from 1 to a third of the series, at most :data:`_WALK_LAGS`; its
    intercept is the per-slot noise; 0 for a stationary noise, the increment's variance for
    a random walk); and the span of the series (slots, oldest to newest)."""

    slope: float
    span: int
    slot_seconds: float


def _walk(
    series: Sequence[tuple[int, float]], slot: float, *, newest: int | None = None
) -> SlotWalk | None:
    """:class:`SlotWalk` of (slot index, log step time) pairs in time order (None: fewer
    than :data:`MIN_DRIFT_SLOTS`); its span reaches ``newest`` (a slot left out: filling)."""
    m = len(series)
    if m < MIN_DRIFT_SLOTS:
        return None
    values = dict(series)
    points = []
    for h in range(1, max(2, min(_WALK_LAGS, m // 3)) + 1):
        diffs = [values[i + h] - x for i, x in series if i + h in values]
        if diffs:
            points.append((float(h), sum(d * d for d in diffs) / len(diffs)))
    if len(points) < 2:
        return None
    mx = sum(h for h, _ in points) / len(points)
    my = sum(g for _, g in points) / len(points)
    slope = sum((h - mx) * (g - my) for h, g in points) / sum((h - mx) ** 2 for h, _ in points)
    end = series[-1][0] if newest is None else max(newest, series[-1][0])
    return SlotWalk(max(slope, 0.0), end - series[0][0] + 1, slot)


def pooled_drift(
    series: Sequence[tuple[Sequence[int], Sequence[float], Sequence[float]]], slot: float
) -> SlotDrift | None:
    """The server's drift pooled over its load buckets, for a bucket with too few slots of
    its own (a load that cycles visits each bucket once a cycle): ``series`` per bucket its
    slot indices, log step times and log tokens per step in time order. A machine's speed
    drifts at every load alike, so each bucket's slots about that bucket's own mean pool into
    one variance (their squared deviations over the buckets' degrees of freedom), the lag-1
    correlation of adjacent slots likewise (its upper point, 0 with fewer than 5 pairs), and
    tokens per step's robust variance from the median absolute difference of a bucket's
    consecutive slots. None: fewer than ``MIN_DRIFT_SLOTS - 1`` degrees of freedom."""
    squares = cross = 0.0
    freedom = pairs = count = 0
    differences: list[float] = []
    token_squares = token_cross = 0.0
    token_pairs = 0
    for slots, steps, tokens in series:
        m = len(steps)
        if m < 2:
            continue
        mean = sum(steps) / m
        dev = [x - mean for x in steps]
        token_mean = sum(tokens) / m
        token_dev = [x - token_mean for x in tokens]
        squares += sum(d * d for d in dev)
        token_squares += sum(d * d for d in token_dev)
        freedom += m - 1
        count += m
        for j in range(1, m):
            differences.append(abs(tokens[j] - tokens[j - 1]))
            if slots[j] == slots[j - 1] + 1:
                pairs += 1
                cross += dev[j - 1] * dev[j]
                token_cross += token_dev[j - 1] * token_dev[j]
                token_pairs += 1
    if freedom < MIN_DRIFT_SLOTS - 1:
        return None
    differences.sort()
    middle = differences[len(differences) // 2]
    tokens_variance = (middle / (0.6745 * math.sqrt(2.0))) ** 2
    tokens_rho = _pooled_rho(token_squares, token_cross, token_pairs, count)
    if squares < _FLAT * count:
        return SlotDrift(0.0, 0.0, count, slot, tokens_variance, tokens_rho)
    rho = _pooled_rho(squares, cross, pairs, count)
    # Deviations about each bucket's own mean: the squares over the degrees of freedom, as for
    # independent slots. Not widened for an AR(1) as one long series is (:func:`_drift_of`):
    # at two or three slots a bucket, 1 - f(m, rho) at rho's upper point sat at its 0.2 floor
    # and made the variance five times what the slots said. A drift that outlasts a bucket's
    # few visits reads short here; a bucket's own slots take over at 6.
    return SlotDrift(squares / freedom, rho, count, slot, tokens_variance, tokens_rho)


def _pooled_rho(squares: float, cross: float, pairs: int, count: int) -> float:
    """The pooled lag-1 correlation at its upper 95 % point (:func:`_rho_from`'s)."""
    if squares <= 0 or pairs < MIN_DRIFT_SLOTS - 1:
        return 0.0
    rho = min(max(cross / pairs / (squares / count), 0.0), _MAX_RHO)
    return min(rho + _RHO_Z * math.sqrt((1.0 - rho * rho) / pairs), _MAX_RHO)
