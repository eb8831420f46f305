"""Which dashboard queries may return nothing, and why.

Every panel query must return data for every combination of existing variable values
(tests/rules/test_promtool.py on a synthetic fleet, tests/e2e on a real Prometheus), except
where specmon's metric contract (specmon/daemon/metrics.py, docs/metrics.md) says the data
does not exist:

- :data:`ABSENT`: families an engine cannot have. SGLang and TGI count no draft tokens, so
  they have no ``specmon_draft_tokens_total`` (its meaning in the contract says so; a test
  checks it). A query reading such a family may be empty when every target it selects is of
  such an engine.
- :data:`ABSENT` also holds the load families (concurrency, step time, time per output token,
  mean draft length) and every figure against a baseline for the engines whose pages carry no
  per-step timing specmon reads (SGLang, TensorRT-LLM): the contract says they exist for vLLM
  (V1), llama.cpp and TGI only; TGI, which counts no drafted tokens, has no measured cost.
  The change's speed-up per bucket (issue 55) needs the same timing.
- :data:`WITH_BASELINE`: families exported only for a target compared with a baseline
  (``baseline:`` a twin, or ``cost_profile``), and ``specmon_draft_cost_ratio{source="measured"}``.
  A query reading one may be empty when no target it selects has a baseline.
- :data:`ON_FIRST_EVENT`: families whose series appear with their first event (a refused
  reading). A query reading one must return data for some combination, not for each.
- :data:`CHANGE`: the newest configuration change per bucket (issue 55) exists only once a
  target has changed its speculative configuration; a scenario without a change has none.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.rules.common import promql_metric_names

__all__ = ["ABSENT", "CHANGE", "LOAD", "ON_FIRST_EVENT", "WITH_BASELINE", "may_be_empty"]

#: Load and speed per window, from the engine's decode timing (vLLM V1 and llama.cpp only).
LOAD = frozenset(
    {
        "specmon_concurrency",
        "specmon_step_seconds",
        "specmon_time_per_output_token_seconds",
        "specmon_mean_draft_length",
    }
)
#: Figures against a baseline (they need the load figures too).
AGAINST_BASELINE = frozenset(
    {
        "specmon_realized_speedup_ratio",
        "specmon_measured_breakeven_alpha_ratio",
        "specmon_measured_alpha_margin_ratio",
        "specmon_crossover_concurrency",
        "specmon_crossover_lower_concurrency",
        "specmon_crossover_upper_concurrency",
        "specmon_bucket_realized_speedup_ratio",
        "specmon_bucket_draft_cost_ratio",
        "specmon_bucket_best_chain_length",
        "specmon_bucket_best_speedup_ratio",
    }
)
#: Present only for a target that has a baseline (specmon_baseline_info: a twin).
WITH_BASELINE = AGAINST_BASELINE | {"specmon_baseline_info", "specmon_baseline_usable"}
#: The newest configuration change per concurrency bucket (the epochs' cost curves, which
#: need the engine's step timing as the load figures do).
CHANGE = frozenset(
    {
        "specmon_change_speedup_ratio",
        "specmon_change_speedup_lower_ratio",
        "specmon_change_speedup_upper_ratio",
    }
)
_NO_TIMING = LOAD | AGAINST_BASELINE | CHANGE
ABSENT: dict[str, frozenset[str]] = {
    "sglang": frozenset({"specmon_draft_tokens_total"}) | _NO_TIMING,
    # TGI's router times its decode steps (load figures), but it counts no drafted tokens:
    # no measured draft cost, break-even or crossover even against a twin.
    "tgi": frozenset({"specmon_draft_tokens_total"}) | AGAINST_BASELINE,
    "trtllm": _NO_TIMING,
}
ON_FIRST_EVENT = frozenset({"specmon_rejected_readings_total"})


def needs_baseline(expr: str) -> bool:
    """Whether ``expr`` reads a figure that exists only against a baseline."""
    return bool(promql_metric_names(expr) & WITH_BASELINE) or 'source="measured"' in expr


def may_be_empty(
    expr: str, engines: Iterable[str], *, baselines: Iterable[bool] | None = None
) -> bool:
    """Whether ``expr`` may return nothing when it selects targets of ``engines`` only, which
    have a baseline where ``baselines`` (in the same order; default: every one) says so
    (events aside: see :data:`ON_FIRST_EVENT`)."""
    names = promql_metric_names(expr)
    selected = list(engines)
    flags = [True] * len(selected) if baselines is None else list(baselines)
    baseline_only = needs_baseline(expr)
    return bool(selected) and all(
        bool(names & ABSENT.get(engine, frozenset())) or (baseline_only and not has)
        for engine, has in zip(selected, flags, strict=True)
    )
