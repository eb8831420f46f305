"""The cost curve of one target and model: step time with and without speculation as functions
of concurrency, kept far longer than any window, the speed-up and draft cost at any load
inside what was measured, and the uncertainty of both. Pure: no I/O. What is read off it, and
when it may be (a load the curve measured, never past it), is the answer's
(:mod:`specmon.answer.reads`, :func:`specmon.answer.curve_crossover`).

Public API (what the daemon, and issue 55's persistence, code against):

- :class:`CurveAccumulator`, its state (:class:`CurveState`, :class:`SlotSums`,
  ``state_to_dict`` / ``state_from_dict``) and :class:`BucketSums`: the curve's memory, an
  hour of intervals per time slot and concurrency bucket (:mod:`specmon.load.curve_sums`,
  re-exported here).
- :func:`side_points` -> :class:`SidePoint` per bucket with enough data (the
  :class:`~specmon.load.buckets.Thresholds` a window's bucket needs), its step time, the
  relative standard error of that mean (spread of the per-interval step times) and K.
- :func:`fit_shape` -> :class:`Shape`: T(n) = fixed + slope max(knee, n) (the cost model's
  fixed part, bandwidth-bound floor and compute-bound slope, docs/background.md), weighted
  least squares over the buckets, its relative fit residual.
- :class:`Curve` (``Curve.build(spec, base, ...)``; :func:`twin_curve`,
  :func:`profile_curve`): ``speedup_at``, ``tpot_at``, ``log_sd`` (the standard deviation
  of log(speed-up) at a load) and ``bound`` (the speed-up's bounds as functions of the load,
  for the crossover's range).
- :func:`speedup_interval` and :func:`acceptance_log_sd`: the interval's arithmetic, for a
  verdict read off a window's bucket or off the configured cost.

The interval is a normal approximation on log(speed-up) (delta method): the variance of
log K (accepted tokens per step: the per-draft accepted count's variance from per-position
survival, binomial per token without positions, else the per-interval spread), of log
T_spec and log T_base (spread of per-interval step times / sqrt(intervals)), and, for a read
off the curve, the fit's relative residual and the disagreement between the shape and
straight lines between neighbouring buckets (docs/load-signals.md).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Protocol

from specmon.bounds import chain_bound, speedup_refusal
from specmon.engines.model import SpecCounters
from specmon.load.buckets import DEFAULT_SCHEME, DEFAULT_THRESHOLDS, BucketScheme, Thresholds

# The curve's memory, re-exported: this module's API names it (specmon.load.curve_sums).
from specmon.load.curve_sums import (
    _DTK,
    _I,
    _K1,
    _K2,
    _RS,
    _T1,
    _T2,
    COLUMNS,
    BucketSums,
    CurveAccumulator,
    CurveState,
    SlotSums,
    state_from_dict,
    state_to_dict,
)
from specmon.records import record

# fmt: off
__all__ = [
    "COLUMNS", "Z95", "BucketSums", "Curve", "CurveAccumulator", "CurveState",
    "Shape", "SidePoint", "SlotSums", "acceptance_log_sd", "fit_shape", "interval_spread",
    "profile_curve", "side_points", "speedup_interval", "state_from_dict", "state_to_dict",
    "twin_curve",
]
# fmt: on

#: The two-sided 95 % point of the normal distribution.
Z95 = 1.959964
#: A mean step time's relative standard error is never taken below this (the per-interval
#: spread of a noiseless simulator is 0; no real measurement is that sure).
_FLOOR = 0.005
#: A measured window's mean step time's floor (issue 63): 0.5 % made the interval of a
#: window of many intervals wide from the floor alone (claimed 0.71 %, actual 0.18-0.29 % on
#: the demo); the drift term (specmon.load.curve_sums.SlotDrift) now says when intervals are
#: not independent, so the floor only has to refuse certainty.
_WINDOW_FLOOR = 0.002
_BY_N = operator.attrgetter("concurrency")


def interval_spread(
    accumulator: CurveAccumulator, bucket: int, intervals: int, *, tokens: bool = False
) -> float | None:
    """The relative standard error of a mean over ``intervals`` scrape intervals in
    ``bucket``, from the per-interval spread the accumulator retained there (step time, or
    tokens per step with ``tokens``); None with fewer than 2 retained intervals."""
    sums = accumulator.bucket(bucket)
    if sums is None:
        return None
    first, second = (_K1, _K2) if tokens else (_T1, _T2)
    se = sums.relative_se(first, second)
    if se is None:
        return None
    return max(se * math.sqrt(sums.values[_I] / max(intervals, 1)), _WINDOW_FLOOR)


# -- points and the shape ---------------------------------------------------------------------


@record
class SidePoint:
    """One bucket of one side with enough data: its mean concurrency, mean step time (decode
    seconds / request-steps), that mean's relative standard error, and tokens per step."""

    bucket: int
    label: str
    concurrency: float
    step_seconds: float
    step_relative_se: float
    tokens_per_step: float
    intervals: int


