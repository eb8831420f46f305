"""A fleet read in the terms every source answers in (:mod:`specmon.sources`): each instance
a :class:`~specmon.sources.Reading` or a :class:`~specmon.sources.Failure`, and a read that
cannot be used one failure for every instance, with the scrape result a direct scrape that
failed the same way would have."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from specmon.config_values import format_duration
from specmon.sources import Failure, Outcome, Reading, ScrapeResult
from specmon.sources.prometheus.model import InstanceRead, ReadResult, ReadStatus

__all__ = ["instance_outcome", "read_failure", "scrape_result"]

_SCRAPE_RESULT: Mapping[ReadStatus, ScrapeResult] = {
    ReadStatus.PARTIAL: ScrapeResult.PARTIAL,
    ReadStatus.DOWN: ScrapeResult.CONNECTION_ERROR,
    ReadStatus.TIMEOUT: ScrapeResult.TIMEOUT,
    ReadStatus.HTTP_ERROR: ScrapeResult.HTTP_ERROR,
    ReadStatus.QUERY_ERROR: ScrapeResult.QUERY_ERROR,
    ReadStatus.BAD_RESPONSE: ScrapeResult.PARSE_ERROR,
    ReadStatus.TOO_LARGE: ScrapeResult.TOO_LARGE,
    ReadStatus.CREDENTIALS_ERROR: ScrapeResult.CREDENTIALS_ERROR,
    ReadStatus.INTERNAL_ERROR: ScrapeResult.INTERNAL_ERROR,
}


def scrape_result(status: ReadStatus) -> ScrapeResult:
    """The scrape result every instance gets when a read with this status is not usable."""
    return _SCRAPE_RESULT.get(status, ScrapeResult.INTERNAL_ERROR)


def read_failure(result: ReadResult, *, source: str) -> Failure:
    """What every instance of ``source`` gets from a read that cannot be used."""
    return Failure(
        kind=scrape_result(result.status),
        message=f"Prometheus source {source}: {result.status.value}: {result.message or ''}",
        duration=result.duration_seconds,
    )


def instance_outcome(inst: InstanceRead, *, stale_after: float, duration: float) -> Outcome:
    """One instance of a usable read: its page read by the engine adapters, or why not (stale:
    Prometheus no longer scrapes it; bad series: duplicated or malformed)."""
    if inst.stale:
        return Failure(
            kind=ScrapeResult.STALE,
            message=(
                f"stale: Prometheus has no sample of this instance newer than stale_after "
                f"({format_duration(stale_after)}); its newest is from "
                f"{_sample_time(inst.newest_sample)}"
            ),
            duration=duration,
        )
    page = inst.reading() if inst.error is None else None
    if page is None:
        return Failure(
            kind=ScrapeResult.BAD_SERIES,
            message=inst.error or "no usable series",
            duration=duration,
        )
    return Reading(page=page, size=0, duration=duration)


def _sample_time(stamp: float | None) -> str:
    if stamp is None:
        return "unknown"
    return datetime.fromtimestamp(stamp, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
