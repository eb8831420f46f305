"""Where readings come from. Every source answers, per target, "what does this target say
now?" with a :class:`Reading` (the page read through the engine adapters) or a
:class:`Failure` (a :class:`ScrapeResult` and a message that says why not):

- a page source (:class:`Source`: an engine's ``/metrics``, a saved page) reads one target and
  raises :class:`~specmon.sources.http.FetchError`, the failure as an exception;
- a Prometheus source (:mod:`specmon.sources.prometheus`) reads a whole fleet at once and
  turns each instance into a reading or a failure
  (:func:`~specmon.sources.prometheus.instance_outcome`,
  :func:`~specmon.sources.prometheus.read_failure`).

Either way the outcome reaches the target through one path, :mod:`specmon.daemon.ingest`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from specmon.engines import PageReading
from specmon.records import record

__all__ = ["Failure", "Outcome", "Reading", "ScrapeResult", "Source"]


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
    """One successful read: the page's readings, its size in bytes (0 when it was not a
    page) and how long it took."""

    page: PageReading
    size: int
    duration: float


@record
class Failure:
    """One read without a reading: the target's scrape result, what went wrong (for an
    operator: no secrets) and how long it took."""

    kind: ScrapeResult
    message: str
    duration: float


#: What one read of one target comes to.
Outcome = Reading | Failure


class Source(Protocol):
    async def read(self) -> Reading:
        """Read the target once; raise :class:`~specmon.sources.http.FetchError` when there
        is no page (its ``kind`` is the scrape result)."""
        ...
