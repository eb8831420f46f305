"""The ``sources:`` block: strict validation of Prometheus query sources, and label selectors.

```yaml
sources:
  - prometheus:
      url: http://prometheus:9090        # any Prometheus-compatible query API (path prefix ok)
      selector: '{job=~"vllm.*"}'        # which series; default {} (all)
      instance_labels: [namespace, pod]  # what makes one target; default [instance]
      group_labels: [namespace, service] # whose past a pod's is; default: specmon.state.groups
      bearer_token_file: /var/run/secrets/token   # or bearer_token_env; or basic_auth
      basic_auth: {username: u, password_file: /run/secrets/pw}   # or password_env
      tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false}
      headers: {X-Scope-OrgID: team-a}   # Mimir/Cortex tenant; values are secrets
      interval: 30s
      timeout: 10s
      stale_after: 2m                    # an instance whose samples are older is stale
      overrides:                         # per instance, matched by label; later entries win
        - match: '{pod=~"vllm-eagle-.*"}'
          draft_cost: 0.12
          chain_length: 5
          baseline: team-a/vllm-plain-0
          model: qwen3-8b
```

Optional keys not shown: ``name`` (the ``source`` label of specmon's per-source metrics;
default: the URL's host, port and path, e.g. ``prometheus:9090``), ``name_prefix``, ``engine``, ``draft_cost`` and ``chain_length``
(defaults for every instance of the source), ``method`` (POST or GET), ``accept_partial``,
``max_response_bytes``, ``max_series``, ``max_instances``.

:func:`check_sources` takes the plain parsed YAML (the value of ``sources``) and returns the
configs and every problem, each with its path, in the style of ``specmon.daemon.config``.
Secrets live in ``specmon.secrets.Secret``; token and password *files* are re-read on
every read (Kubernetes rotates projected service-account tokens), and checked here once.

Selectors use PromQL's label-matcher syntax; :func:`parse_selector` parses one into
:class:`Matcher` objects and renders it back canonically, so what is sent to Prometheus is
always well formed. Override ``match`` selectors are evaluated here, with Python regular
expressions anchored at both ends as PromQL anchors RE2's.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specmon.config_values import (
    check_bool,
    check_chain_length,
    check_unit_float,
    join_path,
    kind_of,
    parse_duration,
    parse_size,
)
from specmon.engines import Engine, check_engine
from specmon.report import DEFAULT_DRAFT_COST
from specmon.settings import TargetSettings, settle
from specmon.sources.client_config import CLIENT_KEYS, ClientConfig, FileChecker, check_client
from specmon.sources.selectors import (
    Matcher,
    MatchOp,
    Selector,
    SelectorError,
    parse_selector,
    quote,
)
from specmon.state.groups import check_group_labels

__all__ = [
    "MatchOp",
    "Matcher",
    "Override",
    "PrometheusSourceConfig",
    "QueryMethod",
    "Selector",
    "SelectorError",
    "check_prometheus_source",
    "check_sources",
    "default_source_name",
    "parse_selector",
    "quote",
]

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

#: Labels the engine adapters read (or engines publish per series): grouping instances by one
#: of them would take it off the page and merge or rename models.
ENGINE_LABELS = frozenset(
    {"__name__", "model_name", "engine", "position", "dp_rank", "tp_rank", "engine_type", "le"}
)
#: The label the freshness query sets on its results (specmon.sources.prometheus).
_FRESHNESS_LABEL = "specmon_freshness"
#: Headers specmon sets itself.
_OWN_HEADERS = frozenset({"authorization", "content-type", "content-length", "accept", "host"})
MAX_INSTANCE_LABELS = 8
MAX_OVERRIDES = 1000
MAX_SOURCE_NAME = 128


# --------------------------------------------------------------------------- config types


class QueryMethod(StrEnum):
    POST = "POST"
    GET = "GET"


@dataclass(frozen=True, slots=True)
class Override:
    """Settings for the instances whose labels match ``match``; None = not set here."""

    match: Selector
    draft_cost: float | None = None
    chain_length: int | None = None
    baseline: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class PrometheusSourceConfig:
    url: str
    selector: Selector = field(default_factory=Selector)
    instance_labels: tuple[str, ...] = ("instance",)
    #: Which labels name the group an instance's past belongs to (None: the default rule of
    #: specmon.state.groups; (): no groups).
    group_labels: tuple[str, ...] | None = None
    name_prefix: str = ""
    engine: Engine | None = None  # None = detect per instance
    #: None: not set here or globally (DEFAULT_DRAFT_COST, a guess, applies).
    draft_cost: float | None = None
    chain_length: int | None = None
    #: Headers, credentials and TLS (specmon.sources.client_config).
    client: ClientConfig = field(default_factory=ClientConfig)
    method: QueryMethod = QueryMethod.POST
    interval: float = 30.0
    timeout: float = 10.0
    stale_after: float = 120.0
    accept_partial: bool = False
    max_response_bytes: int = 64 * 2**20
    max_series: int = 200_000
    max_instances: int = 10_000
    overrides: tuple[Override, ...] = ()
    #: Where it was configured (``sources[0]``), for logs.
    origin: str = "sources"
    #: The ``source`` label of the per-source metrics: the ``name`` key, else derived from the
    #: URL (:func:`default_source_name`); unique among the sources.
    name: str = ""

    @property
    def api_url(self) -> str:
        return self.url.rstrip("/") + "/api/v1/query"

    def settings_for(self, labels: Mapping[str, str]) -> TargetSettings:
        """The source's settings with every matching override applied in order (a later
        entry overrides what an earlier one set): :func:`specmon.settings.settle`."""
        return settle(
            {"engine": self.engine, "draft_cost": self.draft_cost, "chain_length": self.chain_length},
            *(
                {"draft_cost": o.draft_cost, "chain_length": o.chain_length,
                 "baseline": o.baseline, "model": o.model}
                for o in self.overrides
                if o.match.matches(labels)
            ),
        )  # fmt: skip


# --------------------------------------------------------------------------- validation


def _nonempty_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("must not contain control characters")
    return value


def _count(low: int, high: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"must be an integer, not {kind_of(value)}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return convert


def _size(value: Any) -> int:
    size = parse_size(value)
    if size > 2**31:
        raise ValueError("must be at most 2GiB")
    return size


def _duration(value: Any) -> float:
    return float(parse_duration(value))


def _url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a URL string, not {kind_of(value)}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    if parts.username or parts.password:
        raise ValueError("credentials in the URL are not allowed; use basic_auth or a bearer token")
    if parts.query or parts.fragment:
        raise ValueError("must not have a query string or fragment (the base URL of the API)")
    if parts.path.rstrip("/").endswith("/api/v1/query") or parts.path.rstrip("/").endswith(
        "/api/v1"
    ):
        raise ValueError(
            "give the base URL (e.g. http://prometheus:9090 or http://mimir/prometheus); "
            "specmon appends /api/v1/query"
        )
    return value


def _selector(value: Any) -> Selector:
    if not isinstance(value, str):
        raise ValueError(f"must be a string like '{{job=~\"vllm.*\"}}', not {kind_of(value)}")
    return parse_selector(value)


def _match(value: Any) -> Selector:
    if not isinstance(value, str):
        raise ValueError(
            f"must be a selector string like '{{pod=~\"a-.*\"}}', not {kind_of(value)}"
        )
    selector = parse_selector(value, compile_regex=True)
    if not selector.matchers:
        raise ValueError("must have at least one matcher (an empty match would match everything)")
    return selector


def _check_instance_labels(checker: FileChecker, value: Any, path: str) -> tuple[str, ...]:
    if value is None:
        return ("instance",)
    if not isinstance(value, list) or not value:
        checker.add(path, "must be a non-empty list of label names")
        return ("instance",)
    if len(value) > MAX_INSTANCE_LABELS:
        checker.add(path, f"at most {MAX_INSTANCE_LABELS} labels")
        return ("instance",)
    out: list[str] = []
    for index, item in enumerate(value):
        where = join_path(path, index)
        if not isinstance(item, str) or not _LABEL_NAME.fullmatch(item):
            checker.add(where, "must be a label name")
        elif item == _FRESHNESS_LABEL:
            checker.add(where, f"{item!r} is used by specmon's own queries")
        elif item in ENGINE_LABELS:
            checker.add(
                where,
                f"{item!r} is a label the engine adapters read; it cannot identify an instance",
            )
        elif item in out:
            checker.add(where, f"duplicate label {item!r}")
        else:
            out.append(item)
    return tuple(out) or ("instance",)


def _check_override(checker: FileChecker, value: Any, path: str) -> Override | None:
    keys = ("match", "draft_cost", "chain_length", "baseline", "model")
    data = checker.mapping(value, path, keys)
    if data is None:
        return None
    before = len(checker.problems)
    if "match" not in data:
        checker.add(join_path(path, "match"), "is required")
    match = checker.get(data, "match", path, _match, None)
    override = Override(
        match=match or Selector(),
        draft_cost=checker.get(data, "draft_cost", path, check_unit_float, None),
        chain_length=checker.get(data, "chain_length", path, check_chain_length, None),
        baseline=checker.get(data, "baseline", path, _nonempty_str, None),
        model=checker.get(data, "model", path, _nonempty_str, None),
    )
    if not any(data.get(k) is not None for k in keys[1:]) and len(checker.problems) == before:
        checker.add(path, "sets nothing (give draft_cost, chain_length, baseline or model)")
    return override if len(checker.problems) == before else None


_PROMETHEUS_KEYS = (
    "name",
    "url",
    "selector",
    "instance_labels",
    "group_labels",
    "name_prefix",
    "engine",
    "draft_cost",
    "chain_length",
    *CLIENT_KEYS,
    "method",
    "interval",
    "timeout",
    "stale_after",
    "accept_partial",
    "max_response_bytes",
    "max_series",
    "max_instances",
    "overrides",
)
SOURCE_KINDS = ("prometheus",)


def _method(value: Any) -> QueryMethod:
    if not isinstance(value, str) or value.upper() not in ("GET", "POST"):
        raise ValueError("must be POST or GET")
    return QueryMethod(value.upper())


def default_source_name(url: str) -> str:
    """A source's name when none is configured: the URL's host, port and path (no scheme, no
    trailing slash), e.g. ``prometheus:9090`` or ``mimir:8080/prometheus``. Stable across
    restarts and reloads as long as the URL is."""
    parts = urlsplit(url)
    name = (parts.netloc.rsplit("@", 1)[-1] + parts.path).rstrip("/")
    return name[:MAX_SOURCE_NAME] or "prometheus"


def _source_name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a non-empty string, not {kind_of(value)}")
    if not value.strip():
        raise ValueError("must be a non-empty string")
    if len(value) > MAX_SOURCE_NAME or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError(f"must be at most {MAX_SOURCE_NAME} printable characters")
    return value


def _name_prefix(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, not {kind_of(value)}")
    if len(value) > 64 or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("must be at most 64 printable characters")
    return value


def check_prometheus_source(
    raw: Any,
    path: str,
    *,
    base_dir: Path,
    environ: Mapping[str, str],
    draft_cost: float = DEFAULT_DRAFT_COST,
    chain_length: int | None = None,
) -> tuple[PrometheusSourceConfig | None, list[str]]:
    """One ``prometheus:`` block (the mapping under the key). Returns the config (None when
    there is any problem) and the problems."""
    checker = FileChecker(base_dir, environ)
    source = _check_prometheus(checker, raw, path, draft_cost, chain_length)
    return (source if not checker.problems else None), checker.problems


def _check_prometheus(
    checker: FileChecker, raw: Any, path: str, draft_cost: float | None, chain_length: int | None
) -> PrometheusSourceConfig | None:
    data = checker.mapping(raw, path, _PROMETHEUS_KEYS)
    if data is None:
        return None
    before = len(checker.problems)
    if "url" not in data:
        checker.add(join_path(path, "url"), "is required")
    url = checker.get(data, "url", path, _url, "")
    get = checker.get
    interval = get(data, "interval", path, _duration, 30.0)
    timeout = get(data, "timeout", path, _duration, min(10.0, interval))
    if timeout > interval:
        checker.add(join_path(path, "timeout"), "must not exceed interval")
    client = check_client(checker, data, path, url=url, reserved=_OWN_HEADERS)
    overrides: list[Override] = []
    raw_overrides = data.get("overrides")
    if raw_overrides is not None:
        where = join_path(path, "overrides")
        if not isinstance(raw_overrides, list):
            checker.add(where, f"must be a list, not {kind_of(raw_overrides)}")
        elif len(raw_overrides) > MAX_OVERRIDES:
            checker.add(where, f"at most {MAX_OVERRIDES} entries")
        else:
            for index, item in enumerate(raw_overrides):
                override = _check_override(checker, item, join_path(where, index))
                if override is not None:
                    overrides.append(override)
    selector = get(data, "selector", path, _selector, Selector())  # problems in key order
    instance_labels = _check_instance_labels(
        checker, data.get("instance_labels"), join_path(path, "instance_labels")
    )
    config = PrometheusSourceConfig(
        url=url,
        selector=selector,
        instance_labels=instance_labels,
        group_labels=get(
            data,
            "group_labels",
            path,
            lambda v: check_group_labels(v, instance_labels=instance_labels),
            None,
        ),
        name_prefix=get(data, "name_prefix", path, _name_prefix, ""),
        engine=get(data, "engine", path, check_engine, None),
        draft_cost=get(data, "draft_cost", path, check_unit_float, draft_cost),
        chain_length=get(data, "chain_length", path, check_chain_length, chain_length),
        client=client,
        method=get(data, "method", path, _method, QueryMethod.POST),
        interval=interval,
        timeout=timeout,
        stale_after=get(data, "stale_after", path, _duration, 120.0),
        accept_partial=get(data, "accept_partial", path, check_bool, False),
        max_response_bytes=get(data, "max_response_bytes", path, _size, 64 * 2**20),
        max_series=get(data, "max_series", path, _count(1, 10_000_000), 200_000),
        max_instances=get(data, "max_instances", path, _count(1, 1_000_000), 10_000),
        overrides=tuple(overrides),
        origin=path,
        name=get(data, "name", path, _source_name, None) or default_source_name(url),
    )
    return config if len(checker.problems) == before else None


def check_sources(
    raw: Any,
    *,
    path: str = "sources",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
    draft_cost: float | None = None,
    chain_length: int | None = None,
) -> tuple[tuple[PrometheusSourceConfig, ...], list[str]]:
    """Validate the value of ``sources:`` (plain parsed YAML; None = no sources).

    ``draft_cost`` and ``chain_length`` are the global defaults an instance falls back to.
    Returns the configs and every problem with its path; any problem means the caller must
    reject the whole config (the configs returned are then incomplete).
    """
    checker = FileChecker(base_dir or Path.cwd(), os.environ if environ is None else environ)
    if raw is None:
        return (), []
    if not isinstance(raw, list):
        checker.add(path, f"must be a list, not {kind_of(raw)}")
        return (), checker.problems
    out: list[PrometheusSourceConfig] = []
    names: dict[str, str] = {}
    for index, item in enumerate(raw):
        where = join_path(path, index)
        if not isinstance(item, dict) or len(item) != 1:
            checker.add(where, f"must be a mapping with one key: {', '.join(SOURCE_KINDS)}")
            continue
        ((kind, body),) = item.items()
        if kind not in SOURCE_KINDS:
            found = difflib.get_close_matches(str(kind), SOURCE_KINDS, n=1, cutoff=0.6)
            hint = f" (did you mean {found[0]!r}?)" if found else ""
            checker.add(join_path(where, str(kind)), f"unknown source kind{hint}")
            continue
        config = _check_prometheus(
            checker, body, join_path(where, "prometheus"), draft_cost, chain_length
        )
        if config is None:
            continue
        if config.name in names:
            given = isinstance(body, dict) and "name" in body
            checker.add(
                join_path(join_path(where, "prometheus"), "name"),
                f"duplicate source name {config.name!r} (also {names[config.name]})"
                + ("" if given else "; set name to tell the sources apart"),
            )
            continue
        names[config.name] = where
        out.append(config)
    return tuple(out), checker.problems
