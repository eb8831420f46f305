"""The measured break-even reading: the draft cost a measured speed ratio implies. Pure.

The model of one speculative iteration (docs/background.md#implied-cost): it keeps K tokens (the accepted draft tokens
plus the target's own token) and costs 1 + k̄ c target steps, where k̄ tokens were drafted and c
is the cost of one drafted token as a fraction of a target step. The speed ratio over plain
decoding is then

    R = K / (1 + k̄ c),     so     c = (K / R - 1) / k̄.

With R measured (tokens/s with the draft over tokens/s without), K = 1 + accepted / drafts and
k̄ = draft tokens / drafts from the speculative server's counters, c is what this machine
actually charged per drafted token - a measured break-even calculation in place of
a parameter-count guess. Speculation pays while K > 1 + k̄ c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmon.arithmetic import implied_draft_cost
from specmon.engines.model import SpecCounters
from specmon.report import report_from_counters

__all__ = [
    "IMPLIED_COST_CAVEAT",
    "BreakEvenReading",
    "breakeven_reading",
    "implied_draft_cost",
]

IMPLIED_COST_CAVEAT = (
    "The implied draft cost c solves the model R = K / (1 + k̄ c) for c from the "
    "measured speed ratio R, the tokens kept per iteration K and the tokens drafted per "
    "iteration k̄. It folds everything the speculative server does beyond plain decoding - "
    "running the draft, the wider verification pass over k̄ + 1 positions, extra scheduling "
    "and sampling - into c, and it inherits the noise of both throughput figures: it is the "
    "cost per drafted token, in target steps, that this machine charged at this concurrency, "
    "not the draft model's cost alone. Prompt processing is part of both runs' time, and K "
    "counts verification steps only."
)


@dataclass(frozen=True, slots=True)
class BreakEvenReading:
    #: K: tokens kept per verification step (mean acceptance length, incl. the target's token).
    tokens_per_iteration: float
    #: k̄: tokens drafted per verification step.
    drafted_per_iteration: float
    #: R: tokens/s with the draft / tokens/s without.
    speed_ratio: float
    #: c implied by R, K and k̄ (None when it cannot be solved).
    implied_draft_cost: float | None
    #: 1 + k̄ c: the tokens per iteration speculation needs to break even at that cost.
    breakeven_tokens_per_iteration: float | None
    #: Chain length k (the number of per-position series), for the alpha figures.
    chain_length: int | None
    #: Effective per-token acceptance alpha and its break-even at (k, implied c).
    alpha: float | None
    breakeven_alpha: float | None
    alpha_margin: float | None
    #: The chain length that would do best at the implied c, from measured survival rates.
    best_chain_length: int | None
    best_speedup: float | None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "tokens_per_iteration": self.tokens_per_iteration,
            "drafted_per_iteration": self.drafted_per_iteration,
            "speed_ratio": self.speed_ratio,
            "implied_draft_cost": self.implied_draft_cost,
            "breakeven_tokens_per_iteration": self.breakeven_tokens_per_iteration,
            "chain_length": self.chain_length,
            "alpha": self.alpha,
            "breakeven_alpha": self.breakeven_alpha,
            "alpha_margin": self.alpha_margin,
            "best_chain_length": self.best_chain_length,
            "best_speedup": self.best_speedup,
            "notes": list(self.notes),
        }


def breakeven_reading(
    counters: SpecCounters, speed_ratio: float | None, *, chain_length: int | None = None
) -> BreakEvenReading | None:
    """The measured reading for one run, or None without drafts or without a speed ratio (or
    for engines that count no drafts or no draft tokens: k̄ is not measured then)."""
    if not (counters.knows("drafts") and counters.knows("draft_tokens")):
        return None
    if counters.drafts <= 0 or speed_ratio is None or not math.isfinite(speed_ratio):
        return None
    if speed_ratio <= 0.0:
        return None
    k_kept = 1.0 + counters.accepted_tokens / counters.drafts
    k_drafted = counters.draft_tokens / counters.drafts
    cost = implied_draft_cost(k_kept, speed_ratio, k_drafted)
    notes: list[str] = []
    alpha = breakeven = margin = best_speed = None
    best_k: int | None = None
    k = chain_length
    needed: float | None = None
    if cost is None:
        notes.append("no draft tokens counted: the draft cost cannot be solved for")
    elif cost < 0.0:
        notes.append(
            f"the measured ratio {speed_ratio:.3f} is above the {k_kept:.3f} tokens per "
            "iteration acceptance can explain (c < 0): timing noise, or the two servers differ "
            "in more than the draft"
        )
    else:
        needed = 1.0 + k_drafted * cost
        report = report_from_counters(
            counters, draft_cost=cost, configured_chain_length=chain_length
        )
        k = report.chain_length
        alpha, breakeven, margin = report.alpha, report.breakeven_alpha, report.alpha_margin
        best_k, best_speed = report.best_chain_length, report.best_speedup
        if cost > 1.0:
            notes.append(
                f"each drafted token cost more than a whole target step (c = {cost:.2f}): "
                "no acceptance rate can make this draft pay on this machine"
            )
        notes.extend(n for n in report.notes if not n.startswith("no alpha breaks even"))
    return BreakEvenReading(
        tokens_per_iteration=k_kept,
        drafted_per_iteration=k_drafted,
        speed_ratio=speed_ratio,
        implied_draft_cost=cost,
        breakeven_tokens_per_iteration=needed,
        chain_length=k,
        alpha=alpha,
        breakeven_alpha=breakeven,
        alpha_margin=margin,
        best_chain_length=best_k,
        best_speedup=best_speed,
        notes=tuple(notes),
    )
