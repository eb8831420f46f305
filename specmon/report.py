"""From counters (a window's increase, or a page's lifetime values) to every figure specmon
reports, in one pure function shared by the daemon, ``specmon inspect`` and ``specmon measure``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from specmon import arithmetic
from specmon.bounds import acceptance_length_refusal, chain_bound, speedup_refusal
from specmon.engines.model import ModelReading, SpecCounters, SpecGauges
from specmon.records import record

__all__ = [
    "DEFAULT_DRAFT_COST",
    "AcceptanceReport",
    "Basis",
    "ChainLengthSource",
    "PositionStat",
    "basis",
    "best_chain",
    "detected_chain_length",
    "engine_draft_cost",
    "figure_out_of_range",
    "has_data",
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


@record
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
    inferred_chain_length: int | None = None,
) -> Basis:
    """Resolve k and the break-even alpha at (k, c): configured wins over detected (the
    engine's position series or published k; 0 means unknown), detected over inferred (vLLM
    V0: from its efficiency gauge). The one place where either is decided."""
    k: int | None
    source: ChainLengthSource | None
    if configured_chain_length is not None:
        k, source = configured_chain_length, ChainLengthSource.CONFIGURED
    elif detected_chain_length:
        k, source = detected_chain_length, ChainLengthSource.DETECTED
    elif inferred_chain_length:
        k, source = inferred_chain_length, ChainLengthSource.INFERRED
    else:
        k, source = None, None
    breakeven = arithmetic.breakeven_alpha(k, draft_cost) if k is not None else None
    return Basis(k, source, draft_cost, breakeven)


def best_chain(
    *,
    draft_cost: float,
    chain_length: int | None,
    survival: Sequence[float] | None = None,
    alpha: float | None = None,
    drafted_per_draft: float | None = None,
) -> arithmetic.BestChain | None:
    """The chain length k' in 0..k that maximises the expected speed-up, and that speed-up
    (0: speculation does not pay). The one place where the best chain length is chosen, for
    the reports, the load view and ``specmon recommend``.

    - ``survival``: per-position survival, cut at ``chain_length`` when it is known;
    - else ``alpha`` and ``chain_length``: independent acceptance, survival alpha^i;
    - the draft cost counts as 0 when negative (a measured c below 0 is noise); with
      ``drafted_per_draft`` (tokens drafted per draft, measured at k) a chain of k' drafts
      k' x drafted / k tokens, so the cost per position is c x drafted / k (1 for a draft
      model, below 1 for proposers that vary their length).

    None when neither survival nor (alpha, k) is known.
    """
    if survival:
        rates = list(survival[:chain_length] if chain_length is not None else survival)
    elif alpha is not None and chain_length is not None:
        rates = [alpha**i for i in range(1, chain_length + 1)]
    else:
        return None
    cost = max(draft_cost, 0.0)
    if drafted_per_draft is not None and chain_length:
        cost = cost * drafted_per_draft / chain_length
    return arithmetic.best_chain_length(rates, cost)


@record
class PositionStat:
    position: int  # 1 = first drafted token
    survival: float | None
    conditional: float | None


@record
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
    #: Tokens drafted per draft, when both are counted or estimated (not when one is assumed
    #: from k).
    mean_draft_length: float | None = None
    #: True when the per-draft figures rest on the engine's own acceptance-length gauge
    #: (TensorRT-LLM without a drafts counter or k): estimates, not counts.
    engine_estimate: bool = False

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
    engine_acceptance_length: float | None = None,
) -> AcceptanceReport:
    """Every figure from counter values (lifetime or a window's increase).

    The chain length is ``configured_chain_length`` when given, else
    ``detected_chain_length`` (what the engine publishes now: its position series or its
    configured k; default: the position series in ``counters``).

    Engines that lack a counter (``counters.unknown``) get the figures that do not need it;
    where a figure needs it and k is known, it assumes every draft carried k tokens and says
    so in the notes: TensorRT-LLM without per-position series has no drafts counter (drafts
    ~ draft tokens / k), TGI and SGLang have no draft-token counter (draft tokens ~ k drafts).
    Without a drafts counter and without k, ``engine_acceptance_length`` (TensorRT-LLM's own
    tokens per step, averaged over the window's scrapes) gives the per-draft figures as
    estimates: drafts ~ accepted / (L - 1).
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
    if k is None:
        notes.append(
            "chain length unknown: the engine publishes no per-position series (yet) and no "
            "k; configure chain_length"
        )
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

    # What was counted, and what has to be assumed for the rest.
    estimate = False
    drafts: float | None = counters.drafts if counters.knows("drafts") else None
    draft_tokens: float | None = counters.draft_tokens if counters.knows("draft_tokens") else None
    if drafts is None and draft_tokens is not None and draft_tokens > 0:
        if k:
            drafts = draft_tokens / k
            notes.append(
                "the engine counts no drafts: per-draft figures (mean acceptance length, "
                f"alpha, speed-up) assume every draft carried k = {k} tokens "
                "(drafts = draft tokens / k)"
            )
        elif (
            engine_acceptance_length is not None
            and engine_acceptance_length > 1.0
            and counters.accepted_tokens > 0
        ):
            drafts = counters.accepted_tokens / (engine_acceptance_length - 1.0)
            estimate = True
            notes.append(
                "the engine counts no drafts and the chain length is unknown: per-draft figures "
                f"rest on its own acceptance length L = {engine_acceptance_length:.3f} "
                "(spec_decode_acceptance_length: tokens per step of the engine's last "
                "iterations, averaged over the scrapes; an estimate, not a count): drafts ~ "
                "accepted / "
                f"(L - 1), mean draft length (L - 1) / acceptance ratio = "
                f"{draft_tokens / drafts:.2f}; configure chain_length for alpha"
            )
        else:
            notes.append(
                "the engine counts no drafts and the chain length is unknown: only the draft "
                "acceptance ratio can be computed; configure chain_length for the rest"
            )
    elif draft_tokens is None and drafts is not None and drafts > 0:
        if k:
            draft_tokens = drafts * k
            notes.append(
                "the engine counts no draft tokens: the draft acceptance ratio and the "
                f"speed-up assume every draft carried k = {k} tokens"
            )
        else:
            notes.append(
                "the engine counts no draft tokens and the chain length is unknown: the draft "
                "acceptance ratio and the speed-up need chain_length"
            )
    if "accepted_tokens" in counters.derived:
        notes.append(
            "accepted tokens are derived, not counted: generated tokens - verification "
            "steps - requests (see the engine notes)"
        )

    positions: tuple[PositionStat, ...] = ()
    survival: list[float] | None = None
    if per_pos and counters.knows("drafts"):
        survival = arithmetic.survival(per_pos, counters.drafts)
        conditional = arithmetic.conditional_acceptance(per_pos, counters.drafts)
        positions = tuple(
            PositionStat(i + 1, survival[i] if survival is not None else None, conditional[i])
            for i in range(len(per_pos))
        )

    mean_len = alpha = expected = None
    best: arithmetic.BestChain | None = None
    accept_ratio = (
        counters.accepted_tokens / draft_tokens
        if draft_tokens is not None and draft_tokens > 0
        else None
    )
    if drafts is not None and drafts > 0:
        mean_accepted = counters.accepted_tokens / drafts
        mean_len = 1.0 + mean_accepted
        if draft_tokens is not None:
            expected = arithmetic.measured_speedup(mean_accepted, draft_cost, draft_tokens / drafts)
        if k is not None:
            alpha = arithmetic.effective_alpha(mean_accepted, k)
            if alpha is None and k > 0:
                notes.append(
                    f"mean accepted tokens per draft ({mean_accepted:.3f}) exceeds the chain "
                    f"length {k}: the configured chain length is too short"
                )
        if survival is not None and k is not None:
            best = best_chain(
                draft_cost=draft_cost, chain_length=k, survival=survival,
                drafted_per_draft=draft_tokens / drafts if draft_tokens is not None else None,
            )  # fmt: skip
            assert best is not None
        elif not per_pos and alpha is not None and k is not None:
            best = best_chain(draft_cost=draft_cost, chain_length=k, alpha=alpha)
            assert best is not None
            notes.append(
                "no per-position series: the best chain length assumes independent "
                "acceptance (alpha^i)"
            )
    elif drafts is not None or draft_tokens is None or draft_tokens == 0:
        notes.append("no drafts counted: nothing to compute acceptance from")

    return _report(
        resolved,
        drafts=counters.drafts if counters.knows("drafts") else None,
        draft_tokens=counters.draft_tokens if counters.knows("draft_tokens") else None,
        accepted_tokens=counters.accepted_tokens,
        positions=positions,
        mean_acceptance_length=mean_len,
        draft_acceptance_ratio=accept_ratio,
        alpha=alpha,
        expected_speedup=expected,
        best=best,
        notes=notes,
        mean_draft_length=(
            draft_tokens / drafts
            if drafts
            and draft_tokens is not None
            and (estimate or (counters.knows("drafts") and counters.knows("draft_tokens")))
            else None
        ),
        engine_estimate=estimate,
    )


def _report(
    resolved: Basis,
    *,
    drafts: int | None,
    draft_tokens: int | None,
    accepted_tokens: int | None,
    positions: tuple[PositionStat, ...],
    mean_acceptance_length: float | None,
    draft_acceptance_ratio: float | None,
    alpha: float | None,
    expected_speedup: float | None,
    best: arithmetic.BestChain | None,
    notes: list[str],
    mean_draft_length: float | None = None,
    engine_estimate: bool = False,
) -> AcceptanceReport:
    """The report of figures computed on ``resolved``; the alpha margin is alpha less the
    break-even alpha when both are known."""
    breakeven = resolved.breakeven_alpha
    return AcceptanceReport(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted_tokens,
        chain_length=resolved.chain_length,
        chain_length_source=resolved.chain_length_source,
        draft_cost=resolved.draft_cost,
        positions=positions,
        mean_acceptance_length=mean_acceptance_length,
        draft_acceptance_ratio=draft_acceptance_ratio,
        alpha=alpha,
        breakeven_alpha=breakeven,
        alpha_margin=alpha - breakeven if alpha is not None and breakeven is not None else None,
        expected_speedup=expected_speedup,
        best_chain_length=best.chain_length if best is not None else None,
        best_speedup=best.speedup if best is not None else None,
        notes=tuple(notes),
        mean_draft_length=mean_draft_length,
        engine_estimate=engine_estimate,
    )


#: Floats computed from valid counts may land this far outside their range.
_EPSILON = 1e-9


def figure_out_of_range(report: AcceptanceReport) -> str | None:
    """The first figure of ``report`` outside what one engine page can give, or None:
    survival and conditional acceptance in [0, 1] and survival not rising along the chain,
    acceptance ratio and alpha in [0, 1], mean acceptance length in [1, k + 1] and the
    speed-ups at most k + 1 (k: the longer of the chain length and the position series)."""
    previous = 1.0
    for pos in report.positions:  # (each window of each scrape: no tuple of pairs a position)
        survival, conditional = pos.survival, pos.conditional
        if survival is not None and not -_EPSILON <= survival <= 1.0 + _EPSILON:
            return f"survival {survival:.4g} at position {pos.position}, outside [0, 1]"
        if conditional is not None and not -_EPSILON <= conditional <= 1.0 + _EPSILON:
            return (
                f"conditional acceptance {conditional:.4g} at position {pos.position}, "
                "outside [0, 1]"
            )
        if survival is not None:
            if survival > previous + _EPSILON:
                return f"survival rises to {survival:.4g} at position {pos.position}"
            previous = survival
    for name, ratio in (("draft acceptance ratio", report.draft_acceptance_ratio),
                        ("alpha", report.alpha)):  # fmt: skip
        if ratio is not None and not -_EPSILON <= ratio <= 1.0 + _EPSILON:
            return f"{name} {ratio:.4g}, outside [0, 1]"
    # k: the chain length or the position series, else the largest any adapter reads.
    k = chain_bound(detected=max(report.chain_length or 0, len(report.positions)))
    length = report.mean_acceptance_length
    if length is not None:
        problem = acceptance_length_refusal(length, chain_length=k)
        if problem is not None:
            return problem
    for name, speedup in (("expected speed-up", report.expected_speedup),
                          ("best speed-up", report.best_speedup)):  # fmt: skip
        if speedup is not None:
            problem = speedup_refusal(speedup, chain_length=k, measured=False)
            if problem is not None:
                return f"{name}: {problem}"
    return None


def detected_chain_length(reading: ModelReading) -> int | None:
    """The chain length a reading shows: the larger of its position series and the k the
    engine publishes as configuration (TensorRT-LLM creates position series lazily, up to
    the longest draft seen so far); None when it shows neither."""
    positions = len(reading.counters.accepted_per_position) if reading.counters else 0
    return max(positions, reading.chain_length or 0) or None


def has_data(counters: SpecCounters) -> bool:
    """True when the counters hold anything to compute from: drafts, or (engines without a
    drafts counter) draft tokens."""
    if counters.knows("drafts"):
        return counters.drafts > 0
    return counters.knows("draft_tokens") and counters.draft_tokens > 0


def engine_draft_cost(gauges: SpecGauges | None, *, chain_length: int | None) -> float | None:
    """The draft cost c the engine measured (TensorRT-LLM's draft overhead o, converted with
    :func:`specmon.arithmetic.draft_cost_from_overhead`: c = o / (k (1 - o))), or None when
    the engine measured none (no overhead gauge, o = 0: one-model speculation) or k is
    unknown."""
    if gauges is None or gauges.draft_overhead is None or not chain_length:
        return None
    return arithmetic.draft_cost_from_overhead(gauges.draft_overhead, chain_length)


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
    detected_chain_length: int | None = None,
) -> AcceptanceReport:
    """Figures for engines that publish gauges only (vLLM V0, SGLang without its verify-call
    counter).

    ``detected_chain_length``: the k the engine publishes (SGLang ``spec_num_steps``); the
    configured one wins. Without per-position data the expected and best speed-ups use the
    independence model S(alpha, k', c); they are estimates, and the notes say so.
    """
    notes = [f"gauges over the engine's {gauges.scope}; no per-position data"]
    resolved = basis(
        draft_cost=draft_cost,
        configured_chain_length=configured_chain_length,
        detected_chain_length=detected_chain_length,
    )
    alpha: float | None = None
    mean_len = gauges.mean_acceptance_length
    if gauges.acceptance_rate is not None and gauges.mean_acceptance_length is None:
        # vLLM V0 counts every accepted position: the rate is a per-token alpha.
        alpha = gauges.acceptance_rate
        if resolved.chain_length is None and gauges.efficiency is not None:
            resolved = basis(
                draft_cost=draft_cost,
                inferred_chain_length=infer_chain_length(alpha, gauges.efficiency),
            )
            if resolved.chain_length is not None:
                notes.append(
                    f"chain length {resolved.chain_length} inferred from spec_decode_efficiency"
                )
        if resolved.chain_length is not None and gauges.efficiency is not None:
            mean_len = gauges.efficiency * (resolved.chain_length + 1)
    elif mean_len is not None and resolved.chain_length is not None:
        alpha = arithmetic.effective_alpha(mean_len - 1.0, resolved.chain_length)
    k = resolved.chain_length
    if k is None:
        notes.append("chain length unknown: configure chain_length")
    expected = None
    best: arithmetic.BestChain | None = None
    if k is not None:
        if mean_len is not None:
            expected = arithmetic.speedup_from_length(mean_len, draft_cost, k)
        elif alpha is not None:
            expected = arithmetic.speedup(alpha, k, draft_cost)
        best = best_chain(draft_cost=draft_cost, chain_length=k, alpha=alpha)
        if best is not None:
            notes.append("best chain length assumes independent acceptance (alpha^i)")
    return _report(
        resolved,
        drafts=None,
        draft_tokens=None,
        accepted_tokens=None,
        positions=(),
        mean_acceptance_length=mean_len,
        draft_acceptance_ratio=gauges.acceptance_rate,
        alpha=alpha,
        expected_speedup=expected,
        best=best,
        notes=notes,
    )
