"""One asyncio task per target: fetch, read, update the target's state, log what changed.

A scrape is bounded by the target's ``scrape_timeout`` and the response size cap; a failing
target backs off (doubling its interval up to 8x, at most a minute beyond its interval) so a
dead server costs nearly nothing, and no target ever waits for another.

Scrapes wake on a grid (:func:`wake_time`): the targets due within one tick share one pass of
the event loop instead of each costing its own. Each target keeps its own schedule, exact to
the interval (the grid only delays a wake-up, by less than a tick, and never accumulates).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from specmon.daemon.config import TargetConfig
from specmon.daemon.governor import Governor
from specmon.daemon.ingest import Ingest, internal_error
from specmon.daemon.target import Event, TargetState
from specmon.logs import Logger
from specmon.sources import Failure, Outcome, Reading, ScrapeResult, Source
from specmon.sources.deadlines import deadline
from specmon.sources.http import FetchError

__all__ = ["MAX_TICK", "Gate", "TargetScraper", "backoff_delay", "gate", "next_due", "wake_time"]


def backoff_delay(interval: float, failures: int) -> float:
    """Delay before the next scrape after ``failures`` consecutive failures."""
    if failures <= 0:
        return interval
    factor = float(1 << min(failures - 1, 3))
    return min(interval * factor, interval + 60.0)


#: The wake-up grid's step, in seconds, for intervals of two seconds and more (a twentieth of
#: shorter ones). At 1,000 targets every 5 s about 20 targets share a tick; measured with
#: 1,000 targets on loopback, waking each on its own cost 0.18 ms of CPU per scrape in the
#: event loop alone, on a 0.1 s grid 0.065 ms (bench/results/HISTORY.md).
MAX_TICK = 0.1


def wake_time(due: float, *, interval: float) -> float:
    """The first point of the wake-up grid at or after ``due`` (loop time, seconds); the
    grid's step is at most a twentieth of ``interval``."""
    tick = min(MAX_TICK, interval / 20.0)
    if tick <= 0.0:
        return due
    return math.ceil(due / tick) * tick


def next_due(due: float, *, wait: float, now: float) -> float:
    """When the scrape after one due at ``due`` is due: a ``wait`` later on the target's own
    schedule, or ``now`` when that has passed already (a stalled loop, a scrape that overran:
    start again at once, not in a burst of catch-up scrapes)."""
    return max(due + wait, now)


