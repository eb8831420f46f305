"""Typed readings that engine adapters produce from a page: the common language of specmon.

Everything downstream (windows, arithmetic, exporter, CLI, A/B tool) sees these types and
never a raw page, so a new engine or a new source of numbers (a Prometheus query API, a file)
only has to produce them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from specmon.exposition import Problem

__all__ = [
    "Context",
    "Engine",
    "ModelReading",
    "PageReading",
    "SpecCounters",
    "SpecGauges",
]


class Engine(StrEnum):
    VLLM = "vllm"
    VLLM_V0 = "vllm_v0"
    LLAMACPP = "llamacpp"
    SGLANG = "sglang"


@dataclass(frozen=True, slots=True)
class SpecCounters:
    """Lifetime speculative-decoding counters of one model, summed over engine processes.

    ``accepted_per_position[i]`` counts drafts whose accepted prefix was at least i + 1 tokens
    long (the engines' 0-based position i; specmon's position i + 1). An empty tuple means the
    engine published no per-position series (yet).
    """

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...] = ()
    #: Counters the engine printed with reduced precision (llama.cpp: 6 significant digits).
    rounded: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SpecGauges:
    """Engines that publish only gauges: no sample size, no window of our own."""

    #: "lifetime" (vLLM V0) or "last logging interval" (SGLang).
    scope: str
    #: Accepted / drafted tokens (vLLM V0 counts every accepted position: a per-token alpha).
    acceptance_rate: float | None = None
    #: Tokens per verification step including the bonus token (SGLang spec_accept_length).
    mean_acceptance_length: float | None = None
    #: vLLM V0: emitted tokens / (steps * (k + 1)).
    efficiency: float | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """Neighbouring series that help read acceptance: load and step time.

    Raw lifetime values as the engine printed them (summed over vLLM's ``engine`` label);
    ``specmon.load`` turns two of them into an interval's concurrency, step time and time per
    output token. What each means, per engine, with the evidence: docs/load-signals.md.
    """

    #: vLLM ``num_requests_running``; llama.cpp ``requests_processing`` (point samples).
    requests_running: float | None = None
    #: vLLM ``generation_tokens_total``; llama.cpp ``tokens_predicted_total``.
    generation_tokens: int | None = None
    #: vLLM ``inter_token_latency_seconds`` sum and count: one observation per request per
    #: engine step (several tokens under speculation); the sum is the requests' decode time.
    inter_token_latency_sum_seconds: float | None = None
    inter_token_latency_count: int | None = None
    #: vLLM ``num_requests_waiting``; llama.cpp ``requests_deferred``.
    requests_waiting: float | None = None
    #: vLLM ``time_to_first_token_seconds_count``: requests whose first token (from their
    #: prefill step) was generated.
    first_token_count: int | None = None
    #: Engine steps: vLLM ``iteration_tokens_total_count``; llama.cpp ``n_decode_total``.
    engine_steps: int | None = None
    #: llama.cpp ``n_busy_slots_per_decode``: busy slots per decode call over the server's
    #: lifetime (a ratio, not a current value).
    busy_slots_per_decode: float | None = None
    #: llama.cpp ``tokens_predicted_seconds_total``: the decode time of finished requests.
    generation_seconds: float | None = None
    #: vLLM ``request_time_per_output_token_seconds`` sum and count (per finished request).
    request_tpot_sum_seconds: float | None = None
    request_tpot_count: int | None = None
    #: Significant digits the engine prints its numbers with (llama.cpp: 6); None = exact.
    significant_digits: int | None = None


@dataclass(frozen=True, slots=True)
class ModelReading:
    model: str
    counters: SpecCounters | None = None
    gauges: SpecGauges | None = None
    context: Context = field(default_factory=Context)


@dataclass(frozen=True, slots=True)
class PageReading:
    """What one page says: which engine, and per model its speculative-decoding data."""

    engine: Engine | None
    models: tuple[ModelReading, ...]
    #: Human-readable remarks: precision caveats, what an engine cannot tell.
    notes: tuple[str, ...] = ()
    malformed: int = 0
    problems: tuple[Problem, ...] = ()
    #: False when the page had content but not a single valid exposition line.
    is_exposition: bool = True
    #: Models the page names without speculative-decoding data (a baseline server): their
    #: ``context`` only; ``counters`` and ``gauges`` are None. Not part of ``models``.
    plain_models: tuple[ModelReading, ...] = ()

    def context_of(self, model: str) -> Context | None:
        """The load series of ``model`` (speculating or not), or None when the page lacks it."""
        for reading in (*self.models, *self.plain_models):
            if reading.model == model:
                return reading.context
        return None

    @property
    def speculation(self) -> bool:
        return any(m.counters is not None or m.gauges is not None for m in self.models)

    @property
    def message(self) -> str | None:
        """Why there is nothing to compute, in words for an operator; None when there is."""
        if not self.is_exposition:
            return "the response is not a Prometheus exposition page"
        if self.speculation:
            return None
        if self.engine is None:
            return (
                "no speculative-decoding metrics and no known engine on this page "
                "(expected vLLM, llama.cpp or SGLang metrics)"
            )
        return (
            f"{self.engine.value} page without speculative-decoding metrics: "
            "speculation is off, or this build is too old"
        )
