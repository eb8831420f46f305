"""Where speculation stops paying: the one crossover function of the daemon, ``specmon
recommend`` and ``specmon measure``. Pure.

- :func:`curve_crossover`: off a cost curve (:class:`~specmon.load.curve.Curve`: both sides'
  step times fitted over their measured buckets), at an acceptance, with its 95 % range where
  the speed-up's bounds fall through 1; only where measured buckets bracket it. What every
  surface shows wherever both sides' step times were measured (a twin, a profile, the
  server's own past, an A/B measurement).
- :func:`crossover`: through speed-ups measured at increasing concurrency (linear between
  them, never extrapolated), and :func:`crossover_at_acceptance` at an acceptance from draft
  costs measured per load: where no curve can be fitted.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable

from specmon import arithmetic
from specmon.bounds import chain_bound, speedup_refusal
from specmon.engines.model import SpecCounters
from specmon.load import Profile
from specmon.load.curve import Curve, acceptance_log_sd
from specmon.records import record
from specmon.report import report_from_counters

__all__ = [
    "Crossover",
    "crossover",
    "crossover_at_acceptance",
    "curve_crossover",
    "profile_crossover",
    "speedup_at_cost",
]


@record
class Crossover:
    """Where speculation stops paying, from speed-ups measured at increasing concurrency.

    ``concurrency`` lies between the last measured concurrency where it paid
    (``pays_up_to``) and the first where it did not (``costs_from``); when it did not pay
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


def crossover(points: Iterable[tuple[float, float]]) -> Crossover | None:
    """The lowest concurrency at which the speed-up falls to 1 or below, linear between the
    (concurrency, speed-up) points; None when it stays above 1 over the whole measured range
    (or there is nothing measured). Never extrapolated: the answer always lies within the
    measured concurrencies."""
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


def curve_crossover(
    curve: Curve, *, tokens_per_step: float, acceptance_sd: float, chain_length: int | None = None
) -> Crossover | None:
    """Where the speed-up at an acceptance of ``tokens_per_step`` (log standard deviation
    ``acceptance_sd``) falls through 1 on ``curve``, only where measured buckets bracket it
    (paid at one, not at the next measured); its range where the interval's bounds fall
    through 1. Not paid even at the lowest measured load: that load. None when it pays over
    the whole measured range, or a speed-up there breaks a bound (:mod:`specmon.bounds`)."""
    points = sorted(curve.measured, key=lambda p: p.concurrency)
    values = [curve.speedup_at(p.concurrency, tokens_per_step) for p in points]
    k = chain_bound(configured=chain_length)
    if any(
        v is None or speedup_refusal(v, chain_length=k, measured=True) is not None for v in values
    ):
        return None
    measured = [(p, v) for p, v in zip(points, values, strict=True) if v is not None]
    first, last = measured[0][0].concurrency, measured[-1][0].concurrency
    if measured[0][1] <= 1.0:
        return Crossover(first, None, first, measured[0][1], (1 - measured[0][1]) * 100,
                         first, last, low=first, high=first)  # fmt: skip
    falls = next(
        ((p0, p1, s1) for (p0, _), (p1, s1) in itertools.pairwise(measured) if s1 <= 1.0), None
    )
    if falls is None:
        return None
    p0, p1, s1 = falls
    # The bounds' constants are looked up only here: at most one pair falls through 1.
    bound = curve.bound(tokens_per_step, acceptance_sd)
    at = _root(lambda n: bound(n, 0), p0.concurrency, p1.concurrency)
    low = _root(lambda n: bound(n, -1), first, p1.concurrency, fallback=first)
    high = _root(lambda n: bound(n, 1), p0.concurrency, last, fallback=last)
    gap = p1.bucket - p0.bucket - 1
    note = (
        f"between buckets {p0.label} and {p1.label}, {gap} bucket"
        f"{'s' if gap > 1 else ''} apart with no measurement: the range is wide"
        if gap >= 1
        else None
    )
    return Crossover(at, p0.concurrency, p1.concurrency, s1, (1 - s1) * 100, first, last,
                     low=min(low, at), high=max(high, at), note=note)  # fmt: skip


def _root(
    f: Callable[[float], float], lo: float, hi: float, *, fallback: float | None = None
) -> float:
    """Where f falls through 1 between ``lo`` and ``hi`` (scanned, then bisected), or
    ``fallback`` (default ``hi``) when it does not."""
    grid = [lo + (hi - lo) * j / 16 for j in range(17)]
    prev = grid[0]
    if f(prev) <= 1.0:
        return lo
    for n in grid[1:]:
        if f(n) <= 1.0:
            a, b = prev, n
            for _ in range(24):  # (hi - lo) / 16 / 2^24: far below any figure's precision
                mid = (a + b) / 2
                a, b = (mid, b) if f(mid) > 1.0 else (a, mid)
            return b
        prev = n
    return hi if fallback is None else fallback


def profile_crossover(profile: Profile) -> Crossover | None:
    """The crossover of a cost profile (``specmon measure --profile-out``): both servers'
    levels as the two sides of a cost curve, at the profile's own acceptance (its levels
    pooled): the function the daemon reads its crossover with, on the profile's data. Where
    the levels give no curve (no step times), the speed-ups at the profile's acceptance from
    each level's draft cost, linear between levels."""
    acceptance = profile.acceptance()
    per_step = profile.tokens_per_step()
    curve = Curve.build(profile.speculative_points(), profile.baseline_points(),
                        drafted_per_step=profile.drafted_per_step())  # fmt: skip
    if curve is not None and per_step is not None:
        drafted = (
            acceptance.draft_tokens / acceptance.drafts
            if acceptance is not None and acceptance.drafts > 0 and acceptance.draft_tokens > 0
            else float(profile.chain_length or 1)
        )
        sd = acceptance_log_sd(acceptance, tokens_per_draft=drafted) or 0.0
        return curve_crossover(curve, tokens_per_step=per_step, acceptance_sd=sd,
                               chain_length=profile.chain_length)  # fmt: skip
    if acceptance is None:
        return None
    return crossover_at_acceptance(profile.costs(), acceptance)
