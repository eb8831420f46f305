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
    TRTLLM = "trtllm"
    TGI = "tgi"


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
    #: Counters the engine does not publish at all ("drafts": TensorRT-LLM without its
    #: per-position series; "draft_tokens": TGI, SGLang). Their value here is 0 and means
    #: nothing; :mod:`specmon.report` says what can and cannot be computed without them.
    unknown: tuple[str, ...] = ()
    #: Counters specmon derived from other series rather than read (SGLang's accepted tokens:
    #: generation tokens - verification steps - requests).
    derived: tuple[str, ...] = ()

    def knows(self, name: str) -> bool:
        """True unless the engine publishes no counter ``name`` (drafts, draft_tokens)."""
        return name not in self.unknown


@dataclass(frozen=True, slots=True)
class SpecGauges:
    """Engines that publish only gauges: no sample size, no window of our own."""

    #: "lifetime" (vLLM V0), "last logging interval" (SGLang), "last iteration" (TensorRT-LLM).
    scope: str
    #: Accepted / drafted tokens (vLLM V0 counts every accepted position: a per-token alpha).
    acceptance_rate: float | None = None
    #: Tokens per verification step including the bonus token (SGLang spec_accept_length).
    mean_acceptance_length: float | None = None
    #: vLLM V0: emitted tokens / (steps * (k + 1)).
    efficiency: float | None = None
    #: TensorRT-LLM ``spec_decode_draft_overhead``: the drafter's wall time / the whole
    #: iteration's wall time, for the last iteration (two-model speculation only; 0 otherwise).
    draft_overhead: float | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """Neighbouring series that help read acceptance: load and step time."""

    requests_running: float | None = None
    generation_tokens: int | None = None
    inter_token_latency_sum_seconds: float | None = None
    inter_token_latency_count: int | None = None


@dataclass(frozen=True, slots=True)
class ModelReading:
    model: str
    counters: SpecCounters | None = None
    #: Engines with counters may publish gauges beside them (TensorRT-LLM's draft overhead).
    gauges: SpecGauges | None = None
    context: Context = field(default_factory=Context)
    #: The chain length the engine publishes as configuration (SGLang ``spec_num_steps``,
    #: TensorRT-LLM ``speculative_config_info{spec_num_tokens}``, TGI's largest histogram
    #: bucket); None when it publishes none. Position series, when present, count too.
    chain_length: int | None = None


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
                "(expected vLLM, llama.cpp, SGLang, TensorRT-LLM or TGI metrics)"
            )
        return (
            f"{self.engine.value} page without speculative-decoding metrics: "
            "speculation is off, or this build is too old"
        )
