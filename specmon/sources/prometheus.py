"""Read the engines' raw series through a Prometheus-compatible query API (Prometheus, Thanos,
Mimir, Cortex, VictoriaMetrics), one page per instance.

A read sends a few instant queries for the whole fleet (never one per instance), all evaluated
at the same ``time``:

- the **value** queries select every sample name the engine adapters read
  (:func:`specmon.engines.wanted_names`), restricted by the configured selector; by default
  one query with a regex over ``__name__`` (:class:`QueryStrategy`; ``bench/promsource.py``
  measures the alternatives);
- one **freshness** query, ``max``/``min`` by the instance labels of ``timestamp()`` of each
  engine's marker and running-requests series: the newest and oldest sample time of each
  instance (all series of one scrape share its time). An instant query answers
  with the last sample within Prometheus's lookback (5 minutes by default) stamped with the
  evaluation time, so without this a Prometheus that stopped scraping an instance would keep
  serving its last numbers as if they were current. ``timestamp()`` must be applied to a bare
  selector (on anything else it returns the evaluation time) and drops the metric name, so it
  is applied per name and the results are joined with ``or``.

The value series are grouped by ``instance_labels``; each group becomes a
:class:`specmon.parser.Page` with the sample names and labels the engine would have printed
(minus ``__name__`` and the grouping labels; Prometheus's other target labels such as ``job``
stay and are ignored by the adapters), so ``specmon.engines.read_parsed`` reads it with the
same adapters and gets the same counters as a direct scrape.

Instance names: the values of ``instance_labels`` in order, joined by ``/``, each with ``%``,
``/`` and control characters percent-encoded (so distinct label values never give one name),
after the optional ``name_prefix``. Names longer than 200 characters keep their first 183 and
end in ``~`` and 16 hex digits of the SHA-256 of the full name. ``instance_labels: [instance]``
gives ``10.0.0.7:8000`` (the name file_sd gives the same target); ``[namespace, pod]`` gives
``team-a/vllm-0``.

Safety: explicit timeouts (the whole read, and Prometheus's own ``timeout`` parameter); caps on
the decoded bytes of every response together, on series, instances, label counts and lengths;
JSON constants (NaN, Infinity) and deep nesting rejected; a duplicated series makes its
instance unusable rather than double counted; messages never contain the configured headers,
tokens or passwords (remote text is truncated, cleaned and scrubbed of them).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import os
import re
import ssl
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from specmon import files
from specmon.engines import ADAPTERS as _ADAPTERS
from specmon.engines import (
    Engine,
    PageReading,
    detect_engine_from_names,
    read_parsed,
    wanted_names,
)
from specmon.parser import Page, Problem, Sample
from specmon.process.memory import collector_paused
from specmon.secrets import redact
from specmon.settings import TargetSettings
from specmon.sources.http import open_session
from specmon.sources.prometheus_config import (
    PrometheusSourceConfig,
    QueryMethod,
    build_ssl_context,
    quote,
)

__all__ = [
    "FRESHNESS_LABEL",
    "IN_FLIGHT",
    "InFlight",
    "InstanceRead",
    "PrometheusSource",
    "QueryStrategy",
    "ReadResult",
    "ReadStatus",
    "build_instances",
    "check_shape",
    "freshness_names",
    "freshness_query",
    "instance_name",
    "parse_answer",
    "value_queries",
]

#: Label the freshness query puts on its two result sets ("newest", "oldest").
FRESHNESS_LABEL = "specmon_freshness"
MAX_LABELS_PER_SERIES = 64
MAX_LABEL_VALUE_CHARS = 2048
MAX_VALUE_CHARS = 64
MAX_NAME_CHARS = 200
#: Labels whose values tell one engine series from another within an instance. Two series
#: of one name that agree on all of them are the same engine series seen twice (two jobs
#: scraping one endpoint, unmerged HA replicas, instance_labels too coarse). TensorRT-LLM
#: names its positions ``token_position``; histogram buckets differ by ``le``.
IDENTITY_LABELS = (
    "model_name",
    "engine",
    "position",
    "token_position",
    "le",
    "dp_rank",
    "tp_rank",
    "engine_type",
)
_MAX_ERRORS_KEPT = 5
#: A sample time further ahead of the read's evaluation time than this is refused (the
#: instance's series are bad): Prometheus stamps samples with its own clock at scrape time.
MAX_CLOCK_AHEAD = 300.0
_MAX_WARNINGS_KEPT = 10
_ERROR_BODY_BYTES = 2**20
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


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


# --------------------------------------------------------------------------- queries


def _selector_suffix(config: PrometheusSourceConfig) -> str:
    inner = config.selector.promql()
    return "," + inner if inner else ""


def _engines(config: PrometheusSourceConfig) -> tuple[Engine, ...]:
    return (config.engine,) if config.engine is not None else tuple(_ADAPTERS)


def value_queries(
    config: PrometheusSourceConfig, strategy: QueryStrategy = DEFAULT_STRATEGY
) -> tuple[str, ...]:
    """The PromQL value queries of one read."""
    inner = config.selector.promql()
    if strategy is QueryStrategy.PER_NAME:
        return tuple(f"{name}{{{inner}}}" for name in wanted_names(config.engine))
    groups: list[tuple[str, ...]]
    if strategy is QueryStrategy.PER_ENGINE:
        groups = [wanted_names(engine) for engine in _engines(config)]
    else:
        groups = [wanted_names(config.engine)]
    suffix = _selector_suffix(config)
    return tuple(f"{{__name__=~{quote('|'.join(names))}{suffix}}}" for names in groups)


#: Series present on every page of an engine, with or without speculation: the
#: running-requests gauges. With the adapters' speculative markers they date an instance.
_PRESENCE = (
    "vllm:num_requests_running",
    "vllm_num_requests_running",
    "llamacpp:requests_processing",
    "sglang:num_running_reqs",
)


def freshness_names(engine: Engine | None = None) -> tuple[str, ...]:
    """The names whose sample times date an instance: each engine's speculative marker
    series (drafts counters, SGLang's and vLLM V0's gauges) and running-requests gauge. All
    series of one scrape share its timestamp, so these few stand for the whole page; dating
    every wanted name cost Prometheus about 5 times more at 2,000 instances
    (bench/results/HISTORY.md)."""
    wanted = wanted_names(engine)
    engines = (engine,) if engine is not None else tuple(_ADAPTERS)
    markers = tuple(m for e in engines for m in _ADAPTERS[e].markers)
    return tuple(n for n in wanted if n.startswith(markers) or n in _PRESENCE)


def freshness_query(config: PrometheusSourceConfig) -> str:
    """Newest and oldest sample time per instance (over :func:`freshness_names`), as two
    result sets told apart by :data:`FRESHNESS_LABEL`."""
    inner = config.selector.promql()
    stamps = " or ".join(f"timestamp({name}{{{inner}}})" for name in freshness_names(config.engine))
    by = ", ".join(config.instance_labels)
    return (
        f'label_replace(max by ({by}) ({stamps}), "{FRESHNESS_LABEL}", "newest", "", "")'
        f' or label_replace(min by ({by}) ({stamps}), "{FRESHNESS_LABEL}", "oldest", "", "")'
    )


def _escape_part(value: str) -> str:
    """``%``, ``/``, control and invisible formatting characters (bidi overrides) as ``%XX``
    of their UTF-8 bytes: a name shows as what it is, on one line."""
    if value.isascii() and "%" not in value and "/" not in value and not _CONTROL.search(value):
        return value
    out = []
    for ch in value:
        if ch in "%/" or unicodedata.category(ch) in ("Cc", "Cf"):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
        else:
            out.append(ch)
    return "".join(out)


def instance_name(values: Sequence[str], *, prefix: str = "") -> str:
    """The target name for an instance with these instance-label values (see the module
    docstring). Stable: the same values always give the same name."""
    name = prefix + "/".join(_escape_part(v) for v in values)
    if len(name) > MAX_NAME_CHARS:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        name = name[: MAX_NAME_CHARS - 17] + "~" + digest
    return name


# --------------------------------------------------------------------------- answers


class _Failure(Exception):
    def __init__(
        self,
        status: ReadStatus,
        message: str,
        *,
        error_type: str | None = None,
        http_status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.http_status = http_status


@dataclass(frozen=True, slots=True)
class Answer:
    """A successful vector answer."""

    result: list[Any]
    warnings: tuple[str, ...] = ()
    partial: bool = False


def _clean(text: object, limit: int = 300, secrets: Sequence[str] = ()) -> str:
    """Remote text made safe to log: the secrets taken out of the whole text first (a cut
    must never leave part of one behind), then valid UTF-8, no control characters, cut."""
    value = redact(str(text), secrets, limit=limit * 4)
    value = value.encode("utf-8", "replace").decode("utf-8")
    value = _CONTROL.sub(" ", value).strip()
    return value if len(value) <= limit else value[:limit] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"JSON constant {name} is not allowed")


def check_shape(body: bytes, *, max_series: int) -> None:
    """Bound what decoding ``body`` can build, before decoding it: a vector answer holds about
    two objects and one array a series, so more than ``max_series`` times that is refused as
    ``too_large`` (a few C-speed scans; 60 MB of ``{}`` decoded would take gigabytes and hold
    the event loop for seconds). Deep nesting is refused by the decoder itself."""
    limit = 3 * max_series + 64
    if body.count(b"{") + body.count(b"[") > limit:
        raise _Failure(
            ReadStatus.TOO_LARGE,
            f"the answer holds more JSON objects and arrays than max_series ({max_series}) "
            "series could; narrow the selector or raise max_series",
        )


def parse_answer(body: bytes, *, http_status: int = 200, secrets: Sequence[str] = ()) -> Answer:
    """Decode one ``/api/v1/query`` answer; raise :class:`_Failure` unless it is a
    successful vector. Error answers (any HTTP status) become QUERY_ERROR or TIMEOUT."""
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise _Failure(
            ReadStatus.BAD_RESPONSE, "the answer's JSON is nested too deeply", http_status=None
        ) from None
    except ValueError as exc:  # also UnicodeDecodeError and over-long integers
        if http_status != 200:
            raise _http_failure(http_status, body, secrets) from None
        raise _Failure(
            ReadStatus.BAD_RESPONSE, f"the answer is not JSON: {_clean(exc, 120, secrets)}"
        ) from None
    if not isinstance(doc, dict):
        if http_status != 200:
            raise _http_failure(http_status, body, secrets)
        raise _Failure(ReadStatus.BAD_RESPONSE, f"the answer is a JSON {type(doc).__name__}")
    status = doc.get("status")
    if status == "error":
        error_type = _clean(doc.get("errorType", ""), 60, secrets) or None
        error = _clean(doc.get("error", ""), 500, secrets)
        kind = ReadStatus.TIMEOUT if error_type == "timeout" else ReadStatus.QUERY_ERROR
        raise _Failure(
            kind,
            f"Prometheus answered {error_type or 'an error'}: {error or '(no message)'}",
            error_type=error_type,
            http_status=http_status,
        )
    if http_status != 200:
        raise _http_failure(http_status, body, secrets)
    if status != "success":
        raise _Failure(
            ReadStatus.BAD_RESPONSE, f'"status" is {_clean(status, 40, secrets)!r}, not "success"'
        )
    data = doc.get("data")
    if not isinstance(data, dict):
        raise _Failure(ReadStatus.BAD_RESPONSE, '"data" is not an object')
    result_type = data.get("resultType")
    if result_type != "vector":
        raise _Failure(
            ReadStatus.BAD_RESPONSE,
            f'"resultType" is {_clean(result_type, 40, secrets)!r}; an instant query must give a vector',
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise _Failure(ReadStatus.BAD_RESPONSE, '"result" is not a list')
    raw_warnings = doc.get("warnings", [])
    if raw_warnings is None:
        raw_warnings = []
    if not isinstance(raw_warnings, list):
        raise _Failure(ReadStatus.BAD_RESPONSE, '"warnings" is not a list')
    warnings = tuple(_clean(w, 300, secrets) for w in raw_warnings[:_MAX_WARNINGS_KEPT])
    if len(raw_warnings) > _MAX_WARNINGS_KEPT:
        warnings += (f"... and {len(raw_warnings) - _MAX_WARNINGS_KEPT} more warnings",)
    partial = doc.get("isPartial") is True  # VictoriaMetrics cluster
    if partial and not warnings:
        warnings = ("isPartial: some storage nodes did not answer",)
    return Answer(result=result, warnings=warnings, partial=partial or bool(warnings))


def _http_failure(http_status: int, body: bytes, secrets: Sequence[str] = ()) -> _Failure:
    snippet = _clean(body.decode("utf-8", "replace"), 200, secrets)
    hint = {
        401: " (check bearer_token_file or basic_auth)",
        403: " (check the credentials' permissions)",
        404: " (check url: the base URL of the API, with any path prefix)",
        405: " (try method: GET or POST)",
    }.get(http_status, "")
    detail = f": {snippet}" if snippet else ""
    return _Failure(
        ReadStatus.HTTP_ERROR, f"HTTP {http_status}{hint}{detail}", http_status=http_status
    )


# --------------------------------------------------------------------------- grouping


class _Group:
    __slots__ = (
        "bad",
        "bad_example",
        "common",
        "dupe_example",
        "dupes",
        "identities",
        "key",
        "samples",
        "series",
    )

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = key
        self.samples: dict[str, list[Sample]] = {}
        self.identities: dict[tuple[str | None, ...], Mapping[str, str]] = {}
        self.common: dict[str, str] | None = None
        self.series = 0
        self.bad = 0
        self.bad_example = ""
        self.dupes = 0
        self.dupe_example = ""

    def error(self, message: str) -> None:
        self.bad += 1
        if not self.bad_example:
            self.bad_example = message

    def duplicate(self, message: str) -> None:
        self.dupes += 1
        if not self.dupe_example:
            self.dupe_example = message

    def message(self) -> str | None:
        """Why the instance's series cannot be used, or None."""
        parts = []
        if self.dupes:
            parts.append(
                f"{self.dupes} series appear more than once (first: {self.dupe_example}); they "
                "would be counted twice: add the label that tells them apart to "
                "instance_labels, narrow the selector or deduplicate replicas"
            )
        if self.bad:
            parts.append(f"{self.bad} malformed series (first: {self.bad_example})")
        return "; ".join(parts) or None


