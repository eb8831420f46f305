"""The daemon's hook for per-class figures: a target's reading in, its
:class:`~specmon.classes.ClassesView` out. No I/O.

:class:`~specmon.daemon.target.TargetState` calls :func:`observe_classes` once per reading
(one line there); everything per class is decided in :mod:`specmon.classes`. The class figures
rest on the target's basis: its configured chain length, else the k its engine shows (the
first speculating model's), and its configured draft cost c.

A per-class verdict (the class's tokens per step against the target's measured step time) is
the answer layer's to make: it would read the target's verdict basis beside each
:class:`~specmon.classes.ClassFigures` here, and is not computed by specmon yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specmon.classes import ClassesView, ClassHistory, classes_view
from specmon.daemon import metrics_classes as mc
from specmon.daemon.config import TargetConfig
from specmon.daemon.metric_def import MetricDef
from specmon.daemon.views import ModelView
from specmon.engines import PageReading
from specmon.engines.model import SpecCounters, add_counters

__all__ = ["emit_classes", "observe_classes"]


class _Sink(Protocol):
    """specmon.daemon.collector's Sink (structurally; the collector imports this module)."""

    def add(
        self, family: MetricDef, values: tuple[str | None, ...], value: float | int | None
    ) -> None: ...


def observe_classes(
    history: ClassHistory,
    reading: PageReading,
    models: Sequence[ModelView],
    *,
    mono: float,
    windows: Sequence[float],
    config: TargetConfig,
) -> ClassesView | None:
    """Add the reading's class counts (with the engine's own counters, summed over its
    models, for the coverage) and give the view; None for a target without classes."""
    if reading.classes is None:
        return None
    counted = [m.counters for m in reading.models if m.counters is not None]
    engine = None
    if counted:
        summed = add_counters(counted)
        engine = SpecCounters(  # what any model does not count, the sum does not either
            drafts=summed.drafts,
            draft_tokens=summed.draft_tokens,
            accepted_tokens=summed.accepted_tokens,
            unknown=tuple(sorted({u for c in counted for u in c.unknown})),
        )
    history.add(mono, reading.classes, engine=engine)
    detected = next(
        (m.basis.chain_length for m in models if m.speculating and m.basis.chain_length), None
    )
    return classes_view(
        history,
        windows=windows,
        draft_cost=config.draft_cost,
        configured_chain_length=config.chain_length,
        detected_chain_length=detected,
    )


def emit_classes(view: ClassesView | None, out: _Sink, *, target: str) -> None:
    """The target's ``specmon_class_*`` series (none without classes)."""
    if view is None:
        return
    out.add(mc.SOURCE_UP, (target, view.source or "tap"), 0.0 if view.error else 1.0)
    for window in view.windows:
        out.add(mc.COVERAGE, (target, window.window), window.coverage)
        for c in window.classes:
            labels = (target, c.name, window.window)
            out.add(mc.CLASS_REQUESTS, labels, c.requests)
            out.add(mc.CLASS_DRAFTED, labels, c.draft_tokens)
            out.add(mc.CLASS_ACCEPTED, labels, c.accepted_tokens)
            out.add(mc.CLASS_ACCEPTANCE, labels, c.draft_acceptance_ratio)
            out.add(mc.CLASS_LENGTH, labels, c.mean_acceptance_length)
            out.add(mc.CLASS_ALPHA, labels, c.alpha)
            out.add(mc.CLASS_MARGIN, labels, c.alpha_margin)
