"""Each configuration epoch's cost-curve accumulator (issue 55: the epochs are the curve's
accumulators, per configuration), fed with every whole interval of the target's models, kept
in the state file beside the epochs, and read two ways:

- the ``history`` basis of the verdict: the current (speculating) epoch against the newest
  epoch without speculation whose loads overlap it, at the load every basis reads at
  (:func:`specmon.daemon.load_view.read_concurrency`, through :func:`specmon.load.matched.matched_read`);
- "did the change help?": the current epoch against the previous one, per bucket both
  measured (:func:`specmon.load.matched.matched_buckets`).

An interval goes where the epoch tracker puts its counts: while a change is being confirmed
it waits apart, then joins the new epoch (confirmed) or the current one (cancelled). No I/O.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from specmon.bounds import time_per_token_refusal
from specmon.daemon.load_view import HISTORY, LoadFigures
from specmon.engines import SpecCounters
from specmon.load import DEFAULT_SCHEME, Speeds
from specmon.load.curve import (
    COLUMNS,
    CurveAccumulator,
    CurveRead,
    SlotSums,
    acceptance_log_sd,
    state_from_dict,
    state_to_dict,
)
from specmon.load.matched import (
    MatchedBucket,
    epoch_accumulator,
    loads_seen,
    matched_buckets,
    matched_read,
)
from specmon.records import record
from specmon.report import report_from_counters
from specmon.state.epochs import Epoch, EpochBook, ModelEpochs

__all__ = ["HISTORY", "ChangeView", "EpochCurves", "history_figures"]

_DS, _DT = COLUMNS.index("decode_seconds"), COLUMNS.index("decode_tokens")
_DTK, _AC, _DR = COLUMNS.index("draft_tokens"), COLUMNS.index("accepted"), COLUMNS.index("drafts")


@record
class ChangeView:
    """The newest change of one model: its epoch against the previous one."""

    model: str
    before: Epoch
    after: Epoch
    #: Per bucket both measured enough of.
    buckets: tuple[MatchedBucket, ...]
    #: The buckets each epoch measured enough of (labels), for loads that do not overlap.
    loads_before: tuple[str, ...]
    loads_after: tuple[str, ...]


class _Model:
    __slots__ = ("curves", "number", "pending", "saved")

    def __init__(self) -> None:
        self.number = 0
        self.curves: dict[int, CurveAccumulator] = {}
        self.pending: CurveAccumulator | None = None
        #: Each epoch's saved form and the accumulator version it was made at (a past
        #: epoch's is made once).
        self.saved: dict[int, tuple[int, dict[str, Any]]] = {}

    def to_json(self) -> dict[str, Any]:
        out = {}
        for number, curve in self.curves.items():
            made = self.saved.get(number)
            if made is None or made[0] != curve.version:
                made = self.saved[number] = (curve.version, _compact(state_to_dict(curve.state())))
            out[str(number)] = made[1]
        for gone in set(self.saved) - set(self.curves):
            del self.saved[gone]
        return out


def _merge(into: CurveAccumulator, other: CurveAccumulator) -> CurveAccumulator:
    sums: dict[tuple[float, int], list[float]] = {}
    for slot in (*into.state().slots, *other.state().slots):
        have = sums.setdefault((slot.start, slot.bucket), [])
        if len(have) < len(slot.values):
            have.extend([0.0] * (len(slot.values) - len(have)))
        for i, value in enumerate(slot.values):
            have[i] += value
    state = replace(into.state(), slots=tuple(SlotSums(s, b, tuple(v))
                                              for (s, b), v in sums.items()))  # fmt: skip
    return CurveAccumulator.from_state(state)


class EpochCurves:
    """One target's epochs' accumulators, per model and epoch number."""

    __slots__ = ("_models",)

    def __init__(self) -> None:
        self._models: dict[str, _Model] = {}

    def clear(self) -> None:
        self._models.clear()

    def feed(self, book: EpochBook, model: str, row: array[float] | None) -> None:
        """Put the model's latest whole interval row where the epoch tracker put its counts
        (called after the book observed the same page)."""
        where = book.position(model)
        if where is None:
            return
        number, pending, numbers = where
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _Model()
            state.number = number
        if number != state.number:  # a change confirmed (or marked): its intervals move
            if state.pending is not None:
                state.curves[number] = state.pending
            state.pending, state.number = None, number
            for gone in set(state.curves) - set(numbers):
                del state.curves[gone]
        elif not pending and state.pending is not None:  # a change cancelled
            current = state.curves.get(number)
            state.curves[number] = (
                state.pending if current is None else _merge(current, state.pending)
            )
            state.pending = None
        if row is None:
            return
        if pending:
            if state.pending is None:
                state.pending = epoch_accumulator()
            state.pending.add_row(row)
        else:
            curve = state.curves.get(number)
            if curve is None:
                curve = state.curves[number] = epoch_accumulator()
            curve.add_row(row)

    def curve(self, model: str, number: int) -> CurveAccumulator | None:
        state = self._models.get(model)
        return state.curves.get(number) if state is not None else None

    def change(self, epochs: ModelEpochs) -> ChangeView | None:
        """The newest change of a model, compared per bucket (None: one epoch only)."""
        before, after = epochs.previous, epochs.current
        if before is None:
            return None
        old, new = self.curve(epochs.model, before.number), self.curve(epochs.model, after.number)
        if old is None or new is None:
            return None
        # An epoch not yet known to speculate has seen no draft: its sums are plain decoding.
        was, now = before.speculation is True, after.speculation is True
        buckets = matched_buckets(
            old, new, older_speculative=was, newer_speculative=now,
            chain_length=after.chain_length,
        )  # fmt: skip
        return ChangeView(
            epochs.model, before, after, buckets,
            tuple(p.label for p in loads_seen(old, speculative=was)),
            tuple(p.label for p in loads_seen(new, speculative=now)),
        )  # fmt: skip

    def changes(self, views: tuple[ModelEpochs, ...]) -> tuple[ChangeView, ...]:
        found = (self.change(v) for v in views)
        return tuple(c for c in found if c is not None)

    # -- the state file ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Per model, per epoch number, the accumulator's state (the pending intervals of a
        change being confirmed are not kept: at most a few scrapes)."""
        return {name: m.to_json() for name, m in self._models.items() if m.curves}

    def restore(self, data: Mapping[str, Any], book: EpochBook) -> None:
        """Take saved accumulators (validated through specmon.bounds: raises ValueError,
        leaving this as it was), for the epochs the book holds."""
        restored: dict[str, dict[int, CurveAccumulator]] = {}
        for name, saved in data.items():
            if not isinstance(name, str) or not isinstance(saved, dict) or len(saved) > 64:
                raise ValueError("curves: a model is not a name and an object")
            where = book.position(name)
            numbers = set(where[2]) if where is not None else set()
            curves: dict[int, CurveAccumulator] = {}
            for key, raw in saved.items():
                if not isinstance(key, str) or not key.isdigit():
                    raise ValueError("curves: an epoch number is not an integer")
                if not isinstance(raw, dict):
                    raise ValueError("curves: an epoch's curve is not an object")
                state = state_from_dict(raw)
                for slot in state.slots:
                    _check(slot)
                if int(key) in numbers:
                    curves[int(key)] = CurveAccumulator.from_state(state)
            restored[name] = curves
        for name, curves in restored.items():
            where = book.position(name)
            model = self._models.setdefault(name, _Model())
            model.curves.update(curves)
            if where is not None:
                model.number = where[0]


