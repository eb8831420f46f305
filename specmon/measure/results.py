"""What a measurement run collected, before any analysis: plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from specmon.engines.model import SpecCounters, SpecGauges
from specmon.load import LoadInterval
from specmon.measure.endpoints import ChatAnswer, Endpoint, ServerInfo
from specmon.measure.levels import LoadLevel

__all__ = [
    "MetricsDelta",
    "Outcome",
    "RawMeasurement",
    "Settings",
    "SideRun",
    "WorkloadRun",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: the answer or the error, and how long it took."""

    workload: str
    prompt_index: int
    repeat: int
    latency: float
    answer: ChatAnswer | None = None
    error: str | None = None
    #: Streamed: seconds from sending to the first and the last chunk with content.
    first_token: float | None = None
    last_token: float | None = None
    #: Seconds from the start of its side's run to sending it.
    sent_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.answer is not None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.workload, self.prompt_index, self.repeat)


@dataclass(frozen=True, slots=True)
class SideRun:
    """One workload's requests to one server at one level."""

    outcomes: tuple[Outcome, ...]
    #: Wall time from the first request sent to the last answer received.
    seconds: float
    #: Open loop: requests that found MAX_IN_FLIGHT requests already waiting and were sent
    #: late (the schedule was not kept).
    delayed: int = 0
    #: Requests sent again on another connection after the server had closed an idle one
    #: (specmon.measure.client).
    resent: int = 0


@dataclass(frozen=True, slots=True)
class MetricsDelta:
    """The speculative server's counters around one workload's run."""

    #: Increase over the run (reset-aware), or None.
    counters: SpecCounters | None = None
    #: Engines that publish gauges only (vLLM V0, SGLang): the page after the run.
    gauges: SpecGauges | None = None
    engine: str | None = None
    #: Engine restarts detected between the two scrapes.
    resets: int = 0
    #: Why there are no counters (the metrics page could not be read, has no speculation...).
    error: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkloadRun:
    workload: str
    level: LoadLevel
    #: Requests per repeat, and the repeats sent at this level.
    prompts: int
    baseline: SideRun
    speculative: SideRun
    metrics: MetricsDelta
    #: Each server's load counters over its run (docs/load-signals.md); None when its page
    #: lacks the series or could not be read.
    baseline_load: LoadInterval | None = None
    speculative_load: LoadInterval | None = None
    repeats: int = 1


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything that shapes the requests, for the record. Never holds a secret."""

    model: str
    max_tokens: int
    seed: int
    #: Times each prompt is sent per server and level; None: "auto" (levels.repeats_at).
    repeats: int | None
    concurrency: tuple[int, ...]
    workloads: tuple[str, ...]
    prompts_file: str | None = None
    warmup: int = 1
    ignore_eos: bool = False
    timeout: float = 300.0
    #: The name of the environment variable the API key came from (not its value).
    api_key_env: str | None = None
    api_key_used: bool = False
    label: str | None = None
    #: Open-loop levels, requests per second (Poisson arrivals), after the concurrency ones.
    rates: tuple[float, ...] = ()
    #: Streamed requests (time to first token, inter-token latency).
    stream: bool = True
    #: Synthetic workloads: their prompt lengths in the server's tokens.
    input_tokens: tuple[int, ...] = ()
    dataset_file: str | None = None

    @property
    def levels(self) -> tuple[LoadLevel, ...]:
        """Every level in the order measured: the concurrency levels, then the rates."""
        return (*(LoadLevel(concurrency=c) for c in self.concurrency),
                *(LoadLevel(rate=r) for r in self.rates))  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "temperature": 0,
            "top_p": 1,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "seeds": "seed + repeat index (repeats are distinct requests)",
            "repeats": "auto" if self.repeats is None else self.repeats,
            "concurrency": list(self.concurrency),
            "rates_per_second": list(self.rates),
            "stream": self.stream,
            "input_tokens": list(self.input_tokens),
            "dataset_file": self.dataset_file,
            "workloads": list(self.workloads),
            "prompts_file": self.prompts_file,
            "warmup": self.warmup,
            "ignore_eos": self.ignore_eos,
            "timeout_seconds": self.timeout,
            "api_key_env": self.api_key_env,
            "api_key_used": self.api_key_used,
            "label": self.label,
        }


@dataclass(frozen=True, slots=True)
class RawMeasurement:
    settings: Settings
    baseline: Endpoint
    speculative: Endpoint
    baseline_info: ServerInfo
    speculative_info: ServerInfo
    runs: tuple[WorkloadRun, ...]
    #: ISO 8601 local time with offset.
    started: str
    finished: str
    #: Drafts the baseline server counted during the whole run (None: not readable).
    baseline_drafts: int | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: What the output says about the workloads (synthetic prompts made, answers dropped).
    workload_notes: tuple[str, ...] = ()
