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
from specmon.load.slot_drift import (
    MIN_DRIFT_SLOTS,
    SlotDrift,
    SlotWalk,
    _Closed,
    _walk,
    ar1_mean_factor,
    pooled_drift,
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
#: The fewest intervals a slot needs to count in the pooled drift (:meth:`pooled_drift`).
_MIN_SLOT_INTERVALS = 2
_MAX_POSITIONS = 64
#: The (thresholds, side) pairs :meth:`CurveAccumulator.measured` keeps up to date (the daemon
#: asks one per accumulator); past this many they are all made again from the buckets.
_MAX_SIGNATURES = 8
_ZEROS = bytes(8 * _WIDTH)
#: At most this many slots a bucket over the retention: a slot is a minute, or a 1,440th of
#: a retention longer than a day (7d: 7-minute slots), so a week costs what a day does.
SLOTS_PER_RETENTION = 1440
#: At least this many slots over a retention shorter than an hour (its 60th: 2 s at 2m), so
#: the drift terms, which read slots, scale with a retention scaled down (the end-to-end
#: test runs the shipped durations at 1/30, its curve's hour at 2m).
MIN_SLOTS_PER_RETENTION = 60
#: What one slot costs in memory at k = 4 (its sums, 25 doubles, the array holding them,
#: its key and its entry): 397 bytes measured with tracemalloc over 10,000 slots
#: (bench/state.py --slots; 325 at k = 0, 813 at k = 64). A list of floats took 773.
SLOT_BYTES = 400


def slot_seconds_for(retention: float) -> float:
    """A slot's length for ``retention``: a minute, or a SLOTS_PER_RETENTION-th of a
    retention past a day, or a MIN_SLOTS_PER_RETENTION-th of one under an hour."""
    return min(max(60.0, retention / SLOTS_PER_RETENTION), retention / MIN_SLOTS_PER_RETENTION)


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

    __slots__ = ("_buckets", "_closed", "_drift", "_last", "_measured", "_memo", "_pooled", "_prefix",
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
        #: The drift pooled over buckets (:meth:`pooled_drift`) and the key it was made at.
        self._pooled: tuple[tuple[int, int, int], SlotDrift | None] | None = None
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
    def slot_seconds(self) -> float:
        """A time slot's length (seconds)."""
        return self._slot

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

    def pooled_drift(self) -> SlotDrift | None:
        """The server's drift pooled over its buckets' complete slots (the newest minute,
        still filling, left out; :func:`specmon.load.slot_drift.pooled_drift`): what a
        bucket with fewer than :data:`MIN_DRIFT_SLOTS` slots of its own takes (None: too few
        slots anywhere, or an epoch's single slot). Made once per new slot: O(slots)."""
        if self._slot >= EPOCH_SPAN or not self._slots:
            return None
        first, newest = next(iter(self._slots))[0], next(reversed(self._slots))[0]
        key = (first, newest, len(self._slots))
        if self._pooled is not None and self._pooled[0] == key:
            return self._pooled[1]
        complete: dict[int, list[tuple[int, array[float]]]] = {}
        for (slot, bucket), values in sorted(self._slots.items()):
            if slot < newest and values[_RS] > 0 and values[_DT] > 0 and values[_DS] > 0:
                complete.setdefault(bucket, []).append((slot, values))
        per: list[tuple[list[int], list[float], list[float]]] = []
        for kept in complete.values():
            # A slot holding a sliver of a visit (a phase's last seconds past the minute, an
            # interval straddling a change of load) is no batch mean: only slots with at least
            # half the intervals of the bucket's fullest count. In the demo without noise the
            # slivers made a pooled sd of 14-35 %.
            least = max(_MIN_SLOT_INTERVALS, 0.5 * max(v[_I] for _, v in kept))
            full = [(slot, v) for slot, v in kept if v[_I] >= least]
            per.append((
                [slot for slot, _ in full],
                [math.log(v[_DS] / v[_RS]) for _, v in full],
                [math.log(v[_DT] / v[_RS]) for _, v in full],
            ))  # fmt: skip
        found = pooled_drift(per, self._slot)
        self._pooled = (key, found)
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
