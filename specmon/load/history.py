"""One model's rolling load history for the daemon: the intervals between consecutive
scrapes, with a sliding sum per window length (:class:`LoadHistory`), and a window's load
(:class:`LoadWindow`)."""

from __future__ import annotations

import math
from array import array
from dataclasses import field

from specmon.engines.model import RejectReason
from specmon.load.buckets import DEFAULT_SCHEME, BucketScheme, BucketTotals
from specmon.load.compare import CompareMemo
from specmon.load.counters import LoadCounters
from specmon.load.curve import CurveAccumulator
from specmon.load.interval import LoadInterval, Speeds, bounded_ratio
from specmon.load.laws import interval_refusal
from specmon.load.rows import (
    BUCKET,
    DECODE_SECONDS,
    DECODE_TOKENS,
    DRAFTS,
    ENGINE_MISSING,
    ENGINE_STEPS,
    ERRORS,
    INTERVALS,
    LEAN,
    POSITIONS,
    REQUEST_STEPS,
    RESUM_EVERY,
    SLOT_MISSING,
    SLOT_STEPS,
    IntervalRows,
    Pairs,
    Slide,
    interval_of,
    interval_row,
    row_concurrency,
)
from specmon.records import record

#: Two times this close are one reading's (an interval's start is its end less its seconds).
_SAME_TIME = 1e-6


@record
class LoadWindow:
    """A window's load: all its intervals summed, and per concurrency bucket."""

    totals: LoadInterval | None
    buckets: tuple[BucketTotals, ...]
    #: Mean of the requests-running gauge over the window's readings (a point-sampled
    #: fallback for engines without step counters).
    requests_running_mean: float | None
    #: The most recent interval: the load the engine is under now (read by a comparison
    #: with a baseline only: None for a window read without its buckets).
    latest: LoadInterval | None = None
    #: The model's cost-curve accumulator (specmon.load.curve), for a comparison to read.
    curve: CurveAccumulator | None = field(default=None, compare=False, repr=False)


