"""The cost model's bounds on every derived figure, in one place. Pure: no I/O, no imports.

With a chain length k, no step can yield more than k + 1 tokens (k accepted drafts and the
target's own token), so (docs/background.md):

- a mean acceptance length L lies in [1, k + 1];
- any speed-up lies in (0, k + 1]: one computed from counts (expected, best) exactly; one
  measured from timing (realized against a twin or a profile, per bucket) may exceed it by
  noise, so it is withheld only above (k + 1) x :data:`TIMING_NOISE`;
- a measured draft cost is finite.

k is resolved by :func:`chain_bound`: the configured ``chain_length``, else the k the engine
shows (its position series or its published k), else the largest k any adapter reads
(:data:`ADAPTER_MAX_CHAIN`, the default ``max_position``), else none (no bound: the caller
notes it). Every surface that derives a speed-up, an acceptance length or a draft cost (the
daemon's windows and buckets, a cost profile at load, a curve or an interval of the answer,
state restored from disk) calls these functions; none re-states a bound.
"""

from __future__ import annotations

import math

__all__ = [
    "ADAPTER_MAX_CHAIN",
    "TIMING_NOISE",
    "acceptance_length_refusal",
    "chain_bound",
    "draft_cost_refusal",
    "speedup_refusal",
    "time_per_token_refusal",
]

#: The largest chain length an adapter reads (``global.limits.max_position``'s default, and
#: TensorRT-LLM's largest believed ``spec_num_tokens``): k + 1 = 65 when nothing else is known.
ADAPTER_MAX_CHAIN = 64
#: A time per output token (or a decoding step) outside [1 us, 10 min] is no measurement: a
#: request served a million tokens a second, or one token in more than ten minutes.
MIN_TOKEN_SECONDS = 1e-6
MAX_TOKEN_SECONDS = 600.0
#: How far above k + 1 a speed-up measured from timing may lie before it is withheld (two
#: servers' timings, or a server and a profile, differ by noise).
TIMING_NOISE = 1.1


def chain_bound(
    *,
    configured: int | None = None,
    detected: int | None = None,
    adapter_max: int | None = ADAPTER_MAX_CHAIN,
) -> int | None:
    """The k that bounds a figure: ``configured``, else ``detected``, else ``adapter_max``
    (0 or None each mean unknown), else None (no bound)."""
    for k in (configured, detected, adapter_max):
        if k is not None and k > 0:
            return k
    return None


def acceptance_length_refusal(length: float, *, chain_length: int | None) -> str | None:
    """Why a mean acceptance length cannot be (not finite, below 1, above k + 1), or None."""
    if not math.isfinite(length):
        return f"mean acceptance length {length}, not finite"
    if length < 1.0 - 1e-9:
        return f"mean acceptance length {length:.4g}, below 1"
    if chain_length is not None and length > chain_length + 1.0 + 1e-9:
        return f"mean acceptance length {length:.4g}, above k + 1 = {chain_length + 1}"
    return None


def speedup_refusal(speedup: float, *, chain_length: int | None, measured: bool) -> str | None:
    """Why a speed-up cannot be, or None: not finite, not above 0, or above k + 1 (one
    ``measured`` from timing: above (k + 1) x :data:`TIMING_NOISE`). Without k (None) only
    the first two are checked."""
    if not math.isfinite(speedup):
        return f"speed-up {speedup}, not finite"
    if speedup <= 0.0:
        return f"speed-up {speedup:.4g}, not above 0"
    if chain_length is None:
        return None
    top = chain_length + 1.0
    if measured:
        if speedup > top * TIMING_NOISE:
            return (
                f"speed-up {speedup:.4g} measured from timing, above (k + 1) x "
                f"{TIMING_NOISE:g} = {top * TIMING_NOISE:.4g} (k = {chain_length})"
            )
        return None
    if speedup > top + 1e-9:
        return f"speed-up {speedup:.4g}, above k + 1 = {top:g}"
    return None


def draft_cost_refusal(cost: float) -> str | None:
    """Why a measured draft cost cannot be used (not finite), or None."""
    if not math.isfinite(cost):
        return f"draft cost {cost}, not finite"
    return None


def time_per_token_refusal(seconds: float) -> str | None:
    """Why a time per output token or a step time cannot be a measurement (outside
    [:data:`MIN_TOKEN_SECONDS`, :data:`MAX_TOKEN_SECONDS`], or not finite), or None."""
    if not (MIN_TOKEN_SECONDS <= seconds <= MAX_TOKEN_SECONDS):
        return (
            f"{seconds:g} s, outside [{MIN_TOKEN_SECONDS:g} s, {MAX_TOKEN_SECONDS:g} s] (a "
            "million tokens a second to one token in ten minutes)"
        )
    return None