def _describe(name: str, labels: Mapping[str, str]) -> str:
    shown = ",".join(f"{k}={_clean(v, 60)!r}" for k, v in sorted(labels.items())[:8])
    return f"{name}{{{shown}}}"


class _LabelCheck:
    """Validates label names once each (a fleet repeats a handful of names)."""

    def __init__(self) -> None:
        self.good: set[str] = set()
        #: Label values already found valid (job, model_name, position, ... repeat).
        self.values: set[str] = set()

    def problem(self, metric: Mapping[Any, Any]) -> str | None:
        if len(metric) > MAX_LABELS_PER_SERIES:
            return f"more than {MAX_LABELS_PER_SERIES} labels"
        good, values = self.good, self.values
        for key, value in metric.items():
            if key not in good:
                if not isinstance(key, str) or not _LABEL_NAME.fullmatch(key):
                    return f"invalid label name {_clean(key, 60)!r}"
                good.add(key)
            if type(value) is not str:
                return f"label {key} is not a string"
            if value in values:
                continue
            if len(value) > MAX_LABEL_VALUE_CHARS:
                return f"label {key} is longer than {MAX_LABEL_VALUE_CHARS} characters"
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    return f"label {key} is not valid UTF-8"
            if len(values) < 100_000:
                values.add(value)
        return None


