"""The cycle collector held off while a large answer is built (used by the daemon's pages and
the Prometheus source; the collector's schedule itself is in specmon/daemon/malloc.py)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


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
