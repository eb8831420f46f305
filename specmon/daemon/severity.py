"""How bad a target is, for the status page's order: one severity per target, from its
state (down, refused readings) and the answer's standing on the window the page shows (the
primary window, or the first window with data; :class:`specmon.answer.Standing`, decided in
the answer layer). Pure.

The order, worst first: down, refused readings, slower than no speculation, below break-even,
near it, measuring a new load, no answer yet (pending, no speculative data), fine, and last
the baselines: targets up without speculation that another target names as its ``baseline:``
twin (nothing to judge there by design). The first four are problems.
"""

from __future__ import annotations

from enum import IntEnum

from specmon.answer import Standing
from specmon.daemon.target import ModelView, TargetView, WindowView

__all__ = [
    "Severity",
    "pick_window",
    "target_severity",
    "window_severity",
]


class Severity(IntEnum):
    """Worst first; ``problem`` for the first four; ``BASELINE`` last (a twin, by design
    without speculation)."""

    DOWN = 0
    REFUSED = 1
    SLOWER = 2
    BELOW = 3
    NEAR = 4
    MEASURING = 5
    UNJUDGED = 6
    FINE = 7
    BASELINE = 8

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
    """The window's answer's standing (:class:`specmon.answer.Standing`: decided there)."""
    if window is None or window.answer is None:
        return Severity.UNJUDGED
    return _BY_STANDING[window.answer.standing]


_BY_STANDING = {
    Standing.SLOWER: Severity.SLOWER,
    Standing.BELOW: Severity.BELOW,
    Standing.NEAR: Severity.NEAR,
    Standing.MEASURING: Severity.MEASURING,
    Standing.UNJUDGED: Severity.UNJUDGED,
    Standing.FINE: Severity.FINE,
}


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
