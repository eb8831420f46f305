"""The row layout of intervals: one interval as a row of doubles, the queues that hold rows
end to end, and the running sums a sliding window keeps. The hot path of the daemon's load
figures: a window costs O(its new and expired intervals) per reading."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Sequence

from specmon.load.counters import LoadCounters
from specmon.load.interval import LoadInterval, bounded_ratio
from specmon.load.laws import is_reset
from specmon.rows import Rows

# One interval as a row of doubles (an ``array('d')``, held end to end with the others in one
# array, :class:`IntervalRows`: a fraction of the memory of a LoadInterval object and its floats,
# and one object a history for the cycle collector): end time, seconds, the
# increases (an optional figure the interval lacks as 0 plus a 1 in its "missing" column, so
# that rows add up column by column), whether a count is big (below), resets; then, from
# LEAN on, what only a comparison with a baseline reads: the bucket (-1: none), the drafts,
# the seconds' "missing" column and the accepted drafts per position. A lean history (a
# target compared with nothing) keeps the first LEAN columns only. A reading's counters are at most 2**53 (``engines._common.MAX_COUNT``), so the
# increases are exact; their sums stay exact as long as they stay below 2**53, which every
# real engine's do by many orders of magnitude. A row with a count of 2**32 or more (only a
# hostile or broken page) is "big": a sliding sum it leaves is summed again from scratch.
END, SECONDS, REQUEST_STEPS, DECODE_SECONDS, DECODE_TOKENS = 0, 1, 2, 3, 4
ENGINE_STEPS, SLOT_STEPS, ERRORS, INTERVALS = 5, 6, 7, 12
ENGINE_MISSING, SLOT_MISSING, BIG, RESETS, LEAN = 13, 14, 15, 16, 17
BUCKET, DRAFTS, DRAFT_TOKENS, ACCEPTED, SECONDS_MISSING, POSITIONS = 17, 18, 19, 20, 21, 22
_BIG_COUNT = float(2**32)
_ADD, _SUB = operator.add, operator.sub


def interval_row(
    before: LoadCounters, after: LoadCounters, seconds: float | None, end: float
) -> array[float]:
    """The increases from ``before`` to ``after`` (see :func:`interval`) as a row ending at
    ``end``, in no bucket (-1): the history computes it straight from the two readings, with
    no :class:`LoadInterval` in between."""
    eb, ea = before.errors, after.errors
    engine_before, engine_after = before.engine_steps, after.engine_steps
    if is_reset(before, after):  # the engine restarted: its new values are the increase
        request_steps, decode_seconds = after.request_steps, after.decode_seconds
        decode_tokens, engine, slots = after.decode_tokens, engine_after, after.slot_steps
        drafts, draft_tokens, accepted = after.drafts, after.draft_tokens, after.accepted_tokens
        per_pos = after.accepted_per_position
        resets = 1
        errors = ea
    else:
        request_steps = max(after.request_steps - before.request_steps, 0.0)
        decode_seconds = max(after.decode_seconds - before.decode_seconds, 0.0)
        decode_tokens = max(after.decode_tokens - before.decode_tokens, 0.0)
        engine = (
            None
            if engine_before is None or engine_after is None
            else max(engine_after - engine_before, 0.0)
        )
        slots_before, slots_after = before.slot_steps, after.slot_steps
        slots = (
            None
            if slots_before is None or slots_after is None
            else max(slots_after - slots_before, 0.0)
        )
        drafts = max(after.drafts - before.drafts, 0)
        draft_tokens = max(after.draft_tokens - before.draft_tokens, 0)
        accepted = max(after.accepted_tokens - before.accepted_tokens, 0)
        old = before.accepted_per_position
        width = len(old)
        per_pos = tuple(
            max(new - old[i], 0) if i < width else new
            for i, new in enumerate(after.accepted_per_position)
        )
        resets = 0
        errors = (eb[0] + ea[0], eb[1] + ea[1], eb[2] + ea[2], eb[3] + ea[3], eb[4] + ea[4])
    step_after = after.engine_step_seconds
    if step_after is not None and engine:
        # TGI: the engine's step time, weighted by the requests each step served on average
        # over the interval (exact while batch size and step time are uncorrelated in it).
        step_before = before.engine_step_seconds
        step_sum = step_after if resets or step_before is None else step_after - step_before
        decode_seconds = max(step_sum, 0.0) * request_steps / engine
    big = max(drafts, draft_tokens, accepted, resets, 1, *per_pos) >= _BIG_COUNT
    return array(
        "d",
        (
            end,
            seconds or 0.0,
            request_steps,
            decode_seconds,
            decode_tokens,
            engine or 0.0,
            slots or 0.0,
            *errors,
            1.0,
            1.0 if engine is None else 0.0,
            1.0 if slots is None else 0.0,
            1.0 if big else 0.0,
            float(resets),
            -1.0,
            float(drafts),
            float(draft_tokens),
            float(accepted),
            1.0 if seconds is None else 0.0,
            *map(float, per_pos),
        ),
    )


class IntervalRows(Rows[float]):
    """The held intervals' rows (:class:`specmon.rows.Rows`; about 208 bytes an interval at
    four positions, against about 280 as a ``bytes`` of its own in a deque with its start time
    as a float in another). An interval's start is its end less its seconds, as the
    window's edge was always computed."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("d")

    def start(self, index: int) -> float:
        slot = self._first + index  # Rows._at(), inline: every window reads it every scrape
        if slot >= self._capacity:
            slot -= self._capacity
        at = slot * self._stride
        return self._data[at + END] - self._data[at + SECONDS]