def side_points(
    buckets: Sequence[BucketSums],
    *,
    speculative: bool,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[SidePoint, ...]:
    """The buckets with enough data (a window's bucket's :class:`Thresholds`)."""
    out = []
    for b in buckets:
        # The one decision of what is measured, which the accumulator's signature also reads.
        totals = b.measured_totals(thresholds, speculative=speculative)
        if totals is None:
            continue
        n, step, per_step = totals.concurrency, totals.step_seconds, totals.tokens_per_step
        assert n is not None and step is not None and per_step is not None
        se = b.relative_se(_T1, _T2)
        out.append(
            SidePoint(b.bucket, b.label, n, step, max(se if se is not None else 0.05, _FLOOR),
                      per_step, b.intervals)
        )  # fmt: skip
    return tuple(out)


@record
class Shape:
    """T(n) = fixed + slope max(knee, n), fitted; ``residual``: the root mean square of the
    relative residuals over the fit's degrees of freedom, unweighted (a relative spread, added
    to a read's log variance as one; the fit itself is weighted), None when the fit has no
    degree of freedom. Issue 63's review found it documented as weighted."""

    fixed: float
    slope: float
    knee: float
    residual: float | None
    points: tuple[tuple[float, float], ...]

    def at(self, concurrency: float) -> float:
        return self.fixed + self.slope * max(self.knee, concurrency)

    def lines(self, concurrency: float) -> float:
        """Straight lines between the points (flat past the ends): what the shape is checked
        against between buckets."""
        return _lines(self.points, bisect.bisect_left(self.points, (concurrency,)), concurrency)


def _lines(points: Sequence[tuple[float, float]], i: int, n: float) -> float:
    """:meth:`Shape.lines` at ``n``, ``i`` the first point at or past ``n`` (bisected on the
    (x, y) pairs with ``(n,)``: the first x >= n, as on the x alone)."""
    if i <= 0:
        return points[0][1]
    if i >= len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (n - x0) / (x1 - x0) if x1 > x0 else y1


def _wls(xs: Sequence[float], ys: Sequence[float], ws: Sequence[float]) -> tuple[float, float]:
    """Weighted least squares y = a + b x with a >= 0, b >= 0."""
    sw = sum(ws)
    mx = sum(w * x for w, x in zip(ws, xs, strict=True)) / sw
    my = sum(w * y for w, y in zip(ws, ys, strict=True)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs, strict=True))
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys, strict=True))
    b = sxy / sxx if sxx > 0 else 0.0
    if b < 0:
        return my, 0.0
    a = my - b * mx
    if a < 0:
        sxx0 = sum(w * x * x for w, x in zip(ws, xs, strict=True))
        return 0.0, (sum(w * x * y for w, x, y in zip(ws, xs, ys, strict=True)) / sxx0
                     if sxx0 > 0 else 0.0)  # fmt: skip
    return a, b


