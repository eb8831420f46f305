"""One reading's load counters in engine-neutral terms, with the worst-case rounding of
engines that print reduced precision (llama.cpp: 6 significant digits). Pure: no I/O."""

from __future__ import annotations

import dataclasses
import math

from specmon.arithmetic import rounding_error
from specmon.engines.model import Context, SpecCounters
from specmon.records import record

#: A figure whose worst-case error from the engine's printed precision exceeds this share of
#: its value is not reported (llama.cpp prints 6 significant digits).
MAX_ROUNDING_ERROR = 0.01


# --------------------------------------------------------------------------------------------
# One reading: engine-neutral cumulative counters
# --------------------------------------------------------------------------------------------


@record
class LoadCounters:
    """One model's lifetime load counters at one scrape, in engine-neutral terms.

    ``engine_steps`` and ``slot_steps`` are None when the engine publishes no step counter.
    ``errors`` holds the worst-case rounding of (request_steps, decode_seconds, decode_tokens,
    engine_steps, slot_steps) from the printed precision (all 0 for exact engines).
    """

    request_steps: float
    decode_seconds: float
    decode_tokens: float
    engine_steps: float | None = None
    slot_steps: float | None = None
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = ()
    requests_running: float | None = None
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    #: Which mapping produced it: "inter_token_latency" (vLLM), "predicted_seconds"
    #: (llama.cpp) or "engine_step_seconds" (TGI).
    source: str = ""
    #: The engine's step wall time summed over engine steps (TGI), when it publishes that
    #: instead of the requests' decode time: an interval's decode seconds are then
    #: Δstep seconds × Δrequest-steps / Δengine steps (``decode_seconds`` is 0 here).
    engine_step_seconds: float | None = None
    #: Engine replicas whose series were summed (vLLM data parallel): their engine time
    #: adds up (:mod:`specmon.load.laws`).
    replicas: int = 1


_NO_COUNTERS = SpecCounters(0, 0, 0)


def load_counters(context: Context, counters: SpecCounters | None = None) -> LoadCounters | None:
    """The engine-neutral counters of one reading, or None when the page lacks the series.

    - vLLM-style (``inter_token_latency`` sum and count present): request-steps = ITL count,
      decode seconds = ITL sum, decode tokens = generated - first tokens, engine steps =
      ``iteration_tokens_total`` count, slot-steps = ITL count + first tokens.
    - TGI-style (engine step seconds, engine steps and request-steps present): request-steps
      = skipped-token observations less prefill requests, decode tokens = request-steps +
      accepted, slot-steps = request-steps, engine steps = decode steps; the decode seconds
      come per interval from the step seconds (see ``engine_step_seconds``).
    - llama.cpp-style (``tokens_predicted_seconds`` present): request-steps = tokens -
      accepted, decode seconds = predicted seconds, decode tokens = tokens, engine steps =
      ``n_decode_total``, slot-steps = ``n_busy_slots_per_decode`` x ``n_decode_total``.
    """
    spec = counters or _NO_COUNTERS
    digits = context.significant_digits
    c = context
    for v in (
        c.inter_token_latency_sum_seconds,
        c.generation_seconds,
        c.busy_slots_per_decode,
        c.requests_running,
    ):
        if v is not None and (not math.isfinite(v) or v < 0):
            return None  # an adapter let a broken value through: no load figures, no guess
    if c.inter_token_latency_sum_seconds is not None and c.inter_token_latency_count is not None:
        if c.generation_tokens is None:
            return None
        first = c.first_token_count or 0
        slots = None
        if c.engine_steps is not None and c.first_token_count is not None:
            slots = float(c.inter_token_latency_count + c.first_token_count)
        return _mapped(
            c,
            spec,
            request_steps=float(c.inter_token_latency_count),
            decode_seconds=c.inter_token_latency_sum_seconds,
            decode_tokens=float(max(c.generation_tokens - first, 0)),
            slot_steps=slots,
            source="inter_token_latency",
        )
    if (
        c.engine_step_seconds is not None
        and c.engine_steps is not None
        and c.request_steps is not None
    ):
        if not math.isfinite(c.engine_step_seconds) or c.engine_step_seconds < 0:
            return None
        steps = float(c.request_steps)
        mapped = _mapped(
            c,
            spec,
            request_steps=steps,
            decode_seconds=0.0,
            decode_tokens=steps + float(spec.accepted_tokens),
            slot_steps=steps,
            source="engine_step_seconds",
        )
        return dataclasses.replace(mapped, engine_step_seconds=c.engine_step_seconds)
    if c.generation_seconds is not None and c.generation_tokens is not None:
        tokens = float(c.generation_tokens)
        accepted = float(spec.accepted_tokens)
        # The accepted count is exact when it came from the per-position sum.
        accepted_error = (
            0.0 if spec.accepted_per_position else rounding_error(accepted, digits, integer=True)
        )
        tokens_error = rounding_error(tokens, digits, integer=True)
        slots = slots_error = None
        steps_error = 0.0
        if c.engine_steps is not None:
            steps_error = rounding_error(c.engine_steps, digits, integer=True)
            if c.busy_slots_per_decode is not None:
                ratio = c.busy_slots_per_decode
                ratio_error = rounding_error(ratio, digits)
                slots = ratio * c.engine_steps
                slots_error = (
                    ratio * steps_error + c.engine_steps * ratio_error + ratio_error * steps_error
                )
        return _mapped(
            c,
            spec,
            request_steps=max(tokens - accepted, 0.0),
            decode_seconds=c.generation_seconds,
            decode_tokens=tokens,
            slot_steps=slots,
            errors=(
                tokens_error + accepted_error,
                rounding_error(c.generation_seconds, digits),
                tokens_error,
                steps_error,
                slots_error or 0.0,
            ),
            source="predicted_seconds",
        )
    return None


def _mapped(
    context: Context,
    spec: SpecCounters,
    *,
    request_steps: float,
    decode_seconds: float,
    decode_tokens: float,
    slot_steps: float | None,
    source: str,
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0),
) -> LoadCounters:
    """What one mapping gives, with what every mapping takes as published: the engine's step
    counter, the speculative counters and the running requests."""
    return LoadCounters(
        request_steps=request_steps,
        decode_seconds=decode_seconds,
        decode_tokens=decode_tokens,
        engine_steps=None if context.engine_steps is None else float(context.engine_steps),
        slot_steps=slot_steps,
        drafts=spec.drafts,
        draft_tokens=spec.draft_tokens,
        accepted_tokens=spec.accepted_tokens,
        accepted_per_position=spec.accepted_per_position,
        requests_running=context.requests_running,
        errors=errors,
        source=source,
        replicas=max(context.engine_replicas or 1, 1),
    )
