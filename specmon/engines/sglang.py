"""SGLang: gauges over the last logging interval, no per-position data, no chain length.

``sglang:spec_accept_length`` is the mean acceptance length (tokens per verification step,
bonus token included); ``sglang:spec_accept_rate`` the acceptance rate. Alpha needs a
configured chain length.
"""

from __future__ import annotations

from specmon.engines._common import mean_by_model
from specmon.engines.model import (
    Context,
    Engine,
    GaugeScope,
    ModelReading,
    Rejection,
    SpecGauges,
)
from specmon.exposition import Page

__all__ = ["SglangAdapter"]

_LENGTH = "sglang:spec_accept_length"
_RATE = "sglang:spec_accept_rate"
_RUNNING = "sglang:num_running_reqs"

NOTE = (
    "SGLang publishes gauges over its last logging interval: no draft counts (sample size), "
    "no per-position data, and no chain length (configure chain_length for alpha)"
)


class SglangAdapter:
    engine = Engine.SGLANG
    wanted: tuple[str, ...] = (_LENGTH, _RATE, _RUNNING)
    markers: tuple[str, ...] = (_LENGTH, _RATE)

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        lengths = mean_by_model(page, _LENGTH)
        rates = mean_by_model(page, _RATE)
        if not lengths and not rates:
            return [], []
        running = mean_by_model(page, _RUNNING)
        models: list[ModelReading | Rejection] = []
        for model in sorted(set(lengths) | set(rates)):
            length = lengths.get(model)
            rate = rates.get(model)
            models.append(
                ModelReading(
                    model=model,
                    gauges=SpecGauges(
                        scope=GaugeScope.LAST_INTERVAL,
                        acceptance_rate=rate,
                        mean_acceptance_length=length,
                    ),
                    context=Context(requests_running=running.get(model)),
                )
            )
        return models, [NOTE]
