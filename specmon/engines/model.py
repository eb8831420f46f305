"""Typed readings that engine adapters produce from a page: the common language of specmon.

Everything downstream (windows, arithmetic, exporter, CLI, A/B tool) sees these types and
never a raw page, so a new engine or a new source of numbers (a Prometheus query API, a file)
only has to produce them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field
from enum import StrEnum

from specmon.engines.classes import ClassReading
from specmon.parser import Problem
from specmon.records import record

__all__ = [
    "Context",
    "Engine",
    "GaugeScope",
    "ModelReading",
    "PageLimits",
    "PageReading",
    "RejectReason",
    "Rejection",
    "SpecCounters",
    "SpecGauges",
    "add_counters",
]


class Engine(StrEnum):
    VLLM = "vllm"
    VLLM_V0 = "vllm_v0"
    LLAMACPP = "llamacpp"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    TGI = "tgi"


@record
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

    def counts_dict(self) -> dict[str, object]:
        """The four counts, as written to JSON documents (results, lab book, profiles)."""
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "accepted_per_position": list(self.accepted_per_position),
        }


def add_counters(parts: Iterable[SpecCounters]) -> SpecCounters:
    """The sum of several counter increases (per-position element-wise, padded with zeros);
    a counter rounded in any part is rounded in the sum."""
    items = list(parts)
    width = max((len(p.accepted_per_position) for p in items), default=0)
    per_pos = [0] * width
    for part in items:
        for i, value in enumerate(part.accepted_per_position):
            per_pos[i] += value
    return SpecCounters(
        drafts=sum(p.drafts for p in items),
        draft_tokens=sum(p.draft_tokens for p in items),
        accepted_tokens=sum(p.accepted_tokens for p in items),
        accepted_per_position=tuple(per_pos),
        rounded=tuple(sorted({r for p in items for r in p.rounded})),
    )


class GaugeScope(StrEnum):
    """What span of time an engine's acceptance gauges cover."""

    #: Since the engine started (vLLM V0): specmon reports it as the ``lifetime`` window.
    LIFETIME = "lifetime"
    #: The engine's last logging interval (SGLang): specmon averages readings per window.
    LAST_INTERVAL = "last logging interval"
    #: The engine's last iteration (TensorRT-LLM): specmon averages readings per window.
    LAST_ITERATION = "last iteration"
    #: Measured by the engine itself and published beside its counters (TensorRT-LLM's draft
    #: overhead), averaged per window.
    ENGINE = "engine"


@record
class SpecGauges:
    """Engines that publish only gauges: no sample size, no window of our own."""

    scope: GaugeScope
    #: Accepted / drafted tokens (vLLM V0 counts every accepted position: a per-token alpha).
    acceptance_rate: float | None = None
    #: Tokens per verification step including the bonus token (SGLang spec_accept_length).
    mean_acceptance_length: float | None = None
    #: vLLM V0: emitted tokens / (steps * (k + 1)).
    efficiency: float | None = None
    #: TensorRT-LLM ``spec_decode_draft_overhead``: the drafter's wall time / the whole
    #: iteration's wall time, for the last iteration (two-model speculation only; 0 otherwise).
    draft_overhead: float | None = None


@record
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
    #: TGI ``tgi_batch_inference_duration_sum{method="decode"}``: the wall time of every
    #: decode step (one per engine step, whatever the batch); its ``_count`` is
    #: ``engine_steps``.
    engine_step_seconds: float | None = None
    #: TGI ``tgi_request_skipped_tokens_count`` - ``tgi_batch_next_size_sum``: one
    #: observation per request per generation step, less each request's prefill step.
    request_steps: int | None = None
    #: Engine replicas behind the model's series (vLLM data parallel: its ``engine`` label
    #: values, summed); None: one.
    engine_replicas: int | None = None


@record
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