class LoadHistory:
    """One model's load readings, kept as the intervals between consecutive scrapes, with a
    sliding sum per window length asked for (so a window costs O(its new and expired
    intervals) per reading, not O(its length)).

    ``lean``: keep only what :meth:`speeds` reads (17 doubles an interval, not 22 and the
    positions: a target compared with no baseline, to save memory). The first
    :meth:`window` or :attr:`latest` (a reload gave the target a baseline, or another target
    takes it as its twin) makes the history whole: exactly, by laying the held rows out
    again, when every dropped column was 0 (a server without speculation: what a twin is);
    else the held intervals are let go and the history starts again from the last reading
    (a speculating target's drafts cannot be made up)."""

    def __init__(
        self,
        *,
        retention: float,
        scheme: BucketScheme = DEFAULT_SCHEME,
        lean: bool = False,
        curve_retention: float = 3600.0,
    ) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention
        self._scheme = scheme
        self._lean = lean
        #: A lean row dropped a column that was not 0: it cannot be made whole again.
        self._lossy = False
        self._last: tuple[float, LoadCounters] | None = None
        #: How much earlier than its time the last reading's page may have been rendered.
        self._last_lag = 0.0
        #: The held intervals' rows, oldest first.
        self._rows = IntervalRows()
        #: The newest row as a LoadInterval, made when first asked for.
        self._latest: LoadInterval | None = None
        self._dropped = 0  # absolute index of the oldest held interval
        #: (time, requests running) per reading that had the gauge.
        self._running = Pairs()
        self._running_dropped = 0
        self._slides: dict[float, Slide] = {}
        self._memos: dict[float, CompareMemo] = {}
        #: window(seconds) with its buckets, until the next reading: a twin that several
        #: speculating targets take as their baseline (a canary beside a pool) is read by
        #: each of them on each of their scrapes.
        self._windows: dict[float, LoadWindow] = {}
        #: Why the last reading's interval was left out (:mod:`specmon.load.laws`), or None.
        self.refusal: tuple[RejectReason, str] | None = None
        #: Every whole interval, per time slot and bucket, for ``curve_retention`` (the cost
        #: curve: specmon.load.curve); fed while the history is whole (compared, or a twin).
        #: None while lean (about 160 bytes a history saved across a fleet compared with
        #: nothing): made with the history's first whole row.
        self._curve_retention = curve_retention
        self.curve: CurveAccumulator | None = None if lean else self._new_curve()
        #: The last reading's interval row, whole even in a lean history (None: the last
        #: reading closed no interval): the configuration epoch's accumulator takes it.
        self.whole_row: array[float] | None = None
        #: The start of the sums kept from one time on (:meth:`anchor`), or None.
        self._anchor: float | None = None

    def _new_curve(self) -> CurveAccumulator:
        return CurveAccumulator(retention=self._curve_retention, scheme=self._scheme)

    @property
    def lean(self) -> bool:
        """Whether the rows still hold only what :meth:`speeds` reads."""
        return self._lean

    def memo(self, seconds: float) -> CompareMemo:
        """The comparison memo of the window of ``seconds`` (see :class:`CompareMemo`)."""
        memo = self._memos.get(seconds)
        if memo is None:
            memo = self._memos[seconds] = CompareMemo()
        return memo

    def set_retention(self, retention: float) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention

    def add(self, time: float, counters: LoadCounters, *, lag: float = 0.0) -> bool:
        """Record a reading; True when it closed an interval since the previous one (False
        for the first reading, a reading not newer than the previous, or an interval that
        breaks the laws of :mod:`specmon.load.laws`: left out, with the reason in
        :attr:`refusal`, and the next interval starts from this reading). The interval is
        :attr:`latest`.

        ``lag``: how much earlier than ``time`` the page may have been rendered (a scrape
        stamped when its answer arrived: the scrape's duration). The laws allow the interval
        that starts from this reading that much more wall time: a slow scrape of a starved
        server shows counters from its start, and the next, quick one from its end."""
        last = self._last
        self.refusal = None
        self.whole_row = None
        if last is not None and time <= last[0]:
            return False
        if self._windows:
            self._windows = {}
        slides = self._slides.values()
        if last is not None:
            self.refusal = interval_refusal(last[1], counters, time - last[0] + self._last_lag)
        if last is not None and self.refusal is None:
            row = interval_row(last[1], counters, time - last[0], time)
            self.whole_row = array("d", row) if self._lean else row
            if self._lean:
                if not self._lossy and any(row[DRAFTS:]):
                    self._lossy = True
                del row[LEAN:]
            else:
                self._bucket(row)
                if self.curve is not None:
                    self.curve.add_row(row)
            rows = self._rows
            rows.append(row)
            if len(rows) == rows.capacity:  # room for the retention at this rate (rows.py)
                rows.reserve_for(
                    retention=self._retention, intervals=len(rows), span=time - rows.start(0)
                )
            self._latest = None
            for slide in slides:
                slide.put(row, 1)
        if counters.requests_running is not None:
            running = self._running
            running.append((time, counters.requests_running))
            if len(running) == running.capacity:
                running.reserve_for(
                    retention=self._retention,
                    intervals=len(running) - 1,
                    span=time - running.time(0),
                )
            for slide in slides:
                slide.running_sum += counters.requests_running
                slide.running_count += 1
        self._last = (time, counters)
        self._last_lag = lag if lag > 0 else 0.0  # NaN > 0 is False too
        for slide in slides:
            self._advance(slide, time)
        cutoff = time - self._retention
        rows = self._rows
        while len(rows) and rows.start(0) < cutoff:
            for slide in slides:
                if slide.first <= self._dropped:  # still inside a window longer than retention
                    slide.put(rows.row(0), -1)
                    slide.first = self._dropped + 1
            rows.popleft()
            self._dropped += 1
        running = self._running
        while len(running) and running.time(0) < cutoff:
            value = running.value(0)
            running.popleft()
            for slide in slides:
                if slide.running_first <= self._running_dropped:
                    slide.running_sum -= value
                    slide.running_count -= 1
                    slide.running_first = self._running_dropped + 1
            self._running_dropped += 1
        return last is not None and self.refusal is None

    def _bucket(self, row: array[float]) -> None:
        """Put a whole row in its concurrency bucket (it has none while its concurrency is
        unknown or it saw no request step)."""
        concurrency = row_concurrency(row)
        if concurrency is not None and row[REQUEST_STEPS] > 0:
            row[BUCKET] = float(self._scheme.index_of(concurrency))

    def make_whole(self) -> None:
        """Keep every column from now on (see the class): exact while the rows held are a
        server's without speculation; a no-op for a history already whole."""
        if self._lean:
            self._widen()

    def _widen(self) -> None:
        """Make a lean history whole (see the class): its sums are made again."""
        self._lean = False
        curve = self.curve = self._new_curve()
        old = self._rows
        if self._lossy:
            self._dropped += len(old)
            self._rows = IntervalRows()
        else:
            rows = self._rows = IntervalRows()
            padding = array("d", [-1.0]) + array("d", bytes(8 * (POSITIONS - 1 - LEAN)))
            for index in range(len(old)):
                row = old.row(index) + padding
                self._bucket(row)
                curve.add_row(row)
                rows.append(row)
                if index == 0:
                    rows.reserve(old.capacity)
        self._lossy = False
        self._latest = None
        for slide in self._slides.values():
            slide.first = max(slide.first, self._dropped)
            self._resum(slide)

    @property
    def latest_concurrency(self) -> float | None:
        """:attr:`latest`'s concurrency, read off its row without making a lean history
        whole (None before the second reading, or when that interval decoded nothing)."""
        if not len(self._rows):
            return None
        return row_concurrency(self._rows.newest())

    @property
    def latest(self) -> LoadInterval | None:
        """The most recent interval still held (None before the second reading)."""
        if self._lean:
            self._widen()
        if not len(self._rows):
            return None
        if self._latest is None:
            self._latest = interval_of(self._rows.newest(), strip_positions=False)
        return self._latest

    def _advance(self, slide: Slide, now: float) -> None:
        """Take out of ``slide`` what no longer lies inside it."""
        start = now - slide.seconds - 1e-9
        rows = self._rows
        index, held = slide.first - self._dropped, len(rows)
        while index < held:
            if rows.start(index) >= start:
                break
            slide.put(rows.row(index), -1)
            index += 1
        slide.first = index + self._dropped
        first = slide.running_first - self._running_dropped
        index, slide.running_sum = self._running.skip_before(first, start, slide.running_sum)
        slide.running_count -= index - first
        slide.running_first = index + self._running_dropped
        if slide.changes > RESUM_EVERY:
            self._resum(slide)

    def _resum(self, slide: Slide) -> None:
        """Sum ``slide`` again from the intervals inside it."""
        fresh = Slide(slide.seconds, bucketed=slide.bucketed, lean=self._lean)
        fresh.first = slide.first
        fresh.running_first = slide.running_first
        rows = self._rows
        for index in range(slide.first - self._dropped, len(rows)):
            fresh.put(rows.row(index), 1)
        running = self._running
        for index in range(slide.running_first - self._running_dropped, len(running)):
            fresh.running_sum += running.value(index)
            fresh.running_count += 1
        fresh.changes = 0
        slide.total, slide.buckets, slide.changes = fresh.total, fresh.buckets, 0
        slide.running_sum, slide.running_count = fresh.running_sum, fresh.running_count

    def _slide(self, seconds: float) -> Slide:
        slide = self._slides.get(seconds)
        if slide is None:
            slide = self._slides[seconds] = Slide(seconds, lean=self._lean)
            slide.first, slide.running_first = self._dropped, self._running_dropped
            if self._last is not None:
                self._advance(slide, self._last[0])
            self._resum(slide)
        return slide

    def anchor(self, since: float | None, *, curve: bool = False) -> None:
        """Keep the sums of the intervals that start at ``since`` or later (the reading that
        opens the current configuration epoch's first interval): the windows asked for
        ``since`` read them (one sliding sum, O(1) a reading, whatever the windows); None
        lets them go (no window reaches back to it any more). With ``curve`` the cost curve
        starts again from the same intervals (the configuration changed: its step times are
        another server's)."""
        if since is None:
            self._anchor = None
            self._slides.pop(math.inf, None)
            self._windows.pop(math.inf, None)
            return
        if curve and self.curve is not None:
            self.curve = self._new_curve()
            for index in range(len(self._rows)):
                if self._rows.start(index) >= since - _SAME_TIME:
                    self.curve.add_row(self._rows.row(index))
        if since == self._anchor:
            return
        self._anchor = since
        self._windows.pop(math.inf, None)
        slide = Slide(math.inf, lean=self._lean)
        rows, index = self._rows, 0
        while index < len(rows) and rows.start(index) < since - _SAME_TIME:
            index += 1
        slide.first = self._dropped + index
        # The requests-running gauge of the readings after ``since`` (the one at ``since``
        # closed the previous configuration's last interval).
        skipped, _ = self._running.skip_before(0, since + _SAME_TIME, 0.0)
        slide.running_first = self._running_dropped + skipped
        self._resum(slide)
        self._slides[math.inf] = slide

    def _key(self, seconds: float, since: float | None) -> float:
        """The slide of a window of ``seconds`` that starts no earlier than ``since``: its
        own, or the anchored one when ``since`` cuts it."""
        if since is None or self._last is None or since <= self._last[0] - seconds:
            return seconds
        self.anchor(since)
        return math.inf

    def window(
        self, seconds: float, *, buckets: bool = True, since: float | None = None
    ) -> LoadWindow:
        """The intervals that lie wholly inside the last ``seconds`` (and start at ``since``
        or later); ``buckets=False`` leaves out what only a comparison with a baseline
        reads: the per-bucket sums and the latest interval."""
        if self._lean:
            self._widen()
        if self._last is None:
            return LoadWindow(None, (), None)
        seconds = self._key(seconds, since)
        if buckets:
            cached = self._windows.get(seconds)
            if cached is not None:
                return cached
        slide = self._slide(seconds)
        if (buckets and not slide.bucketed) or slide.changes > RESUM_EVERY:
            slide.bucketed = slide.bucketed or buckets
            self._resum(slide)
        total = slide.total.interval()
        running = slide.running_sum / slide.running_count if slide.running_count > 0 else None
        if not buckets:
            return LoadWindow(total, (), running)
        scheme = self._scheme.buckets
        found = []
        for index in sorted(slide.buckets):
            summed = slide.buckets[index].interval()
            if summed is not None:
                found.append(BucketTotals(scheme[index], summed))
        latest = self.latest if total is not None else None
        window = self._windows[seconds] = LoadWindow(
            total, tuple(found), running, latest, self.curve
        )
        return window

    def counts(
        self, seconds: float, *, since: float | None = None
    ) -> tuple[int, float | None, float]:
        """The window's scrape intervals, engine steps (None: an interval lacks them) and
        request-steps: what :class:`~specmon.load.buckets.Thresholds` asks of data."""
        if self._last is None:
            return 0, None, 0.0
        slide = self._slide(self._key(seconds, since))
        v = slide.total.values
        engine = None if v[ENGINE_MISSING] >= 0.5 else max(v[ENGINE_STEPS], 0.0)
        return slide.total.intervals, engine, max(v[REQUEST_STEPS], 0.0)

    def mean_running(self, seconds: float, *, since: float | None = None) -> float | None:
        """The requests-running gauge averaged over the window's readings: a time average
        of the load (readings come at a steady interval), where the concurrency of
        :meth:`speeds` weights each engine step (None: no reading had the gauge)."""
        if self._last is None:
            return None
        slide = self._slide(self._key(seconds, since))
        return slide.running_sum / slide.running_count if slide.running_count > 0 else None

    def speeds(self, seconds: float, *, since: float | None = None) -> Speeds | None:
        """The live figures of the window of ``seconds`` read straight from its sums: what
        :meth:`window` with ``buckets=False`` gives through ``totals.concurrency`` (else the
        mean of requests running), ``totals.step_seconds`` and
        ``totals.time_per_output_token_seconds``, the same floats, with no
        :class:`LoadInterval` or :class:`LoadWindow` made (the per-scrape path of a target
        compared with no baseline: two objects of 13 and 4 fields a window a scrape, about a
        sixth of the load figures' cost in-process). None when the window
        holds no interval."""
        if self._last is None:
            return None
        slide = self._slide(self._key(seconds, since))
        if slide.changes > RESUM_EVERY:
            self._resum(slide)
        v = slide.total.values
        if v[INTERVALS] < 0.5:
            return None
        # The clamps of interval_of: a sum's drift a few ulps below 0 reads as 0.
        steps = v[REQUEST_STEPS] if v[REQUEST_STEPS] > 0.0 else 0.0
        decode_seconds = v[DECODE_SECONDS] if v[DECODE_SECONDS] > 0.0 else 0.0
        tokens = v[DECODE_TOKENS] if v[DECODE_TOKENS] > 0.0 else 0.0
        e = ERRORS
        concurrency = None
        if v[ENGINE_MISSING] < 0.5 and v[SLOT_MISSING] < 0.5:
            engine = v[ENGINE_STEPS] if v[ENGINE_STEPS] > 0.0 else 0.0
            slots = v[SLOT_STEPS] if v[SLOT_STEPS] > 0.0 else 0.0
            concurrency = bounded_ratio(slots, engine, v[e + 4], v[e + 3])
        if concurrency is None and slide.running_count > 0:
            concurrency = slide.running_sum / slide.running_count
        return (
            concurrency,
            bounded_ratio(decode_seconds, steps, v[e + 1], v[e]),
            bounded_ratio(decode_seconds, tokens, v[e + 1], v[e + 2]),
        )
