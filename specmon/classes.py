"""Acceptance per request class over rolling windows: pure, no I/O.

A target whose readings carry per-class counts (a ``specmon tap`` beside the engine, or
SGLang's custom-label counters: :class:`~specmon.engines.classes.ClassReading`) keeps them
here as reset-aware running totals, beside the engine's own drafted-token and drafts counters
read at the same moment. A window is the increase from the oldest reading at or after
``t_last - W`` to the newest, as for the engine's own windows (:mod:`specmon.windows`).

Per class and window: the draft acceptance ratio (accepted / drafted tokens of the class's
sums, never an average of per-request rates), the mean acceptance length (1 + accepted /
verification steps), alpha and its margin over the break-even alpha at the target's k and c
(both through :func:`specmon.report.report_from_counters`, the one place they are computed),
and the coverage: the classes' drafted tokens (or steps) over the engine's own in the same
window, how much of the traffic the classes saw.

What this module does **not** do: a per-class speed-up verdict. The answer layer decides
verdicts; a per-class verdict plugs in where :func:`classes_view` builds each
:class:`ClassFigures` (the class's tokens per step against the target's measured step time,
on the target's basis).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from typing import Any

from specmon.config_values import format_duration
from specmon.engines.classes import MAX_CLASSES, ClassCounts, ClassReading
from specmon.engines.model import SpecCounters
from specmon.records import record
from specmon.report import basis, figure_out_of_range, report_from_counters

__all__ = [
    "COVERAGE_SLACK",
    "ClassFigures",
    "ClassHistory",
    "ClassWindow",
    "ClassesView",
    "classes_view",
]

#: A window's coverage may exceed 1 by this much (requests counted by the tap when they end,
#: by the engine step by step, straddle the window's edges); beyond it, it is withheld.
COVERAGE_SLACK = 0.1
#: Fewest drafted tokens (or steps) a class needs in a window for figures.
MIN_DRAFTED = 1

#: A class's running totals: (requests, accepted, drafted or -1, steps or -1).
_Totals = tuple[int, int, int, int]


@record
class ClassFigures:
    """One class in one window."""

    name: str
    requests: int
    accepted_tokens: int
    #: None: the source counts no drafted tokens (SGLang) or no steps (llama.cpp's fields).
    draft_tokens: int | None
    steps: int | None
    draft_acceptance_ratio: float | None = None
    mean_acceptance_length: float | None = None
    alpha: float | None = None
    alpha_margin: float | None = None
    #: Why the figures are withheld (outside their physical bounds), or None.
    withheld: str | None = None


@record
class ClassWindow:
    window: str
    seconds: float
    #: Time the window's readings cover; None with fewer than two readings.
    covered_seconds: float | None
    classes: tuple[ClassFigures, ...]
    #: The classes' drafted tokens (or steps) over the engine's own in the window.
    coverage: float | None = None
    #: What the coverage rests on, or why there is none.
    coverage_note: str | None = None


@record
class ClassesView:
    """A target's per-class figures after a reading."""

    #: "tap" or "sglang".
    source: str
    #: The engine whose per-request fields the tap reads (as the tap says), when known.
    engine: str | None
    chain_length: int | None
    draft_cost: float
    breakeven_alpha: float | None
    windows: tuple[ClassWindow, ...]
    notes: tuple[str, ...] = ()
    #: The last read of the class counts failed (the tap did not answer): why.
    error: str | None = None

    def window(self, label: str) -> ClassWindow | None:
        return next((w for w in self.windows if w.window == label), None)


@record
class _Row:
    mono: float
    totals: tuple[tuple[str, _Totals], ...]
    #: The engine's running (draft tokens, drafts), each -1 when it does not count them.
    engine: tuple[int, int]
    #: Readings so far without the engine's counters: a window across one has no coverage.
    gaps: int


def _raw(counts: ClassCounts) -> _Totals:
    return (
        counts.requests,
        counts.accepted_tokens,
        -1 if counts.draft_tokens is None else counts.draft_tokens,
        -1 if counts.steps is None else counts.steps,
    )