def fit_shape(points: Sequence[SidePoint]) -> Shape | None:
    """The cost model's shape through a side's points, weighted by 1 / their relative
    variance: the knee searched over the points and a grid between them; with two points, the
    straight line through them; with one, flat."""
    pts = sorted(points, key=lambda p: p.concurrency)
    if not pts:
        return None
    xy = tuple((p.concurrency, p.step_seconds) for p in pts)
    if len(pts) == 1:
        return Shape(pts[0].step_seconds, 0.0, 0.0, None, xy)
    xs = [p.concurrency for p in pts]
    ys = [p.step_seconds for p in pts]
    ws = [1.0 / (p.step_seconds * p.step_relative_se) ** 2 for p in pts]
    knees = [0.0]
    if len(pts) >= 3:
        for lo, hi in itertools.pairwise(xs):
            knees.extend(lo * (hi / lo) ** (j / 4) for j in range(4) if lo > 0)
        knees.append(xs[-1])
        # The hinge of each split (flat left of it, a line right of it): the exact knee when
        # the points lie on the shape, which a grid only approaches.
        for j in range(1, len(pts) - 1):
            flat = sum(w * y for w, y in zip(ws[:j], ys[:j], strict=True)) / sum(ws[:j])
            a, b = _wls(xs[j:], ys[j:], ws[j:])
            if b > 0 and xs[j - 1] <= (flat - a) / b <= xs[j]:
                knees.append((flat - a) / b)
    best: tuple[float, float, float, float] | None = None
    for knee in knees:
        a, b = _wls([max(knee, x) for x in xs], ys, ws)
        sse = sum(w * (a + b * max(knee, x) - y) ** 2 for w, x, y in zip(ws, xs, ys, strict=True))
        if best is None or sse < best[0] * (1 - 1e-9):
            best = (sse, a, b, knee)
    assert best is not None
    _, a, b, knee = best
    dof = len(pts) - 3
    residual = None
    if dof > 0:
        rel = [((a + b * max(knee, x)) - y) / y for x, y in zip(xs, ys, strict=True)]
        residual = math.sqrt(sum(r * r for r in rel) / dof)
    return Shape(a, b, knee, residual, xy)


# -- the interval ---------------------------------------------------------------------------


def acceptance_log_sd(counters: SpecCounters | None, *, tokens_per_draft: float) -> float | None:
    """The standard deviation of log(mean acceptance length L = 1 + accepted / drafts): the
    per-draft accepted count's variance from per-position survival (a chain: draft i accepted
    implies i - 1 was, so E[a^2] = sum (2i - 1) s_i), or binomial per drafted token without
    positions; None without drafts."""
    if counters is None or counters.drafts <= 0:
        return None
    d = counters.drafts
    mean = counters.accepted_tokens / d
    positions = counters.accepted_per_position
    if positions and abs(sum(positions) - counters.accepted_tokens) <= len(positions):
        survival = [c / d for c in positions]
        second = sum((2 * i + 1) * s for i, s in enumerate(survival))
        var = max(second - mean * mean, 0.0)
    else:
        p = min(max(mean / tokens_per_draft, 0.0), 1.0) if tokens_per_draft > 0 else 0.0
        var = tokens_per_draft * p * (1 - p)
    # At least one draft's worth of doubt: all accepted or none is not a certainty.
    var = max(var, 0.25 / d)
    return math.sqrt(var / d) / (1.0 + mean)


def speedup_interval(
    speedup: float, log_sd: float, *, chain_length: int | None = None, measured: bool = True
) -> tuple[float, float] | None:
    """The 95 % interval of a speed-up whose log has standard deviation ``log_sd``; None when
    an end breaks the physical bound on a speed-up (:func:`specmon.bounds.speedup_refusal`,
    k: ``chain_length``, else the largest any adapter reads; ``measured``: from timing)."""
    spread = math.exp(Z95 * max(log_sd, 0.0))
    low, high = speedup / spread, speedup * spread
    k = chain_bound(configured=chain_length)
    for end in (low, high):
        if speedup_refusal(end, chain_length=k, measured=measured) is not None:
            return None
    return low, high


