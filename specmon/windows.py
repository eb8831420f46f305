"""Rolling windows over timestamped counter readings: exact, reset-aware, no I/O.

A :class:`CounterHistory` keeps one model's readings as a monotonic running total of counter
increases. An engine restart shows up as the drafts counter going down; like Prometheus's
``increase()``, the increase over that step is then the new value itself (the counter started
again from zero). Some counters going down while the drafts counter does not is not a restart
but a broken page: the reading is refused (``partial_decrease``) unless it persists for
:data:`PARTIAL_DECREASE_LIMIT` readings in a row, which only a restart explains. The
generated-token counter (another family) going down alone restarts only itself. Per-position
series that appear later (llama.cpp publishes them after the first speculative request) count
from zero; series that vanish stop contributing.

A window of W seconds is the increase from the oldest reading at or after ``t_last - W`` to the
newest reading, in integers. Nothing is extrapolated: ``seconds`` says how much time the
window's data actually covers.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections import deque
from itertools import repeat

from specmon.arithmetic import rounding_error
from specmon.engines.model import RejectReason, SpecCounters
from specmon.engines.validate import check_counters
from specmon.records import record
from specmon.rows import Rows

__all__ = ["CounterHistory", "GaugeHistory", "Observation", "WindowDelta", "increase"]


@record
class WindowDelta:
    """Counter increases over a window."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]
    start: float
    end: float
    #: Readings inside the window (at least 2).
    readings: int
    #: Engine restarts detected inside the window.
    resets: int
    #: Tokens the engine generated in the window (None when it publishes no such counter).
    generated_tokens: int | None = None
    #: Counters the engine does not publish, and counters specmon derived (see SpecCounters).
    unknown: tuple[str, ...] = ()
    derived: tuple[str, ...] = ()
    #: The largest relative error the engine's printed precision puts on the window's
    #: drafts, draft tokens or accepted tokens (0 for engines that print exact counts).
    uncertainty: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def as_counters(self) -> SpecCounters:
        return SpecCounters(
            drafts=self.drafts,
            draft_tokens=self.draft_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=self.accepted_per_position,
            unknown=self.unknown,
            derived=self.derived,
        )


#: Consecutive readings with a partial decrease after which it is taken as a restart.
PARTIAL_DECREASE_LIMIT = 3


@record
class Observation:
    """What adding one reading did."""

    accepted: bool
    reset: bool = False
    reason: str = ""
    #: The refused reading had some counters going down while the drafts counter did not.
    partial_decrease: bool = False
    #: The reading was kept but the interval since the previous one broke the physics of
    #: a single page (:func:`specmon.engines.validate.check_counters`): it adds nothing.
    inconsistent: RejectReason | None = None


def _vector(counters: SpecCounters, generated: int | None) -> tuple[int, ...]:
    return (
        counters.drafts,
        counters.draft_tokens,
        counters.accepted_tokens,
        generated if generated is not None else 0,
        *counters.accepted_per_position,
    )


_SCALARS = 4
_GENERATED = 3
#: Significant digits of an engine that prints its counters rounded (llama.cpp).
PRINTED_DIGITS = 6
#: A window's figures are withheld when the printed precision could put them further off
#: than this (see docs/engines.md: llama.cpp past a million drafts).
MAX_WINDOW_ERROR = 0.02
_NAMES = ("drafts", "draft tokens", "accepted tokens", "generated tokens")
#: SpecCounters' names of the first three, as in ``SpecCounters.rounded``.
_COUNTED = ("drafts", "draft_tokens", "accepted_tokens")


def _series_name(index: int) -> str:
    return _NAMES[index] if index < _SCALARS else f"position {index - _SCALARS + 1}"