def _increase(previous: tuple[int, ...] | None, now: tuple[int, ...]) -> tuple[int, ...]:
    """The increase from ``previous`` raw counts to ``now``'s (-1 stays -1: not counted):
    the new values themselves when any count went down (a restart), zero at the first."""
    if previous is None:
        return tuple(-1 if n < 0 else 0 for n in now)
    if any(0 <= n < p for p, n in zip(previous, now, strict=True)):
        return tuple(n if n >= 0 else -1 for n in now)
    return tuple(n - p if p >= 0 and n >= 0 else -1 for p, n in zip(previous, now, strict=True))


def _plus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x + y if x >= 0 and y >= 0 else -1 for x, y in zip(a, b, strict=True))


def _minus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x - y if x >= 0 and y >= 0 else -1 for x, y in zip(a, b, strict=True))


class ClassHistory:
    """One target's per-class running totals over time (bounded: ``retention`` seconds of
    readings, at most :data:`~specmon.engines.classes.MAX_CLASSES` classes)."""

    def __init__(self, *, retention: float) -> None:
        self.retention = retention
        self._rows: deque[_Row] = deque()
        self._raw: dict[str, tuple[int, ...]] = {}
        self._running: dict[str, _Totals] = {}
        self._engine_raw: tuple[int, ...] | None = None
        self._engine_running: tuple[int, ...] = (0, 0)
        self._gaps = 0
        self.source = ""
        self.engine: str | None = None
        self.notes: tuple[str, ...] = ()
        self.error: str | None = None

    def add(self, mono: float, reading: ClassReading, *, engine: SpecCounters | None) -> None:
        """One reading's class counts, with the engine's counters read at the same moment
        (None: the engine's page gave none). A reading that failed (the tap did not answer)
        adds no row: the windows span it."""
        self.source, self.engine, self.notes = reading.source, reading.engine, reading.notes
        self.error = reading.error
        if reading.error is not None:
            return
        for name, counts in reading.classes[:MAX_CLASSES]:
            raw = _raw(counts)
            increase = _increase(self._raw.get(name), raw)
            self._raw[name] = raw
            running = self._running.get(name)
            self._running[name] = increase if running is None else _plus(running, increase)  # type: ignore[assignment]
        if engine is None:
            self._gaps += 1
        else:
            raw_engine = (
                engine.draft_tokens if engine.knows("draft_tokens") else -1,
                engine.drafts if engine.knows("drafts") else -1,
            )
            increase = _increase(self._engine_raw, raw_engine)
            self._engine_raw = raw_engine
            self._engine_running = _plus(self._engine_running, increase)
        engine_now = self._engine_running
        self._rows.append(
            _Row(mono, tuple(sorted(self._running.items())), (engine_now[0], engine_now[1]),
                 self._gaps)
        )  # fmt: skip
        while len(self._rows) > 2 and self._rows[1].mono < mono - self.retention:
            self._rows.popleft()

    def window(self, seconds: float) -> tuple[_Row, _Row] | None:
        """The oldest reading at or after ``newest - seconds`` and the newest, or None."""
        if len(self._rows) < 2:
            return None
        newest = self._rows[-1]
        start = next((r for r in self._rows if r.mono >= newest.mono - seconds), newest)
        return (start, newest) if start is not newest else None


def _delta(start: _Row, end: _Row) -> dict[str, _Totals]:
    """Per class, the increase over the window (a class first seen inside it from zero)."""
    before = dict(start.totals)
    out: dict[str, _Totals] = {}
    for name, totals in end.totals:
        prior = before.get(name)
        out[name] = totals if prior is None else _minus(totals, prior)  # type: ignore[assignment]
    return out