def row_concurrency(row: array[float]) -> float | None:
    """The concurrency of a row's interval(s) (:attr:`LoadInterval.concurrency`)."""
    if row[ENGINE_MISSING] >= 0.5 or row[SLOT_MISSING] >= 0.5:
        return None
    return bounded_ratio(row[SLOT_STEPS], row[ENGINE_STEPS], row[ERRORS + 4], row[ERRORS + 3])


def interval_of(v: Sequence[float], *, strip_positions: bool = True) -> LoadInterval:
    """The :class:`LoadInterval` a row (or a sum of rows) stands for; ``strip_positions``
    drops trailing positions that no interval of a sum had. A sum's rounding drift (far
    below 0.5 for the counts, a few ulps below 0 for a figure that summed to 0) is undone."""
    per_pos = [*map(round, v[POSITIONS:])]
    if strip_positions:
        while per_pos and per_pos[-1] == 0:
            per_pos.pop()
    request_steps, decode_seconds, decode_tokens = (
        v[REQUEST_STEPS],
        v[DECODE_SECONDS],
        v[DECODE_TOKENS],
    )
    engine, slots = v[ENGINE_STEPS], v[SLOT_STEPS]
    drafts, draft_tokens = round(v[DRAFTS]), round(v[DRAFT_TOKENS])
    accepted, resets, intervals = round(v[ACCEPTED]), round(v[RESETS]), round(v[INTERVALS])
    return LoadInterval(
        request_steps if request_steps > 0.0 else 0.0,
        decode_seconds if decode_seconds > 0.0 else 0.0,
        decode_tokens if decode_tokens > 0.0 else 0.0,
        None if v[ENGINE_MISSING] >= 0.5 else engine if engine > 0.0 else 0.0,
        None if v[SLOT_MISSING] >= 0.5 else slots if slots > 0.0 else 0.0,
        drafts if drafts > 0 else 0,
        draft_tokens if draft_tokens > 0 else 0,
        accepted if accepted > 0 else 0,
        tuple(per_pos),
        None if v[SECONDS_MISSING] >= 0.5 else v[SECONDS],
        resets if resets > 0 else 0,
        (v[ERRORS], v[ERRORS + 1], v[ERRORS + 2], v[ERRORS + 3], v[ERRORS + 4]),
        intervals if intervals > 0 else 0,
    )


def _count(value: float) -> int:
    return max(round(value), 0)


