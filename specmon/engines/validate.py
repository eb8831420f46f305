"""Readings checked before they count: what no real engine can publish is refused with its
reason, one model at a time, so a page's good models stay.

A counter page must satisfy, per model: per-position counts that do not rise along the chain,
no more drafts accepted at the first position than drafts, no more accepted than drafted
tokens, no more drafts than drafted tokens (a draft has at least one token), at most
``max_position`` positions. Gauges must lie in their range. A context value out of range
(requests running NaN or negative) is dropped alone: the model's acceptance figures stand.
"""

from __future__ import annotations

import dataclasses
import math

from specmon.engines.model import (
    Context,
    ModelReading,
    PageLimits,
    Rejection,
    RejectReason,
    SpecCounters,
    SpecGauges,
)

__all__ = ["check_counters", "check_model"]

#: llama.cpp prints scalar counters with 6 significant digits: a rounded value may sit up to
#: half a unit of the 6th digit below the exact one.
_ROUNDING = 5e-6


def check_model(
    reading: ModelReading, limits: PageLimits
) -> tuple[ModelReading | None, list[Rejection]]:
    """The reading to use (None when it is refused whole) and what was refused."""
    model = reading.model
    if len(model) > limits.max_label_length:
        shown = model[:40] + "..."
        return None, [
            Rejection(
                shown,
                RejectReason.LABEL_LENGTH,
                f"model name of {len(model)} characters; the limit is {limits.max_label_length}",
            )
        ]
    if reading.counters is not None:
        problem = _counters(reading.counters, limits)
        if problem is not None:
            return None, [Rejection(model, problem[0], problem[1])]
    if reading.gauges is not None:
        problem = _gauges(reading.gauges, limits)
        if problem is not None:
            return None, [Rejection(model, problem[0], problem[1])]
    context, dropped = _context(model, reading.context)
    if dropped:
        reading = dataclasses.replace(reading, context=context)
    return reading, dropped


def _counters(c: SpecCounters, limits: PageLimits) -> tuple[RejectReason, str] | None:
    per_pos = c.accepted_per_position
    if len(per_pos) > limits.max_position:
        return (
            RejectReason.POSITION_LIMIT,
            f"{len(per_pos)} positions; the limit is {limits.max_position}",
        )
    return check_counters(
        c,
        slack_drafts=c.drafts * _ROUNDING if "drafts" in c.rounded else 0.0,
        slack_tokens=c.draft_tokens * _ROUNDING if "draft_tokens" in c.rounded else 0.0,
    )


def check_counters(
    c: SpecCounters, *, slack_drafts: float = 0.0, slack_tokens: float = 0.0
) -> tuple[RejectReason, str] | None:
    """The physics every count of drafts obeys, on one page's lifetime counters or on their
    increase between two pages (an interval, :mod:`specmon.windows`): per-position counts
    that do not rise along the chain, no more accepted at position 1 than drafts, no more
    accepted than drafted tokens, no more drafts than drafted tokens. ``slack_*``: how far a
    rounded counter may be off (llama.cpp's 6 significant digits). The first broken law, or
    None."""
    per_pos = c.accepted_per_position
    # Engines without a drafts or draft-token counter (TensorRT-LLM, SGLang, TGI) publish no
    # bound to check against: those checks are skipped, the others still hold.
    knows_drafts, knows_tokens = c.knows("drafts"), c.knows("draft_tokens")
    for i in range(1, len(per_pos)):
        if per_pos[i] > per_pos[i - 1]:
            return (
                RejectReason.POSITIONS_RISE,
                f"position {i + 1} has {per_pos[i]} accepted drafts, more than position {i} "
                f"({per_pos[i - 1]})",
            )
    if knows_drafts and per_pos and per_pos[0] > c.drafts + slack_drafts:
        return (
            RejectReason.ABOVE_DRAFTS,
            f"position 1 has {per_pos[0]} accepted drafts, more than the {c.drafts} drafts",
        )
    if knows_tokens and c.accepted_tokens > c.draft_tokens + slack_tokens:
        return (
            RejectReason.ACCEPTED_ABOVE_DRAFTED,
            f"{c.accepted_tokens} accepted tokens, more than the {c.draft_tokens} drafted",
        )
    if knows_drafts and knows_tokens and c.drafts > c.draft_tokens + slack_tokens + slack_drafts:
        return (
            RejectReason.DRAFTS_ABOVE_DRAFT_TOKENS,
            f"{c.drafts} drafts but only {c.draft_tokens} drafted tokens",
        )
    return None


def _gauges(g: SpecGauges, limits: PageLimits) -> tuple[RejectReason, str] | None:
    ranges = (
        ("acceptance rate", g.acceptance_rate, 0.0, 1.0),
        ("mean acceptance length", g.mean_acceptance_length, 1.0, limits.max_position + 1.0),
        ("efficiency", g.efficiency, 0.0, 1.0),
        ("draft overhead", g.draft_overhead, 0.0, 1.0),
    )
    for name, value, low, high in ranges:
        if value is None:
            continue
        if not math.isfinite(value):
            return RejectReason.NON_FINITE, f"{name} is {value}"
        if not low <= value <= high:
            return RejectReason.GAUGE_RANGE, f"{name} is {value:g}, outside [{low:g}, {high:g}]"
    return None


_CONTEXT_FIELDS = tuple(f.name for f in dataclasses.fields(Context))


def _context(model: str, context: Context) -> tuple[Context, list[Rejection]]:
    """Every float of the context must be finite and non-negative (requests running, seconds
    sums); one that is not is dropped alone. Integer counters were checked by the adapter."""
    changes: dict[str, None] = {}
    dropped: list[Rejection] = []
    for name in _CONTEXT_FIELDS:  # (each model of each scrape: not dataclasses.fields())
        value = getattr(context, name)
        if not isinstance(value, float) or (math.isfinite(value) and 0.0 <= value <= 1e15):
            continue
        reason = RejectReason.NON_FINITE if not math.isfinite(value) else RejectReason.GAUGE_RANGE
        label = name.replace("_", " ")
        changes[name] = None
        dropped.append(Rejection(model, reason, f"{label} is {value:g}", whole_model=False))
    return (dataclasses.replace(context, **changes) if changes else context), dropped
