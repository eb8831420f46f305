"""The cost curve's memory (:mod:`specmon.load.curve` reads it): one target's and model's
intervals summed per time slot and concurrency bucket, kept far longer than any window, and
its plain, serialisable state. Pure: no I/O.

- :class:`CurveAccumulator` (``retention=3600.0``, ``slot_seconds`` (default a minute, or a
  1,440th of a retention past a day), ``scheme``): one model's intervals summed per time
  slot and concurrency bucket (never raw rows); about :data:`SLOT_BYTES` a slot.
  ``add_row(row)`` takes one interval row (:mod:`specmon.load.rows`' layout, the history's
  clock in ``row[END]``); ``add(end, interval)`` a :class:`LoadInterval`; ``expire(now)``
  drops slots older than the retention; ``bucket(index)`` one bucket's retained sums and
  ``buckets()`` every bucket's (:class:`BucketSums`, oldest slot first summed); ``version``
  rises at every change.
- ``measured(thresholds, speculative=...)``: the set of buckets that pass ``thresholds``
  (a side point each, :func:`specmon.load.curve.side_points`) as a bitmask, bit i for
  bucket i: kept up to date as rows are added and slots expire, each call checking only the
  buckets changed since the last (one a scrape), so the curve is refitted the moment a
  bucket becomes measured or stops being measured (:func:`specmon.load.curve.twin_curve`).
- Its state: ``state()`` -> :class:`CurveState` (``retention``, ``slot_seconds``, ``slots``:
  :class:`SlotSums` (``start``, ``bucket``, ``values``: the column sums in :data:`COLUMNS`
  order, then the accepted drafts per position)); ``CurveAccumulator.from_state(state,
  scheme=...)``; ``state_to_dict(state)`` / ``state_from_dict(data)`` (JSON-ready dict,
  strict: ``ValueError`` naming the problem). Slot ``start`` times are the history's clock
  (monotonic in the daemon): to persist across a restart, shift them by the clocks'
  difference.

What a read costs: a compared target reads its bucket's sums at every scrape (the verdict's
interval, :func:`specmon.load.curve.interval_spread`), and each scrape changes the newest
slot. Summing every retained slot again (up to 60 an hour per bucket) made that read grow
with the daemon's uptime; instead each bucket keeps the sum of its slots before its newest,
in the same order, and a read adds the newest slot to it: the same additions in the same
order as summing them all, so the same figures to the last bit, for the work of one slot.
The kept sum is made again only when a slot of that bucket expires, or when a row lands in a
slot older than the bucket's newest (the clock went back).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from specmon.load.buckets import DEFAULT_SCHEME, BucketScheme, Thresholds
from specmon.load.interval import LoadInterval, bounded_ratio
from specmon.load.rows import (
    ACCEPTED,
    DECODE_SECONDS,
    DECODE_TOKENS,
    DRAFT_TOKENS,
    DRAFTS,
    END,
    ENGINE_STEPS,
    ERRORS,
    POSITIONS,
    REQUEST_STEPS,
    RESETS,
    SLOT_STEPS,
    row_concurrency,
)
from specmon.records import record

#: An epoch's accumulator's one slot: longer than any epoch is kept.
EPOCH_SPAN = 1e9
#: What a curve accumulator keeps made from its sums (the cost curve, specmon.load.curve).
_Made = TypeVar("_Made")

# fmt: off
__all__ = [
    "COLUMNS", "MIN_DRIFT_SLOTS", "SLOTS_PER_RETENTION", "SLOT_BYTES", "BucketSums",
    "CurveAccumulator", "CurveState", "SlotDrift", "SlotSums", "SlotWalk", "ar1_mean_factor",
    "retention_bytes", "slot_seconds_for", "state_from_dict",
    "state_to_dict",
]
# fmt: on

#: The column sums a slot keeps, in order; the accepted drafts per position follow.
COLUMNS = (
    "intervals",
    "request_steps",
    "decode_seconds",
    "decode_tokens",
    "engine_steps",
    "slot_steps",
    "drafts",
    "draft_tokens",
    "accepted",
    "step_sum",
    "step_squares",
    "tokens_per_step_sum",
    "tokens_per_step_squares",
)
_I, _RS, _DS, _DT, _ES, _SS, _DR, _DTK, _AC, _T1, _T2, _K1, _K2 = range(len(COLUMNS))
_WIDTH = len(COLUMNS)
_MAX_SLOTS = 10_000
_MAX_POSITIONS = 64
#: The (thresholds, side) pairs :meth:`CurveAccumulator.measured` keeps up to date (the daemon
#: asks one per accumulator); past this many they are all made again from the buckets.
_MAX_SIGNATURES = 8
_ZEROS = bytes(8 * _WIDTH)
#: At most this many slots a bucket over the retention: a slot is a minute, or a 1,440th of
#: a retention longer than a day (7d: 7-minute slots), so a week costs what a day does.
SLOTS_PER_RETENTION = 1440
#: What one slot costs in memory at k = 4 (its sums, 25 doubles, the array holding them,
#: its key and its entry): 397 bytes measured with tracemalloc over 10,000 slots
#: (bench/state.py --slots; 325 at k = 0, 813 at k = 64). A list of floats took 773.
SLOT_BYTES = 400


def slot_seconds_for(retention: float) -> float:
    """A slot's length for ``retention``: a minute, or a SLOTS_PER_RETENTION-th of it."""
    return max(60.0, retention / SLOTS_PER_RETENTION)


