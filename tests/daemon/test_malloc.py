"""The daemon's malloc tuning (specmon/daemon/malloc.py): applied on glibc, never over the
operator's own setting."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from specmon.daemon.malloc import tune_malloc

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
from specmon.daemon.malloc import tune_malloc
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

    from specmon.daemon.malloc import GC_THRESHOLD0, tune_gc

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
