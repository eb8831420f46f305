"""The last 15 minutes of each target's verdict and margin, and its last few errors and refused
readings: what the target page charts and lists. Bounded per target, so a fleet of 10,000
targets costs a known amount (tests/daemon/test_history.py measures it with tracemalloc).

Per target at most ``MAX_MODELS`` series of ``SLOTS`` samples (one per ``STEP`` seconds: a
later sample in the same step replaces the earlier), each sample a 4-byte time and two 4-byte
floats in three ``array``s; and at most ``MAX_EVENTS`` events of at most ``MAX_EVENT_TEXT``
characters, kept only for a target that had one.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterable

from specmon.daemon.severity import pick_window
from specmon.daemon.target import TargetView
from specmon.records import record

__all__ = [
    "MAX_EVENTS",
    "MAX_EVENT_TEXT",
    "MAX_MODELS",
    "SLOTS",
    "SPAN",
    "STEP",
    "Event",
    "History",
    "Sample",
    "Series",
]

#: Seconds of history kept.
SPAN = 900.0
#: One sample per this many seconds (the last one in the step wins).
STEP = 15.0
#: Samples a series holds at most.
SLOTS = int(SPAN // STEP) + 1
#: Models charted per target (the first speculating ones, in the page's order).
MAX_MODELS = 4
#: Errors and refused readings kept per target, and the longest text of one.
MAX_EVENTS = 5
MAX_EVENT_TEXT = 240
#: Longest model name kept (the page's own names are capped longer; this is a label).
_MAX_MODEL_NAME = 200


@record
class Sample:
    #: Seconds since the epoch.
    time: float
    speedup: float | None
    margin: float | None


@record
class Series:
    model: str
    samples: tuple[Sample, ...]


@record
class Event:
    time: float
    text: str


class _Series:
    __slots__ = ("margins", "model", "speedups", "times")

    def __init__(self, model: str) -> None:
        self.model = model[:_MAX_MODEL_NAME]
        self.times = array("I")
        self.speedups = array("f")
        self.margins = array("f")

    def add(self, now: float, speedup: float | None, margin: float | None) -> None:
        stamp = int(now)
        step = int(STEP)
        if self.times and self.times[-1] // step == stamp // step:
            self.times.pop()
            self.speedups.pop()
            self.margins.pop()
        self.times.append(stamp)
        self.speedups.append(_f(speedup))
        self.margins.append(_f(margin))
        oldest = stamp - int(SPAN)
        drop = 0
        while drop < len(self.times) and (
            self.times[drop] < oldest or len(self.times) - drop > SLOTS
        ):
            drop += 1
        if drop:
            del self.times[:drop], self.speedups[:drop], self.margins[:drop]

    def samples(self) -> tuple[Sample, ...]:
        return tuple(
            Sample(float(t), _none(s), _none(m))
            for t, s, m in zip(self.times, self.speedups, self.margins, strict=True)
        )


class _Target:
    __slots__ = ("events", "last_error", "last_refused", "series")

    def __init__(self) -> None:
        self.series: list[_Series] = []
        self.events: deque[tuple[float, str]] | None = None
        self.last_error: str | None = None
        self.last_refused: str | None = None

    def event(self, now: float, text: str) -> None:
        if self.events is None:
            self.events = deque(maxlen=MAX_EVENTS)
        self.events.append((now, text[:MAX_EVENT_TEXT]))


class History:
    """Every target's recent verdicts and events, fed each new view (:meth:`record`)."""

    def __init__(self) -> None:
        self._targets: dict[str, _Target] = {}

    def __len__(self) -> int:
        return len(self._targets)

    def record(self, view: TargetView, *, window: str, now: float) -> None:
        """Add ``view``'s verdict and margin (over ``window``, as the status page picks it)
        at ``now``, and its error or refused readings when they changed."""
        target = self._targets.get(view.name)
        if target is None:
            target = self._targets[view.name] = _Target()
        if view.scraped and not view.up and view.error:
            error = view.error[:MAX_EVENT_TEXT]
            if error != target.last_error:
                target.event(now, f"error: {error}")
            target.last_error = error
        elif view.up:
            target.last_error = None
        if view.up and view.rejected:
            refused = "; ".join(str(r) for r in view.rejected[:3])[:MAX_EVENT_TEXT]
            if refused != target.last_refused:
                target.event(now, f"refused: {refused}")
            target.last_refused = refused
        elif view.up:
            target.last_refused = None
        if not view.up:
            return  # a gap in the charts, not a repeated old figure
        models = [m for m in view.models if m.speculating][:MAX_MODELS]
        by_name = {s.model: s for s in target.series}
        series: list[_Series] = []
        for model in models:
            kept = by_name.get(model.model[:_MAX_MODEL_NAME]) or _Series(model.model)
            chosen = pick_window(model, window)
            answer = chosen.answer if chosen is not None else None
            # While a new load is measured the answer has no number: a gap, not a spike.
            kept.add(
                now,
                answer.speedup if answer is not None else None,
                answer.alpha_margin if answer is not None else None,
            )
            series.append(kept)
        target.series = series

    def series(self, name: str) -> tuple[Series, ...]:
        target = self._targets.get(name)
        if target is None:
            return ()
        return tuple(Series(s.model, s.samples()) for s in target.series)

    def events(self, name: str) -> tuple[Event, ...]:
        """Newest first."""
        target = self._targets.get(name)
        if target is None or target.events is None:
            return ()
        return tuple(Event(t, text) for t, text in reversed(target.events))

    def forget(self, name: str) -> None:
        self._targets.pop(name, None)

    def keep(self, names: Iterable[str]) -> None:
        """Drop every target not in ``names``."""
        wanted = set(names)
        for name in set(self._targets) - wanted:
            del self._targets[name]


def _f(value: float | None) -> float:
    return math.nan if value is None or not math.isfinite(value) else value


def _none(value: float) -> float | None:
    return None if math.isnan(value) else value