class RejectReason(StrEnum):
    """Why a reading (a model's data on a page, or one value of it) was not used.

    The ``reason`` label of ``specmon_rejected_readings_total``.
    """

    NON_FINITE = "non_finite"
    NEGATIVE = "negative"
    #: A counter beyond 2^53: no engine counts that many tokens, and a double cannot hold
    #: the integer exactly.
    IMPLAUSIBLE = "implausible"
    DUPLICATE = "duplicate_series"
    POSITION_LIMIT = "position_limit"
    #: Per-position counts rising along the chain (more drafts accepted 3 deep than 2 deep).
    POSITIONS_RISE = "positions_rise"
    #: More drafts accepted at the first position than drafts.
    ABOVE_DRAFTS = "position_above_drafts"
    ACCEPTED_ABOVE_DRAFTED = "accepted_above_drafted"
    DRAFTS_ABOVE_DRAFT_TOKENS = "drafts_above_draft_tokens"
    GAUGE_RANGE = "gauge_out_of_range"
    MODEL_LIMIT = "model_limit"
    LABEL_LENGTH = "label_too_long"
    SERIES_LIMIT = "series_limit"
    #: Some counters went down while the drafts counter did not: not a restart, a bad page.
    PARTIAL_DECREASE = "partial_decrease"
    #: Two pages each valid alone whose difference breaks the physics of one (accepted at
    #: position 1 rising by 1,000 while drafts rise by 1): the interval between them is left
    #: out of every window, the readings stay.
    INCONSISTENT_INTERVAL = "inconsistent_interval"
    #: A window whose figures would be less precise than 2 % because the engine prints its
    #: counters rounded (llama.cpp past a million drafts) and the window holds too few
    #: drafts: its figures are withheld (counted once a scrape).
    IMPRECISE_WINDOW = "imprecise_window"
    #: A window figure outside its physical range (a survival above 1): withheld.
    OUT_OF_RANGE = "figure_out_of_range"
    #: A load sum or count (decode seconds, steps, tokens, prefills) that went down while the
    #: engine's step counter rose: not a restart. The interval is left out of the load figures.
    LOAD_DECREASE = "load_counter_decrease"
    #: An interval with more engine time than wall time (x 1.25 + 1 s per engine replica).
    ENGINE_TIME_ABOVE_WALL = "engine_time_above_wall"
    #: An interval whose decoding steps took no time at all (a mean step time of 0).
    ZERO_STEP_TIME = "zero_step_time"
    #: TGI: more requests prefilled (``tgi_batch_next_size_sum``) than step observations.
    PREFILLS_ABOVE_OBSERVATIONS = "prefills_above_observations"
    #: An engine's mean acceptance length gauge above k + 1 (TensorRT-LLM).
    LENGTH_ABOVE_CHAIN = "acceptance_length_above_chain"
    #: A speed-up measured from timing (realized against a twin or a profile, per bucket)
    #: above (k + 1) x 1.1, or a draft cost that is not finite: withheld (every scrape while
    #: the window holds the intervals behind it).
    SPEEDUP_ABOVE_BOUND = "speedup_above_bound"
    #: A window shorter than two of the intervals achieved between the target's reads (the
    #: overload governor stretched them): too few readings for a figure; withheld (counted
    #: once a scrape).
    SPARSE_WINDOW = "sparse_window"


@record
class Rejection:
    """One reading specmon refused, and why (``detail`` is bounded and safe to log)."""

    model: str
    reason: RejectReason
    detail: str
    #: True when the model's whole reading was dropped; False when only one value was (the
    #: model's other figures stand).
    whole_model: bool = True

    def __str__(self) -> str:
        return f"{self.model}: {self.detail}"


@record
class PageLimits:
    """Bounds on what one page may make specmon do (``global.limits`` in the config)."""

    #: Highest draft position accepted (1-based, as specmon exports it).
    max_position: int = 64
    #: Most models read from one page; the rest are rejected.
    max_models: int = 100
    #: Longest model name (label value) accepted.
    max_label_length: int = 256
    #: Longest line examined.
    max_line_length: int = 65536
    #: Most samples of the speculative-decoding families read from one page.
    max_samples: int = 50_000


@record
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
    #: Readings refused by validation (each with its reason); the good ones are in models.
    rejected: tuple[Rejection, ...] = ()
    #: Models the page names without speculative-decoding data (a baseline server): their
    #: ``context`` only; ``counters`` and ``gauges`` are None. Not part of ``models``.
    plain_models: tuple[ModelReading, ...] = ()
    #: Counts per request class (SGLang's custom-label counters, or a ``specmon tap`` read
    #: beside the page: :mod:`specmon.sources.tap`); None without either.
    classes: ClassReading | None = None

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
            why = f" (line {self.problems[0].line_number}: {self.problems[0].reason})"
            return "the response is not a Prometheus exposition page" + (
                why if self.problems else ""
            )
        if self.speculation:
            return None
        whole = [r for r in self.rejected if r.whole_model]
        if whole:
            shown = "; ".join(str(r) for r in whole[:3])
            more = f" (and {len(whole) - 3} more)" if len(whole) > 3 else ""
            return f"every speculative-decoding reading on the page was rejected: {shown}{more}"
        if self.engine is None:
            return (
                "no speculative-decoding metrics and no known engine on this page "
                "(expected vLLM, llama.cpp, SGLang, TensorRT-LLM or TGI metrics)"
            )
        return (
            f"{self.engine.value} page without speculative-decoding metrics: "
            "speculation is off, or this build is too old"
        )
