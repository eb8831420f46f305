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
  (V1), llama.cpp and TGI only (TGI counts no drafted tokens: its c per load assumes k
  drafted tokens per draft). The change's speed-up per bucket (issue 55) needs the same timing.
- :data:`WITH_BASELINE`: families exported only for a target compared with a baseline
  (``baseline:`` a twin, or ``cost_profile``), and ``specmon_draft_cost_ratio{source="measured"}``.
  A query reading one may be empty when no target it selects has a baseline.
- :data:`ON_FIRST_EVENT`: families whose series appear with their first event (a refused
  reading). A query reading one must return data for some combination, not for each.
- :data:`CHANGE`: the newest configuration change per bucket (issue 55) exists only once a
  target has changed its speculative configuration; a scenario without a change has none.
- :data:`MEASURING`: the answer's figures, absent while its window measures a new load
  (``specmon_verdict_info{state="measuring"}``: no figure, never a guess in its place). A query
  reading one may be empty for a measuring window, unless it selects that state itself: a
  panel that shows the answer now reads "measuring" there (tests/dashboards/test_dashboards.py).
- :data:`CLASSES`: the per-request-class families exist only for a target with a tap beside
  it (``tap:``) or SGLang's custom labels (docs/tap.md). A query reading one may be empty when
  no target it selects has classes.
"""

from __future__ import annotations

from collections.abc import Iterable

from tests.rules.common import promql_metric_names

__all__ = [
    "ABSENT",
    "CHANGE",
    "CLASSES",
    "LOAD",
    "MEASURING",
    "ON_FIRST_EVENT",
    "WITH_BASELINE",
    "may_be_empty",
]

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
    # TGI's router times its decode steps (load figures and every figure against a twin; its
    # c per load assumes k drafted tokens per draft), but it counts no drafted tokens.
    "tgi": frozenset({"specmon_draft_tokens_total"}),
    "trtllm": _NO_TIMING,
}
#: The answer's figures: absent while its window measures a new load.
MEASURING = frozenset(
    {
        "specmon_verdict_speedup_ratio",
        "specmon_verdict_speedup_lower_ratio",
        "specmon_verdict_speedup_upper_ratio",
        "specmon_verdict_alpha_margin_ratio",
        "specmon_verdict_breakeven_alpha_ratio",
        "specmon_verdict_draft_cost_ratio",
        "specmon_best_chain_length",
        "specmon_best_speedup_ratio",
        "specmon_realized_speedup_ratio",
        "specmon_measured_breakeven_alpha_ratio",
        "specmon_measured_alpha_margin_ratio",
    }
)
#: How a query selects the measuring windows itself (to show the word "measuring").
SAYS_MEASURING = 'state="measuring"'
ON_FIRST_EVENT = frozenset({"specmon_rejected_readings_total"})
#: Present only for a target with classes (a tap beside it, or SGLang's custom labels).
CLASSES = frozenset(
    {
        "specmon_class_source_up",
        "specmon_class_requests",
        "specmon_class_draft_tokens",
        "specmon_class_accepted_tokens",
        "specmon_class_draft_acceptance_ratio",
        "specmon_class_mean_acceptance_length",
        "specmon_class_alpha_ratio",
        "specmon_class_alpha_margin_ratio",
        "specmon_class_coverage_ratio",
    }
)


def needs_baseline(expr: str) -> bool:
    """Whether ``expr`` reads a figure that exists only against a baseline."""
    return bool(promql_metric_names(expr) & WITH_BASELINE) or 'source="measured"' in expr


def may_be_empty(
    expr: str,
    engines: Iterable[str],
    *,
    baselines: Iterable[bool] | None = None,
    measuring: Iterable[bool] | None = None,
    taps: Iterable[bool] | None = None,
) -> bool:
    """Whether ``expr`` may return nothing when it selects targets of ``engines`` only, which
    have a baseline where ``baselines``, and classes where ``taps`` (in the same order;
    default: every one) say so, and whose window measures a new load where ``measuring`` says
    so (default: none) (events aside: see :data:`ON_FIRST_EVENT`)."""
    names = promql_metric_names(expr)
    selected = list(engines)
    flags = [True] * len(selected) if baselines is None else list(baselines)
    new_load = [False] * len(selected) if measuring is None else list(measuring)
    tapped = [True] * len(selected) if taps is None else list(taps)
    baseline_only = needs_baseline(expr)
    answer_only = bool(names & MEASURING) and SAYS_MEASURING not in expr
    classes_only = bool(names & CLASSES)
    return bool(selected) and all(
        bool(names & ABSENT.get(engine, frozenset()))
        or (baseline_only and not has)
        or (answer_only and new)
        or (classes_only and not tap)
        for engine, has, new, tap in zip(selected, flags, new_load, tapped, strict=True)
    )
