"""Each configuration epoch's cost-curve accumulator (issue 55: the epochs are the curve's
accumulators, per configuration), fed with every whole interval of the target's models, kept
in the state file beside the epochs, and read two ways:

- the baseline of the ``history`` basis: the newest epoch without speculation, its sums per
  load bucket laid out as a window (:meth:`EpochCurves.past`), which the answer compares the
  current window with as it would a twin's (:func:`specmon.answer.read_comparison`);
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

import orjson

from specmon.bounds import time_per_token_refusal
from specmon.load import DEFAULT_SCHEME, BucketTotals, LoadWindow
from specmon.load.buckets import DEFAULT_THRESHOLDS
from specmon.load.curve import (
    COLUMNS,
    CurveAccumulator,
    SlotSums,
    state_from_dict,
    state_to_dict,
)
from specmon.load.curve_sums import EPOCH_SPAN
from specmon.load.matched import MatchedBucket, loads_seen, matched_buckets
from specmon.load.rows import ACCEPTED, DECODE_SECONDS, DECODE_TOKENS, DRAFT_TOKENS, DRAFTS
from specmon.records import record
from specmon.state.epoch_book import EpochBook
from specmon.state.epochs import MAX_EPOCHS, MAX_MODELS, Epoch, ModelEpochs
from specmon.state.store import saved_json

__all__ = ["ChangeView", "EpochCurves", "Past", "describe_epoch"]

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


@record
class Past:
    """A past epoch without speculation as the ``history`` basis's baseline: its sums per
    load bucket, laid out as a window (specmon.answer.reads compares it as a twin's)."""

    epoch: Epoch
    window: LoadWindow
    #: The accumulator's version it was laid out at.
    version: int

    @property
    def detail(self) -> str:
        return f"this server without speculation, {describe_epoch(self.epoch)}"


class _Model:
    __slots__ = ("curves", "number", "pasts", "pending", "saved", "start")

    def __init__(self) -> None:
        self.number = 0
        #: The current epoch's start: with its number, which epoch the sums go to.
        self.start = 0.0
        self.curves: dict[int, CurveAccumulator] = {}
        #: Past epochs laid out as windows, made again when their sums change.
        self.pasts: dict[int, Past] = {}
        self.pending: CurveAccumulator | None = None
        #: Each epoch's saved form (its JSON) and the accumulator version it was made at (a
        #: past epoch's is made once; bytes: a dict of lists of floats took 4 times more).
        self.saved: dict[int, tuple[int, bytes]] = {}

    def saved_form(self) -> dict[str, orjson.Fragment]:
        out = {}
        for number, curve in self.curves.items():
            made = self.saved.get(number)
            if made is None or made[0] != curve.version:
                saved = saved_json(_compact(state_to_dict(curve.state())))
                made = self.saved[number] = (curve.version, saved)
            out[str(number)] = orjson.Fragment(made[1])
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
        number, pending, numbers, start = where
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _Model()
            state.number, state.start = number, start
        if (number, start) != (state.number, state.start):  # a change confirmed (or marked)
            moved, state.pending = state.pending, None
            if start < state.start:  # a brief epoch folded back into this one: its sums stay
                kept = state.curves.get(number)
                if moved is not None:
                    state.curves[number] = moved if kept is None else _merge(kept, moved)
            else:  # a new epoch, or one that took a brief one's place (and number)
                state.curves.pop(number, None)
                if moved is not None:
                    state.curves[number] = moved
            state.number, state.start = number, start
            for gone in set(state.curves) - set(numbers):
                del state.curves[gone]
                state.pasts.pop(gone, None)
        elif not pending and state.pending is not None:  # a change cancelled
            current = state.curves.get(number)
            state.curves[number] = (
                state.pending if current is None else _merge(current, state.pending)
            )
            state.pending = None
        if row is None or _row_refusal(row) is not None:
            return  # the interval breaks a bound a restored bucket must obey: not counted
        if pending:
            if state.pending is None:
                state.pending = CurveAccumulator.for_epoch()
            state.pending.add_row(row)
        else:
            curve = state.curves.get(number)
            if curve is None:
                curve = state.curves[number] = CurveAccumulator.for_epoch()
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

    def past(self, epochs: ModelEpochs | None) -> Past | None:
        """The baseline of the ``history`` basis for a speculating current epoch: the newest
        epoch known to run without speculation that measured any load, as a window of its
        sums per bucket (None: no such epoch, or the current epoch does not speculate)."""
        if epochs is None or not epochs.current.speculation:
            return None
        state = self._models.get(epochs.model)
        if state is None:
            return None
        for epoch in reversed(epochs.epochs[:-1]):
            if epoch.speculation is not False:  # speculating, or never known not to
                continue
            curve = state.curves.get(epoch.number)
            if curve is None or not curve.measured(DEFAULT_THRESHOLDS, speculative=False):
                continue
            made = state.pasts.get(epoch.number)
            if made is None or made.version != curve.version or made.window.curve is not curve:
                scheme = DEFAULT_SCHEME.buckets
                buckets = tuple(BucketTotals(scheme[b.bucket], b.totals) for b in curve.buckets())
                made = state.pasts[epoch.number] = Past(
                    epoch, LoadWindow(None, buckets, None, None, curve), curve.version
                )
            return made
        return None

    def changes(self, views: tuple[ModelEpochs, ...]) -> tuple[ChangeView, ...]:
        found = (self.change(v) for v in views)
        return tuple(c for c in found if c is not None)

    # -- the state file ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """Per model, per epoch number, the accumulator's state (the pending intervals of a
        change being confirmed are not kept: at most a few scrapes), as plain JSON values."""
        return orjson.loads(orjson.dumps(self.saved_form()))  # type: ignore[no-any-return]

    def saved_form(self) -> dict[str, Any]:
        """:meth:`to_json` for the state file: each epoch's JSON made once a change (bytes)."""
        return {name: m.saved_form() for name, m in self._models.items() if m.curves}

    def restore(self, data: Mapping[str, Any], book: EpochBook) -> None:
        """Take saved accumulators (validated through specmon.bounds: raises ValueError,
        leaving this as it was), for the epochs the book holds."""
        if len(data) > MAX_MODELS:
            raise ValueError(f"curves: more than {MAX_MODELS} models")
        restored: dict[str, dict[int, CurveAccumulator]] = {}
        buckets = len(DEFAULT_SCHEME.buckets)
        for name, saved in data.items():
            if not isinstance(name, str) or not isinstance(saved, dict) or len(saved) > MAX_EPOCHS:
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
                if len(state.slots) > buckets or state.slot_seconds != EPOCH_SPAN:
                    # An epoch's sums: one slot per bucket, for the epoch's whole life.
                    raise ValueError("curves: not an epoch's sums (one slot per bucket)")
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
                model.number, model.start = where[0], where[3]


