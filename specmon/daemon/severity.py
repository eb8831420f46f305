"""How bad a target is, for the status page's order: one severity per target, from the
verdict the page shows (the primary window, or the first window with data). Pure.

The order, worst first: down, refused readings, slower than no speculation, below break-even,
near it, no verdict yet (pending, no speculative data), fine, and last the baselines: targets
up without speculation that another target names as its ``baseline:`` twin (nothing to judge
there by design). The first four are problems.
"""

from __future__ import annotations

from enum import IntEnum

from specmon.daemon.target import ModelView, TargetView, WindowView

__all__ = [
    "NEAR_MARGIN",
    "NEAR_SPEEDUP",
    "Severity",
    "pick_window",
    "target_severity",
    "window_severity",
]

#: A margin (alpha minus break-even, on the verdict's basis) below this is "near break-even".
NEAR_MARGIN = 0.05
#: A believed speed-up below this is "near break-even" (5 %: within what a shift of the
#: request mix moves it).
NEAR_SPEEDUP = 1.05


class Severity(IntEnum):
    """Worst first; ``problem`` for the first four; ``BASELINE`` last (a twin, by design
    without speculation)."""

    DOWN = 0
    REFUSED = 1
    SLOWER = 2
    BELOW = 3
    NEAR = 4
    UNJUDGED = 5
    FINE = 6
    BASELINE = 7

    @property
    def problem(self) -> bool:
        return self <= Severity.BELOW


def pick_window(model: ModelView, preferred: str) -> WindowView | None:
    """The window a row shows: ``preferred``, or the first with a report."""
    window = model.window(preferred)
    if window is not None and window.report is not None:
        return window
    with_data = [w for w in model.windows if w.report is not None]
    return with_data[0] if with_data else window


def window_severity(window: WindowView | None) -> Severity:
    """Slower when the verdict, or the realized speed-up against the baseline, is below 1;
    below break-even on a negative margin; near within ``NEAR_MARGIN``/``NEAR_SPEEDUP``."""
    if window is None:
        return Severity.UNJUDGED
    verdict, load = window.verdict, window.load
    speedup = verdict.speedup if verdict is not None else None
    margin = verdict.alpha_margin if verdict is not None else None
    realized = load.realized_speedup if load is not None else None
    if (speedup is not None and speedup < 1.0) or (realized is not None and realized < 1.0):
        return Severity.SLOWER
    if margin is not None and margin < 0.0:
        return Severity.BELOW
    if verdict is None or (speedup is None and margin is None):
        return Severity.UNJUDGED
    if (margin is not None and margin < NEAR_MARGIN) or (
        speedup is not None and speedup < NEAR_SPEEDUP
    ):
        return Severity.NEAR
    return Severity.FINE


def target_severity(view: TargetView, preferred: str) -> Severity:
    """The worst of a target's speculating models (its state first: down, refused)."""
    if not view.scraped:
        return Severity.UNJUDGED
    if not view.up:
        return Severity.DOWN
    if view.rejected:
        return Severity.REFUSED
    if view.baseline_for and not view.speculation:
        return Severity.BASELINE
    judged = [
        window_severity(pick_window(model, preferred)) for model in view.models if model.speculating
    ]
    return min(judged, default=Severity.UNJUDGED)
