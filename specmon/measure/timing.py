"""Streamed token timing of one side's requests: time to first token and inter-token latency,
p50 / p90 / p99 over the requests, and the two sides' ratios. Pure.

Per request (:mod:`specmon.measure.stream`): TTFT is the time from sending it to its first
chunk with content; ITL is (last chunk - first chunk) / (completion tokens - 1), AIPerf's and
GuideLLM's definition, so it is the mean time per token after the first, whatever the chunks
carried. A request whose server sent no ``usage`` has a TTFT and no ITL (specmon never
estimates a token count); one of a single token has no ITL either. Percentiles by linear
interpolation between closest ranks (:func:`specmon.measure.stats.percentile`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specmon.measure.results import Outcome
from specmon.measure.stats import percentile, ratio

__all__ = ["QUANTILES", "TokenTiming", "itl_of", "timing_of", "timing_ratio"]

QUANTILES = (50, 90, 99)


def itl_of(outcome: Outcome) -> float | None:
    """The request's inter-token latency, or None (not streamed, no usage, one token)."""
    answer = outcome.answer
    if answer is None or outcome.first_token is None or outcome.last_token is None:
        return None
    tokens = answer.completion_tokens
    if tokens is None or tokens < 2:
        return None
    return (outcome.last_token - outcome.first_token) / (tokens - 1)


@dataclass(frozen=True, slots=True)
class TokenTiming:
    """One side's TTFT and ITL percentiles (seconds), keyed by QUANTILES."""

    #: Requests with a first token (streamed, completed, some content).
    streamed: int
    ttft: dict[int, float | None]
    #: Requests with an ITL (usage known, at least two tokens).
    with_itl: int
    itl: dict[int, float | None]

    def as_dict(self) -> dict[str, object]:
        return {
            "streamed_requests": self.streamed,
            "ttft_seconds": {f"p{q}": v for q, v in self.ttft.items()},
            "itl_requests": self.with_itl,
            "itl_seconds": {f"p{q}": v for q, v in self.itl.items()},
        }


def timing_of(outcomes: Sequence[Outcome]) -> TokenTiming:
    ttfts = [o.first_token for o in outcomes if o.answer is not None and o.first_token is not None]
    itls = [v for o in outcomes if (v := itl_of(o)) is not None]
    return TokenTiming(
        streamed=len(ttfts),
        ttft={q: percentile(ttfts, q) for q in QUANTILES},
        with_itl=len(itls),
        itl={q: percentile(itls, q) for q in QUANTILES},
    )


def timing_ratio(
    speculative: TokenTiming, baseline: TokenTiming
) -> dict[str, dict[str, float | None]]:
    """With the draft / without, per percentile: below 1 the draft made it faster."""
    return {
        "ttft": {f"p{q}": ratio(speculative.ttft[q], baseline.ttft[q]) for q in QUANTILES},
        "itl": {f"p{q}": ratio(speculative.itl[q], baseline.itl[q]) for q in QUANTILES},
    }
