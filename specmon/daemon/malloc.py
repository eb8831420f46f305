"""Memory management at fleet size: large freed buffers go back to the system (glibc only), and
Python's cycle collector runs less often (:func:`tune_gc`).

Every read of a Prometheus source and every build of ``/metrics`` at thousands of targets makes
and frees buffers of megabytes (answer bodies, their decoding, the joined page). glibc raises
its mmap threshold after the first such buffer is freed, so the later ones come from the heap,
where a few long-lived objects allocated in between keep the freed space from ever being
returned: the daemon's RSS settles tens of MiB above what it holds. Fixing the threshold at
glibc's initial 128 KiB keeps every block of that size or more in its own mapping, returned to
the system when freed (bench/RESULTS.md, fleet mode: peak RSS 309 -> 270 MiB at 2,000
instances). ``MALLOC_MMAP_THRESHOLD_`` in the environment, the operator's own choice, wins.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

__all__ = ["GC_THRESHOLD0", "MMAP_THRESHOLD", "tune_gc", "tune_malloc"]

#: glibc's initial (and minimum dynamic) mmap threshold, in bytes.
MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # <malloc.h>


def tune_malloc(*, threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes; True when it was set (False on
    another C library, or when ``MALLOC_MMAP_THRESHOLD_`` is set)."""
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt does nothing)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold) == 1)


#: Net allocations of tracked objects after which Python collects its youngest generation
#: (CPython's default: 700). One target scrape keeps a few hundred to a few thousand objects
#: alive at once (the page's samples, the views): at 700 the collector ran in the middle of
#: scrapes about 8 times a second at 1,000 targets, promoting the scrape's temporaries to the
#: older generations, and the full collections that followed walked every target's history:
#: 0.54 s of the daemon's 5.3 s of CPU over 30 s (10 %), against 0.03 s at 10,000
#: (bench/RESULTS.md). Garbage in reference cycles waits a little longer, a few MB at most.
GC_THRESHOLD0 = 10_000


def tune_gc(*, threshold0: int = GC_THRESHOLD0) -> tuple[int, int, int]:
    """Set the youngest generation's threshold (the older ones keep theirs); returns the
    thresholds now in force."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold0, older, oldest)
    return gc.get_threshold()
