"""Log floods: one event writes at most a burst of lines, then a few a second; what is dropped
is counted and summed up in one line per event."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import structlog

from specmon.logs import RateLimit, configure_logging, get_logger
from tests.support.strict_json import strict_loads


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logged() -> Iterator[tuple[io.StringIO, RateLimit, Clock, list[str]]]:
    out = io.StringIO()
    clock = Clock()
    limit = RateLimit(burst=100, rate=10, period=10, clock=clock)
    drops: list[str] = []
    limit.on_drop = drops.append
    configure_logging(level="info", fmt="json", stream=out, limit=limit)
    try:
        yield out, limit, clock, drops
    finally:
        structlog.reset_defaults()


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [strict_loads(line) for line in out.getvalue().splitlines()]


def test_three_thousand_new_models_in_one_scrape(
    logged: tuple[io.StringIO, RateLimit, Clock, list[str]],
) -> None:
    out, limit, clock, drops = logged
    log = get_logger(target="vllm-0")
    for i in range(3000):
        log.warning("reading_rejected", model=f"m{i}", reason="too_many_models")
    for i in range(6000):
        log.info("instance_appeared", target=f"i{i}")
    lines = _lines(out)
    assert sum(1 for x in lines if x["event"] == "reading_rejected") == 100
    assert sum(1 for x in lines if x["event"] == "instance_appeared") == 100
    assert len(drops) == 2900 + 5900
    # A second later each event has 10 more lines; the summary comes with the first line
    # that passes once the period is over.
    clock.now += 1.0
    for i in range(50):
        log.warning("reading_rejected", model=f"n{i}", reason="too_many_models")
    assert sum(1 for x in _lines(out) if x["event"] == "reading_rejected") == 110
    assert not [x for x in _lines(out) if x["event"] == "log_lines_dropped"]
    clock.now += 10.0
    log.info("target_up", target="vllm-0")
    summaries = {
        x["dropped_event"]: x["dropped"] for x in _lines(out) if x["event"] == "log_lines_dropped"
    }
    assert summaries == {"reading_rejected": 2900 + 40, "instance_appeared": 5900}
    assert limit.pending == {}


def test_a_quiet_daemon_loses_nothing(
    logged: tuple[io.StringIO, RateLimit, Clock, list[str]],
) -> None:
    out, _, clock, drops = logged
    log = get_logger()
    for i in range(500):  # ten targets changing state every second for 50 s
        clock.now += 0.1
        log.warning("target_down", target=f"t{i % 10}")
    assert len(_lines(out)) == 500 and not drops


def test_lifecycle_lines_are_never_dropped(
    logged: tuple[io.StringIO, RateLimit, Clock, list[str]],
) -> None:
    out, _, _, _ = logged
    log = get_logger()
    for _ in range(300):
        log.info("specmon_stopping")
    assert len(_lines(out)) == 300
