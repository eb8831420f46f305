"""Which dashboard queries may return nothing, and why.

Every panel query must return data for every combination of existing variable values
(tests/rules/test_promtool.py on a synthetic fleet, tests/e2e on a real Prometheus), except
where specmon's metric contract (specmon/daemon/metrics.py, docs/metrics.md) says the data
does not exist:

- :data:`ABSENT`: families an engine cannot have. SGLang and TGI count no draft tokens, so
  they have no ``specmon_draft_tokens_total`` (its meaning in the contract says so; a test
  checks it). A query reading such a family may be empty when every target it selects is of
  such an engine.
- :data:`ON_FIRST_EVENT`: families whose series appear with their first event (a refused
  reading). A query reading one must return data for some combination, not for each.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.rules.common import promql_metric_names

__all__ = ["ABSENT", "ON_FIRST_EVENT", "may_be_empty"]

ABSENT: dict[str, frozenset[str]] = {
    "sglang": frozenset({"specmon_draft_tokens_total"}),
    "tgi": frozenset({"specmon_draft_tokens_total"}),
}
ON_FIRST_EVENT = frozenset({"specmon_rejected_readings_total"})


def may_be_empty(expr: str, engines: Iterable[str]) -> bool:
    """Whether ``expr`` may return nothing when it selects targets of ``engines`` only
    (events aside: see :data:`ON_FIRST_EVENT`)."""
    names = promql_metric_names(expr)
    selected = list(engines)
    return bool(selected) and all(names & ABSENT.get(engine, frozenset()) for engine in selected)
