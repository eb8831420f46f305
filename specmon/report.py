"""From counters (a window's increase, or a page's lifetime values) to every figure specmon
reports, in one pure function shared by the daemon, ``specmon inspect`` and ``specmon measure``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specmon import arithmetic
from specmon.engines.model import SpecCounters, SpecGauges

__all__ = [
    "DEFAULT_DRAFT_COST",
    "AcceptanceReport",
    "Basis",
    "ChainLengthSource",
    "PositionStat",
    "basis",
    "report_from_counters",
    "report_from_gauges",
]

#: Draft cost used when none is configured (a small draft model; see docs/background.md).
DEFAULT_DRAFT_COST = 0.1


class ChainLengthSource(StrEnum):
    """Where the chain length k behind a figure came from."""

    #: ``chain_length`` in specmon's configuration (or on the command line).
    CONFIGURED = "configured"
    #: The number of per-position series the engine publishes.
    DETECTED = "detected"
    #: vLLM V0: the k whose expected efficiency matches the published one.
    INFERRED = "inferred"


@dataclass(frozen=True, slots=True)
class Basis:
    """What every verdict on a model rests on: the chain length k, where it came from, the
    draft cost c and the break-even alpha at (k, c). Resolved only by :func:`basis`."""

    chain_length: int | None
    chain_length_source: ChainLengthSource | None
    draft_cost: float
    breakeven_alpha: float | None


def basis(
    *,
    draft_cost: float,
    configured_chain_length: int | None = None,
    detected_chain_length: int | None = None,
) -> Basis:
    """Resolve k (configured wins over detected; a detected 0 means unknown) and the
    break-even alpha. The one place where either is decided."""
    if configured_chain_length is not None:
        k: int | None = configured_chain_length
        source: ChainLengthSource | None = ChainLengthSource.CONFIGURED
    elif detected_chain_length:
        k, source = detected_chain_length, ChainLengthSource.DETECTED
    else:
        k, source = None, None
    breakeven = arithmetic.breakeven_alpha(k, draft_cost) if k is not None else None
    return Basis(k, source, draft_cost, breakeven)


@dataclass(frozen=True, slots=True)
class PositionStat:
    position: int  # 1 = first drafted token
    survival: float | None
    conditional: float | None


@dataclass(frozen=True, slots=True)
class AcceptanceReport:
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    chain_length: int | None
    chain_length_source: ChainLengthSource | None
    draft_cost: float
    positions: tuple[PositionStat, ...]
    mean_acceptance_length: float | None
    draft_acceptance_ratio: float | None
    alpha: float | None
    breakeven_alpha: float | None
    alpha_margin: float | None
    expected_speedup: float | None
    best_chain_length: int | None
    best_speedup: float | None
    notes: tuple[str, ...] = ()

    @property
    def basis(self) -> Basis:
        return Basis(
            self.chain_length, self.chain_length_source, self.draft_cost, self.breakeven_alpha
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def report_from_counters(
    counters: SpecCounters,
    *,
    draft_cost: float,
    configured_chain_length: int | None = None,
    detected_chain_length: int | None = None,
) -> AcceptanceReport:
    """Every figure from counter values (lifetime or a window's increase).

    The chain length is ``configured_chain_length`` when given, else
    ``detected_chain_length`` (the position series the engine publishes now; default: those
    in ``counters``).
    """
    notes: list[str] = []
    per_pos = counters.accepted_per_position
    detected = len(per_pos) if detected_chain_length is None else detected_chain_length
    resolved = basis(
        draft_cost=draft_cost,
        configured_chain_length=configured_chain_length,
        detected_chain_length=detected,
    )
    k, k_source, breakeven = (
        resolved.chain_length,
        resolved.chain_length_source,
        resolved.breakeven_alpha,
    )
    drafts = counters.drafts
    if k is None:
        notes.append("chain length unknown: no per-position series yet; configure chain_length")
    elif per_pos and len(per_pos) != k:
        if k_source is ChainLengthSource.CONFIGURED:
            notes.append(
                f"configured chain length {k} differs from the {len(per_pos)} position series "
                "the engine publishes"
            )
        else:
            notes.append(
                f"the window spans a chain-length change: {len(per_pos)} position series in "
                f"the window, {k} published now"
            )
    if breakeven is None and k is not None and k > 0:
        notes.append(f"no alpha breaks even at draft cost {draft_cost}: speculation cannot pay")

    positions: tuple[PositionStat, ...] = ()
    survival = arithmetic.survival(per_pos, drafts)
    if per_pos:
        conditional = arithmetic.conditional_acceptance(per_pos, drafts)
        positions = tuple(
            PositionStat(i + 1, survival[i] if survival is not None else None, conditional[i])
            for i in range(len(per_pos))
        )

    mean_len = alpha = margin = expected = best_speed = None
    best_k: int | None = None
    accept_ratio = (
        counters.accepted_tokens / counters.draft_tokens if counters.draft_tokens > 0 else None
    )
    if drafts > 0:
        mean_accepted = counters.accepted_tokens / drafts
        mean_len = 1.0 + mean_accepted
        expected = arithmetic.measured_speedup(
            mean_accepted, draft_cost, counters.draft_tokens / drafts
        )
        if k is not None:
            alpha = arithmetic.effective_alpha(mean_accepted, k)
            if alpha is None and k > 0:
                notes.append(
                    f"mean accepted tokens per draft ({mean_accepted:.3f}) exceeds the chain "
                    f"length {k}: the configured chain length is too short"
                )
        if alpha is not None and breakeven is not None:
            margin = alpha - breakeven
        if survival is not None and k is not None:
            best = arithmetic.best_chain_length(survival[:k], draft_cost)
            best_k, best_speed = best.chain_length, best.speedup
    else:
        notes.append("no drafts counted: nothing to compute acceptance from")

    return AcceptanceReport(
        drafts=drafts,
        draft_tokens=counters.draft_tokens,
        accepted_tokens=counters.accepted_tokens,
        chain_length=k,
        chain_length_source=k_source,
        draft_cost=draft_cost,
        positions=positions,
        mean_acceptance_length=mean_len,
        draft_acceptance_ratio=accept_ratio,
        alpha=alpha,
        breakeven_alpha=breakeven,
        alpha_margin=margin,
        expected_speedup=expected,
        best_chain_length=best_k,
        best_speedup=best_speed,
        notes=tuple(notes),
    )


def infer_chain_length(alpha: float, efficiency: float, *, max_k: int = 64) -> int | None:
    """vLLM V0: the k whose E(alpha, k) / (k + 1) is nearest the published efficiency."""
    if not (0.0 <= alpha <= 1.0) or not (0.0 < efficiency <= 1.0):
        return None
    return min(
        range(1, max_k + 1),
        key=lambda k: abs(arithmetic.expected_tokens(alpha, k) / (k + 1) - efficiency),
    )


def report_from_gauges(
    gauges: SpecGauges,
    *,
    draft_cost: float,
    configured_chain_length: int | None = None,
) -> AcceptanceReport:
    """Figures for engines that publish gauges only (vLLM V0, SGLang).

    Without per-position data the expected and best speed-ups use the independence model
    S(alpha, k', c); they are estimates, and the notes say so.
    """
    notes = [f"gauges over the engine's {gauges.scope}; no per-position data"]
    k = configured_chain_length
    k_source = ChainLengthSource.CONFIGURED if k is not None else None
    alpha: float | None = None
    mean_len = gauges.mean_acceptance_length
    if gauges.acceptance_rate is not None and gauges.mean_acceptance_length is None:
        # vLLM V0 counts every accepted position: the rate is a per-token alpha.
        alpha = gauges.acceptance_rate
        if k is None and gauges.efficiency is not None:
            k = infer_chain_length(alpha, gauges.efficiency)
            k_source = ChainLengthSource.INFERRED if k is not None else None
            if k is not None:
                notes.append(f"chain length {k} inferred from spec_decode_efficiency")
        if k is not None and gauges.efficiency is not None:
            mean_len = gauges.efficiency * (k + 1)
    elif mean_len is not None and k is not None:
        alpha = arithmetic.effective_alpha(mean_len - 1.0, k)
    if k is None:
        notes.append("chain length unknown: configure chain_length")
    breakeven = basis(draft_cost=draft_cost, configured_chain_length=k).breakeven_alpha
    margin = alpha - breakeven if alpha is not None and breakeven is not None else None
    expected = best_speed = None
    best_k: int | None = None
    if k is not None:
        if mean_len is not None:
            expected = mean_len / (1.0 + k * draft_cost)
        elif alpha is not None:
            expected = arithmetic.speedup(alpha, k, draft_cost)
        if alpha is not None:
            survival = [alpha**i for i in range(1, k + 1)]
            best = arithmetic.best_chain_length(survival, draft_cost)
            best_k, best_speed = best.chain_length, best.speedup
            notes.append("best chain length assumes independent acceptance (alpha^i)")
    return AcceptanceReport(
        drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
        chain_length=k,
        chain_length_source=k_source,
        draft_cost=draft_cost,
        positions=(),
        mean_acceptance_length=mean_len,
        draft_acceptance_ratio=gauges.acceptance_rate,
        alpha=alpha,
        breakeven_alpha=breakeven,
        alpha_margin=margin,
        expected_speedup=expected,
        best_chain_length=best_k,
        best_speedup=best_speed,
        notes=tuple(notes),
    )
