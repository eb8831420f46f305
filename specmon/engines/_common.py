"""Helpers shared by the adapters: grouping samples by model, reading counters as integers."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from specmon.exposition import Page, Sample

__all__ = [
    "MAX_POSITIONS",
    "AdapterError",
    "count",
    "first_present",
    "mean_by_model",
    "sum_by",
    "sum_positions",
]


#: Position labels at or above this are ignored: a page cannot make specmon allocate an
#: arbitrarily long per-position vector (engines use k <= 64).
MAX_POSITIONS = 1024


class AdapterError(ValueError):
    """A page's values cannot be used (negative or non-finite counters)."""


def count(value: float, name: str) -> int:
    """A counter value as an exact integer (counters of events are whole numbers)."""
    if not math.isfinite(value) or value < 0:
        raise AdapterError(f"{name} has value {value!r}; a counter must be finite and >= 0")
    return round(value)


def first_present(page: Page, names: Iterable[str]) -> str | None:
    for name in names:
        if page.has(name):
            return name
    return None


def sum_by(samples: Iterable[Sample], key: str) -> dict[str, float]:
    """Sum sample values per value of label ``key`` (other labels, e.g. ``engine``, summed away)."""
    out: dict[str, float] = {}
    for sample in samples:
        group = sample.labels.get(key, "")
        out[group] = out.get(group, 0.0) + sample.value
    return out


def sum_positions(
    samples: Iterable[Sample], key: str | None, *, label: str = "position"
) -> dict[str, dict[int, float]]:
    """Per model (label ``key``; all one group when None), per 0-based position (label
    ``label``), summed values."""
    out: dict[str, dict[int, float]] = {}
    for sample in samples:
        raw = sample.labels.get(label)
        if raw is None:
            continue
        try:
            position = int(raw)
        except ValueError:
            continue
        if position < 0 or position >= MAX_POSITIONS:
            continue
        group = sample.labels.get(key, "") if key else ""
        per = out.setdefault(group, {})
        per[position] = per.get(position, 0.0) + sample.value
    return out


def positions_tuple(per: dict[int, float], name: str) -> tuple[int, ...]:
    """Dense tuple of per-position counts; positions the engine skipped count as 0."""
    if not per:
        return ()
    size = max(per) + 1
    return tuple(count(per.get(i, 0.0), f"{name}[{i}]") for i in range(size))


def mean_by_model(page: Page, name: str) -> dict[str, float]:
    """Mean of a gauge's finite values per ``model_name`` (over ranks and other labels)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for sample in page.get(name):
        if math.isfinite(sample.value):
            groups[sample.label("model_name")].append(sample.value)
    return {model: sum(v) / len(v) for model, v in groups.items() if v}
