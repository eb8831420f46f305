"""Helpers shared by the adapters: grouping samples by model, reading counters as integers,
and turning one model's unusable values into a :class:`Rejection` instead of an exception."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from specmon.engines.model import Context, ModelReading, Rejection, RejectReason
from specmon.parser import Page, Sample

__all__ = [
    "HARD_POSITION_CAP",
    "MAX_COUNT",
    "AdapterError",
    "context_count",
    "count",
    "first_present",
    "labels_by_name",
    "load_context",
    "mean_by_model",
    "note_once",
    "per_model",
    "positions_tuple",
    "sum_by",
    "sum_positions",
]

#: Largest counter value accepted: 2^53, the last integer a double holds exactly. No engine
#: counts that many tokens; a page that says so is broken or hostile.
MAX_COUNT = float(2**53)
#: No per-position storage is made past this position, whatever the page says; the configured
#: limit (``PageLimits.max_position``, normally 64) is applied by validation afterwards.
HARD_POSITION_CAP = 4096


class AdapterError(ValueError):
    """A model's values cannot be used; ``reason`` says why."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def count(value: float, name: str) -> int:
    """A counter value as an exact integer (counters of events are whole numbers)."""
    if math.isnan(value) or math.isinf(value):
        raise AdapterError(RejectReason.NON_FINITE, f"{name} is {value}; a counter must be finite")
    if value < 0:
        raise AdapterError(RejectReason.NEGATIVE, f"{name} is {value:g}; a counter must be >= 0")
    if value > MAX_COUNT:
        raise AdapterError(
            RejectReason.IMPLAUSIBLE, f"{name} is {value:g}, beyond any real count (2^53)"
        )
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
    ``label``), summed values.

    Positions that are not small non-negative integers are skipped here; a position at or
    beyond :data:`HARD_POSITION_CAP` is marked so that :func:`positions_tuple` refuses the
    model, and the configured limit is applied by validation.
    """
    out: dict[str, dict[int, float]] = {}
    for sample in samples:
        raw = sample.labels.get(label)
        if raw is None or not raw.isdigit() or len(raw) > 9:
            continue
        position = int(raw)
        group = sample.labels.get(key, "") if key else ""
        per = out.setdefault(group, {})
        if position >= HARD_POSITION_CAP:
            per[HARD_POSITION_CAP] = math.inf  # noted: positions_tuple rejects it
            continue
        per[position] = per.get(position, 0.0) + sample.value
    return out


def positions_tuple(per: dict[int, float], name: str) -> tuple[int, ...]:
    """Dense tuple of per-position counts; positions the engine skipped count as 0.

    Raises :class:`AdapterError` (``position_limit``) for a position at or beyond
    :data:`HARD_POSITION_CAP` before anything of that size is built.
    """
    if not per:
        return ()
    highest = max(per)
    if highest >= HARD_POSITION_CAP:
        raise AdapterError(
            RejectReason.POSITION_LIMIT,
            f"{name} has a position beyond {HARD_POSITION_CAP}",
        )
    return tuple(count(per.get(i, 0.0), f"{name}[{i}]") for i in range(highest + 1))


def mean_by_model(page: Page, name: str) -> dict[str, float]:
    """Mean of a gauge's values per ``model_name`` (over ranks and other labels). A value that
    is not finite makes the mean not finite: validation rejects it with its reason."""
    groups: dict[str, list[float]] = defaultdict(list)
    for sample in page.get(name):
        groups[sample.label("model_name")].append(sample.value)
    return {model: sum(v) / len(v) for model, v in groups.items() if v}


def max_by_model(page: Page, name: str) -> dict[str, float]:
    """Largest of a gauge's values per ``model_name`` (over ranks and other labels): one
    process's impossible value must not hide in the mean of many."""
    out: dict[str, float] = {}
    for sample in page.get(name):
        model = sample.label("model_name")
        value = sample.value
        if model not in out or not value <= out[model]:  # NaN sticks
            out[model] = value
    return out


def context_count(
    values: dict[str, float], model: str, name: str, dropped: list[Rejection]
) -> int | None:
    """A load counter of ``model`` as an integer; None when absent. One that cannot be used
    (non-finite, negative, beyond 2^53) is dropped alone, with a Rejection in ``dropped``: a
    broken neighbour series must not hide the acceptance counters."""
    value = values.get(model)
    if value is None:
        return None
    try:
        return count(value, name)
    except AdapterError as exc:
        dropped.append(Rejection(model or "default", exc.reason, str(exc)[:200], whole_model=False))
        return None


def load_context(model: str, running: dict[str, float], generated: dict[str, float]) -> Context:
    """``model``'s load: requests running (a gauge's mean) and generation tokens (a counter
    summed per model), each None when the page has no series for it."""
    return Context(
        requests_running=running.get(model),
        generation_tokens=(
            count(generated[model], "generation_tokens") if model in generated else None
        ),
    )


def note_once(notes: list[str], note: str) -> None:
    """Append ``note`` unless ``notes`` already has it."""
    if note not in notes:
        notes.append(note)


def per_model(
    models: Iterable[str], build: Callable[[str], ModelReading | None]
) -> list[ModelReading | Rejection]:
    """``build`` each model (None: the model has nothing to read); a model whose values
    cannot be used becomes a Rejection, and the page's other models are unaffected."""
    out: list[ModelReading | Rejection] = []
    for model in models:
        try:
            reading = build(model)
        except AdapterError as exc:
            out.append(Rejection(model or "default", exc.reason, str(exc)[:200]))
            continue
        if reading is not None:
            out.append(reading)
    return out


def labels_by_name(
    names: Iterable[str],
    labels: tuple[str, ...] = (),
    *,
    by_name: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, tuple[str, ...]]:
    """An adapter's ``series_labels``: for each of ``names``, the labels that tell two of its
    series apart on one server's page (models, ranks, positions, bounds), which the adapter
    sums, averages or keeps apart; ``labels`` for every name, ``by_name`` added for some.
    Two series of one name agreeing on all of them are one series seen twice (fleet mode
    refuses them)."""
    extra = by_name or {}
    return {name: (*labels, *extra.get(name, ())) for name in names}
