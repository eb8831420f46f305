"""How long the daemon's event loop is held, and by what: the loop's lag and the cycle
collector's pauses, measured all the time.

Every scrape, fetch and reload of the daemon runs on one event loop. Anything that holds it
(a long collection, a large answer built in one piece, a starved core) delays every target's
scrape at once: at fleet size, a hold near the scrape timeout ends scrapes as timeouts that
are specmon's, not the targets'. :class:`LoopWatch` sleeps ``tick`` seconds again and again and
measures how late it wakes (``specmon_event_loop_lag_seconds``), and times every collection
of Python's cycle collector through :data:`gc.callbacks` (``specmon_gc_pause_seconds``). A lag
of ``stall_after`` or more is logged once (``event_loop_stalled``) with the collector's time
inside it, which says whether the collector was the cause.

It also measures how much of the time the loop **idles**: :meth:`LoopWatch.time_idle` wraps
the loop's selector so that every wait in it (for I/O or the next timer) is timed, and each
tick reports the tick's span and the idle time inside it (``on_ran``). A loop that never
idles is short of CPU; one waiting on targets that do not answer idles (the overload
governor's test, specmon/daemon/governor.py). Two clock reads per pass of the loop that
waits; none for a pass with callbacks ready (the loop then polls without waiting).
"""

from __future__ import annotations

import asyncio
import gc
import selectors
import time
from collections.abc import Callable
from typing import Any, Protocol

from specmon.logs import Logger

__all__ = ["GC_BUCKETS", "LAG_BUCKETS", "STALL_AFTER", "TICK", "LoopWatch"]

#: Seconds between two wake-ups of the watch.
TICK = 0.1
#: A lag of this many seconds or more is logged (``event_loop_stalled``).
STALL_AFTER = 0.5
#: Histogram buckets, seconds: from a busy tick's normal lag to a scrape timeout.
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
GC_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Observer(Protocol):
    """A histogram (or its labelled child): what the watch records into."""

    def observe(self, amount: float) -> None: ...


class LoopWatch:
    """The event loop's lag and the collector's pauses (see the module docstring).

    ``lag`` records each wake-up's lateness; ``gc_pause(generation)`` gives the observer of
    one generation's pauses. :meth:`install` hooks the collector (and :meth:`uninstall`
    unhooks it); :meth:`run` is the watching task.
    """

    def __init__(
        self,
        *,
        lag: Observer,
        gc_pause: Callable[[int], Observer],
        tick: float = TICK,
        stall_after: float = STALL_AFTER,
        clock: Callable[[], float] = time.perf_counter,
        log: Logger | None = None,
        on_lag: Callable[[float], None] | None = None,
        on_ran: Callable[[float, float], None] | None = None,
    ) -> None:
        if tick <= 0 or stall_after <= 0:
            raise ValueError("tick and stall_after must be positive")
        self._lag = lag
        self._gc_observers = [gc_pause(generation) for generation in range(3)]
        self.tick = tick
        self.stall_after = stall_after
        self._clock = clock
        self._log = log
        #: Told every lag measured (the overload governor keeps the worst per slot).
        self._on_lag = on_lag
        #: Told each tick's span and the loop's idle time inside it, seconds.
        self._on_ran = on_ran
        #: Seconds the loop idled in its selector since the last tick (None: not timed).
        self._idle: float | None = None
        self._timed: tuple[Any, Any] | None = None
        self._gc_started: float | None = None
        self._pauses: list[tuple[int, float]] = []
        #: Seconds the collector ran in all, since :meth:`install`.
        self.gc_seconds = 0.0
        #: Stalls logged so far.
        self.stalls = 0
        self._installed = False

    # -- the collector ----------------------------------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_started = self._clock()
            return
        started, self._gc_started = self._gc_started, None
        if started is None:  # installed in the middle of a collection
            return
        seconds = self._clock() - started
        self.gc_seconds += seconds
        generation = info.get("generation", 2)
        if isinstance(generation, int) and 0 <= generation <= 2 and len(self._pauses) < 1024:
            # Recorded at the next wake-up: a collection can start inside prometheus_client
            # while it holds a metric's (non-reentrant) lock, so none is taken here.
            self._pauses.append((generation, seconds))

    def install(self) -> None:
        """Time every collection from now on (idempotent)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def flush(self) -> None:
        """Record the collector's pauses timed since the last flush."""
        pauses, self._pauses = self._pauses, []
        for generation, seconds in pauses:
            self._gc_observers[generation].observe(seconds)

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False
            self._gc_started = None

    # -- the loop's idle time -----------------------------------------------------------------

    def time_idle(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Time every wait of ``loop`` in its selector from now on; False when the loop has
        no selector to time (an event loop other than asyncio's selector loops): its idle
        time then stays unmeasured."""
        selector = getattr(loop, "_selector", None)
        if self._timed is not None or not callable(getattr(selector, "select", None)):
            return self._timed is not None
        self._idle = 0.0
        timed = _TimedSelector(selector, clock=self._clock, on_wait=self._waited)
        loop._selector = timed  # type: ignore[attr-defined]
        self._timed = (loop, selector)
        return True

    def untime_idle(self) -> None:
        """Give the loop its own selector back."""
        if self._timed is not None:
            loop, selector = self._timed
            if isinstance(getattr(loop, "_selector", None), _TimedSelector):
                loop._selector = selector
            self._timed = None

    def _waited(self, seconds: float) -> None:
        if self._idle is not None:
            self._idle += seconds

    # -- the loop ---------------------------------------------------------------------------

    def woke(self, *, asked: float, slept: float, gc_seconds: float, span: float = 0.0) -> float:
        """Record one wake-up: ``slept`` seconds for a sleep of ``asked``, during which the
        collector ran ``gc_seconds``; ``span``: seconds since the previous wake-up (for the
        idle share). The lag (never negative)."""
        lag = max(0.0, slept - asked)
        self._lag.observe(lag)
        if self._on_lag is not None:
            self._on_lag(lag)
        if self._idle is not None:
            idle, self._idle = self._idle, 0.0
            if self._on_ran is not None and span > 0:
                self._on_ran(span, idle)
        self.flush()
        if lag >= self.stall_after:
            self.stalls += 1
            if self._log is not None:
                self._log.warning(
                    "event_loop_stalled",
                    seconds=round(lag, 3),
                    collector_seconds=round(gc_seconds, 3),
                    hint="every scrape due in that time was delayed by it"
                    + (" (mostly the cycle collector)" if gc_seconds >= lag / 2 else ""),
                )
        return lag

    async def run(self) -> None:
        """Watch until cancelled."""
        try:
            last = self._clock()
            while True:
                before, gc_before = self._clock(), self.gc_seconds
                await asyncio.sleep(self.tick)
                now = self._clock()
                self.woke(
                    asked=self.tick,
                    slept=now - before,
                    gc_seconds=self.gc_seconds - gc_before,
                    span=now - last,
                )
                last = now
        finally:
            self.uninstall()
            self.untime_idle()


class _TimedSelector(selectors.BaseSelector):
    """A selector that times every wait that may block (a timeout other than 0) and hands
    everything else to the selector it wraps."""

    def __init__(
        self,
        real: Any,
        *,
        clock: Callable[[], float],
        on_wait: Callable[[float], None],
    ) -> None:
        self._real: selectors.BaseSelector = real  # or one that quacks like it (tests)
        self._clock = clock
        self._on_wait = on_wait

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._real.select(timeout)
        start = self._clock()
        try:
            return self._real.select(timeout)
        finally:
            self._on_wait(self._clock() - start)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
