"""The daemon's memory management (specmon/process/memory.py): the malloc tuning, applied on
glibc, never over the operator's own setting; the cycle collector's threshold and schedule."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.process.memory import tune_malloc

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_applied_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert tune_malloc() is True


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "262144")
    assert tune_malloc() is False


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_a_freed_large_block_leaves_the_process() -> None:
    """What it is for: with the threshold fixed, a freed multi-megabyte buffer allocated after
    another was freed is unmapped (glibc would otherwise have raised its threshold and
    served it from the heap, where it stays). Measured in a fresh process: RSS after."""
    script = """
import sys
from specmon.process.memory import tune_malloc
if sys.argv[1] == "tuned":
    assert tune_malloc()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
first = bytearray(8 << 20); del first      # glibc raises its threshold past 8 MiB here
blocks = [bytearray(4 << 20) for _ in range(8)]   # 32 MiB: the heap, unless tuned
keep = [bytes(64) for _ in range(20000)]          # small objects allocated in between
blocks[:-1] = []                                  # free 28 MiB
print(rss())
"""
    rss = {
        mode: int(
            subprocess.run(
                [sys.executable, "-c", script, mode], check=True, capture_output=True, text=True
            ).stdout
        )
        for mode in ("tuned", "default")
    }
    assert rss["default"] - rss["tuned"] > 16 << 20, rss


def test_the_collector_stays_out_of_a_scrape_sized_churn() -> None:
    """What tune_gc is for: a workload that keeps about 2,000 objects alive at a time and
    frees them (like one target scrape's samples and views) set off collections of the
    youngest generation again and again at CPython's default threshold, and none once tuned."""
    import gc

    from specmon.process.memory import GC_THRESHOLD0, tune_gc

    def collections_during_churn() -> int:
        before = gc.get_stats()[0]["collections"]
        for _ in range(200):
            batch = [{"value": float(i)} for i in range(2000)]
            del batch
        return int(gc.get_stats()[0]["collections"] - before)

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, saved[1], saved[2])
        default = collections_during_churn()
        assert tune_gc() == (GC_THRESHOLD0, saved[1], saved[2])
        gc.collect()
        tuned = collections_during_churn()
    finally:
        gc.set_threshold(*saved)
    assert default >= 200  # at least once per batch at the default
    assert tuned == 0


# -- the collector's schedule (CollectorSchedule) -------------------------------------------------


class FakeGc:
    """The part of :mod:`gc` the schedule uses, recording every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.frozen = 0

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect{generation}")
        return 3

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen = 100

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0

    def get_freeze_count(self) -> int:
        return self.frozen


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_schedule_freezes_what_survives_its_first_run_and_then_only_collects() -> None:
    from specmon.process.memory import CollectorSchedule

    fake, clock = FakeGc(), Clock()
    schedule = CollectorSchedule(every=60, refreeze_every=3600, collector=fake, clock=clock)
    assert not schedule.frozen
    assert schedule.run_once() == 3
    assert fake.calls == ["collect2", "freeze"] and schedule.frozen
    for _ in range(3):
        clock.now += 60
        schedule.run_once()
    assert fake.calls == ["collect2", "freeze"] + ["collect2"] * 3
    assert schedule.runs == 4


def test_a_thaw_hands_the_frozen_state_back_once_and_the_next_run_freezes_again() -> None:
    from specmon.process.memory import CollectorSchedule

    fake = FakeGc()
    schedule = CollectorSchedule(collector=fake, clock=Clock())
    schedule.thaw()  # nothing frozen yet: nothing to do
    assert fake.calls == []
    schedule.run_once()
    schedule.thaw()
    schedule.thaw()
    assert fake.calls == ["collect2", "freeze", "unfreeze"] and not schedule.frozen
    schedule.run_once()
    assert fake.calls[-2:] == ["collect2", "freeze"]


def test_the_frozen_state_is_walked_again_every_refreeze_period() -> None:
    from specmon.process.memory import CollectorSchedule

    fake, clock = FakeGc(), Clock()
    schedule = CollectorSchedule(every=60, refreeze_every=600, collector=fake, clock=clock)
    schedule.run_once()
    clock.now = 540
    schedule.run_once()
    assert fake.calls == ["collect2", "freeze", "collect2"]
    clock.now = 600
    schedule.run_once()
    assert fake.calls[3:] == ["unfreeze", "collect2", "freeze"]
    clock.now = 1140
    schedule.run_once()
    assert fake.calls[6:] == ["collect2"]  # 540 s after the new freeze


def test_the_schedule_rejects_a_period_that_is_not_positive() -> None:
    from specmon.process.memory import CollectorSchedule

    for every, refreeze in ((0, 60), (-1, 60), (60, 0)):
        with pytest.raises(ValueError, match="positive"):
            CollectorSchedule(every=every, refreeze_every=refreeze, collector=FakeGc())


def test_garbage_in_a_cycle_of_frozen_objects_is_collected_after_a_thaw() -> None:
    """With the real collector: what the schedule froze and then became garbage in a reference
    cycle (a removed target's state) stays until a thaw, and the next run collects it."""
    import gc
    import weakref

    from specmon.process.memory import CollectorSchedule

    class Node:
        other: Node | None = None

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    schedule = CollectorSchedule()
    try:
        schedule.run_once()
        assert schedule.frozen and gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert gone() is not None  # frozen: no collection walks it
        schedule.thaw()
        assert gc.get_freeze_count() == 0
        schedule.run_once()
        assert gone() is None
    finally:
        gc.unfreeze()


def test_the_daemon_runs_the_schedule_and_thaws_when_a_target_goes(tmp_path: Path) -> None:
    """Wiring: ``specmon run``'s daemon starts the schedule, a reload that keeps every target
    leaves the frozen state alone, one that removes a target hands it back, and stopping the
    daemon stops the schedule."""
    import asyncio

    from specmon.daemon.app import Daemon
    from specmon.process.memory import CollectorSchedule

    config = tmp_path / "specmon.yml"

    def write(*names: str) -> None:
        targets = "".join(f"  - name: {n}\n    url: http://127.0.0.1:9/metrics\n" for n in names)
        config.write_text(f"targets:\n{targets}")

    write("a", "b")
    fake = FakeGc()

    async def main() -> None:
        schedule = CollectorSchedule(every=0.05, collector=fake)
        daemon = Daemon(config_path=config, listen="127.0.0.1:0", gc_schedule=schedule)
        await daemon.start()
        try:
            for _ in range(100):
                if schedule.runs >= 2:
                    break
                await asyncio.sleep(0.05)
            assert fake.calls[:3] == ["collect2", "freeze", "collect2"]
            assert (await daemon.reload())[0] and "unfreeze" not in fake.calls
            write("a")
            assert (await daemon.reload())[0]
            assert "unfreeze" in fake.calls and not schedule.frozen
        finally:
            await daemon.stop()
        runs = schedule.runs
        await asyncio.sleep(0.2)
        assert schedule.runs == runs

    asyncio.run(main())