def retention_bytes(retention: float, *, buckets: int = 1) -> int:
    """An accumulator's memory at ``retention`` with data in ``buckets`` buckets at every
    slot (1: a server whose load stays in one bucket a slot; 14: every bucket, the most)."""
    slots = min(_MAX_SLOTS, buckets * (math.ceil(retention / slot_seconds_for(retention)) + 1))
    return slots * SLOT_BYTES


#: (slot column, row column) of the sums a row adds to as they are.
_ADDED = ((_RS, REQUEST_STEPS), (_DS, DECODE_SECONDS), (_DT, DECODE_TOKENS),
          (_ES, ENGINE_STEPS), (_SS, SLOT_STEPS), (_DR, DRAFTS), (_DTK, DRAFT_TOKENS),
          (_AC, ACCEPTED))  # fmt: skip


@record
class SlotSums:
    """One time slot's sums in one bucket: ``values`` in :data:`COLUMNS` order, then the
    accepted drafts per position."""

    start: float
    bucket: int
    values: tuple[float, ...]


@record
class CurveState:
    """A :class:`CurveAccumulator`'s whole state, plain (see :func:`state_to_dict`)."""

    retention: float
    slot_seconds: float
    slots: tuple[SlotSums, ...]


@record
class BucketSums:
    """The retained sums of one bucket (all its slots)."""

    bucket: int
    label: str
    values: tuple[float, ...]

    @property
    def intervals(self) -> int:
        return round(self.values[_I])

    @property
    def totals(self) -> LoadInterval:
        """The bucket's sums as one :class:`LoadInterval` (for :class:`Thresholds`)."""
        v = self.values
        return LoadInterval(
            request_steps=v[_RS],
            decode_seconds=v[_DS],
            decode_tokens=v[_DT],
            engine_steps=v[_ES],
            slot_steps=v[_SS],
            drafts=round(v[_DR]),
            draft_tokens=round(v[_DTK]),
            accepted_tokens=round(v[_AC]),
            accepted_per_position=tuple(map(round, v[_WIDTH:])),
            intervals=round(v[_I]),
        )

    def measured_totals(self, thresholds: Thresholds, *, speculative: bool) -> LoadInterval | None:
        """:attr:`totals` when the bucket is measured on its side: enough data for
        ``thresholds`` and a concurrency, a positive step time and tokens per step (what a
        :func:`specmon.load.curve.side_points` point needs); None otherwise."""
        totals = self.totals
        if thresholds.short_of(totals, speculative=speculative) is not None:
            return None
        if totals.concurrency is None or totals.tokens_per_step is None:
            return None
        step = totals.step_seconds
        return totals if step is not None and step > 0 else None

    def relative_se(self, first: int, second: int) -> float | None:
        """The relative standard error of the mean of a per-interval figure whose sum and sum
        of squares are columns ``first`` and ``second`` (None with fewer than 2 intervals)."""
        v = self.values
        m = v[_I]
        if m < 2 or v[first] <= 0:
            return None
        mean = v[first] / m
        var = max(v[second] / m - mean * mean, 0.0) * m / (m - 1)
        return math.sqrt(var / m) / mean


class _Signature:
    """The measured buckets of one side at some thresholds: ``mask`` (bit i: bucket i) as of
    the last check, ``dirty`` the buckets changed since (checked again at the next)."""

    __slots__ = ("dirty", "mask")

    def __init__(self, dirty: set[int]) -> None:
        self.mask = 0
        self.dirty = dirty


