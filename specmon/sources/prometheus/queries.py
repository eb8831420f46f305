"""The instant queries of one read (the wanted names of every engine adapter, batched) and
the names instances get from their labels."""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence

from specmon.engines import ADAPTERS as _ADAPTERS
from specmon.engines import (
    Engine,
    wanted_names,
)
from specmon.sources.prometheus.model import (
    CONTROL,
    DEFAULT_STRATEGY,
    FRESHNESS_LABEL,
    MAX_NAME_CHARS,
    QueryStrategy,
)
from specmon.sources.prometheus_config import (
    PrometheusSourceConfig,
    quote,
)


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
    if value.isascii() and "%" not in value and "/" not in value and not CONTROL.search(value):
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