def build_instances(
    answers: Iterable[list[Any]],
    freshness: Sequence[Any] | None,
    *,
    config: PrometheusSourceConfig,
    at: float,
    consume: bool = False,
) -> tuple[list[InstanceRead], list[str], int]:
    """Group value-query results into instances (pure; no I/O).

    Returns the instances sorted by name, the read-level problems and the number of series.
    Raises :class:`_Failure` (TOO_LARGE) when the series or instances exceed the caps.
    ``consume``: each result element is replaced by None once grouped, so the decoded answer
    is let go while the instances are built (the read's peak memory at fleet size).
    """
    wanted = frozenset(wanted_names(config.engine))
    inst_labels = config.instance_labels
    inst_set = frozenset(inst_labels)
    checker = _LabelCheck()
    groups: dict[tuple[str, ...], _Group] = {}
    problems: list[str] = []
    unattributed = 0
    total = 0
    for result in answers:
        total += len(result)
        if total > config.max_series:
            raise _Failure(
                ReadStatus.TOO_LARGE,
                f"more than max_series ({config.max_series}) series; narrow the selector "
                "or raise max_series",
            )
        for index, item in enumerate(result):
            if consume:
                result[index] = None
            metric = item.get("metric") if isinstance(item, dict) else None
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(metric, dict):
                unattributed += 1
                _note(problems, "a result element without a metric object")
                continue
            bad = checker.problem(metric)
            key = tuple(metric.get(label, "") for label in inst_labels)
            if bad is not None and not all(
                isinstance(v, str) and len(v) <= MAX_LABEL_VALUE_CHARS for v in key
            ):
                unattributed += 1
                _note(problems, f"a series with unusable instance labels: {bad}")
                continue
            if not any(key):
                unattributed += 1
                _note(
                    problems,
                    f"series without any of the instance labels {list(inst_labels)} "
                    "(they belong to no instance; skipped)",
                )
                continue
            group = groups.get(key)
            if group is None:
                if len(groups) >= config.max_instances:
                    raise _Failure(
                        ReadStatus.TOO_LARGE,
                        f"more than max_instances ({config.max_instances}) instances; narrow "
                        "the selector or raise max_instances",
                    )
                group = groups[key] = _Group(key)
            group.series += 1
            name = metric.get("__name__")
            if bad is not None:
                group.error(f"series {_clean(name, 80)!r}: {bad}")
                continue
            if not isinstance(name, str) or name not in wanted:
                group.error(f"a series named {_clean(name, 80)!r}, which was not asked for")
                continue
            labels = {k: v for k, v in metric.items() if k != "__name__" and k not in inst_set}
            sample = _sample(name, labels, value)
            if isinstance(sample, str):
                group.error(f"{_describe(name, labels)}: {sample}")
                continue
            identity = (name, *map(labels.get, IDENTITY_LABELS))
            seen = group.identities.get(identity)
            if seen is not None:
                differ = sorted(k for k in set(seen) | set(labels) if seen.get(k) != labels.get(k))
                group.duplicate(
                    _describe(name, labels)
                    + (f", differing only in {differ}" if differ else ", identical")
                )
                continue
            group.identities[identity] = labels
            if group.common is None:
                group.common = {k: v for k, v in metric.items() if k != "__name__"}
            else:
                common = group.common
                for k in [k for k, v in common.items() if metric.get(k) != v]:
                    del common[k]
            group.samples.setdefault(name, []).append(sample)
    if unattributed:
        problems.insert(0, f"{unattributed} series skipped (no instance)")
    stamps = _freshness(freshness, inst_labels, problems)
    instances = [
        _instance(group, config=config, at=at, stamps=stamps.get(group.key))
        for group in groups.values()
    ]
    instances.sort(key=lambda i: i.name)
    return instances, problems, total


