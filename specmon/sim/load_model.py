"""How long a simulated decoding step takes, as concurrency and the chain length grow. Pure.

The cost model's bandwidth argument (docs/background.md), as a roofline: a decode step streams every weight of the
target once (``weights_seconds``, paid whatever the batch), while its arithmetic grows with
the rows in the batch, n (k + 1) of them when n sequences each verify k drafted tokens plus
their own (``token_seconds`` per row). The step takes the longer of the two: below the ridge
the extra k rows per sequence ride along for free ("at a concurrency of one there is nothing
else to spend the capacity on and speculation is nearly free"), above it they are real work
competing with real requests. The draft runs k sequential steps of its own, each a smaller
roofline, and every step has a fixed cost (kernel launches, sampling, scheduling)::

    T(n, k) = fixed + max(weights, n (k + 1) token)
              + k (draft_fixed + max(draft_weights, n draft_token))

With acceptance unchanged (K tokens per step), speculation pays while
K T(n, 0) / T(n, k) > 1: at low n the verification is free and the draft is cheap, at high n
both servers are compute-bound and the ratio tends to K / (k + 1) < 1. The crossover is
therefore known by construction (:meth:`LoadModel.crossover`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = ["DEMO_LOAD_MODEL", "LoadModel"]


@dataclass(frozen=True, slots=True)
class LoadModel:
    weights_seconds: float
    token_seconds: float
    fixed_seconds: float = 0.0
    draft_fixed_seconds: float = 0.0
    draft_weights_seconds: float = 0.0
    draft_token_seconds: float = 0.0

    def validate(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be finite and >= 0")
        if self.step_seconds(1, 0) <= 0:
            raise ValueError("a decoding step must take some time")

    def step_seconds(self, concurrency: float, chain_length: int) -> float:
        """T(n, k): one engine step decoding ``concurrency`` sequences, each verifying
        ``chain_length`` drafted tokens (0 = no speculation)."""
        n = max(float(concurrency), 0.0)
        k = max(chain_length, 0)
        target = self.fixed_seconds + max(self.weights_seconds, n * (k + 1) * self.token_seconds)
        draft = k * (
            self.draft_fixed_seconds + max(self.draft_weights_seconds, n * self.draft_token_seconds)
        )
        return target + draft

    def draft_cost(self, concurrency: float, chain_length: int) -> float:
        """The cost model's c at this concurrency: (T(n, k) / T(n, 0) - 1) / k."""
        if chain_length <= 0:
            return 0.0
        ratio = self.step_seconds(concurrency, chain_length) / self.step_seconds(concurrency, 0)
        return (ratio - 1.0) / chain_length

    def speedup(self, concurrency: float, chain_length: int, tokens_per_step: float) -> float:
        """K T(n, 0) / T(n, k): time per output token without speculation over with it."""
        base = self.step_seconds(concurrency, 0)
        return tokens_per_step * base / self.step_seconds(concurrency, chain_length)

    def crossover(
        self, chain_length: int, tokens_per_step: float, *, max_concurrency: float = 4096.0
    ) -> float | None:
        """The lowest (real-valued) concurrency at which the speed-up falls to 1; None when
        it pays up to ``max_concurrency``; 1.0 when it does not even pay at concurrency 1."""

        def f(n: float) -> float:
            return self.speedup(n, chain_length, tokens_per_step) - 1.0

        if f(1.0) <= 0:
            return 1.0
        # Scan for the first sign change (the speed-up need not be monotonic), then bisect.
        lo, n = 1.0, 1.0
        while n < max_concurrency:
            n = min(n * 1.05, max_concurrency)
            if f(n) <= 0:
                hi = n
                for _ in range(200):
                    mid = (lo + hi) / 2
                    if f(mid) > 0:
                        lo = mid
                    else:
                        hi = mid
                return (lo + hi) / 2
            lo = n
        return None


#: The demo fleet's model: a bandwidth-bound target (8 ms to stream its weights, 0.5 ms of
#: arithmetic per row) and a small draft (0.6 ms a step). With survival 0.9/0.7/0.5/0.3
#: (K = 3.4) and k = 4 it pays 2.7x at concurrency 1 and stops paying near 10.9.
DEMO_LOAD_MODEL = LoadModel(
    weights_seconds=0.008,
    token_seconds=0.0005,
    fixed_seconds=0.001,
    draft_fixed_seconds=0.0006,
)


#: The step-time fields, in declaration order.
_FIELDS = tuple(f.name for f in dataclasses.fields(LoadModel))


def load_model_from(value: object) -> LoadModel | None:
    """A load model from a scenario value or a command-line string: ``"demo"``, ``"none"`` /
    None, a mapping of field names to seconds, or ``"weights_seconds=0.008,token_seconds=..."``.
    Raises ValueError naming every problem."""
    if value is None or value == "none":
        return None
    if value == "demo":
        return DEMO_LOAD_MODEL
    fields: dict[str, object]
    if isinstance(value, str):
        fields = {}
        for item in value.split(","):
            key, sep, number = item.partition("=")
            if not sep:
                raise ValueError(f"{item.strip()!r}: expected name=seconds")
            fields[key.strip()] = number.strip()
    elif isinstance(value, dict):
        fields = dict(value)
    else:
        raise ValueError("must be 'demo', 'none' or a mapping of step-time fields")
    problems = [
        f"{k}: unknown field (known: {', '.join(_FIELDS)})" for k in fields if k not in _FIELDS
    ]
    numbers: dict[str, float] = {}
    for key in _FIELDS:
        if key not in fields:
            continue
        raw = fields[key]
        try:
            if isinstance(raw, bool):
                raise TypeError
            numbers[key] = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            problems.append(f"{key}: must be a number of seconds")
    for key in ("weights_seconds", "token_seconds"):
        if key not in fields:
            problems.append(f"{key}: required")
    if problems:
        raise ValueError("; ".join(problems))
    model = LoadModel(**numbers)
    model.validate()
    return model
