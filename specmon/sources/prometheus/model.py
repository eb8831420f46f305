"""What a read of a Prometheus source gives: its status, its instances and their figures,
and the limits it is read within."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from specmon.engines import (
    Engine,
    PageReading,
    identity_labels,
    read_parsed,
)
from specmon.parser import Page
from specmon.settings import TargetSettings

#: Label the freshness query puts on its two result sets ("newest", "oldest").
FRESHNESS_LABEL = "specmon_freshness"
MAX_LABELS_PER_SERIES = 64
MAX_LABEL_VALUE_CHARS = 2048
MAX_VALUE_CHARS = 64
MAX_NAME_CHARS = 200
#: Per sample name, the labels whose values tell one engine series from another within an
#: instance: derived from the adapters' declarations (``series_labels``), so an adapter that
#: reads a new label cannot have its series taken for duplicates. Two series of one name that
#: agree on all of them are the same engine series seen twice (two jobs scraping one endpoint,
#: unmerged HA replicas, instance_labels too coarse).
IDENTITY_LABELS: Mapping[str, tuple[str, ...]] = identity_labels()
#: Identity labels that hold a number (histogram bounds, summary quantiles): compared as numbers,
#: since Prometheus 3 writes ``le="1.0"`` where Prometheus 2 kept the exposition's ``le="1"``.
NUMERIC_LABELS = frozenset({"le", "quantile"})
MAX_ERRORS_KEPT = 5
#: A sample time further ahead of the read's evaluation time than this is refused (the
#: instance's series are bad): Prometheus stamps samples with its own clock at scrape time.
MAX_CLOCK_AHEAD = 300.0
MAX_WARNINGS_KEPT = 10
ERROR_BODY_BYTES = 2**20
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class QueryStrategy(StrEnum):
    #: One regex over ``__name__`` with every engine's names: one value query per read.
    SINGLE = "single"
    #: One regex query per engine adapter (vLLM, vLLM V0, llama.cpp, SGLang).
    PER_ENGINE = "per_engine"
    #: One query per sample name (about 35).
    PER_NAME = "per_name"


#: Chosen from bench/promsource.py's measurements (see bench/results/HISTORY.md).
DEFAULT_STRATEGY = QueryStrategy.SINGLE


class ReadStatus(StrEnum):
    """The outcome of one read of the whole fleet."""

    OK = "ok"
    #: Answered, with warnings (Prometheus/Thanos ``warnings``, VictoriaMetrics ``isPartial``):
    #: some data may be missing.
    PARTIAL = "partial"
    #: No connection (refused, DNS, TLS handshake, reset).
    DOWN = "down"
    #: No complete answer within the timeout (ours, or Prometheus's errorType "timeout").
    TIMEOUT = "timeout"
    #: A non-2xx answer that is not a Prometheus API error (proxy, auth, wrong URL).
    HTTP_ERROR = "http_error"
    #: Prometheus said ``"status": "error"`` (``error_type`` and ``message`` say what).
    QUERY_ERROR = "query_error"
    #: Not a valid API answer: not JSON, wrong shape, wrong resultType.
    BAD_RESPONSE = "bad_response"
    #: Over a cap: response bytes, series or instances.
    TOO_LARGE = "too_large"
    #: A token, password or TLS file could not be read or used; no request was sent.
    CREDENTIALS_ERROR = "credentials_error"
    #: A bug in specmon (reported, never raised).
    INTERNAL_ERROR = "internal_error"


@dataclass(frozen=True, slots=True)
class InstanceRead:
    """One instance (one future target) as this read saw it."""

    name: str
    #: ``instance_labels`` and their values.
    labels: Mapping[str, str]
    #: Labels with one value on every series of the instance (instance labels, ``job``, ...):
    #: what overrides matched.
    common_labels: Mapping[str, str]
    engine: Engine | None
    #: The instance's series as an exposition page; None when they are unusable (``error``).
    page: Page | None
    settings: TargetSettings
    #: Newest and oldest sample time (Unix seconds) among its series; None if unknown.
    newest_sample: float | None
    oldest_sample: float | None
    #: True when a sample is older than ``stale_after`` (or its age is unknown): its numbers
    #: are not current and must not be shown as such.
    stale: bool
    #: Whether the engine's speculative-decoding series are present.
    speculation: bool
    series: int
    #: Seconds from the newest sample to the evaluation time; None if unknown.
    age_seconds: float | None = None
    error: str | None = None

    def reading(self) -> PageReading | None:
        """The page read with the engine adapters (model override applied); None without a
        page."""
        if self.page is None:
            return None
        return read_parsed(self.page, engine=self.engine, model=self.settings.model)


@dataclass(frozen=True, slots=True)
class ReadResult:
    status: ReadStatus
    #: Evaluation time sent to Prometheus (Unix seconds).
    at: float
    #: Sorted by name; empty unless the status is OK or PARTIAL.
    instances: tuple[InstanceRead, ...] = ()
    #: What went wrong, for an operator (no secrets); None when OK.
    message: str | None = None
    #: Prometheus's ``errorType`` (``bad_data``, ``execution``, ``timeout``, ...).
    error_type: str | None = None
    http_status: int | None = None
    warnings: tuple[str, ...] = ()
    #: Read-level problems: series that belong to no instance, malformed freshness answers.
    problems: tuple[str, ...] = ()
    #: Whether the instances may be used: OK, or PARTIAL with ``accept_partial``.
    usable: bool = False
    queries: int = 0
    #: Decoded (uncompressed) response bytes of all queries.
    bytes: int = 0
    series: int = 0
    duration_seconds: float = 0.0
    #: CPU time spent decoding JSON and building pages (``time.process_time``).
    parse_cpu_seconds: float = 0.0

    @property
    def stale(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.instances if i.stale)

    def by_name(self) -> dict[str, InstanceRead]:
        return {i.name: i for i in self.instances}