def _note(problems: list[str], message: str) -> None:
    if message not in problems and len(problems) < _MAX_ERRORS_KEPT:
        problems.append(message)


def _sample(name: str, labels: dict[str, str], value: object) -> Sample | str:
    if not isinstance(value, list) or len(value) != 2:
        return '"value" is not a [time, "number"] pair'
    stamp, raw = value
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        return "the sample time is not a finite number"
    try:
        finite = math.isfinite(stamp)  # an integer of hundreds of digits does not fit a float
    except OverflowError:
        finite = False
    if not finite:
        return "the sample time is not a finite number"
    if not isinstance(raw, str) or len(raw) > MAX_VALUE_CHARS:
        return "the value is not a number string"
    try:
        number = float(raw)
    except ValueError:
        return f"the value {_clean(raw, 40)!r} is not a number"
    # Non-finite values ("NaN", "+Inf") are kept: the adapters judge them as they judge a page.
    return Sample(name, labels, number, None, raw)


def _freshness(
    freshness: Sequence[Any] | None, inst_labels: Sequence[str], problems: list[str]
) -> dict[tuple[str, ...], tuple[float | None, float | None]]:
    out: dict[tuple[str, ...], tuple[float | None, float | None]] = {}
    if freshness is None:
        return out
    bad = 0
    for item in freshness:
        metric = item.get("metric") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            bad += 1
            continue
        which = metric.get(FRESHNESS_LABEL)
        raw = value[1]
        try:
            stamp = float(raw) if isinstance(raw, str) and len(raw) <= MAX_VALUE_CHARS else None
        except ValueError:
            stamp = None
        if which not in ("newest", "oldest") or stamp is None or not math.isfinite(stamp):
            bad += 1
            continue
        key = tuple(
            v if isinstance(v := metric.get(label, ""), str) else "" for label in inst_labels
        )
        newest, oldest = out.get(key, (None, None))
        out[key] = (stamp, oldest) if which == "newest" else (newest, stamp)
    if bad:
        _note(problems, f"{bad} malformed elements in the freshness answer")
    return out