# -- the curve ------------------------------------------------------------------------------


class BaselineCurve(Protocol):
    """A profile as the curve's baseline side: its measured levels."""

    def baseline_points(self) -> tuple[SidePoint, ...]: ...


@record
class Curve:
    """Both sides' shapes and the buckets measured on both."""

    spec: Shape
    base: Shape
    spec_points: tuple[SidePoint, ...]
    base_points: tuple[SidePoint, ...]
    #: Tokens per step of the baseline (1 for a server that does not speculate).
    base_tokens_per_step: float
    #: Drafted tokens per request-step of the speculative side (None: not counted).
    drafted_per_step: float | None
    scheme: BucketScheme = DEFAULT_SCHEME

    @staticmethod
    def build(
        spec: Sequence[SidePoint],
        base: Sequence[SidePoint],
        *,
        drafted_per_step: float | None,
        scheme: BucketScheme = DEFAULT_SCHEME,
    ) -> Curve | None:
        """None unless both sides have a point in a bucket the other also measured (the
        range a read may interpolate in is where both were measured)."""
        spec_shape, base_shape = fit_shape(spec), fit_shape(base)
        if spec_shape is None or base_shape is None:
            return None
        base_steps = sum(p.tokens_per_step * p.intervals for p in base)
        base_k = base_steps / sum(p.intervals for p in base)

        curve = Curve(spec_shape, base_shape, tuple(sorted(spec, key=_BY_N)),
                      tuple(sorted(base, key=_BY_N)), base_k, drafted_per_step, scheme)  # fmt: skip
        return curve if curve.measured else None

    @property
    def measured(self) -> tuple[SidePoint, ...]:
        """The speculative side's points in buckets the baseline also measured."""
        lo = min(p.concurrency for p in self.base_points)
        hi = max(p.concurrency for p in self.base_points)
        base = {p.bucket for p in self.base_points}
        return tuple(p for p in self.spec_points if p.bucket in base or lo <= p.concurrency <= hi)

    def log_sd(self, n: float, acceptance_sd: float) -> float:
        """log(speed-up)'s standard deviation at ``n``: acceptance, both sides' nearest
        buckets' standard errors, the fit residuals and the shape's disagreement with straight
        lines between the buckets."""
        return self.bound(1.0, acceptance_sd)(n, None)

    def bound(
        self, tokens_per_step: float, acceptance_sd: float
    ) -> Callable[[float, int | None], float]:
        """``f(n, sign)``: the speed-up at ``n`` (:meth:`speedup_at`, 0 for none) times
        exp(sign x Z95 x :meth:`_log_sd`); with ``sign`` None, that standard deviation. Each
        side's constants are looked up once here, not at each of the ~120 evaluations of a
        crossover's three root searches; the arithmetic is the same, term by term and in the
        same order, so its figures are the same to the last bit."""
        k_base = self.base_tokens_per_step
        first = acceptance_sd**2
        sides = []
        for shape, pts in ((self.spec, self.spec_points), (self.base, self.base_points)):
            # The buckets either side of n (the points are in concurrency order): the larger
            # standard error of the two, squared, for each place n can bisect to.
            ses = [p.step_relative_se for p in pts]
            near = [max(ses[max(i - 1, 0) : i + 1] or ses[-1:]) ** 2 for i in range(len(ses) + 1)]
            residual = (shape.residual or 0.0) ** 2
            sides.append((shape.points, near, shape.fixed, shape.slope, shape.knee, residual))
        (s_points, s_near, s_fixed, s_slope, s_knee, s_res) = sides[0]
        (b_points, b_near, b_fixed, b_slope, b_knee, b_res) = sides[1]
        bisect_left, sqrt, exp = bisect.bisect_left, math.sqrt, math.exp

        def f(n: float, sign: int | None) -> float:
            spec = s_fixed + s_slope * max(s_knee, n)  # Shape.at
            base = b_fixed + b_slope * max(b_knee, n)
            total = first
            i = bisect_left(s_points, (n,))
            total += s_near[i]
            total += s_res
            total += ((_lines(s_points, i, n) - spec) / spec) ** 2 if spec > 0 else 0.0
            i = bisect_left(b_points, (n,))
            total += b_near[i]
            total += b_res
            total += ((_lines(b_points, i, n) - base) / base) ** 2 if base > 0 else 0.0
            if sign is None:
                return sqrt(total)
            speedup = _speedup(tokens_per_step, spec, base, k_base) or 0.0
            return speedup * exp(sign * Z95 * sqrt(total))

        return f

    def tpot_at(self, concurrency: float, tokens_per_step: float) -> float | None:
        """The speculative side's time per output token at ``concurrency``."""
        step = self.spec.at(concurrency)
        return step / tokens_per_step if step > 0 and tokens_per_step > 0 else None

    def speedup_at(self, concurrency: float, tokens_per_step: float) -> float | None:
        spec, base = self.spec.at(concurrency), self.base.at(concurrency)
        return _speedup(tokens_per_step, spec, base, self.base_tokens_per_step)


