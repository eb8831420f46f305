"""The acceptance arithmetic: pure functions, no I/O.

Shared by the daemon, the CLI and the A/B tool.

Notation (docs/background.md): ``alpha`` is the per-token acceptance rate, ``k`` the chain length
(tokens drafted per verification step), ``c`` the cost of one drafted token as a fraction of a
target step.

- Expected tokens per step, independent acceptance: E(alpha, k) = 1 + alpha + ... + alpha^k.
- Speed-up: S(alpha, k, c) = E(alpha, k) / (1 + k c).
- Break-even alpha: the alpha in [0, 1] with S = 1.
- Effective alpha: the alpha whose yield alpha + ... + alpha^k equals the measured mean
  number of accepted draft tokens per draft.
- With measured survival s_i = per_pos_i / drafts (P(accepted length >= i)), the expected
  tokens per step are 1 + sum s_i exactly, without assuming independence.

Functions return ``None`` ("no value") where an answer does not exist; none of them raises
on degenerate input (no drafts, alpha = 1, c = 0, k = 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

from specmon.records import record

__all__ = [
    "BestChain",
    "best_chain_length",
    "breakeven_alpha",
    "conditional_acceptance",
    "draft_cost_from_overhead",
    "effective_alpha",
    "expected_tokens",
    "implied_draft_cost",
    "measured_speedup",
    "rounding_error",
    "speedup",
    "speedup_from_length",
    "survival",
]

_BISECTION_STEPS = 200


def expected_tokens(alpha: float, k: int) -> float:
    """E = 1 + alpha + ... + alpha^k: tokens per verification step under independent acceptance."""
    if k < 0:
        raise ValueError("chain length must be >= 0")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError("alpha must be within [0, 1]")
    if alpha == 1.0:
        return float(k + 1)
    # The closed form (1 - a^(k+1)) / (1 - a) loses digits near a = 1; Horner does not.
    total = 1.0
    for _ in range(k):
        total = 1.0 + alpha * total
    return total


def speedup(alpha: float, k: int, c: float) -> float:
    """S(alpha, k, c) = E(alpha, k) / (1 + k c)."""
    if c < 0:
        raise ValueError("draft cost must be >= 0")
    return expected_tokens(alpha, k) / (1.0 + k * c)


def _bisect(target: float, k: int) -> float:
    """The alpha in [0, 1] with alpha + ... + alpha^k == target, for 0 <= target <= k.

    Bisection to the last bit of a double; the yield is evaluated inline with the same
    Horner steps as :func:`expected_tokens`. The definition :func:`_solve_increasing`
    answers bit for bit (tests/test_arithmetic.py), and its fall-back."""
    lo, hi = 0.0, 1.0
    steps = range(k)
    for _ in range(_BISECTION_STEPS):
        mid = (lo + hi) / 2.0
        if mid in (lo, hi):
            break
        total = 1.0
        for _ in steps:
            total = 1.0 + mid * total
        if total - 1.0 < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


#: Below this target the bisection's 200 halvings end before adjacent doubles: it answers.
_TINY_TARGET = 2.0**-150
_nextafter = math.nextafter


def _solve_increasing(target: float, k: int) -> float:
    """:func:`_bisect`'s answer, bit for bit, in about half its time (this runs for every
    window of every scrape). The yield F(a) = a + ... + a^k evaluated by Horner's steps is
    non-decreasing over the doubles (every step is), so the bisection ends on the one pair of
    adjacent doubles lo < hi with F(lo) < target <= F(hi) and answers their midpoint. Newton's
    method finds the root from above (F is increasing and convex on [0, 1], and min(1,
    target) lies above the root), then a few steps of one ulp find that pair; anything
    unusual falls back to the bisection."""
    if target < _TINY_TARGET:
        return _bisect(target, k)
    steps = range(k)
    x = target if target < 1.0 else 1.0
    for _ in range(100):
        total = 1.0
        slope = 0.0
        for _ in steps:
            slope = total + x * slope
            total = 1.0 + x * total
        excess = total - 1.0 - target
        if excess <= 0.0 or slope <= 0.0:
            break
        following = x - excess / slope
        if following >= x:
            break
        x = following if following > 0.0 else 0.0
        if excess < 1e-15 * slope:
            break
    lo = x
    for _ in range(64):  # down to the last double below the target
        total = 1.0
        for _ in steps:
            total = 1.0 + lo * total
        if total - 1.0 < target:
            break
        lo = _nextafter(lo, 0.0)
    else:
        return _bisect(target, k)
    for _ in range(64):  # up while the next double is still below it
        hi = _nextafter(lo, 2.0)
        if hi > 1.0:  # a target above k: not asked by the callers; the definition answers
            return _bisect(target, k)
        total = 1.0
        for _ in steps:
            total = 1.0 + hi * total
        if total - 1.0 >= target:
            return (lo + hi) / 2.0
        lo = hi
    return _bisect(target, k)


@functools.lru_cache(maxsize=4096)
def breakeven_alpha(k: int, c: float) -> float | None:
    """The acceptance rate below which speculation at (k, c) costs time (S = 1).

    ``None`` when no alpha breaks even: k = 0 (nothing drafted) or c > 1 (even a draft that
    is always right cannot pay for itself). c = 0 gives 0; c = 1 gives 1. Accurate to well
    under 1e-9 (bisection to the last bit of a double).
    """
    if k < 0 or c < 0 or math.isnan(c):
        raise ValueError("chain length and draft cost must be >= 0")
    if k == 0 or c > 1.0:
        return None
    if c == 0.0:
        return 0.0
    if c == 1.0:
        return 1.0
    return _solve_increasing(k * c, k)


def effective_alpha(mean_accepted: float, k: int) -> float | None:
    """The alpha whose yield alpha + ... + alpha^k equals ``mean_accepted`` (per draft).

    ``None`` when k = 0 or the mean is outside [0, k] (a configured k shorter than the
    engine's real chain, or corrupt counters).
    """
    if k <= 0 or not math.isfinite(mean_accepted):
        return None
    if mean_accepted < 0.0 or mean_accepted > k:
        return None
    if mean_accepted == 0.0:
        return 0.0
    if mean_accepted == float(k):
        return 1.0
    return _solve_increasing(mean_accepted, k)


def survival(accepted_per_position: Sequence[int], drafts: int) -> list[float] | None:
    """s_i = per_pos_i / drafts: the share of drafts accepted at least i tokens deep."""
    if drafts <= 0:
        return None
    return [count / drafts for count in accepted_per_position]


def conditional_acceptance(accepted_per_position: Sequence[int], drafts: int) -> list[float | None]:
    """a_i = per_pos_i / per_pos_(i-1), with per_pos_0 = drafts; ``None`` where the divisor is 0."""
    out: list[float | None] = []
    previous = drafts
    for count in accepted_per_position:
        out.append(count / previous if previous > 0 else None)
        previous = count
    return out


def speedup_from_length(mean_length: float, c: float, drafted_per_draft: float) -> float:
    """The cost model's S = L / (1 + c d): L the mean acceptance length (tokens per
    verification step), d the tokens drafted per draft (k for full chains)."""
    if c < 0:
        raise ValueError("draft cost must be >= 0")
    return mean_length / (1.0 + c * drafted_per_draft)


def measured_speedup(accepted_per_draft: float, c: float, draft_tokens_per_draft: float) -> float:
    """(1 + accepted / drafts) / (1 + c * draft tokens / drafts): the expected speed-up from
    measured counters. accepted / drafts = sum s_i, so no independence is assumed; using the
    drafted tokens per draft (not k) charges only what was drafted (n-gram proposers and
    dynamic speculation draft fewer than k)."""
    return speedup_from_length(1.0 + accepted_per_draft, c, draft_tokens_per_draft)


@record
class BestChain:
    """The chain length that maximises the expected speed-up, and that speed-up."""

    chain_length: int
    speedup: float


def best_chain_length(survival_rates: Sequence[float], c: float) -> BestChain:
    """k' in 0..k maximising (1 + s_1 + ... + s_k') / (1 + k' c).

    k' = 0 (speed-up 1) means speculation does not pay. Ties go to the shorter chain: it costs
    less memory and latency variance for the same expected gain.
    """
    if c < 0:
        raise ValueError("draft cost must be >= 0")
    best, speedup = 0, 1.0
    total = 1.0
    for index, rate in enumerate(survival_rates, start=1):
        total += rate
        value = total / (1.0 + index * c)
        if value > speedup:
            best, speedup = index, value
    return BestChain(best, speedup)


def implied_draft_cost(
    tokens_per_iteration: float, speed_ratio: float, drafted_per_iteration: float
) -> float | None:
    """c = (K / R - 1) / k̄: the draft cost that makes R = K / (1 + k̄ c) hold.

    K: tokens kept per verification step (1 + accepted / drafts); R: measured speed ratio
    (tokens/s with the draft / without); k̄: tokens drafted per step. This is the speed-up
    formula read backwards (docs/background.md#implied-cost): it folds verification overhead into c.

    ``None`` when it cannot be solved (R <= 0, k̄ <= 0, K < 1 or non-finite input). The value
    may be negative: the measured ratio is then higher than acceptance alone can explain.
    """
    values = (tokens_per_iteration, speed_ratio, drafted_per_iteration)
    if not all(math.isfinite(v) for v in values):
        return None
    if speed_ratio <= 0.0 or drafted_per_iteration <= 0.0 or tokens_per_iteration < 1.0:
        return None
    return (tokens_per_iteration / speed_ratio - 1.0) / drafted_per_iteration


def draft_cost_from_overhead(overhead: float, k: float) -> float | None:
    """c = o / (k (1 - o)): the draft cost c behind a measured draft overhead o.

    o is the share of a speculative iteration's wall time spent drafting (TensorRT-LLM's
    ``spec_decode_draft_overhead`` = drafter time / iteration time). In the cost model an
    iteration costs T (1 + k c), of which k c T is drafting, so o = k c / (1 + k c); solved
    for c. k is the number of tokens drafted per request in that iteration. The result folds
    everything in the iteration besides drafting (verification, sampling, scheduling) into
    the "target step", as the speed-up formula does.

    ``None`` when it cannot be solved: o outside (0, 1) (0 means the engine did not time a
    drafter, as with one-model speculation), k <= 0, or non-finite input.
    """
    if not (math.isfinite(overhead) and math.isfinite(k)):
        return None
    if not 0.0 < overhead < 1.0 or k <= 0.0:
        return None
    return overhead / (k * (1.0 - overhead))


def rounding_error(value: float | None, digits: int | None, *, integer: bool = False) -> float:
    """Worst-case absolute error of ``value`` printed with ``digits`` significant digits
    (half a unit of the last printed digit; 0 when ``digits`` is None).

    ``integer``: the true value is a whole number (a count), so it prints exactly while it
    has at most ``digits`` digits."""
    if digits is None or value is None or value == 0 or not math.isfinite(value):
        return 0.0
    exponent = math.floor(math.log10(abs(value)))
    unit = 10.0 ** (exponent - digits + 1)
    if integer and unit <= 1.0:
        return 0.0
    return unit / 2.0
