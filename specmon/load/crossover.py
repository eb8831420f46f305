"""Where speculation stops paying: the speed-up at a draft cost, and the crossover
concurrency where measured speed-ups fall through 1 (never extrapolated)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from specmon import arithmetic
from specmon.engines.model import SpecCounters
from specmon.records import record
from specmon.report import report_from_counters


def speedup_at_cost(counters: SpecCounters, cost: float) -> float | None:
    """The expected speed-up (1 + A/D) / (1 + c T/D) of ``counters``' acceptance at draft cost
    ``cost`` (negative costs count as 0): the closed form when the engine counts drafts and
    draft tokens, else :func:`specmon.report.report_from_counters` (which knows what to assume
    for the counter an engine lacks)."""
    if counters.drafts <= 0:
        return None
    cost = max(cost, 0.0)
    if counters.knows("drafts") and counters.knows("draft_tokens"):
        return arithmetic.measured_speedup(
            counters.accepted_tokens / counters.drafts,
            cost,
            counters.draft_tokens / counters.drafts,
        )
    return report_from_counters(counters, draft_cost=cost).expected_speedup


@record
class Crossover:
    """Where speculation stops paying, from speed-ups measured at increasing concurrency.

    ``concurrency`` is interpolated linearly between the last measured concurrency where it
    paid (``pays_up_to``) and the first where it did not (``costs_from``); when it did not pay
    even at the lowest measured concurrency, ``concurrency`` is that concurrency and
    ``pays_up_to`` is None. ``cost_percent`` = (1 - speed-up at ``costs_from``) x 100.
    """

    concurrency: float
    pays_up_to: float | None
    costs_from: float
    speedup_at: float
    cost_percent: float
    measured_from: float
    measured_to: float
    #: The 95 % range (from the cost curve: where the speed-up's bounds fall through 1);
    #: None when the crossover was not read off a curve.
    low: float | None = None
    high: float | None = None
    #: What an operator should know about it (a gap of unmeasured buckets).
    note: str | None = None


def crossover(points: Iterable[tuple[float, float]]) -> Crossover | None:
    """The lowest concurrency at which the speed-up falls to 1 or below; None when it stays
    above 1 over the whole measured range (or there is nothing measured). Never extrapolated:
    the answer always lies within the measured concurrencies."""
    ordered = sorted((n, s) for n, s in points if math.isfinite(n) and math.isfinite(s))
    if not ordered:
        return None
    low, high = ordered[0][0], ordered[-1][0]
    previous: tuple[float, float] | None = None
    for n, s in ordered:
        if s <= 1.0:
            if previous is None:
                at = n
                pays = None
            else:
                n0, s0 = previous
                at = n0 + (s0 - 1.0) * (n - n0) / (s0 - s) if s0 != s else n
                pays = n0
            return Crossover(
                concurrency=at,
                pays_up_to=pays,
                costs_from=n,
                speedup_at=s,
                cost_percent=(1.0 - s) * 100.0,
                measured_from=low,
                measured_to=high,
            )
        previous = (n, s)
    return None


def crossover_at_acceptance(
    costs: Iterable[tuple[float, float]], counters: SpecCounters
) -> Crossover | None:
    """The crossover at the acceptance of ``counters`` (the current window), from draft costs
    measured at several concurrencies: (concurrency, c) pairs."""
    points = []
    for n, cost in costs:
        s = speedup_at_cost(counters, cost)
        if s is not None:
            points.append((n, s))
    return crossover(points)