def _instance(
    group: _Group,
    *,
    config: PrometheusSourceConfig,
    at: float,
    stamps: tuple[float | None, float | None] | None,
) -> InstanceRead:
    labels = dict(zip(config.instance_labels, group.key, strict=True))
    common = dict(group.common) if group.common is not None else dict(labels)
    settings = config.settings_for(common)
    engine = config.engine or detect_engine_from_names(group.samples)
    speculation = engine is not None and any(
        name.startswith(_ADAPTERS[engine].markers) for name in group.samples
    )
    newest, oldest = stamps if stamps is not None else (None, None)
    stale = oldest is None or newest is None or at - oldest > config.stale_after
    error = group.message()
    if error is None and newest is not None and newest > at + MAX_CLOCK_AHEAD:
        # Its windows would wait for time to catch up with it: years, silently.
        error = (
            f"its newest sample is {newest - at:.0f} s ahead of the read's time "
            f"(more than {MAX_CLOCK_AHEAD:.0f} s): a clock or the data is wrong"
        )
    page: Page | None = None
    if error is None:
        page = Page(samples=group.samples, valid_lines=group.series)
        if newest is None:
            page.problems.append(
                Problem(0, "", "no sample time for this instance in the freshness answer")
            )
    return InstanceRead(
        name=instance_name(group.key, prefix=config.name_prefix),
        labels=labels,
        common_labels=common,
        engine=engine,
        page=page,
        settings=settings,
        newest_sample=newest,
        oldest_sample=oldest,
        stale=stale,
        speculation=speculation,
        series=group.series,
        age_seconds=None if newest is None else at - newest,
        error=error,
    )


# --------------------------------------------------------------------------- the client


