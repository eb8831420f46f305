"""Every model's configuration epochs for one target (:class:`EpochBook`): one
:class:`~specmon.state.epochs.EpochTracker` a model, for one engine at a time. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.engines import PageReading
from specmon.state.epoch_laws import sighting
from specmon.state.epochs import (
    ENGINE_SCRAPES,
    MAX_MODELS,
    Epoch,
    EpochTracker,
    ModelEpochs,
    Reason,
)

__all__ = ["EpochBook"]


class EpochBook:
    """Every model's epochs for one target (at most MAX_MODELS models), for one engine: pages
    from another engine on ENGINE_SCRAPES scrapes in a row start the book afresh (a page
    alternating between two engines clears nothing; its pages from the other engine are not
    counted)."""

    __slots__ = ("_other", "_trackers", "engine")

    def __init__(self) -> None:
        self._trackers: dict[str, EpochTracker] = {}
        #: The engine the epochs were seen on (its value), or None before the first page.
        self.engine: str | None = None
        #: Another engine seen on the last pages: its value and how many pages in a row.
        self._other: tuple[str | None, int] | None = None

    def clear(self) -> None:
        self._trackers.clear()

    def observe(self, reading: PageReading, wall: float) -> list[tuple[str, dict[str, Any]]]:
        """Count one page: its speculating models, and those it names without speculation
        (a model refused whole at this scrape tells nothing and is skipped)."""
        refused = {r.model for r in reading.rejected if r.whole_model}
        out: list[tuple[str, dict[str, Any]]] = []
        engine = reading.engine.value if reading.engine is not None else None
        if engine != self.engine:
            if self.engine is not None:
                other = self._other
                seen = other[1] + 1 if other is not None and other[0] == engine else 1
                self._other = (engine, seen)
                if seen < ENGINE_SCRAPES:
                    return out  # not yet another engine: this page is not counted
                self._trackers.clear()
                out.append(("config_engine_changed", {"before": self.engine, "after": engine}))
            self.engine = engine
        self._other = None
        for speculating, models in ((True, reading.models), (False, reading.plain_models)):
            for model in models:
                if model.model in refused:
                    continue
                tracker = self._trackers.get(model.model)
                if tracker is None:
                    if len(self._trackers) >= MAX_MODELS:
                        continue
                    tracker = self._trackers[model.model] = EpochTracker()
                for name, fields in tracker.observe(sighting(model, speculating=speculating), wall):
                    out.append((name, {"model": model.model, **fields}))
        return out

    def mark(self, *, wall: float, note: str, model: str | None = None) -> list[Epoch]:
        """Mark a change by hand for ``model`` (None: every model); the new epochs."""
        marked = []
        for name, tracker in self._trackers.items():
            if model is None or name == model:
                epoch = tracker.mark(wall=wall, note=note)
                if epoch is not None:
                    marked.append(epoch)
        return marked

    def moved(self, *, wall: float, text: str) -> None:
        """Every model's :meth:`EpochTracker.moved`: the server answers at another address."""
        for tracker in self._trackers.values():
            tracker.moved(wall=wall, text=text)

    def position(self, model: str) -> tuple[int, bool, tuple[int, ...], float] | None:
        """A model's :meth:`EpochTracker.position` (None: not followed)."""
        tracker = self._trackers.get(model)
        return tracker.position() if tracker is not None else None

    def opening(self, model: str) -> tuple[float, Reason, float | None] | None:
        """A model's :meth:`EpochTracker.opening` (None: not followed)."""
        tracker = self._trackers.get(model)
        return tracker.opening() if tracker is not None else None

    def models(self) -> tuple[str, ...]:
        return tuple(self._trackers)

    def current(self, model: str) -> Epoch | None:
        """A model's current epoch, without its counts (None: not followed or not seen)."""
        tracker = self._trackers.get(model)
        return tracker.current if tracker is not None else None

    def view(self) -> tuple[ModelEpochs, ...]:
        views = (t.view(name) for name, t in self._trackers.items())
        return tuple(v for v in views if v is not None)

    def expire(self, *, now: float, max_age: float) -> None:
        for tracker in self._trackers.values():
            tracker.expire(now=now, max_age=max_age)

    def to_json(self) -> dict[str, Any]:
        return {name: t.to_json() for name, t in self._trackers.items()}

    def saved_form(self) -> dict[str, Any]:
        """:meth:`to_json` for the state file (:meth:`EpochTracker.saved_form`)."""
        return {name: t.saved_form() for name, t in self._trackers.items()}

    def restore(self, data: Mapping[str, Any], *, now: float, ceiling: float | None = None) -> None:
        """Take saved models' epochs (raises ValueError on anything out of bounds, leaving
        this book as it was; ``now``, ``ceiling``: :meth:`EpochTracker.restore`'s)."""
        if len(data) > MAX_MODELS:
            raise ValueError(f"more than {MAX_MODELS} models")
        restored: dict[str, EpochTracker] = {}
        for name, saved in data.items():
            if not isinstance(name, str) or len(name) > 1024 or not isinstance(saved, dict):
                raise ValueError("a model is not a name and an object")
            tracker = EpochTracker()
            tracker.restore(saved, now=now, ceiling=ceiling)  # validates first
            restored[name] = tracker
        for name, tracker in restored.items():
            live = self._trackers.get(name)
            if live is None:
                self._trackers[name] = tracker
            else:
                live.restore(data[name], now=now, ceiling=ceiling)
