"""The one path from a read to a target (specmon.daemon.ingest): readings observed, failures
marked, the scrape counters kept by result, a bug while observing costing one reading, and a
removed target's series gone."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.ingest import Ingest
from specmon.daemon.target import Event, TargetState
from specmon.engines import PageReading, read_page
from specmon.logs import get_logger
from specmon.sources import Failure, Reading, ScrapeResult

PAGE = (
    Path(__file__).parents[1] / "fixtures" / "pages" / "vllm-load-spec-c1-after.txt"
).read_text()


class _BrokenState(TargetState):
    """A target whose observation raises, as a bug in specmon would."""

    def observe(
        self,
        reading: PageReading,
        *,
        mono: float,
        wall: float,
        duration: float,
        lag: float = 0.0,
    ) -> list[Event]:
        raise ZeroDivisionError("a bug")


def _setup() -> tuple[Ingest, CollectorRegistry]:
    registry = CollectorRegistry()
    ingest = Ingest(
        scrapes_total=Counter("s", "s", ["target", "result"], registry=registry),
        rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
        log=get_logger(),
    )
    return ingest, registry


def _count(registry: CollectorRegistry, target: str, result: str) -> float | None:
    return registry.get_sample_value("s_total", {"target": target, "result": result})


def _state(name: str, cls: type[TargetState] = TargetState) -> TargetState:
    return cls(TargetConfig(name=name, url="http://h/metrics"), windows=(60.0,), retention=70.0)


def test_readings_failures_and_their_counters() -> None:
    ingest, registry = _setup()
    state = _state("a")
    reading = Reading(page=read_page(PAGE), size=len(PAGE), duration=0.01)
    events = ingest.deliver(state, reading, mono=100.0, wall=1000.0, lag=0.0)
    assert [e.event for e in events][:1] == ["target_up"] and state.view.up
    failure = Failure(kind=ScrapeResult.TIMEOUT, message="no complete response", duration=3.0)
    events = ingest.deliver(state, failure, mono=105.0, wall=1005.0, lag=0.0)
    assert [e.event for e in events] == ["target_down"]
    assert not state.view.up and state.view.error_kind is ScrapeResult.TIMEOUT
    assert _count(registry, "a", "success") == 1 and _count(registry, "a", "timeout") == 1


def test_a_bug_while_observing_costs_one_reading() -> None:
    ingest, registry = _setup()
    broken, fine = _state("broken", _BrokenState), _state("fine")
    reading = Reading(page=read_page(PAGE), size=len(PAGE), duration=0.01)
    ingest.deliver(broken, reading, mono=100.0, wall=1000.0, lag=0.0)
    ingest.deliver(fine, reading, mono=100.0, wall=1000.0, lag=0.0)
    assert not broken.view.up and broken.view.error_kind is ScrapeResult.INTERNAL_ERROR
    assert broken.view.error == "internal error: ZeroDivisionError: a bug"
    assert fine.view.up
    assert _count(registry, "broken", "internal_error") == 1
    assert _count(registry, "broken", "success") is None
    assert _count(registry, "fine", "success") == 1


def test_forget_removes_every_series_of_the_target() -> None:
    ingest, registry = _setup()
    state = _state("gone")
    reading = Reading(page=read_page(PAGE), size=len(PAGE), duration=0.01)
    ingest.deliver(state, reading, mono=100.0, wall=1000.0, lag=0.0)
    ingest.fail(state, Failure(kind=ScrapeResult.HTTP_ERROR, message="HTTP 500", duration=0.1))
    ingest.forget("gone")
    assert _count(registry, "gone", "success") is None
    assert _count(registry, "gone", "http_error") is None
    # Seen again later: counted from zero, with a new child.
    ingest.deliver(_state("gone"), reading, mono=200.0, wall=1100.0, lag=0.0)
    assert _count(registry, "gone", "success") == 1
