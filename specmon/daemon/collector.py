"""Every series a target exports, from a snapshot of its state.

:func:`target_samples` reads one immutable :class:`~specmon.daemon.target.TargetView` and
lists its samples against the families declared in :mod:`specmon.daemon.metrics`; nothing
mutates global gauges, so a removed target or a window without drafts simply has no series.
:mod:`specmon.daemon.exposition` turns the samples into exposition text once per change. One
target's view can never break another's series: its samples are built apart and dropped whole
if anything about them is wrong (:func:`health_samples` is what such a target still says).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol

from specmon.answer import Answer
from specmon.daemon import metrics as m
from specmon.daemon import metrics_answer as a
from specmon.daemon.class_view import emit_classes
from specmon.daemon.metrics import MetricDef
from specmon.daemon.metrics_epochs import (
    CHANGE_KEPT_SPEEDUP,
    CHANGE_SPEEDUP,
    CHANGE_SPEEDUP_LOWER,
    CHANGE_SPEEDUP_UPPER,
    CONFIG_CHANGE_TIME,
)
from specmon.daemon.target import ModelView, TargetView
from specmon.daemon.views import LoadFigures
from specmon.report import AcceptanceReport

__all__ = ["Sample", "Sink", "emit_target", "exportable", "health_samples", "target_samples"]


class Sample(NamedTuple):
    """One series' value (a tuple: thousands are built per second at fleet size)."""

    family: MetricDef
    #: Values of the family's declared labels then its optional ones, in their order (None:
    #: an optional label this series does not carry).
    values: tuple[str | None, ...]
    value: float
    #: The target's constant labels (one mapping shared by all its samples).
    constant: Mapping[str, str]

    @property
    def labels(self) -> dict[str, str]:
        names = (*self.family.labels, *self.family.optional)
        labels = {k: v for k, v in zip(names, self.values, strict=False) if v is not None}
        labels.update(self.constant)
        return labels


#: Figures of a window report, exported when not None.
_WINDOW_FIGURES: tuple[tuple[MetricDef, Callable[[AcceptanceReport], float | int | None]], ...] = (
    (m.DRAFT_ACCEPTANCE, lambda r: r.draft_acceptance_ratio),
    (m.MEAN_ACCEPTANCE_LENGTH, lambda r: r.mean_acceptance_length),
    (m.ALPHA, lambda r: r.alpha),
    (m.ALPHA_MARGIN, lambda r: r.alpha_margin),
    (m.EXPECTED_SPEEDUP, lambda r: r.expected_speedup),
)


class Sink(Protocol):
    """Where a target's series go: :class:`_Out` keeps them as :class:`Sample` tuples,
    :mod:`specmon.daemon.exposition` writes them straight to text. Either drops a value that is
    not a finite number and raises ValueError on label values that do not fit the family."""

    def add(
        self, family: MetricDef, values: tuple[str | None, ...], value: float | int | None
    ) -> None: ...


def check_labels(family: MetricDef, values: tuple[str | None, ...]) -> None:
    """Raise ValueError unless ``values`` fit ``family``'s declared and optional labels."""
    if not len(family.labels) <= len(values) <= len(family.labels) + len(family.optional):
        raise ValueError(f"{family.name}: {len(values)} label values for {family.labels}")
    if None in values[: len(family.labels)]:
        raise ValueError(f"{family.name}: a required label has no value")


