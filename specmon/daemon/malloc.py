"""Give large freed buffers back to the system (glibc only): the daemon's memory at fleet size.

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
import os
import sys

__all__ = ["MMAP_THRESHOLD", "tune_malloc"]

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
