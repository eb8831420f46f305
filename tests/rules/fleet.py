"""A synthetic specmon fleet as promtool input series: every series of the metric contract.

Used to run every dashboard query through ``promtool test rules`` (a query that errors or
returns nothing fails). The fleet:

- ``gpu1``: vLLM, model ``llama``, k = 4, watched by two specmon replicas (``instance``
  ``specmon-a`` and ``specmon-b``), so joins must survive duplicate targets;
- ``cpu1``: llama.cpp, model ``default``, k = 3, one replica, a constant label ``site``;
- ``trt1``: TensorRT-LLM, model ``qwen3``, k = 4, with an engine-measured draft cost
  (``specmon_draft_cost_ratio{source="engine"}``) beside the configured one;
- ``tgi1``: TGI, model ``default``, k = 3, without ``specmon_draft_tokens_total`` (TGI counts
  no draft tokens: the contract says the family is absent, :data:`ABSENT`);
- ``down1``: never reachable (``specmon_up`` 0, no derived series).

``gpu1`` also has a tap beside it: the ``specmon_class_*`` families for the classes ``code``,
``chat`` (below break-even) and ``other``, and the tap's own series (``job="specmon-tap"``):
``chat`` with a share of requests near 0 acceptance, ``code`` with long requests near 1.

``gpu1``, ``cpu1`` and ``tgi1`` (the engines with decode timing) have the load families and a
baseline twin (``gpu1-twin``, ...: ``specmon_baseline_info`` and every figure against it, with
buckets at 4 and 16 requests per step); ``trt1`` has neither, as its engine cannot
(:data:`ABSENT`). The twins themselves are not in the fleet. The verdict is ``measured``
against the twin, ``modelled`` on the engine's c for ``trt1``; ``tgi1``'s ``1m`` window
measures a new load (:data:`MEASURING`): no figure of the answer there, only
``specmon_verdict_info{state="measuring"}``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.dashboards.coverage import ABSENT, LOAD, MEASURING

__all__ = [
    "ABSENT",
    "BASELINES",
    "ENGINES",
    "FLEET_METRICS",
    "MEASURING_WINDOWS",
    "SAMPLES",
    "STEP",
    "TAPPED",
    "fleet_series",
]

STEP = "15s"
#: Samples per series: 40 minutes at 15 s.
SAMPLES = 160
WINDOWS = ("1m", "5m", "15m")


@dataclass(frozen=True, slots=True)
class _Target:
    name: str
    engine: str
    model: str
    k: int
    instances: tuple[str, ...]
    extra: tuple[tuple[str, str], ...] = ()
    #: c measured by the engine (TensorRT-LLM), exported as source="engine".
    engine_cost: float | None = None


_TARGETS = (
    _Target("gpu1", "vllm", "llama", 4, ("specmon-a:10920", "specmon-b:10920")),
    _Target("cpu1", "llamacpp", "default", 3, ("specmon-a:10920",), (("site", "lab"),)),
    _Target("trt1", "trtllm", "qwen3", 4, ("specmon-a:10920",), engine_cost=0.07),
    _Target("tgi1", "tgi", "default", 3, ("specmon-b:10920",)),
)
#: Target -> engine, for every target that has one.
ENGINES = {t.name: t.engine for t in _TARGETS}
#: Target -> whether it is compared with a baseline twin.
BASELINES = {t.name: not (LOAD & ABSENT.get(t.engine, frozenset())) for t in _TARGETS}
_DOWN = "down1"
#: Target -> the window that measures a new load.
MEASURING_WINDOWS = {"tgi1": "1m"}
#: The targets with a tap beside them (the specmon_class_* families).
TAPPED = frozenset({"gpu1"})


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _const(value: float) -> str:
    return f"{value:g}x{SAMPLES}"


def _counter(step: float, start: float = 0) -> str:
    return f"{start:g}+{step:g}x{SAMPLES}"


def fleet_series() -> list[dict[str, str]]:
    """promtool ``input_series`` entries."""
    out: list[dict[str, str]] = []

    def add(name: str, labels: dict[str, str], values: str) -> None:
        # The answer has no figure while its window measures a new load.
        window = labels.get("window")
        if name in MEASURING and window == MEASURING_WINDOWS.get(labels.get("target", ""), ""):
            return
        out.append({"series": name + _labels(**labels), "values": values})

    for instance in ("specmon-a:10920", "specmon-b:10920"):
        own = {"job": "specmon", "instance": instance}
        add("specmon_build_info", {**own, "version": "0.1.0", "python": "3.11.2"}, _const(1))
        add("specmon_config_last_reload_successful", own, _const(1))
        add("specmon_config_last_reload_success_timestamp_seconds", own, _const(1000))
        add("specmon_targets", own, _const(len(_TARGETS) + 1))
        add("specmon_file_sd_read_errors_total", own, _const(0))
        add("specmon_log_lines_dropped_total", {**own, "event": "target_down"}, _const(0))
        add(
            "specmon_rejected_readings_total",
            {**own, "target": _DOWN, "reason": "negative"},
            _const(0),
        )
        add("specmon_web_config_last_reload_successful", own, _const(1))
        add("specmon_web_config_last_reload_success_timestamp_seconds", own, _const(1000))
        add("specmon_web_rejections_total", {**own, "reason": "unauthorized"}, _counter(0))
        add("specmon_shard_info", {**own, "shard": "0", "shards": "1"}, _const(1))
        # The state file, written every 30 s: its success time follows the clock.
        state_file = {**own, "file": "/var/lib/specmon/specmon-state.json"}
        add("specmon_state_last_write_successful", state_file, _const(1))
        add("specmon_state_last_write_success_timestamp_seconds", state_file, _counter(15))
        # The event loop: 150 wake-ups a scrape, one in 1,000 later than 0.1 s, none past 1 s.
        for le, step in (("0.1", 149.85), ("1.0", 150), ("+Inf", 150)):
            add("specmon_event_loop_lag_seconds_bucket", {**own, "le": le}, _counter(step))
        add("specmon_event_loop_lag_seconds_count", own, _counter(150))
        add("specmon_event_loop_lag_seconds_sum", own, _counter(0.6))
        # One full collection a minute of 0.25 s (a quarter of one a scrape).
        for le, step in (("0.1", 0), ("0.5", 0.25), ("+Inf", 0.25)):
            add(
                "specmon_gc_pause_seconds_bucket",
                {**own, "generation": "2", "le": le},
                _counter(step),
            )
        add("specmon_gc_pause_seconds_count", {**own, "generation": "2"}, _counter(0.25))
        add("specmon_gc_pause_seconds_sum", {**own, "generation": "2"}, _counter(0.0625))
        # The overload governor: on schedule (the overload itself: specmon-alerts.test.yml, O).
        add("specmon_scrape_interval_stretch", own, _const(1))
        add("specmon_scrape_delay_seconds", own, _const(0.004))
        add("specmon_scrape_interval_achieved_seconds", {**own, "interval": "5s"}, _const(5))
        add("specmon_scrape_timeouts_excused_total", own, _const(0))
        add("specmon_scrapes_in_flight_limit", own, _const(256))
        add("specmon_scrapes_deferred_total", own, _const(0))
        add("specmon_event_loop_busy_ratio", own, _const(0.3))
        # A Prometheus source (fleet mode) beside the direct targets.
        source = {**own, "source": "prometheus:9090"}
        add("specmon_source_up", source, _const(1))
        add("specmon_source_reads_total", {**source, "result": "ok"}, _counter(0.5))
        add("specmon_source_queries_total", source, _counter(1))
        add("specmon_source_read_duration_seconds", source, _const(0.4))
        add("specmon_source_last_success_timestamp_seconds", source, _counter(15, 1000))
        add("specmon_source_response_bytes", source, _const(4e6))
        add("specmon_source_instances", {**source, "state": "current"}, _const(0))
        down = {**own, "target": _DOWN}
        add("specmon_up", down, _const(0))
        add("specmon_scrape_duration_seconds", down, _const(3))
        add("specmon_scrapes_total", {**down, "result": "timeout"}, _counter(3))

    for t in _TARGETS:
        for instance in t.instances:
            base = {"job": "specmon", "instance": instance, "target": t.name, **dict(t.extra)}
            model = {**base, "engine": t.engine, "model": t.model}
            add("specmon_up", base, _const(1))
            add("specmon_scrape_duration_seconds", base, _const(0.02))
            add("specmon_last_success_timestamp_seconds", base, _counter(15, 1000))
            add("specmon_scrapes_total", {**base, "result": "success"}, _counter(3))
            add("specmon_scrapes_total", {**base, "result": "timeout"}, _const(2))
            add("specmon_speculation_enabled", {**base, "engine": t.engine}, _const(1))
            add("specmon_page_malformed_lines", base, _const(0))
            add("specmon_chain_length", model, _const(t.k))
            add("specmon_draft_cost_ratio", {**model, "source": "configured"}, _const(0.1))
            if t.engine_cost is not None:
                add(
                    "specmon_draft_cost_ratio", {**model, "source": "engine"}, _const(t.engine_cost)
                )
            absent = ABSENT.get(t.engine, frozenset())
            twin = f"{t.name}-twin" if BASELINES[t.name] else None
            if twin is not None:
                add("specmon_baseline_info", {**base, "baseline": twin}, _const(1))
                add(
                    "specmon_baseline_usable",
                    {**base, "baseline": twin, "reason": "same_model"},
                    _const(1),
                )
                add(
                    "specmon_draft_cost_ratio",
                    {**model, "source": "measured", "baseline": twin},
                    _const(0.12),
                )
            add("specmon_breakeven_alpha_ratio", model, _const(0.29))
            add("specmon_drafts_total", model, _counter(60))
            if "specmon_draft_tokens_total" not in absent:
                add("specmon_draft_tokens_total", model, _counter(60 * t.k))
            add("specmon_accepted_tokens_total", model, _counter(90))
            add("specmon_engine_resets_total", model, _const(1))
            add("specmon_requests_running", model, _const(3))
            # Two configuration epochs: k = 2 before, this k now, changed at t = 1000 s.
            for epoch, k in (("1", "2"), ("2", str(t.k))):
                info = {**model, "epoch": epoch, "speculation": "true", "chain_length": k}
                add("specmon_config_epoch_info", info, _const(1))
            add("specmon_config_change_timestamp_seconds", model, _const(1000))
            for bucket, ratio in (("4", 1.2), ("16", 1.05)):
                if "specmon_change_speedup_ratio" in absent:  # no step timing: no curves
                    break
                b = {**model, "concurrency": bucket}
                add("specmon_change_speedup_ratio", b, _const(ratio))
                add("specmon_change_speedup_lower_ratio", b, _const(ratio - 0.05))
                add("specmon_change_speedup_upper_ratio", b, _const(ratio + 0.03))
                kept = {**b, "change": "1->2"}
                add("specmon_change_kept_speedup_ratio", kept, _const(ratio))
            for window in WINDOWS:
                w = {**model, "window": window}
                add("specmon_window_drafts", w, _const(1200))
                add("specmon_window_seconds", w, _const(300))
                add("specmon_window_generated_tokens", w, _const(4200))
                add("specmon_draft_acceptance_ratio", w, _const(0.4))
                add("specmon_mean_acceptance_length", w, _const(2.5))
                add("specmon_alpha_ratio", w, _const(0.6))
                add("specmon_alpha_margin_ratio", w, _const(0.31))
                add("specmon_expected_speedup_ratio", w, _const(1.6))
                add("specmon_best_chain_length", w, _const(t.k - 1))
                add("specmon_best_speedup_ratio", w, _const(1.7))
                if "specmon_concurrency" not in absent:
                    add("specmon_concurrency", w, _const(4))
                    add("specmon_step_seconds", w, _const(0.0125))
                    add("specmon_time_per_output_token_seconds", w, _const(0.005))
                    add("specmon_mean_draft_length", w, _const(t.k))
                # The verdict: realized against the twin where there is one, else the engine's
                # measured c, else the configured one (the fleet configures every c).
                basis = (
                    "twin" if twin else ("engine" if t.engine_cost is not None else "configured")
                )
                state = {"engine": "modelled", "configured": "guess"}.get(basis, "measured")
                if MEASURING_WINDOWS.get(t.name) == window:
                    state = "measuring"
                add("specmon_verdict_info", {**w, "basis": basis, "state": state}, _const(1))
                add("specmon_verdict_speedup_ratio", w, _const(1.8 if twin else 1.6))
                add("specmon_verdict_speedup_lower_ratio", w, _const(1.7 if twin else 1.55))
                add("specmon_verdict_speedup_upper_ratio", w, _const(1.9 if twin else 1.65))
                add("specmon_verdict_alpha_margin_ratio", w, _const(0.3 if twin else 0.31))
                add("specmon_verdict_breakeven_alpha_ratio", w, _const(0.3 if twin else 0.29))
                add("specmon_verdict_draft_cost_ratio", w, _const(0.12 if twin else 0.1))
                for position in range(1, t.k + 1):
                    p = {**w, "position": str(position)}
                    add("specmon_position_survival_ratio", p, _const(0.8**position))
                    add("specmon_position_conditional_ratio", p, _const(0.8))
                if twin is None:
                    continue
                bl = {**w, "baseline": twin}
                add("specmon_realized_speedup_ratio", bl, _const(1.8))
                add("specmon_measured_breakeven_alpha_ratio", bl, _const(0.3))
                add("specmon_measured_alpha_margin_ratio", bl, _const(0.3))
                add("specmon_crossover_concurrency", bl, _const(14))
                add("specmon_crossover_lower_concurrency", bl, _const(13))
                add("specmon_crossover_upper_concurrency", bl, _const(15))
                for bucket, speedup in (("4", 1.8), ("16", 0.9)):
                    bc = {**bl, "concurrency": bucket}
                    add("specmon_bucket_realized_speedup_ratio", bc, _const(speedup))
                    add("specmon_bucket_draft_cost_ratio", bc, _const(0.1 if speedup > 1 else 0.6))
                    add("specmon_bucket_best_chain_length", bc, _const(t.k if speedup > 1 else 1))
                    add("specmon_bucket_best_speedup_ratio", bc, _const(max(speedup, 1.05)))
    # gpu1 has a tap beside it: two classes and the rest, per window.
    (tapped,) = (t for t in _TARGETS if t.name in TAPPED)
    for instance in tapped.instances:
        base = {"job": "specmon", "instance": instance, "target": tapped.name}
        add("specmon_class_source_up", {**base, "source": "tap"}, _const(1))
        for window in WINDOWS:
            add("specmon_class_coverage_ratio", {**base, "window": window}, _const(0.9))
            for name, ratio, alpha, margin in (
                ("code", 0.6, 0.7, 0.41),
                ("chat", 0.2, 0.25, -0.04),
                ("other", 0.3, 0.4, 0.11),
            ):
                c = {**base, "class": name, "window": window}
                add("specmon_class_requests", c, _const(40))
                add("specmon_class_draft_tokens", c, _const(3000))
                add("specmon_class_accepted_tokens", c, _const(3000 * ratio))
                add("specmon_class_draft_acceptance_ratio", c, _const(ratio))
                add("specmon_class_mean_acceptance_length", c, _const(1 + 4 * ratio))
                add("specmon_class_alpha_ratio", c, _const(alpha))
                add("specmon_class_alpha_margin_ratio", c, _const(margin))
    # gpu1's tap: its own series (job specmon-tap), the class histograms included.
    tap = {"job": "specmon-tap", "instance": "gpu1-tap:9410"}
    for name, near_zero, loop in (("code", 0, 3), ("chat", 12, 0), ("other", 1, 0)):
        c = {**tap, "class": name}
        add("specmon_tap_requests_total", c, _counter(2))
        add("specmon_tap_draft_tokens_total", c, _counter(300))
        add("specmon_tap_accepted_tokens_total", c, _counter(120))
        add("specmon_tap_spec_steps_total", c, _counter(100))
        for family, low, high in (
            ("specmon_tap_request_acceptance_ratio", near_zero / 20, 2.0),
            ("specmon_tap_long_request_acceptance_ratio", 0.0, 1.0),
        ):
            for le in ("0.05", "0.5", "0.95", "1.0", "+Inf"):
                if le == "0.05":
                    step = low
                elif le == "0.95" and family.startswith("specmon_tap_long"):
                    step = high - loop / 20
                else:
                    step = high if le in ("1.0", "+Inf", "0.95") else high / 2
                add(f"{family}_bucket", {**c, "le": le}, _counter(step))
            add(f"{family}_count", c, _counter(high))
            add(f"{family}_sum", c, _counter(high / 2))
    add("specmon_tap_unparsed_responses_total", {**tap, "reason": "no_fields"}, _counter(0.1))
    add("specmon_tap_upstream_errors_total", {**tap, "kind": "connect"}, _const(0))
    add("specmon_tap_upstream_retries_total", tap, _counter(0.02))
    add("specmon_tap_client_disconnects_total", tap, _counter(0.01))
    add("specmon_tap_requests_in_flight", tap, _const(3))
    add("specmon_tap_info", {**tap, "engine": "vllm", "version": "0.1.0"}, _const(1))
    # The twins: up, without speculation, their load and speed only.
    for t in _TARGETS:
        if not BASELINES[t.name]:
            continue
        for instance in t.instances:
            base = {"job": "specmon", "instance": instance, "target": f"{t.name}-twin"}
            model = {**base, "engine": t.engine, "model": t.model}
            add("specmon_up", base, _const(1))
            add("specmon_speculation_enabled", {**base, "engine": t.engine}, _const(0))
            add("specmon_requests_running", model, _const(3))
            for window in WINDOWS:
                w = {**model, "window": window}
                add("specmon_concurrency", w, _const(4))
                add("specmon_step_seconds", w, _const(0.008))
                add("specmon_time_per_output_token_seconds", w, _const(0.009))
    return out


FLEET_METRICS = frozenset(entry["series"].split("{", 1)[0] for entry in fleet_series())
