"""Exact random draws for the simulator (binomial, Poisson) with a seedable generator."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

__all__ = ["binomial", "draw_positions", "poisson"]


def binomial(rng: random.Random, n: int, p: float) -> int:
    """An exact Binomial(n, p) draw by geometric skipping: O(n * min(p, 1 - p)) steps."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - binomial(rng, n, 1.0 - p)
    log_q = math.log1p(-p)
    count = 0
    position = 0
    while True:
        # Trials until the next success: geometric with success probability p.
        position += int(math.log(1.0 - rng.random()) / log_q) + 1
        if position > n:
            return count
        count += 1


def poisson(rng: random.Random, mean: float) -> int:
    """An exact Poisson draw (Knuth for small means, sums of smaller draws for large ones)."""
    if mean <= 0:
        return 0
    total = 0
    while mean > 30.0:
        total += poisson(rng, 30.0)
        mean -= 30.0
    limit = math.exp(-mean)
    product = rng.random()
    count = 0
    while product > limit:
        product *= rng.random()
        count += 1
    return total + count


def draw_positions(rng: random.Random, drafts: int, survival: Sequence[float]) -> list[int]:
    """Per-position acceptance counts for ``drafts`` drafts with survival rates s_1 >= s_2 ...

    Position i's count is the number of drafts whose accepted prefix reached i, drawn as a
    chain of binomials: reaching i given reaching i - 1 has probability s_i / s_(i-1).
    """
    counts: list[int] = []
    alive = drafts
    previous = 1.0
    for rate in survival:
        conditional = 0.0 if previous <= 0 else min(max(rate / previous, 0.0), 1.0)
        alive = binomial(rng, alive, conditional)
        counts.append(alive)
        previous = rate
    return counts
