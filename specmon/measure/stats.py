"""Statistics of one run: percentiles, token rates and ratios. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile", "rate", "ratio"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation between closest ranks.

    The same definition as numpy's default ("linear") and ``statistics.quantiles(...,
    method="inclusive")``: with n values, position (n - 1) q / 100. ``None`` for no values. With
    few values, p95 lies between the two slowest requests, not beyond them.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError("percentile must be within [0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def rate(amount: int | None, seconds: float) -> float | None:
    """amount / seconds, or None when the amount is unknown or no time passed."""
    if amount is None or not math.isfinite(seconds) or seconds <= 0.0:
        return None
    return amount / seconds


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is not > 0."""
    if numerator is None or denominator is None or denominator <= 0.0:
        return None
    value = numerator / denominator
    return value if math.isfinite(value) else None