def exportable(value: float | int | None) -> float | None:
    """``value`` as the float a series carries, or None for one never exported (absent, NaN
    or infinite). Raises OverflowError for an int beyond a double (the caller drops all)."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


class _Out:
    """Samples of one target; a value that is not a finite number is never exported."""

    __slots__ = ("_constant", "samples")

    def __init__(self, constant: Mapping[str, str]) -> None:
        self.samples: list[Sample] = []
        self._constant = constant

    def add(
        self, family: MetricDef, values: tuple[str | None, ...], value: float | int | None
    ) -> None:
        number = exportable(value)
        if number is None:
            return
        check_labels(family, values)
        self.samples.append(Sample(family, values, number, self._constant))


def target_samples(view: TargetView) -> list[Sample]:
    """Every series one target exports, in no particular order. May raise on a view that
    cannot be exported (the caller drops the target's samples whole)."""
    out = _Out(view.labels)
    emit_target(view, out)
    return out.samples


def emit_target(view: TargetView, out: Sink) -> None:
    """Every series one target exports, into ``out``, in no particular order. May raise on a
    view that cannot be exported (the caller drops the target's series whole)."""
    if not view.scraped:
        return
    t = (view.name,)
    out.add(m.UP, t, 1.0 if view.up else 0.0)
    out.add(m.SCRAPE_DURATION, t, view.last_duration)
    out.add(m.LAST_SUCCESS, t, view.last_success)
    if view.baseline is not None:  # configuration: also while the target is down
        out.add(m.BASELINE_INFO, (view.name, view.baseline), 1.0)
    if not view.up:
        return
    check = view.baseline_check
    if check is not None and view.baseline is not None:
        out.add(m.BASELINE_USABLE, (view.name, view.baseline, check.reason), float(check.usable))
    engine = view.engine.value if view.engine else "unknown"
    out.add(m.MALFORMED_LINES, t, view.malformed)
    out.add(m.SPECULATION_ENABLED, (view.name, engine), 1.0 if view.speculation else 0.0)
    for epochs in view.epochs:  # while up, as every figure (the page lists them while down)
        ml = (view.name, engine, epochs.model)
        for e in epochs.epochs[-2:]:  # the current and the previous epoch only
            k = str(e.chain_length) if e.chain_length else "none"
            spec = "unknown" if e.speculation is None else str(e.speculation).lower()
            out.add(m.CONFIG_EPOCH_INFO, (*ml, str(e.number), spec, k, e.note), 1)
        if epochs.previous is not None:
            out.add(CONFIG_CHANGE_TIME, ml, epochs.current.start)
    newest = {c.model: c for c in view.changes}  # kept oldest first: each model's last
    for change in view.changes:
        numbers = f"{change.before.number}->{change.after.number}"
        for b in change.buckets:
            bl = (view.name, engine, change.model, b.label)
            out.add(CHANGE_KEPT_SPEEDUP, (*bl[:3], numbers, b.label), b.speedup)
            if newest[change.model] is not change:
                continue
            out.add(CHANGE_SPEEDUP, bl, b.speedup)
            if b.interval is not None:
                out.add(CHANGE_SPEEDUP_LOWER, bl, b.interval[0])
                out.add(CHANGE_SPEEDUP_UPPER, bl, b.interval[1])
    for model in view.models:
        _model_samples(out, (view.name, engine, model.model), model)
    emit_classes(view.classes, out, target=view.name)  # per request class: daemon/class_view.py


def _model_samples(out: Sink, labels: tuple[str, str, str], model: ModelView) -> None:
    out.add(m.REQUESTS_RUNNING, labels, model.requests_running)
    if not model.speculating:  # a baseline server: its load and speed only
        for window in model.windows:
            if window.load is not None:
                _load_samples(out, (*labels, window.window), window.load)
        return
    basis = model.basis
    out.add(m.CHAIN_LENGTH, labels, basis.chain_length)
    out.add(m.DRAFT_COST, (*labels, "configured"), basis.draft_cost)
    out.add(m.DRAFT_COST, (*labels, "engine"), model.engine_draft_cost)
    primary = model.windows[len(model.windows) // 2] if model.windows else None
    answer = primary.answer if primary is not None else None
    if answer is not None and answer.compared and answer.against:
        out.add(m.DRAFT_COST, (*labels, "measured", answer.against), answer.draft_cost)
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
        if window.load is not None:
            _load_samples(out, wl, window.load)
        if window.answer is not None:
            _answer_samples(out, wl, window.answer)
        report = window.report
        if report is None:
            continue
        for family, getter in _WINDOW_FIGURES:
            out.add(family, wl, getter(report))
        if report.engine_estimate and (
            window.load is None or window.load.mean_draft_length is None
        ):
            # TensorRT-LLM without a drafts counter or k: from its own acceptance length.
            out.add(m.MEAN_DRAFT_LENGTH, wl, report.mean_draft_length)
        for pos in report.positions:
            pl = (*wl, str(pos.position))
            out.add(m.POSITION_SURVIVAL, pl, pos.survival)
            out.add(m.POSITION_CONDITIONAL, pl, pos.conditional)


def _load_samples(out: Sink, wl: tuple[str, ...], load: LoadFigures) -> None:
    out.add(m.CONCURRENCY, wl, load.concurrency)
    out.add(m.STEP_SECONDS, wl, load.step_seconds)
    out.add(m.TPOT, wl, load.time_per_output_token_seconds)
    out.add(m.MEAN_DRAFT_LENGTH, wl, load.mean_draft_length)


def _answer_samples(out: Sink, wl: tuple[str, ...], answer: Answer) -> None:
    out.add(a.VERDICT_INFO, (*wl, answer.basis.value, answer.state.value), 1.0)
    out.add(a.VERDICT_SPEEDUP, wl, answer.speedup)
    if answer.interval is not None:
        out.add(a.VERDICT_SPEEDUP_LOWER, wl, answer.interval[0])
        out.add(a.VERDICT_SPEEDUP_UPPER, wl, answer.interval[1])
    out.add(a.VERDICT_MARGIN, wl, answer.alpha_margin)
    out.add(a.VERDICT_BREAKEVEN, wl, answer.breakeven_alpha)
    out.add(a.VERDICT_DRAFT_COST, wl, answer.draft_cost)
    out.add(m.BEST_CHAIN_LENGTH, wl, answer.best_chain_length)
    out.add(m.BEST_SPEEDUP, wl, answer.best_speedup)
    if not answer.compared or answer.against is None:
        return
    bl = (*wl, answer.against)
    out.add(a.REALIZED_SPEEDUP, bl, answer.speedup)
    out.add(a.MEASURED_BREAKEVEN, bl, answer.breakeven_alpha)
    out.add(a.MEASURED_MARGIN, bl, answer.alpha_margin)
    if answer.crossover is not None:
        out.add(a.CROSSOVER, bl, answer.crossover.concurrency)
        out.add(a.CROSSOVER_LOWER, bl, answer.crossover.low)
        out.add(a.CROSSOVER_UPPER, bl, answer.crossover.high)
    for per in answer.per_load:
        bc = (*bl, per.label)
        out.add(a.BUCKET_SPEEDUP, bc, per.speedup)
        out.add(a.BUCKET_DRAFT_COST, bc, per.draft_cost)
        out.add(a.BUCKET_BEST_CHAIN, bc, per.best_chain_length)
        out.add(a.BUCKET_BEST_SPEEDUP, bc, per.best_speedup)


def health_samples(view: TargetView) -> list[Sample]:
    """What a target whose figures cannot be exported still says: that it is up."""
    try:
        out = _Out(view.labels)
        out.add(m.UP, (view.name,), 1.0 if view.up else 0.0)
        out.add(m.SCRAPE_DURATION, (view.name,), view.last_duration)
        return out.samples
    except Exception:  # labels themselves unusable: nothing at all
        return []