def _compact(saved: dict[str, Any]) -> dict[str, Any]:
    """Sums written to 7 significant digits (a relative 1e-7: far below any interval; the
    file is half as large as with every digit of a double)."""
    for slot in saved["slots"]:
        slot["values"] = [float(f"{v:.7g}") for v in slot["values"]]
    return saved


def _check(slot: SlotSums) -> None:
    """A restored bucket within the bounds a live interval obeys."""
    v = slot.values
    if v[_DT] > 0 and v[_DS] > 0:
        problem = time_per_token_refusal(v[_DS] / v[_DT])
        if problem is not None:
            raise ValueError(f"curves: {problem}")
    if v[_AC] > v[_DTK] or (v[_DR] > v[_DTK] and v[_DTK] > 0):
        raise ValueError("curves: more accepted tokens or drafts than draft tokens")


def _when(epoch: Epoch) -> str:
    start = time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch.start))
    if epoch.end is None:
        return f"{start}-now"
    same_day = time.gmtime(epoch.start)[:3] == time.gmtime(epoch.end)[:3]
    end = time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", time.gmtime(epoch.end))
    return f"{start}-{end} UTC"


def history_figures(
    live: LoadFigures,
    *,
    curves: EpochCurves,
    epochs: ModelEpochs | None,
    speeds: Speeds | None,
    acceptance: SpecCounters,
    chain_length: int | None,
) -> LoadFigures:
    """``live`` (a speculating window with no twin or profile) read against the server's own
    past: the newest epoch without speculation whose loads overlap the current epoch's, at
    ``live.read_concurrency``, the load every basis reads at (decided once:
    :func:`~specmon.daemon.load_view.read_concurrency`). ``live``
    unchanged when there is no such epoch (with the loads each epoch saw in its reason when
    there is one whose loads do not overlap)."""
    if epochs is None or not epochs.current.speculation or speeds is None:
        return live
    current = curves.curve(epochs.model, epochs.current.number)
    now = live.read_concurrency
    _, step, tpot = speeds
    if current is None or now is None or step is None or not tpot:
        return live
    per_step = step / tpot
    sd: float | None = None
    refused: list[str] = []
    for epoch in reversed(epochs.epochs[:-1]):
        if epoch.speculation is not False:  # speculating, or never known not to
            continue
        base = curves.curve(epochs.model, epoch.number)
        if base is None:
            continue
        if sd is None:  # only with an epoch to read against (most targets have none)
            drafted = acceptance.draft_tokens / acceptance.drafts if acceptance.drafts else None
            sd = (
                acceptance_log_sd(acceptance, tokens_per_draft=drafted or float(chain_length or 1))
                or 0.0
            )
        read = matched_read(base, current, now, tokens_per_step=per_step,
                            acceptance_sd=sd, chain_length=chain_length)  # fmt: skip
        if isinstance(read, str):
            saw = ", ".join(p.label for p in loads_seen(base, speculative=False)) or "none"
            mine = ", ".join(p.label for p in loads_seen(current, speculative=True)) or "none"
            refused.append(f"epoch {epoch.number} without speculation ({_when(epoch)}) saw "
                           f"loads {saw}, this epoch {mine}: {read}")  # fmt: skip
            continue
        return _figures(live, read, epoch, acceptance, chain_length)
    if refused:
        return replace(live, reason="; ".join(refused[:2]))
    return live


def _figures(
    live: LoadFigures, read: CurveRead, epoch: Epoch, acceptance: SpecCounters, k: int | None
) -> LoadFigures:
    cost = read.draft_cost if read.draft_cost is not None and read.draft_cost >= 0 else None
    report = (
        report_from_counters(acceptance, draft_cost=cost, configured_chain_length=k)
        if cost is not None and acceptance.drafts > 0
        else None
    )
    lo, hi = read.between
    if read.how == "measured":  # a bucket both epochs measured: their own ratio there
        load = "same load"
    else:
        where = f"between buckets {lo} and {hi}" if lo != hi else f"next to bucket {lo}"
        load = f"{read.how} on the cost curve, {where}"
    against = f"against this server without speculation, {_when(epoch)}, {load}"
    return replace(
        live, baseline=HISTORY, realized_speedup=read.speedup, measured_draft_cost=cost,
        measured_breakeven_alpha=report.breakeven_alpha if report else None,
        measured_alpha_margin=report.alpha_margin if report else None,
        speedup_interval=read.interval, read=read.how, read_concurrency=read.concurrency,
        reason=None, against=against, bucket=DEFAULT_SCHEME.bucket_of(read.concurrency).label,
    )  # fmt: skip
