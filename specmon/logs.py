"""structlog set-up: JSON lines when not on a terminal, readable console lines on one."""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

__all__ = ["LEVELS", "Logger", "configure_logging", "get_logger"]

#: The logger type every part of specmon uses (structlog's level-filtering bound logger).
Logger = structlog.typing.FilteringBoundLogger

LEVELS = ("debug", "info", "warning", "error")


def configure_logging(
    *, level: str = "info", fmt: str | None = None, stream: TextIO | None = None
) -> None:
    """``fmt``: "json", "console", or None to choose by whether ``stream`` is a terminal."""
    out = stream if stream is not None else sys.stderr
    if fmt is None:
        fmt = "console" if out.isatty() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
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
