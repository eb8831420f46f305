"""The one path from a read to a target: both ways of reading targets, the page scraper (one
task per target, :mod:`specmon.daemon.scraper`) and the Prometheus source runner (one read for
a fleet, :mod:`specmon.daemon.prometheus_sources`), hand each target's outcome here.

A :class:`~specmon.sources.Reading` is observed into the target's windows; a
:class:`~specmon.sources.Failure` marks it down. Either way ``specmon_scrapes_total`` counts
it by result, and the page's refused readings go to ``specmon_rejected_readings_total``. A bug
while observing costs that one reading (an ``internal_error``), never the target, the other
targets of a fleet read, or the daemon.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from prometheus_client import Counter

from specmon.daemon.target import Event, TargetState
from specmon.engines import PageReading, RejectReason
from specmon.logs import Logger
from specmon.sources import Failure, Outcome, ScrapeResult

__all__ = ["Ingest"]


class Ingest:
    """Delivers outcomes to targets' states and keeps their scrape counters."""

    def __init__(
        self, *, scrapes_total: Counter, rejected_total: Counter, log: Logger,
        before: Callable[[TargetState, PageReading], None] | None = None,
    ) -> None:  # fmt: skip
        #: Called with each page before its target counts it (a new group member's past).
        self._before = before
        self._scrapes_total = scrapes_total
        self._rejected_total = rejected_total
        self._log = log
        #: Each target's ``result="success"`` child, made at its first success (made before,
        #: it would export a zero for a target never scraped): ``labels()`` costs about 3 us,
        #: five times the increment, on every scrape otherwise.
        self._successes: dict[str, Counter] = {}

    def deliver(
        self, state: TargetState, outcome: Outcome, *, mono: float, wall: float, lag: float
    ) -> list[Event]:
        """``outcome`` into ``state``, stamped ``mono``/``wall`` (the read's time: specmon's
        clock for a scrape, Prometheus's sample time for a fleet instance). ``lag``: how much
        earlier than that the page may have been rendered (a scrape stamped on arrival: its
        duration; a sample time: 0). Returns what changed, for the caller to log."""
        if isinstance(outcome, Failure):
            return self.fail(state, outcome)
        name = state.config.name
        try:
            if self._before is not None:
                self._before(state, outcome.page)
            events = state.observe(
                outcome.page, mono=mono, wall=wall, duration=outcome.duration, lag=lag
            )
        except Exception as exc:  # a bug must cost one reading, never the target
            self._log.exception("observe_failed", target=name)
            return self.fail(state, internal_error(exc, outcome.duration))
        success = self._successes.get(name)
        if success is None:
            success = self._successes[name] = self._scrapes_total.labels(
                target=name, result=ScrapeResult.SUCCESS
            )
        success.inc()
        for rejection in state.view.rejected:
            self._rejected_total.labels(target=name, reason=rejection.reason).inc()
        return events

    def fail(self, state: TargetState, failure: Failure) -> list[Event]:
        self._scrapes_total.labels(target=state.config.name, result=failure.kind).inc()
        return state.fail(kind=failure.kind, message=failure.message, duration=failure.duration)

    def forget(self, name: str) -> None:
        """A target is gone: its counter series go with it."""
        self._successes.pop(name, None)
        for result in ScrapeResult:
            with contextlib.suppress(KeyError):
                self._scrapes_total.remove(name, result)
        for reason in RejectReason:
            with contextlib.suppress(KeyError):
                self._rejected_total.remove(name, reason)


def internal_error(exc: Exception, duration: float) -> Failure:
    """A bug in specmon, as the failure of one read (logged with its traceback by the caller)."""
    return Failure(
        kind=ScrapeResult.INTERNAL_ERROR,
        message=f"internal error: {type(exc).__name__}: {str(exc)[:200]}",
        duration=duration,
    )