def _speedup(tokens_per_step: float, spec: float, base: float, k_base: float) -> float | None:
    """K T_base / (K_base T_spec): the speed-up from both sides' step times (None: a step
    time or the baseline's tokens per step is not positive)."""
    if spec <= 0 or base <= 0 or k_base <= 0:
        return None
    return tokens_per_step * base / (k_base * spec)


def twin_curve(
    spec: CurveAccumulator,
    twin: CurveAccumulator,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Curve | None:
    """The curve of ``spec`` against its twin's accumulator (built once per key below)."""

    def make() -> Curve | None:
        return _build(spec, side_points(twin.buckets(), speculative=False, thresholds=thresholds),
                      thresholds)  # fmt: skip

    # Made again after every 8th change of either side, not every scrape (an hour of buckets
    # moves little in 8 intervals, and a fit costs 0.3-1 ms), and at once when a bucket of
    # either side becomes measured or stops being measured: the curve never lags the buckets
    # the windows already compare (a crossover without its range, a read "extrapolated" at a
    # bucket that is measured). The signatures are kept by the accumulators as rows come and
    # go; asking costs a check of the one bucket a scrape changed.
    key = ("twin", id(twin), twin.version >> 3, spec.version >> 3,
           twin.measured(thresholds, speculative=False),
           spec.measured(thresholds, speculative=True))  # fmt: skip
    return spec.memo(key, make)


def profile_curve(
    spec: CurveAccumulator,
    profile: BaselineCurve,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Curve | None:
    """The curve of ``spec`` against a profile's levels (made again as :func:`twin_curve`'s;
    the profile's levels do not change)."""
    return spec.memo(
        ("profile", id(profile), spec.version >> 3, spec.measured(thresholds, speculative=True)),
        lambda: _build(spec, profile.baseline_points(), thresholds),
    )


def _build(
    spec: CurveAccumulator, base: Sequence[SidePoint], thresholds: Thresholds
) -> Curve | None:
    if not base:
        return None
    buckets = spec.buckets()
    points = side_points(buckets, speculative=True, thresholds=thresholds)
    measured = {p.bucket for p in points}
    steps = sum(b.values[_RS] for b in buckets if b.bucket in measured)
    drafted = sum(b.values[_DTK] for b in buckets if b.bucket in measured)
    return Curve.build(points, base, drafted_per_step=drafted / steps if drafted > 0 and steps
                       > 0 else None, scheme=spec._scheme)  # fmt: skip