class CurveAccumulator:
    """One model's intervals summed per time slot and concurrency bucket, kept for
    ``retention`` seconds (see the module's API)."""

    __slots__ = ("_buckets", "_closed", "_drift", "_last", "_measured", "_memo", "_prefix",
                 "_retention", "_scheme", "_slot", "_slots", "_sums", "_walk",
                 "version")  # fmt: skip

    def __init__(
        self,
        *,
        retention: float = 3600.0,
        slot_seconds: float | None = None,
        scheme: BucketScheme = DEFAULT_SCHEME,
    ) -> None:
        if not (retention > 0 and math.isfinite(retention)):
            raise ValueError("retention must be positive")
        if slot_seconds is None:
            slot_seconds = slot_seconds_for(retention)
        if not (slot_seconds > 0 and math.isfinite(slot_seconds)):
            raise ValueError("slot_seconds must be positive")
        self._retention = retention
        self._slot = min(slot_seconds, retention)
        self._scheme = scheme
        #: (slot index, bucket) -> sums, oldest slot first (dicts keep insertion order).
        #: Each slot's sums an array of doubles (8 bytes a sum: a list of floats took 3.6
        #: times as much, issue 61; bench/state.py --slots measures a slot's cost).
        self._slots: dict[tuple[int, int], array[float]] = {}
        #: Per bucket, the key of its newest slot (its last in ``_slots``' order).
        self._last: dict[int, tuple[int, int]] = {}
        #: Per bucket, the sum of its slots before the newest, in ``_slots``' order (None: it
        #: has no other); a bucket missing here has its sum made again at its next read.
        self._prefix: dict[int, list[float] | None] = {}
        #: Per bucket, its sums as last read, until it changes.
        self._sums: dict[int, BucketSums] = {}
        self._buckets: tuple[BucketSums, ...] | None = None
        self._memo: tuple[object, Any] | None = None
        #: Per bucket, its slot drift (:meth:`slot_drift`) and the version it was made at.
        self._drift: dict[int, tuple[int, SlotDrift | None]] = {}
        #: Per bucket, the logs :meth:`slot_drift` reads off its slots before the newest (made
        #: at the newest's key and the oldest slot's index; slot indices, log step times, log
        #: tokens per step): only the newest slot changes from one interval to the next.
        #: Dropped when an older slot changes.
        self._closed: dict[int, tuple[tuple[tuple[int, int], int], _Closed]] = {}
        #: Per bucket, its slot walk (:meth:`slot_walk`) and the (first, newest) slots it was
        #: made at.
        self._walk: dict[int, tuple[tuple[int, int], SlotWalk | None]] = {}
        #: Per (thresholds, side) asked of :meth:`measured`, its measured buckets.
        self._measured: dict[tuple[Thresholds, bool], _Signature] = {}
        #: Rises at every change (a cache of what was read from it is good while it stays).
        self.version = 0

    @classmethod
    def for_epoch(cls) -> CurveAccumulator:
        """A configuration epoch's accumulator: one slot per bucket for its whole life (its
        age is the epoch's, bounded by ``state_max_age``): no time slots, so nothing to shift
        across a restart and a few hundred numbers an epoch."""
        return cls(retention=EPOCH_SPAN, slot_seconds=EPOCH_SPAN)

    def set_retention(self, retention: float) -> None:
        if not (retention > 0 and math.isfinite(retention)):
            raise ValueError("retention must be positive")
        self._retention = retention

    @property
    def whole_life(self) -> bool:
        """Whether this is an epoch's accumulator (:meth:`for_epoch`): one slot a bucket."""
        return self._slot >= EPOCH_SPAN

    def add_row(self, row: Sequence[float]) -> bool:
        """Add one interval row (an interval with a reset, no concurrency or no step time is
        left out); True when it was added."""
        if row[RESETS] > 0 or row[REQUEST_STEPS] <= 0:
            return False
        concurrency = row_concurrency(row)  # type: ignore[arg-type]
        step = bounded_ratio(row[DECODE_SECONDS], row[REQUEST_STEPS], row[ERRORS + 1], row[ERRORS])
        if concurrency is None or step is None or step <= 0:
            return False
        per_step = row[DECODE_TOKENS] / row[REQUEST_STEPS]
        bucket = self._scheme.index_of(concurrency)
        key = (math.floor(row[END] / self._slot), bucket)
        sums = self._slots.get(key)
        if sums is None:
            sums = self._slots[key] = array("d", _ZEROS)
            self._newest(bucket, key)
        elif self._last[bucket] != key:  # an older slot than the bucket's newest: sum again
            self._prefix.pop(bucket, None)
            self._closed.pop(bucket, None)
        sums[_I] += 1.0
        width = len(row)
        for i, column in _ADDED:
            sums[i] += row[column] if column < width else 0.0
        positions = row[POSITIONS : POSITIONS + _MAX_POSITIONS]
        if len(sums) < _WIDTH + len(positions):
            sums.extend([0.0] * (_WIDTH + len(positions) - len(sums)))
        for i, value in enumerate(positions):
            sums[_WIDTH + i] += value
        sums[_T1] += step
        sums[_T2] += step * step
        sums[_K1] += per_step
        sums[_K2] += per_step * per_step
        self._changed(bucket)
        self.expire(row[END])
        return True

    def add(self, end: float, interval: LoadInterval) -> bool:
        """Add one :class:`LoadInterval` ending at ``end`` (see :meth:`add_row`)."""
        e = interval.errors
        row = array(
            "d",
            (
                end, interval.seconds or 0.0, interval.request_steps, interval.decode_seconds,
                interval.decode_tokens, interval.engine_steps or 0.0, interval.slot_steps or 0.0,
                *e, 1.0, 1.0 if interval.engine_steps is None else 0.0,
                1.0 if interval.slot_steps is None else 0.0, 0.0, float(interval.resets), -1.0,
                float(interval.drafts), float(interval.draft_tokens),
                float(interval.accepted_tokens), 0.0, *map(float, interval.accepted_per_position),
            ),
        )  # fmt: skip
        return self.add_row(row)

    def expire(self, now: float) -> None:
        """Drop the slots that ended before ``now - retention`` (and past _MAX_SLOTS)."""
        oldest = math.floor((now - self._retention) / self._slot)
        dropped: set[int] = set()
        while self._slots:
            key = next(iter(self._slots))
            if key[0] >= oldest and len(self._slots) <= _MAX_SLOTS:
                break
            del self._slots[key]
            bucket = key[1]
            if self._last[bucket] == key:  # its only slot
                del self._last[bucket]
            self._prefix.pop(bucket, None)
            self._sums.pop(bucket, None)
            self._closed.pop(bucket, None)
            dropped.add(bucket)
        if dropped:
            self._changed(None)
            for signature in self._measured.values():
                signature.dirty.update(dropped)

    def _newest(self, bucket: int, key: tuple[int, int]) -> None:
        """``key`` is ``bucket``'s new newest slot: the one before it joins the kept sum."""
        before = self._last.get(bucket)
        self._last[bucket] = key
        if before is None:
            self._prefix[bucket] = None
        elif bucket in self._prefix:
            kept = self._prefix[bucket]
            if kept is None:
                self._prefix[bucket] = list(self._slots[before])
            else:
                _add_into(kept, self._slots[before])

    def _changed(self, bucket: int | None) -> None:
        self.version += 1
        self._buckets = None
        if bucket is not None:
            self._sums.pop(bucket, None)
            for signature in self._measured.values():
                signature.dirty.add(bucket)

    def measured(self, thresholds: Thresholds, *, speculative: bool) -> int:
        """The buckets measured on this side (:meth:`BucketSums.measured_totals`) as a
        bitmask, bit i for bucket i: a signature that changes exactly when a bucket becomes
        measured or stops being measured. Only the buckets changed since the last call are
        checked again (a scrape adds to one bucket; an expiry changes the buckets it took
        slots from)."""
        key = (thresholds, speculative)
        signature = self._measured.get(key)
        if signature is None:
            if len(self._measured) >= _MAX_SIGNATURES:
                self._measured.clear()
            signature = self._measured[key] = _Signature(set(self._last))
        if signature.dirty:
            mask = signature.mask
            for index in signature.dirty:
                sums = self.bucket(index)
                if (
                    sums is not None
                    and sums.measured_totals(thresholds, speculative=speculative) is not None
                ):
                    mask |= 1 << index
                else:
                    mask &= ~(1 << index)
            signature.mask = mask
            signature.dirty.clear()
        return signature.mask

    def bucket(self, index: int) -> BucketSums | None:
        """The retained sums of bucket ``index`` (None: nothing retained there)."""
        found = self._sums.get(index)
        if found is None:
            last = self._last.get(index)
            if last is None:
                return None
            if index not in self._prefix:
                self._prefix[index] = self._sum_before(index, last)
            kept = self._prefix[index]
            if kept is None:
                summed = list(self._slots[last])
            else:
                summed = list(kept)
                _add_into(summed, self._slots[last])
            label = self._scheme.buckets[index].label
            found = self._sums[index] = BucketSums(index, label, tuple(summed))
        return found

    def slot_drift(self, index: int) -> SlotDrift | None:
        """The spread of bucket ``index``'s time per output token between its time slots and
        its lag-1 autocorrelation (:class:`SlotDrift`; None: fewer than
        :data:`MIN_DRIFT_SLOTS` slots with decoded tokens, or an epoch's single slot). Made
        once per change of the sums: O(the slots retained), at most one read per window."""
        made = self._drift.get(index)
        if made is not None and made[0] == self.version:
            return made[1]
        found: SlotDrift | None = None
        last = self._last.get(index)
        if self._slot < EPOCH_SPAN and last is not None and self._slots:
            # The bucket's slots, oldest first: a look-up per slot of the retention (60 at an
            # hour of minutes), not a pass over every bucket's.
            closed = self._closed.get(index)
            first = next(iter(self._slots))[0]
            if closed is None or closed[0] != (last, first):  # the slots before the newest
                slots, steps, tokens = array("q"), array("d"), array("d")
                get, log = self._slots.get, math.log
                for slot in range(min(first, last[0]), last[0]):
                    values = get((slot, index))
                    if (
                        values is not None
                        and values[_RS] > 0
                        and values[_DT] > 0
                        and (values[_DS] > 0)
                    ):
                        slots.append(slot)
                        steps.append(log(values[_DS] / values[_RS]))
                        tokens.append(log(values[_DT] / values[_RS]))
                closed = self._closed[index] = ((last, first), _Closed(slots, steps, tokens))
            values = self._slots[last]
            if values[_RS] > 0 and values[_DT] > 0 and values[_DS] > 0:
                found = closed[1].with_newest(
                    last[0], math.log(values[_DS] / values[_RS]),
                    math.log(values[_DT] / values[_RS]), self._slot,
                )  # fmt: skip
            else:
                found = closed[1].alone(self._slot)
        self._drift[index] = (self.version, found)
        return found

    def slot_walk(self, index: int) -> SlotWalk | None:
        """How far bucket ``index``'s step time wanders with time, read as a walk off its
        complete slots (the newest, still filling, left out) (:class:`SlotWalk`; None: fewer
        than :data:`MIN_DRIFT_SLOTS` of them with decoded tokens, or an epoch's single slot).
        For the ``history`` basis only (a past epoch against now): O(slots x lags), made
        once per new slot (about 150 us for an hour of minutes), not at every scrape."""
        last = self._last.get(index)
        if self._slot >= EPOCH_SPAN or last is None or not self._slots:
            return None
        first = next(iter(self._slots))[0]
        key = (min(first, last[0]), last[0])
        made = self._walk.get(index)
        if made is not None and made[0] == key:
            return made[1]
        series = []
        for slot in range(key[0], last[0]):
            values = self._slots.get((slot, index))
            if values is not None and values[_RS] > 0 and values[_DT] > 0 and values[_DS] > 0:
                series.append((slot, math.log(values[_DS] / values[_RS])))
        found = _walk(series, self._slot, newest=last[0])
        self._walk[index] = (key, found)
        return found

    def _sum_before(self, index: int, last: tuple[int, int]) -> list[float] | None:
        """The sum of bucket ``index``'s slots before ``last``, in order (None: none)."""
        summed: list[float] | None = None
        for key, values in self._slots.items():
            if key[1] != index or key == last:
                continue
            if summed is None:
                summed = list(values)
            else:
                _add_into(summed, values)
        return summed

    def buckets(self) -> tuple[BucketSums, ...]:
        """The retained sums per bucket, by bucket."""
        if self._buckets is None:
            found = (self.bucket(index) for index in sorted(self._last))
            self._buckets = tuple(b for b in found if b is not None)
        return self._buckets

    def memo(self, key: object, make: Callable[[], _Made]) -> _Made:
        """``make()``, kept while ``key`` stays the same (the curve against a baseline is
        built once for every window, and again as the key's versions move on)."""
        if self._memo is None or self._memo[0] != key:
            self._memo = (key, make())
        made: _Made = self._memo[1]
        return made

    def state(self) -> CurveState:
        return CurveState(
            self._retention,
            self._slot,
            tuple(
                SlotSums(index * self._slot, bucket, tuple(values))
                for (index, bucket), values in self._slots.items()
            ),
        )

    @classmethod
    def from_state(
        cls, state: CurveState, *, scheme: BucketScheme = DEFAULT_SCHEME
    ) -> CurveAccumulator:
        out = cls(retention=state.retention, slot_seconds=state.slot_seconds, scheme=scheme)
        count = len(scheme.buckets)
        for slot in sorted(state.slots, key=lambda s: s.start):
            if not 0 <= slot.bucket < count or len(slot.values) < _WIDTH:
                raise ValueError(f"slot at {slot.start:g}: bucket or width out of range")
            key = (math.floor(slot.start / out._slot + 0.5), slot.bucket)
            out._slots[key] = array("d", slot.values)
        # Each bucket's newest slot; its kept sum is made at its first read.
        out._last = {key[1]: key for key in out._slots}
        out._changed(None)
        return out


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