def _pad(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    return values + (0,) * (size - len(values)) if len(values) < size else values


#: A reading is held as one row of 64-bit integers (:class:`specmon.rows.Rows`: all the
#: readings of a history in one array, 8 bytes a number and nothing else): the
#: cumulative reset count, the number of position series the reading published, then the
#: running totals (:func:`_vector`'s order). A reading's counters are at most 2**53
#: (``engines._common.MAX_COUNT``), so a total passes this only after hundreds of restarts at
#: that size; the retained totals are then rebased (windows are differences) and the offset
#: kept as Python integers for :meth:`CounterHistory.totals`.
_REBASE_AT = 2**62
_RESETS, _POSITIONS, _TOTALS = 0, 1, 2


class CounterHistory:
    """One model's counter readings, kept for ``retention`` seconds."""

    def __init__(self, *, retention: float) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention
        self._times: Rows[float] = Rows("d")  # one number a row: the reading's time
        #: A row a reading: resets, positions, running totals of increases (see _REBASE_AT).
        self._rows: Rows[int] = Rows("q")
        #: Added to the last total by totals(): what rebasing took off (see _REBASE_AT).
        self._offset: tuple[int, ...] = ()
        self._last_raw: tuple[int, ...] | None = None
        #: The counters the newest reading printed rounded (SpecCounters.rounded).
        self._last_rounded: tuple[str, ...] = ()
        #: The newest held reading's time and totals (what its rows hold, for add()).
        self._last_time: float | None = None
        self._last_total: tuple[int, ...] = ()
        self._reset_count = 0
        self._partial_decreases = 0
        self._has_generated = False
        self._generated_seen = False
        #: (unknown, derived) of the readings held: a reading with another counter set
        #: (TensorRT-LLM's per-position series appearing) restarts the history.
        self._kind: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        #: Times the history restarted because the counter set changed.
        self.source_changes = 0

    def __len__(self) -> int:
        return len(self._times)

    def set_retention(self, retention: float) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self._retention = retention

    def max_positions(self) -> int:
        """The most position series any retained reading published."""
        return self._rows.column_max(_POSITIONS) or 0

    @property
    def resets(self) -> int:
        """Engine restarts detected since this history began."""
        return self._reset_count

    def totals(self) -> SpecCounters | None:
        """Increases seen since this history began (monotonic; survives engine restarts)."""
        if not len(self._rows):
            return None
        newest = self._rows.newest()
        last = tuple(newest[_TOTALS:])
        if self._offset:
            size = max(len(last), len(self._offset))
            last = tuple(
                a + b for a, b in zip(_pad(last, size), _pad(self._offset, size), strict=True)
            )
        unknown, derived = self._kind or ((), ())
        return SpecCounters(
            drafts=last[0],
            draft_tokens=last[1],
            accepted_tokens=last[2],
            accepted_per_position=last[_SCALARS : _SCALARS + newest[_POSITIONS]],
            unknown=unknown,
            derived=derived,
        )

    def add(
        self, time: float, counters: SpecCounters, *, generated_tokens: int | None = None
    ) -> Observation:
        """Record a reading taken at ``time`` (seconds, any monotonic clock).

        ``generated_tokens``: the engine's generated-token counter, if it has one; kept in
        the same reset-aware running total so a window can say "busy but no drafts".
        """
        if self._last_time is not None and time <= self._last_time:
            return Observation(False, reason="reading is not newer than the previous one")
        kind = (counters.unknown, counters.derived)
        restarted = self._kind is not None and kind != self._kind
        if restarted:
            # Other counters now stand behind the same names (TensorRT-LLM: drafts from the
            # per-position series once they appear): differences across the change would
            # mix two sources, so the windows start again from this reading.
            self._times.clear()
            self._rows.clear()
            self._last_raw = None
            self._offset = ()
            self._generated_seen = False
            self.source_changes += 1
        self._kind = kind
        # A reading without the generated-token counter changes nothing in its running total
        # (no increase, no reset); a counter that appears later counts from its first value.
        previous_generated = self._last_raw[3] if self._last_raw is not None else None
        if generated_tokens is None:
            generated = previous_generated
        else:
            generated = generated_tokens
            if not self._generated_seen and self._last_raw is not None:
                self._last_raw = (*self._last_raw[:3], generated, *self._last_raw[4:])
            self._generated_seen = True
        self._has_generated = generated_tokens is not None
        raw = _vector(counters, generated)
        inconsistent: tuple[RejectReason, str] | None = None
        if self._last_raw is None:
            total = tuple(0 for _ in raw)
            reset = False
        else:
            previous = self._last_raw
            base = self._last_total
            size = max(len(raw), len(previous), len(base))
            new_p, old_p = _pad(raw, size), _pad(previous, size)
            common = min(len(raw), len(previous))
            # A restart: the drafts counter went down. A series missing now (llama.cpp's
            # positions after a restart) is not a decrease.
            reset = new_p[0] < old_p[0]
            partial = (
                [i for i in range(common) if i != _GENERATED and new_p[i] < old_p[i]]
                if not reset and any(map(operator.lt, new_p[:common], old_p[:common]))
                else []
            )
            if partial:
                self._partial_decreases += 1
                if self._partial_decreases < PARTIAL_DECREASE_LIMIT:
                    return Observation(
                        False,
                        reason=f"{_series_name(partial[0])} went down while the drafts counter "
                        "did not: a broken page, not a restart",
                        partial_decrease=True,
                    )
                # Persistent: the engine restarted or changed what it counts. The drafts
                # counter did not go down, so these are not counters that started again from
                # zero and their values are no increase: the reading becomes the new
                # baseline, with nothing added.
                reset = True
                increase = (0,) * size
            elif reset:
                increase = new_p
            else:
                width = len(raw)  # series missing now (after a restart) increase by 0
                increase = (
                    *map(max, map(operator.sub, new_p[:width], old_p[:width]), repeat(0)),
                    *repeat(0, size - width),
                )
                if common > _GENERATED and new_p[_GENERATED] < old_p[_GENERATED]:
                    # The generated-token counter restarted alone: its new value is its increase.
                    increase = (
                        *increase[:_GENERATED],
                        new_p[_GENERATED],
                        *increase[_GENERATED + 1 :],
                    )
                if len(raw) == len(previous):  # (position series appearing: counted from 0)
                    broken = self._broken(increase, previous, raw, counters)
                    if broken is not None:
                        inconsistent = broken
                        increase = (0,) * size
            base = _pad(base, size)
            total = tuple(map(operator.add, base, increase))  # both ``size`` long
        self._partial_decreases = 0
        if reset:
            self._reset_count += 1
        self._last_raw = raw
        self._last_rounded = counters.rounded
        self._times.append((time,))
        if max(total) > _REBASE_AT:
            total = self._rebase(total)
        rows = self._rows
        rows.append((self._reset_count, len(raw) - _SCALARS, *total))
        self._last_time, self._last_total = time, total
        if len(rows) == rows.capacity and len(rows) > 1:
            # Room for the retention at the rate the readings came (one allocation: rows.py).
            rows.reserve_for(
                retention=self._retention,
                intervals=len(rows) - 1,
                span=time - self._times.cell(0, 0),
            )
            self._times.reserve(rows.capacity)
        self._prune(time)
        if restarted:
            return Observation(True, reason="the engine's counter set changed; windows restart")
        if inconsistent is not None:
            return Observation(
                True,
                reason="the interval since the previous reading is left out of every window: "
                + inconsistent[1],
                inconsistent=inconsistent[0],
            )
        return Observation(True, reset=reset)

    def _broken(
        self,
        increase: tuple[int, ...],
        before: tuple[int, ...],
        after: tuple[int, ...],
        counters: SpecCounters,
    ) -> tuple[RejectReason, str] | None:
        """The physics of a single page, checked on an interval's increases; a counter
        printed rounded at either end may be off by half a unit of its last digit there."""
        rounded = set(counters.rounded) | set(self._last_rounded)

        def slack(index: int, name: str) -> float:
            if name not in rounded:
                return 0.0
            return rounding_error(before[index], PRINTED_DIGITS, integer=True) + rounding_error(
                after[index], PRINTED_DIGITS, integer=True
            )

        delta = SpecCounters(
            drafts=increase[0],
            draft_tokens=increase[1],
            accepted_tokens=increase[2],
            accepted_per_position=increase[_SCALARS : len(after)],
            rounded=counters.rounded,
            unknown=counters.unknown,
            derived=counters.derived,
        )
        broken = check_counters(
            delta, slack_drafts=slack(0, "drafts"), slack_tokens=slack(1, "draft_tokens")
        )
        if broken is None:
            return None
        return RejectReason.INCONSISTENT_INTERVAL, f"{broken[0].value}: {broken[1]}"

    def _rebase(self, total: tuple[int, ...]) -> tuple[int, ...]:
        """Take the oldest retained total off every retained total and ``total`` (windows
        are differences, so none changes); add it to the offset totals() reports."""
        rows = self._rows
        oldest = tuple(rows.row(0)[_TOTALS:]) if len(rows) else total
        size = max(len(total), len(oldest), len(self._offset))
        oldest = _pad(oldest, size)
        self._offset = tuple(a + b for a, b in zip(_pad(self._offset, size), oldest, strict=True))
        for index in range(len(rows)):
            row = rows.row(index)
            padded = _pad(tuple(row[_TOTALS:]), size)
            # Past the held rows' width both are zeros (a reading wider than all held ones).
            rebased = [a - b for a, b in zip(padded, oldest, strict=True)]
            rows.replace(index, (row[_RESETS], row[_POSITIONS], *rebased[: rows.stride - _TOTALS]))
        return tuple(a - b for a, b in zip(_pad(total, size), oldest, strict=True))

    def _prune(self, now: float) -> None:
        cutoff = now - self._retention
        times = self._times
        while len(times) > 1 and times.cell(0, 0) < cutoff:
            times.popleft()
            self._rows.popleft()

    def window(self, seconds: float, *, since: float | None = None) -> WindowDelta | None:
        """Increases over the last ``seconds`` (relative to the newest reading), or None when
        fewer than two readings fall inside it; ``since``: no reading before that time (the
        one that opens the current configuration's first interval) starts it."""
        times = self._times
        end_index = len(times) - 1
        if end_index < 1:
            return None
        end_time = self._last_time
        assert end_time is not None
        first = end_time - seconds if since is None else max(end_time - seconds, since)
        start_index = times.bisect_left(first)
        if start_index >= end_index:
            return None
        rows = self._rows
        start, end = rows.row(start_index), rows.row(end_index)  # as wide as each other
        delta = tuple(map(operator.sub, end, start))
        return WindowDelta(
            drafts=delta[_TOTALS + 0],
            draft_tokens=delta[_TOTALS + 1],
            accepted_tokens=delta[_TOTALS + 2],
            # Every position series published by a reading inside the window after its start
            # (after a restart llama.cpp publishes none until a request completes; the window
            # still has data). The start reading's own are not: after a restart with a
            # shorter k, its deeper positions are the old configuration's, rising no more.
            accepted_per_position=delta[
                _TOTALS + _SCALARS : _TOTALS
                + _SCALARS
                + (rows.column_max(_POSITIONS, start_index + 1, end_index) or 0)
            ],
            start=times.cell(start_index, 0),
            end=end_time,
            readings=end_index - start_index + 1,
            resets=delta[_RESETS],
            generated_tokens=delta[_TOTALS + _GENERATED] if self._has_generated else None,
            unknown=self._kind[0] if self._kind else (),
            derived=self._kind[1] if self._kind else (),
            uncertainty=self._uncertainty(delta, resets=delta[_RESETS]),
        )

    def _uncertainty(self, delta: tuple[int, ...], *, resets: int) -> float:
        """The largest relative error rounding puts on the window's drafts, draft tokens or
        accepted tokens: each end of each stretch between restarts is off by at most half a
        unit of its last printed digit, no larger than the newest reading's."""
        if not self._last_rounded or self._last_raw is None:
            return 0.0
        worst = 0.0
        for index, name in enumerate(_COUNTED):
            increase = delta[_TOTALS + index]
            if name not in self._last_rounded or increase <= 0:
                continue
            unit = rounding_error(self._last_raw[index], PRINTED_DIGITS, integer=True)
            worst = max(worst, 2.0 * unit * (resets + 1) / increase)
        return worst


def increase(before: SpecCounters, after: SpecCounters) -> WindowDelta:
    """The increase from one reading to a later one, reset-aware (a two-reading window).

    ValueError when the two readings hold different counter sets (``unknown``/``derived``
    differ): their difference would mix two sources.
    """
    if (before.unknown, before.derived) != (after.unknown, after.derived):
        raise ValueError("the engine published a different set of counters in the two readings")
    history = CounterHistory(retention=math.inf)
    history.add(0.0, before)
    history.add(1.0, after)
    window = history.window(math.inf)
    assert window is not None
    return window


class GaugeHistory:
    """Readings of a gauge (SGLang's last-interval acceptance), averaged over a window."""

    def __init__(self, *, retention: float) -> None:
        self._retention = retention
        self._times: deque[float] = deque()
        self._values: deque[float] = deque()

    def add(self, time: float, value: float) -> None:
        if self._times and time <= self._times[-1]:
            return
        self._times.append(time)
        self._values.append(value)
        cutoff = time - self._retention
        while len(self._times) > 1 and self._times[0] < cutoff:
            self._times.popleft()
            self._values.popleft()

    def mean(self, seconds: float, *, since: float | None = None) -> tuple[float, int] | None:
        """Mean of the readings in the last ``seconds`` and how many there were; ``since``:
        only the readings after that time (each describes the interval it ends)."""
        if not self._times:
            return None
        first = self._times[-1] - seconds
        if since is not None:
            first = max(first, math.nextafter(since, math.inf))
        start = bisect.bisect_left(self._times, first)
        values = list(self._values)[start:]
        return (sum(values) / len(values), len(values)) if values else None
