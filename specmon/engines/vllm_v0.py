"""vLLM V0 engine (v0.5.3 to v0.9): lifetime gauges only.

V0 publishes ``vllm:spec_decode_draft_acceptance_rate`` (lifetime accepted / drafted tokens;
V0 counts every accepted position, so this estimates the per-token alpha directly) and
``vllm:spec_decode_efficiency``. Its ``*_total`` series are not usable counters (each update
adds the cumulative value), so there is no window and no per-position data: every figure is
over the server's lifetime.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.engines._common import labels_by_name, mean_by_model
from specmon.engines.model import Engine, GaugeScope, ModelReading, Rejection, SpecGauges
from specmon.parser import Page

__all__ = ["VllmV0Adapter"]

_PREFIXES = ("vllm:", "vllm_")
_RATE = "spec_decode_draft_acceptance_rate"
_EFFICIENCY = "spec_decode_efficiency"

NOTE = (
    "vLLM V0 publishes lifetime gauges only: no window and no per-position data exist; "
    "figures cover the server's whole lifetime"
)


class VllmV0Adapter:
    engine = Engine.VLLM_V0
    wanted: tuple[str, ...] = tuple(p + n for p in _PREFIXES for n in (_RATE, _EFFICIENCY))
    markers: tuple[str, ...] = tuple(p + _RATE for p in _PREFIXES)
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(wanted, ("model_name", "engine"))

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        prefix = next((p for p in _PREFIXES if page.has(p + _RATE)), None)
        if prefix is None:
            return [], []
        rates = mean_by_model(page, prefix + _RATE)
        efficiency = mean_by_model(page, prefix + _EFFICIENCY)
        models: list[ModelReading | Rejection] = [
            ModelReading(
                model=model,
                gauges=SpecGauges(
                    scope=GaugeScope.LIFETIME,
                    acceptance_rate=rate,
                    efficiency=efficiency.get(model),
                ),
            )
            for model, rate in sorted(rates.items())
        ]
        return models, [NOTE]
