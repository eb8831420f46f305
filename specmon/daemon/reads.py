"""When a target's last few readings were taken: the interval it achieves between them
(stretched by the overload governor or not), and whether a window is too short for a figure
at that interval."""

from __future__ import annotations

import itertools
from collections import deque

from specmon.engines import RejectReason

__all__ = ["ReadTimes"]

#: Readings whose times give a target's achieved interval (the median of their gaps).
KEPT = 6


class ReadTimes:
    """The monotonic times of a target's last :data:`KEPT` readings."""

    __slots__ = ("_interval", "_times")

    def __init__(self) -> None:
        self._times: deque[float] = deque(maxlen=KEPT)
        #: :attr:`interval`, made at each reading (every window of the scrape asks for it).
        self._interval: float | None = None

    def add(self, mono: float) -> None:
        self._times.append(mono)
        gaps = sorted(b - a for a, b in itertools.pairwise(self._times))
        self._interval = gaps[(len(gaps) - 1) // 2] if gaps else None

    @property
    def last(self) -> float | None:
        """The newest reading's monotonic time (None before the first)."""
        return self._times[-1] if self._times else None

    @property
    def interval(self) -> float | None:
        """The (lower) median gap between the readings kept, seconds (None before two)."""
        return self._interval

    def sparse(self, seconds: float) -> tuple[RejectReason, str] | None:
        """Why a window of ``seconds`` is too short for a figure at the interval achieved
        (shorter than two of them), or None."""
        achieved = self.interval
        if achieved is None or seconds >= 2 * achieved:
            return None
        return RejectReason.SPARSE_WINDOW, (
            f"shorter than two of the intervals achieved between readings ({achieved:.3g} s; "
            "specmon is stretching its scrape intervals, runbook SpecmonOverloaded): too few "
            "readings for a figure"
        )
