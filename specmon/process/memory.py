"""Memory management at fleet size: large freed buffers go back to the system (glibc only), and
Python's cycle collector runs on the daemon's clock instead of on allocation counts
(:func:`tune_gc`, :class:`CollectorSchedule`).

Every read of a Prometheus source and every build of ``/metrics`` at thousands of targets makes
and frees buffers of megabytes (answer bodies, their decoding, the joined page). glibc raises
its mmap threshold after the first such buffer is freed, so the later ones come from the heap,
where a few long-lived objects allocated in between keep the freed space from ever being
returned: the daemon's RSS settles tens of MiB above what it holds. Fixing the threshold at
glibc's initial 128 KiB keeps every block of that size or more in its own mapping, returned to
the system when freed (bench/results/HISTORY.md, fleet mode: peak RSS 309 -> 270 MiB at 2,000
instances). ``MALLOC_MMAP_THRESHOLD_`` in the environment, the operator's own choice, wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from specmon.logs import Logger

__all__ = [
    "COLLECT_EVERY",
    "GC_THRESHOLD0",
    "MMAP_THRESHOLD",
    "REFREEZE_EVERY",
    "CollectorSchedule",
    "collector_paused",
    "tune_gc",
    "tune_malloc",
]

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


#: Net allocations of tracked objects after which Python collects its youngest generation on
#: its own (CPython's default: 700). The daemon runs the collector itself
#: (:class:`CollectorSchedule`); this is the backstop for garbage in reference cycles piling up
#: between two scheduled runs (a burst of failing scrapes): the count rises only with objects
#: that stay alive or become such garbage, since every object freed counts one down. Why not
#: CPython's own schedule, at 1,000 and 5,000 targets (bench/results/HISTORY.md): at 700 the collector
#: ran in the middle of scrapes about 8 times a second, promoting the scrape's temporaries and
#: setting off full collections that walked every target's history (109 of them, 66 s, in 4
#: minutes at 5,000 targets); at 10,000 it still ran every few seconds, and each run walked
#: every view made since the last one (100-280 ms at 5,000 targets), because freeing the views
#: they replace kept the count low while the youngest generation grew: 3,397 targets marked
#: down by a timeout in 200 s.
GC_THRESHOLD0 = 50_000


def tune_gc(*, threshold0: int = GC_THRESHOLD0) -> tuple[int, int, int]:
    """Set the youngest generation's threshold (the older ones keep theirs); returns the
    thresholds now in force."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(threshold0, older, oldest)
    return gc.get_threshold()


#: Seconds between two runs of the full collection by :class:`CollectorSchedule`.
COLLECT_EVERY = 60.0
#: Seconds after which the frozen long-lived state is handed back to the collector once.
REFREEZE_EVERY = 3600.0


class Collector(Protocol):
    """What :class:`CollectorSchedule` needs of :mod:`gc` (a fake in the tests)."""

    def collect(self, generation: int = 2) -> int: ...
    def freeze(self) -> None: ...
    def unfreeze(self) -> None: ...
    def get_freeze_count(self) -> int: ...


class CollectorSchedule:
    """Python's cycle collector run by the daemon, every ``every`` seconds, instead of when
    CPython's allocation count says so (:data:`GC_THRESHOLD0` is only the backstop).

    Each run is a full collection. After the first one (and after any run that follows a
    :meth:`thaw`) everything still alive is frozen (:func:`gc.freeze`): the targets' state,
    sessions, tasks and code, which live as long as the configuration, are no longer walked by
    later runs, which then visit what was made since (mostly the targets' current views) and
    take a fraction of the time. A frozen object freed by its reference count is freed as
    always; only garbage in a reference cycle among frozen objects would wait, so the frozen
    state is handed back to the collector (:meth:`thaw`) whenever a target is removed (its
    state may be such garbage) and every ``refreeze_every`` seconds in any case.

    Measured at 5,000 targets over 7 minutes (bench/results/HISTORY.md): young and middle collections
    at start-up only, then one run a minute of 0.2-0.3 s, no target marked down by a timeout
    (3,458 with CPython's own schedule), the collector's CPU 0.6 % of a core (6.2 %).
    """

    def __init__(
        self,
        *,
        every: float = COLLECT_EVERY,
        refreeze_every: float = REFREEZE_EVERY,
        collector: Collector | None = None,
        clock: Callable[[], float] = time.monotonic,
        log: Logger | None = None,
    ) -> None:
        if every <= 0 or refreeze_every <= 0:
            raise ValueError("every and refreeze_every must be positive")
        self.every = every
        self.refreeze_every = refreeze_every
        self._gc: Collector = collector if collector is not None else gc
        self._clock = clock
        self._log = log
        #: When the long-lived state was last frozen (None: not frozen; the next run does).
        self._frozen_at: float | None = None
        #: Runs so far.
        self.runs = 0

    @property
    def frozen(self) -> bool:
        return self._frozen_at is not None

    def thaw(self) -> None:
        """Hand the frozen objects back to the collector (a target was removed: its state may
        be garbage in a cycle); the next run collects what is garbage and freezes the rest."""
        if self._frozen_at is not None:
            self._gc.unfreeze()
            self._frozen_at = None

    def run_once(self) -> int:
        """One scheduled run: thaw if the state was frozen ``refreeze_every`` ago, collect
        everything not frozen, freeze what survives if nothing is frozen. The objects
        collected."""
        started = self._clock()
        if self._frozen_at is not None and started - self._frozen_at >= self.refreeze_every:
            self.thaw()
        collected = self._gc.collect(2)
        froze = self._frozen_at is None
        if froze:
            self._gc.freeze()
            self._frozen_at = started
        self.runs += 1
        if self._log is not None:
            self._log.debug(
                "collector_ran",
                seconds=round(self._clock() - started, 4),
                collected=collected,
                froze=froze,
                frozen_objects=self._gc.get_freeze_count(),
            )
        return collected

    async def run(self) -> None:
        """Run every ``every`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.every)
            self.run_once()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside: for building a large answer (a status page, the targets
    API, a decoded Prometheus answer) whose many containers are all alive until it is done.
    An automatic collection in the middle would walk them and everything made since the last
    scheduled run (at 5,000 targets, the views: hundreds of milliseconds) to find nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
