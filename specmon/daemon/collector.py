"""Every series a target exports, from a snapshot of its state.

:func:`target_samples` reads one immutable :class:`~specmon.daemon.target.TargetView` and
lists its samples against the families declared in :mod:`specmon.daemon.metrics`; nothing
mutates global gauges, so a removed target or a window without drafts simply has no series.
:mod:`specmon.daemon.render` turns the samples into exposition text once per change. One
target's view can never break another's series: its samples are built apart and dropped whole
if anything about them is wrong (:func:`health_samples` is what such a target still says).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from specmon.daemon import metrics as m
from specmon.daemon.metrics import MetricDef
from specmon.daemon.target import ModelView, TargetView
from specmon.report import AcceptanceReport

__all__ = ["Sample", "health_samples", "target_samples"]


@dataclass(frozen=True, slots=True)
class Sample:
    family: MetricDef
    #: Values of the family's declared labels, in their order.
    values: tuple[str, ...]
    value: float
    #: The target's constant labels (one mapping shared by all its samples).
    constant: Mapping[str, str]

    @property
    def labels(self) -> dict[str, str]:
        labels = dict(zip(self.family.labels, self.values, strict=True))
        labels.update(self.constant)
        return labels


#: Figures of a window report, exported when not None.
_WINDOW_FIGURES: tuple[tuple[MetricDef, Callable[[AcceptanceReport], float | int | None]], ...] = (
    (m.DRAFT_ACCEPTANCE, lambda r: r.draft_acceptance_ratio),
    (m.MEAN_ACCEPTANCE_LENGTH, lambda r: r.mean_acceptance_length),
    (m.ALPHA, lambda r: r.alpha),
    (m.ALPHA_MARGIN, lambda r: r.alpha_margin),
    (m.EXPECTED_SPEEDUP, lambda r: r.expected_speedup),
    (m.BEST_CHAIN_LENGTH, lambda r: r.best_chain_length),
    (m.BEST_SPEEDUP, lambda r: r.best_speedup),
)


class _Out:
    """Samples of one target; a value that is not a finite number is never exported."""

    def __init__(self, constant: Mapping[str, str]) -> None:
        self.samples: list[Sample] = []
        self._constant = constant

    def add(self, family: MetricDef, values: tuple[str, ...], value: float | int | None) -> None:
        if value is None:
            return
        number = float(value)  # OverflowError for an int beyond a double: the caller drops all
        if not math.isfinite(number):
            return
        if len(values) != len(family.labels):
            raise ValueError(f"{family.name}: {len(values)} label values for {family.labels}")
        self.samples.append(Sample(family, values, number, self._constant))


def target_samples(view: TargetView) -> list[Sample]:
    """Every series one target exports, in no particular order. May raise on a view that
    cannot be exported (the caller drops the target's samples whole)."""
    out = _Out(view.labels)
    if not view.scraped:
        return []
    t = (view.name,)
    out.add(m.UP, t, 1.0 if view.up else 0.0)
    out.add(m.SCRAPE_DURATION, t, view.last_duration)
    out.add(m.LAST_SUCCESS, t, view.last_success)
    if not view.up:
        return out.samples
    engine = view.engine.value if view.engine else "unknown"
    out.add(m.MALFORMED_LINES, t, view.malformed)
    out.add(m.SPECULATION_ENABLED, (view.name, engine), 1.0 if view.speculation else 0.0)
    for model in view.models:
        _model_samples(out, (view.name, engine, model.model), model)
    return out.samples


def _model_samples(out: _Out, labels: tuple[str, str, str], model: ModelView) -> None:
    basis = model.basis
    out.add(m.CHAIN_LENGTH, labels, basis.chain_length)
    out.add(m.DRAFT_COST, (*labels, "configured"), basis.draft_cost)
    out.add(m.DRAFT_COST, (*labels, "engine"), model.engine_draft_cost)
    out.add(m.REQUESTS_RUNNING, labels, model.requests_running)
    out.add(m.BREAKEVEN, labels, basis.breakeven_alpha)
    if model.totals_accepted is not None:
        # Engines without a counter (TensorRT-LLM: drafts; SGLang, TGI: draft tokens) get no
        # series for it rather than a zero.
        out.add(m.DRAFTS, labels, model.totals_drafts)
        out.add(m.DRAFT_TOKENS, labels, model.totals_draft_tokens)
        out.add(m.ACCEPTED_TOKENS, labels, model.totals_accepted)
        out.add(m.ENGINE_RESETS, labels, model.resets)
    for window in model.windows:
        wl = (*labels, window.window)
        out.add(m.WINDOW_DRAFTS, wl, window.drafts)
        if window.drafts is not None:
            out.add(m.WINDOW_GENERATED, wl, window.generated_tokens)
        out.add(m.WINDOW_SECONDS, wl, window.covered_seconds)
        report = window.report
        if report is None:
            continue
        for family, getter in _WINDOW_FIGURES:
            out.add(family, wl, getter(report))
        for pos in report.positions:
            pl = (*wl, str(pos.position))
            out.add(m.POSITION_SURVIVAL, pl, pos.survival)
            out.add(m.POSITION_CONDITIONAL, pl, pos.conditional)


def health_samples(view: TargetView) -> list[Sample]:
    """What a target whose figures cannot be exported still says: that it is up."""
    try:
        out = _Out(view.labels)
        out.add(m.UP, (view.name,), 1.0 if view.up else 0.0)
        out.add(m.SCRAPE_DURATION, (view.name,), view.last_duration)
        return out.samples
    except Exception:  # labels themselves unusable: nothing at all
        return []
