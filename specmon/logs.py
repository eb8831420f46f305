"""structlog set-up: JSON lines when not on a terminal, readable console lines on one, and a
limit on how many lines one kind of event may write (:class:`RateLimit`)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

import structlog

from specmon import jsontext

__all__ = ["LEVELS", "LIMIT", "Logger", "RateLimit", "configure_logging", "get_logger"]

#: The logger type every part of specmon uses (structlog's level-filtering bound logger).
Logger = structlog.typing.FilteringBoundLogger

LEVELS = ("debug", "info", "warning", "error")


class RateLimit:
    """At most ``burst`` lines of one event (``target_down``, ``instance_appeared``, ...) at
    once, then ``rate`` a second: a fleet whose 3,000 model names change every scrape must
    not write thousands of lines a scrape. What is dropped is counted per event, reported
    by ``on_drop`` (``specmon_log_lines_dropped_total``) and summed up in one
    ``log_lines_dropped`` line per event and ``period``, written with the next line that
    passes (and by :meth:`flush`)."""

    #: Never limited: the summary itself, and the process's own lifecycle.
    EXEMPT = frozenset(
        {"log_lines_dropped", "specmon_started", "specmon_stopping", "specmon_stopped",
         "specmon_stop_abandoned"}
    )  # fmt: skip

    def __init__(
        self,
        *,
        burst: float = 100.0,
        rate: float = 10.0,
        period: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.rate, self.period = burst, rate, period
        self._clock = clock
        #: event -> (tokens, last refill time)
        self._buckets: dict[str, tuple[float, float]] = {}
        #: Dropped since the last summary, per event.
        self.pending: dict[str, int] = {}
        self._next_summary = clock() + period
        self.on_drop: Callable[[str], None] | None = None

    def __call__(
        self, logger: Any, method: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        event = str(event_dict.get("event", ""))
        if event in self.EXEMPT:
            return event_dict
        now = self._clock()
        tokens, last = self._buckets.get(event, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[event] = (tokens, now)
            self.pending[event] = self.pending.get(event, 0) + 1
            if self.on_drop is not None:
                self.on_drop(event)
            raise structlog.DropEvent
        self._buckets[event] = (tokens - 1.0, now)
        if self.pending and now >= self._next_summary:
            self.flush()
        return event_dict

    def flush(self) -> None:
        """Write one ``log_lines_dropped`` line per event with dropped lines pending."""
        pending, self.pending = self.pending, {}
        self._next_summary = self._clock() + self.period
        log = get_logger()
        for event, count in sorted(pending.items()):
            log.warning("log_lines_dropped", dropped_event=event, dropped=count,
                        limit=f"{self.burst:g} lines, then {self.rate:g} a second")  # fmt: skip


#: The process's limit, installed by :func:`configure_logging`.
LIMIT = RateLimit()


def configure_logging(
    *,
    level: str = "info",
    fmt: str | None = None,
    stream: TextIO | None = None,
    limit: RateLimit = LIMIT,
) -> None:
    """``fmt``: "json", "console", or None to choose by whether ``stream`` is a terminal;
    ``limit``: the per-event limit on lines (the process's own by default)."""
    out = stream if stream is not None else sys.stderr
    if fmt is None:
        fmt = "console" if out.isatty() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=jsontext.dumps, sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        limit,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
        renderer,
    ]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        # Loggers are bound once (per target) and used on every scrape: resolve the
        # configuration once per logger, not per call.
        cache_logger_on_first_use=True,
    )


def get_logger(**initial: Any) -> Logger:
    logger: Logger = structlog.get_logger("specmon").bind(**initial)
    return logger
