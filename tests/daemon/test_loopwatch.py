"""The event loop's lag and the cycle collector's pauses (specmon/process/loopwatch.py)."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest
import structlog
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.logs import get_logger
from specmon.process.loopwatch import LoopWatch


class Recorder:
    """A histogram's child, by hand: the amounts observed."""

    def __init__(self) -> None:
        self.amounts: list[float] = []

    def observe(self, amount: float) -> None:
        self.amounts.append(amount)


def _watch(
    *, tick: float = 0.1, stall_after: float = 0.5
) -> tuple[LoopWatch, Recorder, list[Recorder]]:
    lag, pauses = Recorder(), [Recorder() for _ in range(3)]
    watch = LoopWatch(
        lag=lag,
        gc_pause=lambda generation: pauses[generation],
        tick=tick,
        stall_after=stall_after,
        log=get_logger(),
    )
    return watch, lag, pauses


def test_a_wake_up_records_its_lag_and_a_stall_is_logged_with_the_collectors_share() -> None:
    watch, lag, _ = _watch(tick=0.1, stall_after=0.5)
    with structlog.testing.capture_logs() as logs:
        assert watch.woke(asked=0.1, slept=0.13, gc_seconds=0.0) == pytest.approx(0.03)
        assert watch.woke(asked=0.1, slept=0.09, gc_seconds=0.0) == 0.0  # early: no lag
        assert watch.woke(asked=0.1, slept=1.3, gc_seconds=0.9) == pytest.approx(1.2)
        assert watch.woke(asked=0.1, slept=0.8, gc_seconds=0.1) == pytest.approx(0.7)
    assert lag.amounts == pytest.approx([0.03, 0.0, 1.2, 0.7])
    assert [entry["event"] for entry in logs] == ["event_loop_stalled"] * 2
    assert logs[0]["seconds"] == 1.2 and logs[0]["collector_seconds"] == 0.9
    assert logs[0]["log_level"] == "warning"
    assert "cycle collector" in logs[0]["hint"]
    assert "cycle collector" not in logs[1]["hint"]  # 0.1 of 0.7 s: something else
    assert watch.stalls == 2


def test_the_collectors_pauses_are_timed_by_generation_and_recorded_at_the_next_wake_up() -> None:
    watch, _, pauses = _watch()
    watch.install()
    watch.install()  # idempotent: one callback
    try:
        assert gc.callbacks.count(watch._on_gc) == 1
        gc.collect(0)
        gc.collect(2)
        # Nothing is observed inside the collector's callback (no metric lock taken there).
        assert [p.amounts for p in pauses] == [[], [], []]
        watch.woke(asked=0.1, slept=0.1, gc_seconds=0.0)
    finally:
        watch.uninstall()
    assert watch._on_gc not in gc.callbacks
    assert len(pauses[0].amounts) >= 1 and len(pauses[2].amounts) >= 1
    assert all(0 <= seconds < 5 for p in pauses for seconds in p.amounts)
    assert watch.gc_seconds == pytest.approx(sum(sum(p.amounts) for p in pauses))
    before = [len(p.amounts) for p in pauses]
    gc.collect(2)  # uninstalled: no longer timed
    watch.flush()
    assert [len(p.amounts) for p in pauses] == before


def test_a_callback_installed_in_the_middle_of_a_collection_records_nothing() -> None:
    watch, _, pauses = _watch()
    watch._on_gc("stop", {"generation": 2})  # no start seen
    watch._on_gc("start", {"generation": 7})
    watch._on_gc("stop", {"generation": 7})  # not a generation: timed, not recorded
    watch.flush()
    assert [p.amounts for p in pauses] == [[], [], []]


def test_the_watch_sees_a_held_loop_and_unhooks_the_collector_when_cancelled() -> None:
    """A real loop held for 0.3 s by a blocking call: the watch wakes that late and logs it."""
    watch, lag, _ = _watch(tick=0.01, stall_after=0.2)

    async def main() -> None:
        watch.install()
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # noqa: ASYNC251 - the loop held on purpose, as by a long collection
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(main())
    assert max(lag.amounts) >= 0.25
    assert sum(1 for amount in lag.amounts if amount >= 0.2) == 1
    assert [entry["event"] for entry in logs] == ["event_loop_stalled"]
    assert watch._on_gc not in gc.callbacks


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        _watch(tick=0)
    with pytest.raises(ValueError, match="must be positive"):
        _watch(stall_after=-1)


def test_the_daemon_exports_both_histograms_from_the_start() -> None:
    from specmon.daemon.app import Daemon

    daemon = Daemon(config_path=None)
    text = generate_latest(daemon.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    lag = families["specmon_event_loop_lag_seconds"]
    assert lag.type == "histogram"
    assert {s.labels.get("le") for s in lag.samples if s.name.endswith("_bucket")} >= {
        "0.5",
        "+Inf",
    }
    pause = families["specmon_gc_pause_seconds"]
    counts = {s.labels["generation"]: s.value for s in pause.samples if s.name.endswith("_count")}
    assert counts == {"0": 0.0, "1": 0.0, "2": 0.0}