class RowSum:
    """A running sum of intervals that intervals can also be taken out of (a sliding window):
    the rows' columns summed in one pass (``map`` over two sequences of doubles, a few
    microseconds per scrape); an optional figure is None while any interval
    inside lacks it."""

    __slots__ = ("cached", "values")

    def __init__(self, width: int = POSITIONS) -> None:
        #: LEAN wide in a lean history (its rows are), else POSITIONS and more.
        self.values: list[float] = [0.0] * width
        #: interval() until the next add: a bucket no interval entered or left since the
        #: last scrape gives the same object again (its comparisons are not redone).
        self.cached: LoadInterval | None = None

    @property
    def intervals(self) -> int:
        return _count(self.values[INTERVALS])

    def add(self, row: array[float], sign: int) -> None:
        self.cached = None
        values = self.values
        if len(row) != len(values):  # more or fewer positions than the sum has seen
            if len(row) > len(values):
                values.extend([0.0] * (len(row) - len(values)))
            else:
                row = row + array("d", [0.0] * (len(values) - len(row)))
        self.values = list(map(_ADD if sign > 0 else _SUB, values, row))

    def interval(self) -> LoadInterval | None:
        if self.cached is not None:
            return self.cached
        if self.values[INTERVALS] < 0.5:
            return None
        self.cached = interval_of(self.values)
        return self.cached


#: A sliding window is summed again from its intervals after this many changes, so that the
#: rounding of adding and taking out floats never accumulates.
RESUM_EVERY = 512


class Slide:
    """One window length's sums (total, per bucket, requests running), kept up to date as
    intervals arrive and leave: a window costs the same whatever its length."""

    __slots__ = ("bucketed", "buckets", "changes", "first", "running_count", "running_first",
                 "running_sum", "seconds", "total")  # fmt: skip

    def __init__(self, seconds: float, *, bucketed: bool = False, lean: bool = False) -> None:
        self.seconds = seconds
        self.total = RowSum(LEAN if lean else POSITIONS)
        #: Per-bucket sums are kept only once a window was asked for them (a comparison with
        #: a baseline): a target without one never pays for them.
        self.bucketed = bucketed
        self.buckets: dict[int, RowSum] = {}
        #: Absolute index of the oldest interval (reading) inside the window.
        self.first = 0
        self.running_first = 0
        self.running_sum = 0.0
        self.running_count = 0
        self.changes = 0

    def put(self, row: array[float], sign: int) -> None:
        if sign < 0 and row[BIG]:  # its leaving may round the sums: sum them again
            self.changes = RESUM_EVERY
        self.total.add(row, sign)
        if not self.bucketed:  # (a lean history's slides never are: its rows have no bucket)
            self.changes += 1
            return
        bucket = int(row[BUCKET])
        if bucket >= 0:
            sums = self.buckets.get(bucket)
            if sums is None:
                sums = self.buckets[bucket] = RowSum()
            sums.add(row, sign)
            if sums.intervals <= 0:
                del self.buckets[bucket]
        self.changes += 1


class Pairs(Rows[float]):
    """A queue of (time, value) pairs of doubles (:class:`specmon.rows.Rows`): 16 bytes a
    pair, not a tuple and two float objects."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("d")

    def time(self, index: int) -> float:
        return self.cell(index, 0)

    def value(self, index: int) -> float:
        return self.cell(index, 1)

    def skip_before(self, index: int, start: float, total: float) -> tuple[int, float]:
        """From pair ``index`` on, the index of the first pair at ``start`` or later (or the
        length), and ``total`` less the values passed over, one by one."""
        data, count, first, capacity = self._data, self._count, self._first, self._capacity
        while index < count:
            slot = first + index
            at = 2 * (slot - capacity if slot >= capacity else slot)
            if data[at] >= start:
                break
            total -= data[at + 1]
            index += 1
        return index, total


def interval(
    before: LoadCounters, after: LoadCounters, *, seconds: float | None = None
) -> LoadInterval:
    """The increases from ``before`` to ``after``, reset-aware.

    A counter that went down (by more than its printed rounding) means the engine restarted:
    the new values are then the increase, as Prometheus's ``increase()`` counts them.
    Per-position series that appear later count from zero.
    """
    return interval_of(interval_row(before, after, seconds, 0.0), strip_positions=False)