def _add_into(into: list[float], values: Sequence[float]) -> None:
    """``into`` += ``values``, element by element (widened with zeros to fit)."""
    if len(into) < len(values):
        into.extend([0.0] * (len(values) - len(into)))
    into[: len(values)] = map(operator.add, into, values)  # in C: every read of a bucket


def state_to_dict(state: CurveState) -> dict[str, Any]:
    """A JSON-ready dict of ``state``."""
    return {
        "retention_seconds": state.retention,
        "slot_seconds": state.slot_seconds,
        "columns": list(COLUMNS),
        "slots": [
            {"start": s.start, "bucket": s.bucket, "values": list(s.values)} for s in state.slots
        ],
    }


_NUMBERS = frozenset({int, float})


def _sums(values: list[Any]) -> tuple[float, ...] | None:
    """``values`` as floats when every one is a finite number (a fast path: the types and the
    range checked in C), else None."""
    if not set(map(type, values)) <= _NUMBERS:
        return None
    try:
        numbers = tuple(map(float, values))
    except OverflowError:
        return None
    low, high = min(numbers), max(numbers)
    if not (math.isfinite(low) and math.isfinite(high)) or low < -1e18:
        return None
    return numbers


def state_from_dict(data: Mapping[str, Any]) -> CurveState:
    """The state :func:`state_to_dict` wrote; ValueError naming the first problem."""

    def number(value: object, where: str, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: must be a number")
        out = float(value)
        if not math.isfinite(out) or (positive and out <= 0) or (not positive and out < -1e18):
            raise ValueError(f"{where}: out of range")
        return out

    if not isinstance(data, Mapping):
        raise ValueError("curve state: must be a mapping")
    if list(data.get("columns", ())) != list(COLUMNS):
        raise ValueError("columns: not this version's")
    retention = number(data.get("retention_seconds"), "retention_seconds", positive=True)
    slot_seconds = number(data.get("slot_seconds"), "slot_seconds", positive=True)
    raw = data.get("slots")
    if not isinstance(raw, list) or len(raw) > _MAX_SLOTS:
        raise ValueError(f"slots: must be a list of at most {_MAX_SLOTS}")
    slots = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping):
            raise ValueError(f"slots[{i}]: must be a mapping")
        values = item.get("values")
        bucket = item.get("bucket")
        if not isinstance(bucket, int) or isinstance(bucket, bool) or bucket < 0:
            raise ValueError(f"slots[{i}].bucket: must be an integer >= 0")
        if not isinstance(values, list) or not _WIDTH <= len(values) <= _WIDTH + _MAX_POSITIONS:
            raise ValueError(f"slots[{i}].values: must be a list of {_WIDTH} to "
                             f"{_WIDTH + _MAX_POSITIONS} numbers")  # fmt: skip
        numbers = _sums(values)
        if numbers is None:  # find the first bad value, for the message
            numbers = tuple(number(v, f"slots[{i}].values[{j}]") for j, v in enumerate(values))
        if min(numbers) < 0:
            raise ValueError(f"slots[{i}].values: sums must be >= 0")
        slots.append(SlotSums(number(item.get("start"), f"slots[{i}].start"), bucket, numbers))
    return CurveState(retention, slot_seconds, tuple(slots))