class _Waker:
    """One timer per grid point, however many scrapes wake at it: the scrapes wait on plain
    futures, so the event loop's timer heap holds tens of entries instead of one per target
    (its pushes and pops compare in Python)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[float, list[asyncio.Future[None]]] = {}

    async def until(self, when: float) -> None:
        """Sleep until loop time ``when`` (a grid point: equal floats for one point)."""
        if when <= self._loop.time():
            await asyncio.sleep(0)
            return
        waiters = self._waiters.get(when)
        if waiters is None:
            waiters = self._waiters[when] = []
            self._loop.call_at(when, self._wake, when)
        future = self._loop.create_future()
        waiters.append(future)
        await future  # a cancelled scraper's future is cancelled with it, and skipped below

    def _wake(self, when: float) -> None:
        for future in self._waiters.pop(when, ()):
            if not future.done():
                future.set_result(None)


_WAKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Waker] = weakref.WeakKeyDictionary()


class Gate:
    """The governor's in-flight limits, applied: a scrape over its lane's limit waits here,
    in order, before it starts (its timeout not begun), and starts when a scrape of its lane
    ends. Two lanes: targets that answer, and suspects (their last judged scrape timed out),
    so that scrapes that never answer hold no place a healthy target waits for. A probe (the
    scrape after an excused timeout) waits first in its line. At most one waiter per
    target."""

    def __init__(self, governor: Governor) -> None:
        self._governor = governor
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._suspects: deque[asyncio.Future[None]] = deque()

    async def enter(self, *, first: bool = False, suspect: bool = False) -> bool:
        """Wait for a place under the limit of the scrape's lane; True when it had to
        wait (deferred)."""
        governor = self._governor
        waiting = self._suspects if suspect else self._waiting
        if not waiting and governor.admit(suspect=suspect):
            return False
        future = asyncio.get_running_loop().create_future()
        if first:
            waiting.appendleft(future)
        else:
            waiting.append(future)
        governor.defer(suspect=suspect)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted, then cancelled
                self.leave(judged=False, timeout=0.0, suspect=suspect)
            raise
        return True

    def leave(self, *, judged: bool, timeout: float, suspect: bool = False) -> None:
        """A scrape that entered ended (see :meth:`Governor.finished`): its place goes to
        the next in its line."""
        self._governor.finished(judged=judged, timeout=timeout, suspect=suspect)
        self._admit(self._suspects if suspect else self._waiting, suspect=suspect)

    def admit_waiting(self) -> None:
        """Start as many waiting scrapes as the limits allow (the first lane's may have
        grown)."""
        self._admit(self._waiting, suspect=False)
        self._admit(self._suspects, suspect=True)

    def _admit(self, waiting: deque[asyncio.Future[None]], *, suspect: bool) -> None:
        governor = self._governor
        while waiting:
            if waiting[0].done():  # its scraper was cancelled while it waited
                waiting.popleft()
                continue
            if not governor.admit(suspect=suspect):
                return
            waiting.popleft().set_result(None)

    def __len__(self) -> int:
        return len(self._waiting) + len(self._suspects)


_GATES: weakref.WeakKeyDictionary[Governor, Gate] = weakref.WeakKeyDictionary()


def gate(governor: Governor) -> Gate:
    """The one gate of ``governor`` (every scraper it governs waits at the same one)."""
    found = _GATES.get(governor)
    if found is None:
        found = _GATES[governor] = Gate(governor)
    return found


def _waker(loop: asyncio.AbstractEventLoop) -> _Waker:
    waker = _WAKERS.get(loop)
    if waker is None:
        waker = _WAKERS[loop] = _Waker(loop)
    return waker


class TargetScraper:
    """Scrapes one target on its schedule; each outcome goes to the target through
    :class:`~specmon.daemon.ingest.Ingest`."""

    def __init__(
        self,
        state: TargetState,
        *,
        source: Callable[[TargetConfig], Source],
        ingest: Ingest,
        log: Logger,
        on_scraped: Callable[[str], None],
        governor: Governor | None = None,
    ) -> None:
        self.state = state
        #: Told when each scrape starts; its stretch multiplies the interval, and it excuses
        #: the timeouts that are specmon's own (None: on schedule, every timeout counted).
        self._governor = governor
        self._source = source
        self._ingest = ingest
        #: Bound once: every line this scraper logs names its target.
        self._log = log.bind(target=state.config.name)
        self._on_scraped = on_scraped
        self.failures = 0
        #: Timeouts excused in a row: at the governor's ``excuse_limit`` the next scrape is a
        #: probe, judged whatever specmon's state (module governor, "Excuses are bounded").
        self.excused = 0
        #: The next scrape is a probe due at the configured interval (after the first excused
        #: timeout in a row; a probe that judged nothing waits for the stretched schedule, or
        #: probes would scrape a starved process's targets 16 times as often as the rest).
        self._probe_soon = False
        #: Loop time of the last successful read (for the interval achieved).
        self._last_read: float | None = None
        #: The last judged scrape timed out: the next scrapes run in the suspects' lane of
        #: the in-flight limit (module governor) until one is judged otherwise.
        self.suspect = False

    async def run(self, *, first_delay: float | None = None) -> None:
        """Scrape until cancelled. The first scrape waits a random part of the interval so
        that many targets do not all fire at once."""
        interval = self.state.config.scrape_interval
        delay = random.uniform(0, interval) if first_delay is None else first_delay  # noqa: S311
        loop = asyncio.get_running_loop()
        # ``due``: when this scrape should start, off the grid; the next one is due a wait
        # later, so the grid's rounding never accumulates into the schedule.
        due = loop.time() + delay
        waker = _waker(loop)
        governor = self._governor
        asked = interval
        previous: float | None = None
        gated = None if governor is None else gate(governor)
        while True:
            wake = wake_time(due, interval=interval)
            await waker.until(wake)
            judged = False
            suspect = self.suspect
            if governor is not None and gated is not None:
                # Over the in-flight limit: wait, not started; lateness counts the wait, but
                # only the loop's own lateness is evidence that specmon was behind.
                woke = loop.time()
                waited = await gated.enter(
                    first=self.excused >= governor.policy.excuse_limit, suspect=suspect
                )
                if waited:
                    governor.lagged(at=woke, lag=woke - wake)
                    due = loop.time()  # deferred: the schedule goes on from its start
                now = loop.time()
                governor.started(
                    at=now,
                    late=now - wake,
                    interval=interval,
                    asked=asked,
                    gap=None if previous is None else now - previous,
                    waited=waited,
                    suspect=suspect,
                )
                previous = now
            try:
                judged = await self.scrape_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep scraping whatever happened
                self._log.exception("scrape_failed")
            finally:
                if gated is not None:
                    gated.leave(
                        judged=judged, timeout=self.state.config.scrape_timeout, suspect=suspect
                    )
            interval = self.state.config.scrape_interval
            stretch = 1.0 if governor is None else governor.stretch
            # After an excused timeout the probe comes at the configured interval: a target
            # that hangs is not hidden for a stretched interval more.
            soon = self._probe_soon
            asked = interval if soon else backoff_delay(interval * stretch, self.failures)
            due = next_due(due, wait=asked, now=loop.time())

    async def scrape_once(self) -> bool:
        """One scrape; True when its outcome was delivered to the target (not excused)."""
        started = time.perf_counter()
        loop_started = asyncio.get_running_loop().time()
        governor = self._governor
        probe = governor is not None and self.excused >= governor.policy.excuse_limit
        config = self.state.config
        outcome: Outcome
        try:
            if governor is not None and probe:
                outcome = await self._probe(governor, config, start=loop_started)
            else:
                outcome = await self._source(config).read()
        except _Inconclusive:
            assert governor is not None
            governor.excuse()  # never given its timeout: excused, and probed again
            self._probe_soon = False
            self._canonical(ScrapeResult.TIMEOUT, time.perf_counter() - started, excused=True)
            return False
        except FetchError as exc:
            outcome = Failure(
                kind=exc.kind, message=str(exc), duration=time.perf_counter() - started
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must cost one scrape, never the target or the daemon
            self._log.exception("read_failed")
            outcome = internal_error(exc, time.perf_counter() - started)
        if not probe and self._excused(outcome, start=loop_started):
            self.excused += 1
            self._probe_soon = True
            self._canonical(ScrapeResult.TIMEOUT, outcome.duration, excused=True)
            return False
        self.excused = 0
        self._probe_soon = False
        # Judged: a timeout of its own puts the target in the suspects' lane, anything else
        # takes it out (an excused timeout, specmon's own, changes nothing).
        self.suspect = isinstance(outcome, Failure) and outcome.kind is ScrapeResult.TIMEOUT
        lag = outcome.duration if isinstance(outcome, Reading) else 0.0
        events = self._ingest.deliver(
            self.state, outcome, mono=time.monotonic(), wall=time.time(), lag=lag
        )
        self._emit(events)
        view = self.state.view
        if view.up and isinstance(outcome, Reading):
            self.failures = 0
            if governor is not None:
                now = asyncio.get_running_loop().time()
                if self._last_read is not None:
                    governor.completed(interval=config.scrape_interval, gap=now - self._last_read)
                self._last_read = now
            self._canonical(
                ScrapeResult.SUCCESS,
                outcome.duration,
                size=outcome.size,
                malformed=outcome.page.malformed,
            )
        else:
            self.failures += 1
            kind = view.error_kind or ScrapeResult.INTERNAL_ERROR
            self._canonical(kind, outcome.duration, error=view.error)
        self._on_scraped(self.state.config.name)
        return True

    async def _probe(self, governor: Governor, config: TargetConfig, *, start: float) -> Reading:
        """A scrape judged whatever specmon's state: its timeout counts the time specmon ran
        (the clock less the stalls measured meanwhile), up to ``probe_wall`` timeouts on the
        clock; a timeout then is the target's. One that reached that bound before specmon
        gave it half its timeout raises :class:`_Inconclusive`: specmon could not judge."""
        timeout = config.scrape_timeout
        until = start + timeout * governor.policy.probe_wall
        loop = asyncio.get_running_loop()
        # The source's own deadline later than ``until``: the probe's decides.
        source = self._source(dataclasses.replace(config, scrape_timeout=until - start + 1.0))

        def owed(late: float) -> float:
            return governor.owed(
                start=start, now=loop.time(), late=late, timeout=timeout, until=until
            )

        try:
            async with deadline(timeout, extend=owed):
                return await source.read()
        except TimeoutError:
            now = loop.time()
            ran = (now - start) - governor.stalled_during(start=start, end=now)
            if ran < timeout / 2:  # not even half its timeout: specmon cannot judge
                raise _Inconclusive from None
            raise FetchError(
                ScrapeResult.TIMEOUT,
                f"no complete response within {timeout:g}s of specmon's own time "
                f"({now - start:.1f}s on the clock)",
            ) from None

    def _excused(self, outcome: Outcome, *, start: float) -> bool:
        """A timeout while specmon itself was behind: not the target's (module governor)."""
        if self._governor is None or not isinstance(outcome, Failure):
            return False
        if outcome.kind is not ScrapeResult.TIMEOUT:
            return False
        view = self.state.view
        if view.scraped and not view.up:  # down already: its timeouts are its own (a tarpit
            return False  # must not count as specmon's trouble for the governor)
        return self._governor.excuses(
            timeout=self.state.config.scrape_timeout,
            start=start,
            end=asyncio.get_running_loop().time(),
        )

    def _emit(self, events: list[Event]) -> None:
        for event in events:
            log = self._log.warning if event.level == "warning" else self._log.info
            log(event.event, **event.fields)

    def _canonical(self, result: ScrapeResult, duration: float, **extra: Any) -> None:
        """One line per scrape, at debug level (its fields are not even gathered otherwise:
        about 2 % of a scrape's CPU at fleet size)."""
        if not self._log.is_enabled_for(logging.DEBUG):
            return
        view = self.state.view
        fields: dict[str, Any] = {
            "result": result,
            "duration_s": round(duration, 4),
            "engine": view.engine.value if view.engine else None,
        }
        primary = self.state.primary_window
        for model in view.models:
            window = model.window(primary)
            if window is not None and window.report is not None:
                fields[f"alpha_{primary}"] = _r(window.report.alpha)
                fields[f"margin_{primary}"] = _r(window.report.alpha_margin)
                fields[f"drafts_{primary}"] = window.drafts
                break
        if self.failures:
            fields["failures"] = self.failures
        self._log.debug("scrape", **fields, **extra)


class _Inconclusive(Exception):
    """A probe that reached its bound on the clock before specmon gave it half its timeout."""


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
