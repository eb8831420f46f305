"""The reference rendering of the target families: prometheus_client's own custom-collector
path (families built from the same samples, encoded by the library). Tests compare specmon's
renderer (specmon/daemon/exposition.py) with it, and in-process tests use it to read views."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specmon.daemon.collector import Sample, health_samples, target_samples
from specmon.daemon.metrics import FAMILIES, Kind, MetricDef
from specmon.daemon.target import TargetView

__all__ = ["TargetCollector"]


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
                samples = health_samples(view)
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
