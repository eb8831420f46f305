"""The overload governor's newer families (specmon/daemon/governor.py), declared beside
:mod:`specmon.daemon.metrics` (which lists them with every other family) to keep that module
within its size."""

from __future__ import annotations

from specmon.daemon.metric_def import Scope
from specmon.daemon.metric_def import gauge as _g

__all__ = ["LOOP_BUSY"]

LOOP_BUSY = _g(
    "specmon_event_loop_busy_ratio",
    "Share of the overload governor's last 5 s period the event loop was not idle (not "
    "waiting in its selector for I/O or a timer); near 1 specmon is short of CPU.",
    (),
    Scope.OWN,
    "share of the overload governor's last 5-second period specmon's event loop was not "
    "idle (timed around every wait in its selector): near 1 specmon is short of CPU (no core "
    "of its own, or too many targets), and only then does the governor stretch the intervals "
    "(at 0.9 or more with the schedule 10 % behind; [runbook](runbook.md#specmonoverloaded)). "
    "Absent on an event loop whose selector cannot be timed",
)
