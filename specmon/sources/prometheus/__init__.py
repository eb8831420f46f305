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

The package: ``model`` (statuses, instances, results, limits) -> ``queries`` (what one read
asks) -> ``answers`` (one answer decoded within bounds) -> ``grouping`` (series into
instances, pure) -> ``client`` (:class:`PrometheusSource`: one read, its budget, its failures)
-> ``outcomes`` (the read as a reading or a failure per instance, as every source answers).
"""

from __future__ import annotations

from specmon.sources.prometheus.answers import check_shape, parse_answer
from specmon.sources.prometheus.client import IN_FLIGHT, InFlight, PrometheusSource
from specmon.sources.prometheus.grouping import build_instances
from specmon.sources.prometheus.model import (
    DEFAULT_STRATEGY,
    FRESHNESS_LABEL,
    IDENTITY_LABELS,
    MAX_CLOCK_AHEAD,
    MAX_NAME_CHARS,
    InstanceRead,
    QueryStrategy,
    ReadResult,
    ReadStatus,
)
from specmon.sources.prometheus.outcomes import instance_outcome, read_failure, scrape_result
from specmon.sources.prometheus.queries import (
    freshness_names,
    freshness_query,
    instance_name,
    value_queries,
)

__all__ = [
    "DEFAULT_STRATEGY",
    "FRESHNESS_LABEL",
    "IDENTITY_LABELS",
    "IN_FLIGHT",
    "MAX_CLOCK_AHEAD",
    "MAX_NAME_CHARS",
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
    "instance_outcome",
    "parse_answer",
    "read_failure",
    "scrape_result",
    "value_queries",
]
