"""Realistic noise for the simulator (issue 63): step times that drift, traffic of mixed
request classes. Pure (the random generator is passed in).

**Drift.** Real servers' step times wander (thermals, clocks, the allocator, neighbours on the
host) with strong persistence, not as independent noise per interval. The simulated engine
multiplies its load model's step time by ``exp(x - sd^2 / 2)``, where x is a stationary
Ornstein-Uhlenbeck process of standard deviation ``sd`` and correlation time ``seconds``:
sampled every simulated second it is AR(1) with coefficient ``exp(-1 / seconds)``, and it is
sampled exactly over any step. The ``- sd^2 / 2`` makes the factor's mean exactly 1, so the
expected step time (the truth an answer is compared with) is the load model's.

**Classes.** Traffic mixes requests of different acceptance (code and chat, one language and
another): a share of the drafts comes from a second class with its own survival rates, and
the share moves with time, ``share + swing sin(2 pi t / period)``. The expected tokens per
step are those of the per-position mean survival (:func:`mean_survival`): the expectation is
linear in each position's rate, and the sine's mean over a period is 0.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Classes", "Drift", "drift_step", "mean_survival", "share_for_tokens"]


@dataclass(frozen=True, slots=True)
class Drift:
    """A multiplicative step-time drift: log-factor sd and correlation time (seconds)."""

    sd: float = 0.0
    seconds: float = 60.0

    def validate(self) -> None:
        if not (math.isfinite(self.sd) and 0.0 <= self.sd <= 0.5):
            raise ValueError("drift sd must be within [0, 0.5]")
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError("drift seconds must be > 0")

    def factor(self, x: float) -> float:
        """The step-time factor of the process at ``x`` (mean 1 over the process)."""
        return math.exp(x - self.sd * self.sd / 2.0)


def drift_step(rng: random.Random, x: float, *, drift: Drift, elapsed: float) -> float:
    """The process ``elapsed`` seconds after it stood at ``x`` (an exact OU transition)."""
    if drift.sd <= 0 or elapsed <= 0:
        return x if drift.sd > 0 else 0.0
    phi = math.exp(-elapsed / drift.seconds)
    return phi * x + drift.sd * math.sqrt(max(0.0, 1.0 - phi * phi)) * rng.gauss(0.0, 1.0)


@dataclass(frozen=True, slots=True)
class Classes:
    """A second request class: its survival rates and its share of the drafts over time."""

    survival: tuple[float, ...]
    share: float
    swing: float = 0.0
    period: float = 300.0

    def validate(self, chain_length: int) -> None:
        if len(self.survival) != chain_length:
            raise ValueError(
                f"the second class has {len(self.survival)} survival rates, the chain {chain_length}"
            )
        previous = 1.0
        for rate in self.survival:
            if not 0.0 <= rate <= previous + 1e-12:
                raise ValueError("the second class's survival must lie in [0, 1] and not rise")
            previous = rate
        if self.swing < 0:
            raise ValueError("the class swing must be >= 0")
        if not (self.share - self.swing >= 0.0 and self.share + self.swing <= 1.0):
            raise ValueError("the class share +- its swing must stay within [0, 1]")
        if not (math.isfinite(self.period) and self.period > 0):
            raise ValueError("the class period must be > 0")

    def share_at(self, t: float) -> float:
        """The second class's share of the drafts at time ``t`` (seconds)."""
        return self.share + self.swing * math.sin(2.0 * math.pi * t / self.period)


def mean_survival(survival: Sequence[float], classes: Classes | None) -> tuple[float, ...]:
    """The per-position survival averaged over the mix (over whole periods of its swing)."""
    if classes is None or classes.share <= 0:
        return tuple(survival)
    f = classes.share
    return tuple((1.0 - f) * a + f * b for a, b in zip(survival, classes.survival, strict=True))


def share_for_tokens(
    survival: Sequence[float], other: Sequence[float], *, tokens_per_step: float
) -> float:
    """The second class's share that makes the mix's expected tokens per step
    ``tokens_per_step`` (1 + the survival's sum). Raises ValueError when out of reach."""
    a, b = 1.0 + sum(survival), 1.0 + sum(other)
    if a == b:
        raise ValueError("the two classes have the same tokens per step")
    f = (a - tokens_per_step) / (a - b)
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"{tokens_per_step} tokens per step lies outside the two classes'")
    return f