def _figures(
    name: str,
    delta: _Totals,
    *,
    draft_cost: float,
    configured_chain_length: int | None,
    detected_chain_length: int | None,
) -> ClassFigures:
    requests, accepted, drafted, steps = delta
    figures = ClassFigures(
        name=name,
        requests=requests,
        accepted_tokens=accepted,
        draft_tokens=None if drafted < 0 else drafted,
        steps=None if steps < 0 else steps,
    )
    sample = drafted if drafted >= 0 else steps
    if sample < MIN_DRAFTED:
        return figures
    # Steps of 0 beside drafted tokens: a source that gives none (llama.cpp's fields).
    unknown = tuple(
        n
        for n, v in (("drafts", steps), ("draft_tokens", drafted))
        if v < 0 or (v == 0 and n == "drafts")
    )
    counters = SpecCounters(
        drafts=max(steps, 0), draft_tokens=max(drafted, 0), accepted_tokens=accepted,
        unknown=unknown,
    )  # fmt: skip
    report = report_from_counters(
        counters,
        draft_cost=draft_cost,
        configured_chain_length=configured_chain_length,
        detected_chain_length=detected_chain_length,
    )
    why = figure_out_of_range(report)
    if why is not None:
        return _with(figures, withheld=why)
    # Here a per-class verdict would plug in: the answer layer, given this report and the
    # target's measured step time, on the target's basis (not computed here).
    return _with(
        figures,
        draft_acceptance_ratio=report.draft_acceptance_ratio,
        mean_acceptance_length=report.mean_acceptance_length,
        alpha=report.alpha,
        alpha_margin=report.alpha_margin,
    )


def _with(figures: ClassFigures, **changes: Any) -> ClassFigures:
    return dataclasses.replace(figures, **changes)


def _coverage(deltas: Iterable[_Totals], start: _Row, end: _Row) -> tuple[float | None, str | None]:
    items = list(deltas)
    if end.gaps != start.gaps:
        return None, "the engine's page lacked its counters at a reading inside the window"
    engine_tokens, engine_drafts = _minus(end.engine, start.engine)
    if items and all(d[2] >= 0 for d in items) and engine_tokens >= 0:
        seen, total, unit = sum(d[2] for d in items), engine_tokens, "drafted tokens"
    elif items and all(d[3] >= 0 for d in items) and engine_drafts >= 0:
        seen, total, unit = sum(d[3] for d in items), engine_drafts, "verification steps"
    else:
        return None, "the engine's page gives no counter to compare with"
    if total <= 0:
        return None, f"the engine counted no {unit} in the window"
    ratio = seen / total
    if ratio > 1.0 + COVERAGE_SLACK:
        return None, (
            f"the classes counted more {unit} ({seen}) than the engine ({total}): another "
            "engine's traffic behind the tap, or a restart inside the window"
        )
    return min(ratio, 1.0), f"{unit}: {seen} of the engine's {total}"


def classes_view(
    history: ClassHistory,
    *,
    windows: Iterable[float],
    draft_cost: float,
    configured_chain_length: int | None,
    detected_chain_length: int | None,
) -> ClassesView:
    """Per window, every class's figures at the target's k and c, and the coverage."""
    resolved = basis(
        draft_cost=draft_cost,
        configured_chain_length=configured_chain_length,
        detected_chain_length=detected_chain_length,
    )
    out: list[ClassWindow] = []
    for seconds in windows:
        label = format_duration(seconds)
        pair = history.window(seconds)
        if pair is None:
            out.append(ClassWindow(label, seconds, None, ()))
            continue
        start, end = pair
        deltas = _delta(start, end)
        figures = tuple(
            _figures(
                name,
                delta,
                draft_cost=draft_cost,
                configured_chain_length=configured_chain_length,
                detected_chain_length=detected_chain_length,
            )
            for name, delta in sorted(deltas.items())
        )
        coverage, note = _coverage(deltas.values(), start, end)
        out.append(ClassWindow(label, seconds, end.mono - start.mono, figures, coverage, note))
    return ClassesView(
        source=history.source,
        engine=history.engine,
        chain_length=resolved.chain_length,
        draft_cost=draft_cost,
        breakeven_alpha=resolved.breakeven_alpha,
        windows=tuple(out),
        notes=history.notes,
        error=history.error,
    )
