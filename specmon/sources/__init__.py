"""Where readings come from. A :class:`Source` answers one question, "what does this target
say now?", with a :class:`Reading` (the page read through the engine adapters) or a
:class:`~specmon.sources.http.FetchError` that says why not. The daemon's scraper calls
sources and never knows whether the numbers came from an HTTP page, a file or a query API.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from specmon.engines import PageReading
from specmon.records import record

__all__ = ["Reading", "ScrapeResult", "Source"]


class ScrapeResult(StrEnum):
    """How one read of a target ended: the ``result`` label of ``specmon_scrapes_total``."""

    SUCCESS = "success"
    HTTP_ERROR = "http_error"
    TIMEOUT = "timeout"
    CONNECTION_ERROR = "connection_error"
    TOO_LARGE = "too_large"
    #: A response that is not an exposition page at all.
    PARSE_ERROR = "parse_error"
    #: A bug in specmon: logged with its traceback; the target keeps being scraped.
    INTERNAL_ERROR = "internal_error"
    # Targets read through a Prometheus source (specmon.daemon.prometheus_sources): the read's own
    # failures map to the values above (down: connection_error, bad answer: parse_error) or:
    #: Prometheus answered with a query error (``"status": "error"``).
    QUERY_ERROR = "query_error"
    #: Prometheus answered with warnings (some data may be missing) and the source does not
    #: set ``accept_partial``.
    PARTIAL = "partial"
    #: The source's token, password or TLS files could not be used; nothing was sent.
    CREDENTIALS_ERROR = "credentials_error"
    #: The instance's newest sample is older than the source's ``stale_after``: Prometheus
    #: no longer scrapes it, its last numbers are not current.
    STALE = "stale"
    #: The instance's series cannot be used (duplicated or malformed: its message says which).
    BAD_SERIES = "bad_series"


@record
class Reading:
    """One successful read: the page's readings, its size in bytes and how long it took."""

    page: PageReading
    size: int
    duration: float


class Source(Protocol):
    async def read(self) -> Reading:
        """Read the target once; raise :class:`~specmon.sources.http.FetchError` when there
        is no page (its ``kind`` is the scrape result)."""
        ...