class InFlight:
    """The response bytes every Prometheus read of the process holds at once (bodies being
    received or not yet decoded): sources that each answer up to their cap must not add up.
    A read that would take the total past ``limit`` (or past its own cap, when that is
    larger) fails at once as ``too_large``, letting its bytes go, rather than wait."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int, *, cap: int) -> bool:
        if self.held + size > max(self.limit, cap):
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


#: Response bytes in flight for the whole process: two full answers at the default cap.
IN_FLIGHT = InFlight(128 * 2**20)


@dataclass
class _Budget:
    remaining: int
    used: int = 0
    shared: InFlight = IN_FLIGHT
    #: Bytes this read took from ``shared`` (given back once its answers are decoded).
    held: int = 0

    def release(self) -> None:
        self.shared.give(self.held)
        self.held = 0


@dataclass
class _Secrets:
    headers: dict[str, str] = field(default_factory=dict)
    values: list[str] = field(default_factory=list)


class PrometheusSource:
    """Reads one configured Prometheus source. Use as an async context manager, or call
    :meth:`close`; pass ``session`` to share the daemon's (it is then not closed here).

    ``read()`` never raises (but for cancellation): every outcome is a :class:`ReadResult`.
    """

    def __init__(
        self,
        config: PrometheusSourceConfig,
        *,
        session: aiohttp.ClientSession | None = None,
        strategy: QueryStrategy = DEFAULT_STRATEGY,
        concurrency: int = 4,
        in_flight: InFlight = IN_FLIGHT,
    ) -> None:
        self.config = config
        self.strategy = strategy
        self._in_flight = in_flight
        self._session = session
        self._own_session = session is None
        #: Why the TLS files cannot be used now (they were valid when the config was loaded).
        self._tls_error: str | None = None
        self._ssl: ssl.SSLContext | None = None
        try:
            self._ssl = build_ssl_context(config.tls)
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            self._tls_error = f"cannot use the tls files: {_clean(reason, 160)}"
        self._concurrency = max(1, concurrency)
        self._values = value_queries(config, strategy)
        self._freshness = freshness_query(config)
        parts = urlsplit(config.url)
        self.display_url = f"{parts.scheme}://{parts.netloc}{parts.path}"

    async def __aenter__(self) -> PrometheusSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            # specmon's one session factory, as the daemon's shared session: no cookies (a
            # query API's Set-Cookie was kept without bound and sent back), no proxy or netrc
            # from the environment, specmon's User-Agent.
            self._session = open_session(
                max_connections=self._concurrency + 1, purpose="prometheus source"
            )
        return self._session

    @property
    def queries(self) -> tuple[str, ...]:
        """Every query of one read, value queries first."""
        return (*self._values, self._freshness)

    async def read(self, *, at: float | None = None) -> ReadResult:
        at = time.time() if at is None else at
        started = time.perf_counter()
        try:
            result = await self._read(at, started)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must cost one read, never the daemon
            _raise_if_cancelling()
            return ReadResult(
                status=ReadStatus.INTERNAL_ERROR,
                at=at,
                message=f"internal error: {type(exc).__name__}: {_clean(exc, 200)}",
                duration_seconds=time.perf_counter() - started,
            )
        # A cancellation that arrived while a query failed is reported by the task group as
        # that failure, not raised: the read must not come back as if it had merely failed,
        # or the source's loop would go on reading after a stop.
        _raise_if_cancelling()
        return result

    async def _read(self, at: float, started: float) -> ReadResult:
        config = self.config
        if self._tls_error is not None:
            return ReadResult(
                status=ReadStatus.CREDENTIALS_ERROR,
                at=at,
                message=self._tls_error,
                duration_seconds=time.perf_counter() - started,
            )
        try:
            secrets = self._secrets()
        except OSError as exc:
            return ReadResult(
                status=ReadStatus.CREDENTIALS_ERROR,
                at=at,
                message=f"cannot read a credentials file: {exc.strerror or type(exc).__name__}"
                + (f" ({exc.filename})" if exc.filename else ""),
                duration_seconds=time.perf_counter() - started,
            )
        budget = _Budget(config.max_response_bytes, shared=self._in_flight)
        try:
            return await self._read_within(budget, at, started, secrets)
        finally:
            budget.release()

    async def _read_within(
        self, budget: _Budget, at: float, started: float, secrets: _Secrets
    ) -> ReadResult:
        config = self.config
        queries = self.queries
        try:
            bodies = await self._fetch_all(queries, at=at, budget=budget, secrets=secrets)
        except _Failure as failure:
            return self._failed(failure, at=at, started=started, budget=budget, secrets=secrets)
        cpu = time.process_time()
        try:
            # Decoding and grouping allocate hundreds of thousands of small objects and no
            # cycles; the cyclic collector would spend about 40 % of the time walking them
            # (measured at 2,000 instances). No other task runs during this synchronous block.
            with collector_paused():
                for body in bodies:
                    check_shape(body, max_series=config.max_series)
                answers = [parse_answer(body, secrets=secrets.values) for body in bodies]
                del bodies  # decoded: the bodies' megabytes go before the grouping
                budget.release()
                values, freshness = answers[:-1], answers[-1]
                instances, problems, series = build_instances(
                    (a.result for a in values),
                    freshness.result,
                    config=config,
                    at=at,
                    consume=True,
                )
        except _Failure as failure:
            return self._failed(
                failure,
                at=at,
                started=started,
                budget=budget,
                secrets=secrets,
                cpu=time.process_time() - cpu,
            )
        warnings: list[str] = []
        for answer in answers:
            warnings.extend(w for w in answer.warnings if w not in warnings)
        partial = any(a.partial for a in answers)
        status = ReadStatus.PARTIAL if partial else ReadStatus.OK
        return ReadResult(
            status=status,
            at=at,
            instances=tuple(instances),
            message=(
                "Prometheus answered with warnings; some series may be missing" if partial else None
            ),
            warnings=tuple(redact(w, secrets.values) for w in warnings),
            problems=tuple(problems),
            usable=not partial or config.accept_partial,
            queries=len(queries),
            bytes=budget.used,
            series=series,
            duration_seconds=time.perf_counter() - started,
            parse_cpu_seconds=time.process_time() - cpu,
        )

    async def _fetch_all(
        self, queries: Sequence[str], *, at: float, budget: _Budget, secrets: _Secrets
    ) -> list[bytes]:
        """Every query's answer body, concurrently, within the read's timeout; the most
        specific failure when any fails.

        The queries run as plain tasks awaited with :func:`asyncio.wait`, not in a task
        group: a group reports a child's failure instead of its parent's cancellation when
        both happen at once (and Python 3.11's leaves its own cancel request counted), and
        a read cancelled by a stop must end as cancelled. Whatever happens, every query task
        has ended when this returns or raises."""
        config = self.config
        deadline = asyncio.get_running_loop().time() + config.timeout
        gate = asyncio.Semaphore(self._concurrency)
        tasks = [
            asyncio.create_task(
                self._query(q, at=at, deadline=deadline, budget=budget, secrets=secrets, gate=gate)
            )
            for q in queries
        ]
        try:
            async with asyncio.timeout(config.timeout):
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except TimeoutError:
            raise _Failure(
                ReadStatus.TIMEOUT,
                f"no complete answer from {self.display_url} within {config.timeout:g}s",
            ) from None
        finally:
            for task in tasks:
                task.cancel()  # nothing for the finished ones
            await asyncio.wait(tasks)
        errors = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
        if not errors:
            return [task.result() for task in tasks]
        failures = [e for e in errors if isinstance(e, _Failure)]
        chosen = min(failures, key=_severity) if failures else errors[0]
        # A failure's traceback holds its query's frame and every body received so far:
        # nothing of this read may outlive it.
        for error in errors:
            error.__traceback__ = None
        del errors, failures
        tasks.clear()
        raise chosen

    def _failed(
        self,
        failure: _Failure,
        *,
        at: float,
        started: float,
        budget: _Budget,
        secrets: _Secrets,
        cpu: float = 0.0,
    ) -> ReadResult:
        return ReadResult(
            status=failure.status,
            at=at,
            message=redact(failure.message, secrets.values),
            error_type=failure.error_type,
            http_status=failure.http_status,
            queries=len(self.queries),
            bytes=budget.used,
            duration_seconds=time.perf_counter() - started,
            parse_cpu_seconds=cpu,
        )

    def _secrets(self) -> _Secrets:
        """Request headers, with token and password files read now (they rotate)."""
        config = self.config
        out = _Secrets()
        for name, value in config.headers.items():
            out.headers[name] = value.reveal()
            out.values.append(value.reveal())
        token: str | None = None
        if config.bearer_token is not None:
            token = config.bearer_token.reveal()
        elif config.bearer_token_file is not None:
            token = _read_secret_file(config.bearer_token_file)
        if token is not None:
            out.headers["Authorization"] = f"Bearer {token}"
            out.values.append(token)
        auth = config.basic_auth
        if auth is not None:
            if auth.password is not None:
                password = auth.password.reveal()
            else:
                assert auth.password_file is not None
                password = _read_secret_file(auth.password_file)
            pair = base64.b64encode(f"{auth.username}:{password}".encode()).decode("ascii")
            out.headers["Authorization"] = f"Basic {pair}"
            out.values.extend([password, pair])
        out.headers["Accept"] = "application/json"
        return out

    async def _query(
        self,
        query: str,
        *,
        at: float,
        deadline: float,
        budget: _Budget,
        secrets: _Secrets,
        gate: asyncio.Semaphore,
    ) -> bytes:
        config = self.config
        async with gate:
            remaining = deadline - asyncio.get_running_loop().time()
            params = {
                "query": query,
                "time": f"{at:.3f}",
                # Prometheus stops evaluating at its own timeout too (ms: every
                # Prometheus-compatible API parses it).
                "timeout": f"{max(1, int(remaining * 1000))}ms",
            }
            session = self._get_session()
            ssl_arg: Any = self._ssl if self._ssl is not None else True
            try:
                if config.method is QueryMethod.POST:
                    request = session.post(
                        config.api_url,
                        data=params,
                        headers=secrets.headers,
                        ssl=ssl_arg,
                        allow_redirects=False,
                    )
                else:
                    request = session.get(
                        config.api_url,
                        params=params,
                        headers=secrets.headers,
                        ssl=ssl_arg,
                        allow_redirects=False,
                    )
                async with request as resp:
                    if resp.status == 200:
                        return await _read_capped(resp, budget, config.max_response_bytes)
                    body = await _read_error_body(resp, budget)
                    if 300 <= resp.status < 400:
                        location = resp.headers.get("Location", "")
                        loc = urlsplit(location)
                        shown = f"{loc.scheme}://{loc.netloc}{loc.path}" if loc.netloc else ""
                        raise _Failure(
                            ReadStatus.HTTP_ERROR,
                            f"HTTP {resp.status}: redirected"
                            + (f" to {_clean(shown, 120, secrets.values)}" if shown else "")
                            + "; set url to the final address",
                            http_status=resp.status,
                        )
                    parse_answer(body, http_status=resp.status, secrets=secrets.values)
                    raise _http_failure(
                        resp.status, body, secrets.values
                    )  # not reached: parse_answer raises
            except _Failure:
                raise
            except aiohttp.ClientConnectorCertificateError as exc:
                raise _Failure(
                    ReadStatus.DOWN,
                    f"TLS certificate of {self.display_url} not accepted: "
                    f"{_clean(exc.certificate_error, 160, secrets.values)}",
                ) from None
            except aiohttp.ClientConnectorError as exc:
                err = exc.os_error
                reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
                raise _Failure(
                    ReadStatus.DOWN, f"cannot connect to {exc.host}:{exc.port}: {reason}"
                ) from None
            except aiohttp.ServerDisconnectedError:
                raise _Failure(
                    ReadStatus.DOWN, f"{self.display_url} closed the connection"
                ) from None
            except aiohttp.ServerTimeoutError:
                raise _Failure(
                    ReadStatus.TIMEOUT, f"{self.display_url} did not answer in time"
                ) from None
            except aiohttp.ClientPayloadError as exc:
                raise _Failure(
                    ReadStatus.BAD_RESPONSE,
                    f"broken response body: {_clean(exc, 160, secrets.values)}",
                ) from None
            except aiohttp.ClientResponseError as exc:
                raise _Failure(
                    ReadStatus.HTTP_ERROR,
                    f"HTTP error {exc.status}: {_clean(exc.message, 120, secrets.values)}",
                    http_status=exc.status,
                ) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise _Failure(
                    ReadStatus.DOWN,
                    f"{type(exc).__name__} talking to {self.display_url}: {_clean(exc, 160, secrets.values)}",
                ) from None


def _raise_if_cancelling() -> None:
    """Raise CancelledError when the current task has a cancellation pending: cancellation
    always wins over a failure that happened at the same time."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _severity(failure: BaseException) -> int:
    """Which failure of several concurrent ones to report: the most specific."""
    order = (
        ReadStatus.QUERY_ERROR,
        ReadStatus.HTTP_ERROR,
        ReadStatus.TOO_LARGE,
        ReadStatus.BAD_RESPONSE,
        ReadStatus.TIMEOUT,
        ReadStatus.DOWN,
    )
    status = getattr(failure, "status", None)
    return order.index(status) if status in order else len(order)


def _read_secret_file(path: os.PathLike[str]) -> str:
    try:
        value = files.read_text_capped(path, max_bytes=files.MAX_SECRET_BYTES).strip()
    except UnicodeDecodeError:
        raise OSError(0, "the file is not UTF-8 text", str(path)) from None
    if not value:
        raise OSError(0, "the file is empty", str(path))
    return value


async def _read_capped(resp: aiohttp.ClientResponse, budget: _Budget, cap: int) -> bytes:
    declared = resp.content_length
    if (
        declared is not None
        and declared > budget.remaining
        and not resp.headers.get("Content-Encoding")
    ):
        raise _Failure(
            ReadStatus.TOO_LARGE,
            f"the answers exceed max_response_bytes ({cap} bytes decoded, all queries of a "
            "read together)",
        )
    chunks: list[bytes] = []
    message = None
    async for chunk in resp.content.iter_chunked(65536):
        size = len(chunk)
        budget.used += size
        budget.remaining -= size
        if budget.remaining < 0:
            message = (
                f"the answers exceed max_response_bytes ({cap} bytes decoded, all queries of "
                "a read together)"
            )
        elif not budget.shared.take(size, cap=cap):
            message = (
                f"the process's response bytes in flight ({budget.shared.limit} bytes, every "
                "source together) are taken by other reads; this read gave up"
            )
        if message is not None:
            # Nothing of the body may outlive the failure (its traceback holds this frame).
            chunk = b""
            chunks.clear()
            raise _Failure(ReadStatus.TOO_LARGE, message)
        budget.held += size
        chunks.append(chunk)
    body = b"".join(chunks)
    chunks.clear()
    return body


async def _read_error_body(resp: aiohttp.ClientResponse, budget: _Budget) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(16384):
        take = chunk[: _ERROR_BODY_BYTES - size]
        chunks.append(take)
        size += len(take)
        budget.used += len(take)
        if size >= _ERROR_BODY_BYTES:
            break
    return b"".join(chunks)
