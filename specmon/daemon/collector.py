"""The custom collector: metric families built per scrape of specmon from a snapshot of views.

Nothing here mutates global gauges: every call to :meth:`TargetCollector.collect` reads the
current immutable :class:`~specmon.daemon.target.TargetView` of every target and builds fresh
families (declared once in :mod:`specmon.daemon.metrics`), so a removed target or a window
without drafts simply has no series. One target's view can never break another's series: its
samples are built apart and dropped whole if anything about them is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specmon.daemon import metrics as m
from specmon.daemon.metrics import FAMILIES, Kind, MetricDef
from specmon.daemon.target import ModelView, TargetView
from specmon.report import AcceptanceReport

__all__ = ["Sample", "TargetCollector", "target_samples"]


@dataclass(frozen=True, slots=True)
class Sample:
    family: MetricDef
    labels: Mapping[str, str]
    value: float


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
        labels = dict(zip(family.labels, values, strict=True))
        labels.update(self._constant)
        self.samples.append(Sample(family, labels, number))


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


class TargetCollector(Collector):
    """Families of every target's series, built from the views at each collection.

    ``on_error(target, exc)`` is told about a target whose view could not be exported; that
    target's derived series are left out of this collection, every other target's are not.
    """

    def __init__(
        self,
        views: Callable[[], Iterable[TargetView]],
        *,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        self._views = views
        self._on_error = on_error

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on the targets; the registry must not cache them

    def collect(self) -> Iterator[Metric]:
        by_family: dict[str, list[Sample]] = {}
        for view in self._views():
            try:
                samples = target_samples(view)
            except Exception as exc:  # one bad view must not cost the others their series
                if self._on_error is not None:
                    self._on_error(view.name, exc)
                samples = _health_only(view)
            for sample in samples:
                by_family.setdefault(sample.family.name, []).append(sample)
        for family in FAMILIES:
            found = by_family.get(family.name)
            if not found:
                continue
            metric = _family(family)
            for sample in found:
                metric.add_sample(family.sample_name, dict(sample.labels), sample.value)
            yield metric


def _family(family: MetricDef) -> Metric:
    if family.kind is Kind.COUNTER:
        return CounterMetricFamily(family.name, family.help)
    return GaugeMetricFamily(family.name, family.help)


def _health_only(view: TargetView) -> list[Sample]:
    """What a target whose figures cannot be exported still says: that it is up."""
    try:
        out = _Out(view.labels)
        out.add(m.UP, (view.name,), 1.0 if view.up else 0.0)
        out.add(m.SCRAPE_DURATION, (view.name,), view.last_duration)
        return out.samples
    except Exception:  # labels themselves unusable: nothing at all
        return []
