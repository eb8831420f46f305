"""The crossover's root searches evaluate the speed-up's bound about a hundred times per window
and scrape, through ``Curve.bound`` (each side's constants looked up once). It must give the
same figures, to the last bit, as the plain definition: the speed-up read off both shapes
times exp(sign x 1.96 x the log standard deviation summed term by term (docs/load-signals.md),
written out here as it read before the lookups were hoisted."""

from __future__ import annotations

import bisect
import math

from specmon.answer import curve_crossover
from specmon.load.curve import Z95, Curve, twin_curve
from tests.test_curve import TOKENS, accumulators


def log_sd(curve: Curve, n: float, acceptance_sd: float) -> float:
    """The log standard deviation at ``n``, term by term in the documented order."""
    total = acceptance_sd**2
    for shape, pts in ((curve.spec, curve.spec_points), (curve.base, curve.base_points)):
        xs = [p[0] for p in shape.points]
        i = bisect.bisect_left(xs, n)
        near = pts[max(i - 1, 0) : i + 1] or pts[-1:]
        total += max(p.step_relative_se for p in near) ** 2
        value = shape.fixed + shape.slope * max(shape.knee, n)
        total += (shape.residual or 0.0) ** 2
        if i <= 0:
            line = shape.points[0][1]
        elif i >= len(xs):
            line = shape.points[-1][1]
        else:
            (x0, y0), (x1, y1) = shape.points[i - 1], shape.points[i]
            line = y0 + (y1 - y0) * (n - x0) / (x1 - x0) if x1 > x0 else y1
        total += ((line - value) / value) ** 2 if value > 0 else 0.0
    return math.sqrt(total)


def plain_bound(curve: Curve, n: float, sign: int, per_step: float, acceptance_sd: float) -> float:
    spec = curve.spec.fixed + curve.spec.slope * max(curve.spec.knee, n)
    base = curve.base.fixed + curve.base.slope * max(curve.base.knee, n)
    k_base = curve.base_tokens_per_step
    speedup = per_step * base / (k_base * spec) if spec > 0 and base > 0 and k_base > 0 else 0.0
    return speedup * math.exp(sign * Z95 * log_sd(curve, n, acceptance_sd))


def test_the_bound_is_the_plain_definition_to_the_last_bit() -> None:
    checked = 0
    for levels, seed in (((1, 2, 4, 8, 16, 32), 11), ((1, 2, 4, 16, 32), 3), ((16, 32), 2),
                         ((4,), 7)):  # fmt: skip
        spec, twin = accumulators(levels, seed=seed)
        curve = twin_curve(spec, twin)
        assert curve is not None
        measured = [p.concurrency for p in curve.spec_points + curve.base_points]
        # A grid across and past the range, and every measured concurrency exactly (where
        # the bisection lands on a point).
        loads = [0.25 * j for j in range(1, 180)] + measured
        for per_step, acceptance_sd in ((TOKENS, 0.005), (1.7, 0.0), (3.1, 0.04)):
            bound = curve.bound(per_step, acceptance_sd)
            for n in loads:
                assert bound(n, None) == log_sd(curve, n, acceptance_sd), n
                assert curve.log_sd(n, acceptance_sd) == log_sd(curve, n, acceptance_sd), n
                for sign in (-1, 0, 1):
                    assert bound(n, sign) == plain_bound(curve, n, sign, per_step, acceptance_sd)
                    checked += 1
    assert checked > 6000


def test_the_crossover_reads_the_same_through_thebound() -> None:
    """The crossover's root searches find, through the hoisted bound, where the plain
    definition falls through 1 (checked at the roots: just before each, still above)."""
    spec, twin = accumulators((1, 2, 4, 8, 16, 32), seed=11)
    curve = twin_curve(spec, twin)
    assert curve is not None
    found = curve_crossover(curve, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert found is not None and found.low is not None and found.high is not None
    for root, sign in ((found.concurrency, 0), (found.low, -1), (found.high, 1)):
        assert plain_bound(curve, root, sign, TOKENS, 0.005) <= 1.0
        assert plain_bound(curve, root * (1 - 1e-6), sign, TOKENS, 0.005) > 1.0