def _compact(saved: dict[str, Any]) -> dict[str, Any]:
    """Sums written to 7 significant digits (a relative 1e-7: far below any interval; the
    file is half as large as with every digit of a double)."""
    for slot in saved["slots"]:
        slot["values"] = [float(f"{v:.7g}") for v in slot["values"]]
    return saved


def _sums_refusal(
    decode_seconds: float, decode_tokens: float, draft_tokens: float, accepted: float,
    drafts: float,
) -> str | None:  # fmt: skip
    """Why sums (an interval's, or a bucket's) cannot be counted, or None: a time per output
    token outside specmon.bounds, more accepted tokens or drafts than draft tokens."""
    if decode_tokens > 0 and decode_seconds > 0:
        problem = time_per_token_refusal(decode_seconds / decode_tokens)
        if problem is not None:
            return problem
    if accepted > draft_tokens or (drafts > draft_tokens and draft_tokens > 0):
        return "more accepted tokens or drafts than draft tokens"
    return None


def _row_refusal(row: array[float]) -> str | None:
    """:func:`_sums_refusal` of an interval row (specmon.load.rows' layout), checked when it
    is counted as a restored bucket is when read back."""
    width = len(row)
    return _sums_refusal(
        row[DECODE_SECONDS], row[DECODE_TOKENS],
        row[DRAFT_TOKENS] if width > DRAFT_TOKENS else 0.0,
        row[ACCEPTED] if width > ACCEPTED else 0.0, row[DRAFTS] if width > DRAFTS else 0.0,
    )  # fmt: skip


def _check(slot: SlotSums) -> None:
    """A restored bucket within the bounds a live interval obeys."""
    v = slot.values
    problem = _sums_refusal(v[_DS], v[_DT], v[_DTK], v[_AC], v[_DR])
    if problem is not None:
        raise ValueError(f"curves: {problem}")


def describe_epoch(epoch: Epoch) -> str:
    """When an epoch ran, for people ("2026-12-07 10:13-10:20 UTC")."""
    start = time.strftime("%Y-%m-%d %H:%M", time.gmtime(epoch.start))
    if epoch.end is None:
        return f"{start}-now"
    same_day = time.gmtime(epoch.start)[:3] == time.gmtime(epoch.end)[:3]
    end = time.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M", time.gmtime(epoch.end))
    return f"{start}-{end} UTC"
