"""The target page's history: one sample per step, 15 minutes kept, a few events, and a known
bound on memory per target (measured here with tracemalloc over 1,000 targets; ``./dev.sh bench
status`` measures 10,000: 1,257 B a target with one model, 4,509 B with four)."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import tracemalloc

from specmon.daemon.history import (
    MAX_EVENT_TEXT,
    MAX_EVENTS,
    MAX_MODELS,
    SLOTS,
    SPAN,
    STEP,
    History,
)
from specmon.daemon.target import ModelView, TargetView
from tests.support.answers import make_answer
from tests.support.views import fleet_views

#: The figure this test holds the history to: bytes per target with one model and a full
#: 15 minutes (61 samples) and a full event list of the longest texts.
BOUND_PER_TARGET = 3_000


def _healthy() -> TargetView:
    return next(v for v in fleet_views() if v.name == "llama-b")


def _with_verdict(view: TargetView, speedup: float) -> TargetView:
    answer = make_answer(speedup)
    models = tuple(
        dataclasses.replace(
            m, windows=tuple(dataclasses.replace(w, answer=answer) for w in m.windows)
        )
        for m in view.models
    )
    return dataclasses.replace(view, models=models)


def test_one_sample_per_step_and_fifteen_minutes_kept() -> None:
    history = History()
    view = _healthy()
    for second in range(0, 3600, 5):  # an hour of scrapes every 5 s
        history.record(_with_verdict(view, 1.0 + second / 3600), window="5m", now=1e6 + second)
    [series] = history.series(view.name)
    assert len(series.samples) == SLOTS == int(SPAN // STEP) + 1
    times = [s.time for s in series.samples]
    assert times == sorted(times) and times[-1] - times[0] <= SPAN
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert set(gaps[:-1]) == {STEP} and 0 < gaps[-1] <= STEP  # the last step still filling
    # the last sample of a step wins: the latest figure (float32: 7 digits)
    assert abs((series.samples[-1].speedup or 0) - (1.0 + 3595 / 3600)) < 1e-6
    # a down scrape adds no sample and records the error once, however often it repeats
    down = dataclasses.replace(view, up=False, error="cannot connect to <host>")
    for n in range(3):
        history.record(down, window="5m", now=1e6 + 3600 + n)
    assert len(history.series(view.name)[0].samples) == SLOTS
    assert [e.text for e in history.events(view.name)] == ["error: cannot connect to <host>"]


def test_events_and_models_are_capped() -> None:
    history = History()
    view = _healthy()
    for n in range(20):
        failing = dataclasses.replace(view, up=False, error=f"{n} " + "e" * 5000)
        history.record(failing, window="5m", now=float(n))
    events = history.events(view.name)
    assert len(events) == MAX_EVENTS and events[0].text.startswith("error: 19 ")  # newest first
    assert all(len(e.text) <= MAX_EVENT_TEXT for e in events)
    model = view.models[0]
    many = dataclasses.replace(
        view,
        models=tuple(dataclasses.replace(model, model=f"m{i}" + "x" * 2000) for i in range(50)),
    )
    history.record(many, window="5m", now=100.0)
    series = history.series(view.name)
    assert len(series) == MAX_MODELS and all(len(s.model) <= 200 for s in series)
    history.keep([])
    assert len(history) == 0 and history.series(view.name) == ()


def test_a_thousand_full_targets_stay_within_the_bound() -> None:
    """The worst a target can hold with one model: 61 samples and five events of the longest
    text. Measured over 1,000 targets with tracemalloc (the views themselves excluded)."""
    view = _healthy()
    model: ModelView = view.models[0]
    views = [
        _with_verdict(dataclasses.replace(view, name=f"target-{i:05d}", models=(model,)), 1.5)
        for i in range(1_000)
    ]
    downs = [
        [dataclasses.replace(v, up=False, error=f"{n}" + "e" * 400) for n in range(MAX_EVENTS)]
        for v in views[:100]
    ]
    history = History()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for second in range(0, int(SPAN) + 60, int(STEP)):
            for v in views:
                history.record(v, window="5m", now=1e6 + second)
        for errors in downs:  # events: the longest kept
            for e in errors:
                history.record(e, window="5m", now=2e6)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    per_target = used / len(views)
    print(f"history: {used / 1e6:.1f} MB for 1,000 targets, {per_target:.0f} B per target")
    assert all(len(history.series(v.name)[0].samples) == SLOTS for v in views[100:200])
    assert per_target < BOUND_PER_TARGET
