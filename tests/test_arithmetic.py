"""The acceptance arithmetic: the lesson's numbers, closed forms, properties, degenerate input."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from specmon import arithmetic as ar

# The lesson's table (seed lesson, "The speed-up, derived"): rows k, columns c.
LESSON_TABLE = {
    (2, 0.10): "0.17", (2, 0.20): "0.31", (2, 0.35): "0.48",
    (4, 0.10): "0.29", (4, 0.20): "0.46", (4, 0.35): "0.62",
    (8, 0.10): "0.45", (8, 0.20): "0.62", (8, 0.35): "0.76",
}  # fmt: skip


def half_up(value: float, places: str) -> str:
    return str(Decimal(repr(value)).quantize(Decimal(places), rounding=ROUND_HALF_UP))


@pytest.mark.parametrize(("k", "c"), sorted(LESSON_TABLE))
def test_breakeven_reproduces_the_lessons_table(k: int, c: float) -> None:
    value = ar.breakeven_alpha(k, c)
    assert value is not None
    # The lesson's two-decimal figures are its three-decimal values rounded half-up
    # (0.4747 -> 0.475 -> 0.48). specmon prints three decimals by default for that reason.
    assert half_up(float(half_up(value, "0.001")), "0.01") == LESSON_TABLE[(k, c)]
    # and the exact value is within the table's rounding of it.
    assert abs(value - float(LESSON_TABLE[(k, c)])) <= 0.0055


@pytest.mark.parametrize("c", [0.01, 0.1, 0.2, 0.35, 0.5, 0.99])
def test_breakeven_k2_matches_the_quadratic_formula(c: float) -> None:
    # k = 2: alpha + alpha^2 = 2c  =>  alpha = (-1 + sqrt(1 + 8c)) / 2
    exact = (-1.0 + math.sqrt(1.0 + 8.0 * c)) / 2.0
    value = ar.breakeven_alpha(2, c)
    assert value is not None
    assert abs(value - exact) < 1e-12


@pytest.mark.parametrize("c", [0.05, 0.3, 0.9])
def test_breakeven_k1_is_c(c: float) -> None:
    value = ar.breakeven_alpha(1, c)
    assert value is not None
    assert abs(value - c) < 1e-12


def test_degenerate_breakeven() -> None:
    assert ar.breakeven_alpha(0, 0.1) is None  # nothing drafted, nothing to break even
    assert ar.breakeven_alpha(4, 0.0) == 0.0  # a free draft pays at any acceptance
    assert ar.breakeven_alpha(4, 1.0) == 1.0
    assert ar.breakeven_alpha(4, 1.5) is None  # dearer than the target: never pays
    with pytest.raises(ValueError, match=">= 0"):
        ar.breakeven_alpha(-1, 0.1)


def test_speedup_examples() -> None:
    # alpha = 1: every token accepted, k + 1 tokens per step
    assert ar.speedup(1.0, 4, 0.0) == 5.0
    assert ar.speedup(1.0, 4, 0.25) == pytest.approx(5.0 / 2.0)
    assert ar.speedup(0.0, 4, 0.1) == pytest.approx(1.0 / 1.4)
    assert ar.speedup(0.5, 0, 0.3) == 1.0
    # closed form
    a, k, c = 0.7, 5, 0.15
    closed = (1 - a ** (k + 1)) / ((1 - a) * (1 + k * c))
    assert ar.speedup(a, k, c) == pytest.approx(closed, rel=1e-14)


def test_effective_alpha_degenerate() -> None:
    assert ar.effective_alpha(0.0, 3) == 0.0
    assert ar.effective_alpha(3.0, 3) == 1.0
    assert ar.effective_alpha(3.5, 3) is None
    assert ar.effective_alpha(1.0, 0) is None
    assert ar.effective_alpha(float("nan"), 3) is None
    assert ar.effective_alpha(-0.1, 3) is None


def test_survival_and_conditional() -> None:
    assert ar.survival([80, 45, 25], 100) == [0.8, 0.45, 0.25]
    assert ar.survival([1], 0) is None
    assert ar.conditional_acceptance([80, 40, 0, 0], 100) == [0.8, 0.5, 0.0, None]
    assert ar.conditional_acceptance([], 0) == []
    assert ar.conditional_acceptance([0], 0) == [None]


def test_best_chain_length_examples() -> None:
    # position 3 almost never accepted: cut the chain at 2
    best = ar.best_chain_length([0.9, 0.8, 0.02], 0.1)
    assert best.chain_length == 2
    assert best.speedup == pytest.approx((1 + 0.9 + 0.8) / 1.2)
    # nothing pays: speculation off
    off = ar.best_chain_length([0.05, 0.01], 0.2)
    assert off.chain_length == 0
    assert off.speedup == 1.0
    assert ar.best_chain_length([], 0.1).chain_length == 0
    # ties go to the shorter chain (c = 0, position 2 never accepted)
    assert ar.best_chain_length([0.5, 0.0], 0.0).chain_length == 1


def test_measured_speedup_matches_model_when_independent() -> None:
    a, k, c = 0.6, 4, 0.1
    survival = [a**i for i in range(1, k + 1)]
    assert ar.measured_speedup(math.fsum(survival), c, k) == pytest.approx(ar.speedup(a, k, c))


alphas = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
costs = st.floats(min_value=0.001, max_value=0.999, allow_nan=False)
chains = st.integers(min_value=1, max_value=64)


@given(k=chains, c=costs)
def test_speedup_at_breakeven_is_one(k: int, c: float) -> None:
    alpha = ar.breakeven_alpha(k, c)
    assert alpha is not None
    assert 0.0 < alpha < 1.0
    assert ar.speedup(alpha, k, c) == pytest.approx(1.0, abs=1e-9)


@given(k=chains, c=costs)
def test_breakeven_accurate_to_1e9(k: int, c: float) -> None:
    alpha = ar.breakeven_alpha(k, c)
    assert alpha is not None
    # The root is bracketed 1e-9 either side: S changes sign across it.
    assert ar.speedup(max(alpha - 1e-9, 0.0), k, c) <= 1.0 + 1e-12
    assert ar.speedup(min(alpha + 1e-9, 1.0), k, c) >= 1.0 - 1e-12


@given(k=chains, c1=costs, c2=costs)
def test_breakeven_rises_with_cost(k: int, c1: float, c2: float) -> None:
    assume(c1 < c2)
    a1, a2 = ar.breakeven_alpha(k, c1), ar.breakeven_alpha(k, c2)
    assert a1 is not None and a2 is not None
    assert a1 <= a2


@given(k=st.integers(min_value=1, max_value=63), c=costs)
def test_breakeven_rises_with_chain_length(k: int, c: float) -> None:
    a1, a2 = ar.breakeven_alpha(k, c), ar.breakeven_alpha(k + 1, c)
    assert a1 is not None and a2 is not None
    assert a1 <= a2 + 1e-12


@given(alpha=alphas, k=chains)
def test_effective_alpha_inverts_the_yield(alpha: float, k: int) -> None:
    yield_ = ar.expected_tokens(alpha, k) - 1.0
    recovered = ar.effective_alpha(yield_, k)
    assert recovered is not None
    # The yield is flat near alpha = 0 only for k = 1's slope 1, so compare yields, then alphas.
    assert ar.expected_tokens(recovered, k) - 1.0 == pytest.approx(yield_, abs=1e-9)
    assert recovered == pytest.approx(alpha, abs=1e-6)


@given(
    survival=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=16),
    c=st.floats(min_value=0.0, max_value=1.0),
)
def test_best_chain_never_worse_than_full_chain(survival: list[float], c: float) -> None:
    survival = sorted(survival, reverse=True)  # survival never rises along the chain
    best = ar.best_chain_length(survival, c)
    k = len(survival)
    full = (1.0 + math.fsum(survival)) / (1.0 + k * c)
    assert 0 <= best.chain_length <= k
    assert best.speedup >= full - 1e-12
    assert best.speedup >= 1.0
    prefix = survival[: best.chain_length]
    assert best.speedup == pytest.approx((1 + math.fsum(prefix)) / (1 + len(prefix) * c))


# The solver every window's alpha and break-even uses: Newton plus one-ulp steps, held to the
# bisection (its definition) bit for bit.


@given(
    k=st.integers(min_value=1, max_value=64),
    share=st.floats(min_value=0.0, max_value=1.0, exclude_min=True, exclude_max=True),
)
def test_the_solver_answers_the_bisection_bit_for_bit(k: int, share: float) -> None:
    from specmon.arithmetic import _bisect, _solve_increasing

    target = share * k
    assume(0.0 < target < k)
    assert _solve_increasing(target, k) == _bisect(target, k)


def test_the_solver_answers_the_bisection_over_what_engines_give() -> None:
    """Targets as the daemon makes them: accepted / drafts of integer counts (every k an
    engine runs), tiny and near-k targets, and break-even targets k c."""
    import random

    from specmon.arithmetic import _bisect, _solve_increasing

    rng = random.Random(11)
    cases = []
    for _ in range(20_000):
        k = rng.choice((1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 32, 64))
        drafts = rng.randint(1, 2 ** rng.randint(1, 53))
        cases.append((rng.randint(0, k * drafts) / drafts, k))  # accepted / drafts
        cases.append((k * rng.random(), k))  # k c
        cases.append((k * (1.0 - 10 ** rng.uniform(-16, -1)), k))  # near k
        cases.append((10 ** rng.uniform(-60, 0), k))  # near 0 (tiny costs)
    checked = 0
    for target, k in cases:
        if 0.0 < target < k:
            assert _solve_increasing(target, k) == _bisect(target, k), (target, k)
            checked += 1
    assert checked > 70_000
