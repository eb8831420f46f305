"""The per-target settings every way of naming a target shares (a static target, a file_sd
entry, an instance of a Prometheus source), and the one place their defaults are applied:
:func:`settle`, with the precedence global -> source -> target."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.engines.model import Engine
from specmon.records import record
from specmon.report import DEFAULT_DRAFT_COST

__all__ = ["SETTINGS", "TargetSettings", "settle"]

#: What a layer may set.
SETTINGS = ("engine", "draft_cost", "chain_length", "model", "baseline")


@record
class TargetSettings:
    """What one target is read and computed with."""

    #: None: detected from the page.
    engine: Engine | None = None
    draft_cost: float = DEFAULT_DRAFT_COST
    #: None: the number of position series the engine publishes.
    chain_length: int | None = None
    #: The model label's override (llama.cpp publishes none).
    model: str | None = None
    #: The target to compare with at matched concurrency.
    baseline: str | None = None
    #: Whether some layer set ``draft_cost`` (False: ``DEFAULT_DRAFT_COST``, a guess).
    draft_cost_configured: bool = False


def settle(*layers: Mapping[str, Any]) -> TargetSettings:
    """The defaults, then each layer in order, most general first (the global block, then a
    source or a file_sd block, then the target, its special labels or the overrides that
    match it): a layer sets what it holds a value for; None means "not set here"."""
    values: dict[str, Any] = {}
    for layer in layers:
        for key in SETTINGS:
            value = layer.get(key)
            if value is not None:
                values[key] = value
    return TargetSettings(**values, draft_cost_configured="draft_cost" in values)
