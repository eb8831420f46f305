"""The custom collector: metric families built per scrape of specmon from a snapshot of views.

Nothing here mutates global gauges: every call to :meth:`TargetCollector.collect` reads the
current immutable :class:`~specmon.daemon.target.TargetView` of every target and builds fresh
families, so a removed target or a window without drafts simply has no series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specmon.daemon.target import ModelView, TargetView
from specmon.report import AcceptanceReport

__all__ = ["TargetCollector"]

_SRC = "specmon's window over the engine's spec_decode counters"

# name, help, value from a window report
_WINDOW_RATIOS: tuple[tuple[str, str, Callable[[AcceptanceReport], float | int | None]], ...] = (
    (
        "specmon_draft_acceptance_ratio",
        f"Accepted / drafted tokens in the window ({_SRC}: num_accepted_tokens / "
        "num_draft_tokens increases).",
        lambda r: r.draft_acceptance_ratio,
    ),
    (
        "specmon_mean_acceptance_length",
        f"Tokens per verification step including the bonus token: 1 + accepted / drafts ({_SRC}).",
        lambda r: r.mean_acceptance_length,
    ),
    (
        "specmon_alpha_ratio",
        "Effective per-token acceptance rate alpha: solves alpha + ... + alpha^k = accepted / "
        f"drafts in the window ({_SRC}; k = specmon_chain_length).",
        lambda r: r.alpha,
    ),
    (
        "specmon_alpha_margin_ratio",
        "Effective alpha minus break-even alpha in the window; negative means speculation costs "
        "time (specmon_alpha_ratio - specmon_breakeven_alpha_ratio).",
        lambda r: r.alpha_margin,
    ),
    (
        "specmon_expected_speedup_ratio",
        "Expected speed-up over no speculation in the window: (1 + accepted / drafts) / "
        f"(1 + c * draft_tokens / drafts) ({_SRC}; c = specmon_draft_cost_ratio).",
        lambda r: r.expected_speedup,
    ),
    (
        "specmon_best_chain_length",
        "Chain length k' in 0..k maximising (1 + s_1 + ... + s_k') / (1 + k' c) from measured "
        "per-position survival s_i in the window; 0 means speculation does not pay.",
        lambda r: r.best_chain_length,
    ),
    (
        "specmon_best_speedup_ratio",
        "Expected speed-up at the best chain length (see specmon_best_chain_length).",
        lambda r: r.best_speedup,
    ),
)


class _Families:
    """Families created on first use, emitted in a stable order."""

    def __init__(self) -> None:
        self._order: list[Metric] = []
        self._by_name: dict[str, Metric] = {}

    def _family(self, kind: Callable[[str, str], Metric], name: str, doc: str) -> Metric:
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = kind(name, doc)
            self._order.append(family)
        return family

    def gauge(self, name: str, doc: str) -> Metric:
        return self._family(GaugeMetricFamily, name, doc)

    def counter(self, name: str, doc: str) -> Metric:
        return self._family(CounterMetricFamily, name, doc)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._order)


class TargetCollector(Collector):
    def __init__(self, views: Callable[[], Iterable[TargetView]]) -> None:
        self._views = views

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on the targets; the registry must not cache them

    def collect(self) -> Iterable[Metric]:
        fam = _Families()
        up = fam.gauge(
            "specmon_up",
            "1 if specmon's last scrape of the target succeeded (HTTP 200, a parseable page).",
        )
        duration = fam.gauge(
            "specmon_scrape_duration_seconds",
            "Duration of specmon's last scrape of the target, successful or not.",
        )
        last_ok = fam.gauge(
            "specmon_last_success_timestamp_seconds",
            "Unix time of specmon's last successful scrape of the target.",
        )
        enabled = fam.gauge(
            "specmon_speculation_enabled",
            "1 when the target's page carries speculative-decoding series, 0 when it is up "
            "without them (speculation off, or metrics renamed).",
        )
        for view in self._views():
            base = {"target": view.name, **view.labels}
            if not view.scraped:
                continue
            up.add_sample("specmon_up", base, 1.0 if view.up else 0.0)
            if view.last_duration is not None:
                duration.add_sample("specmon_scrape_duration_seconds", base, view.last_duration)
            if view.last_success is not None:
                last_ok.add_sample(
                    "specmon_last_success_timestamp_seconds", base, view.last_success
                )
            if not view.up:
                continue
            engine = view.engine.value if view.engine else "unknown"
            fam.gauge(
                "specmon_page_malformed_lines",
                "Lines of the target's last page that specmon examined and could not parse "
                "(only the speculative-decoding families and the first line are examined).",
            ).add_sample("specmon_page_malformed_lines", base, float(view.malformed))
            enabled.add_sample(
                "specmon_speculation_enabled",
                {**base, "engine": engine},
                1.0 if view.speculation else 0.0,
            )
            for model in view.models:
                _model_series(fam, {**base, "engine": engine, "model": model.model}, model)
        return list(fam)


def _model_series(fam: _Families, labels: dict[str, str], model: ModelView) -> None:
    if model.basis.chain_length is not None:
        fam.gauge(
            "specmon_chain_length",
            "Chain length k in use: the configured chain_length, else the number of position "
            "series the engine publishes.",
        ).add_sample("specmon_chain_length", labels, float(model.basis.chain_length))
    cost = fam.gauge(
        "specmon_draft_cost_ratio",
        "Draft cost c: one drafted token's cost as a fraction of a target step "
        "(source=configured: from specmon's config, used for every verdict; source=engine: "
        "measured by the engine, TensorRT-LLM's spec_decode_draft_overhead o averaged over "
        "the middle window's scrapes where o > 0 and converted as c = o / (k (1 - o))).",
    )
    cost.add_sample(
        "specmon_draft_cost_ratio", {**labels, "source": "configured"}, model.basis.draft_cost
    )
    if model.engine_draft_cost is not None:
        cost.add_sample(
            "specmon_draft_cost_ratio", {**labels, "source": "engine"}, model.engine_draft_cost
        )
    if model.requests_running is not None:
        fam.gauge(
            "specmon_requests_running",
            "Requests the engine is running now (vllm:num_requests_running, "
            "llamacpp:requests_processing, sglang:num_running_reqs, "
            "trtllm_num_requests_running, tgi_batch_current_size): concurrency, which eats "
            "speculation's gain.",
        ).add_sample("specmon_requests_running", labels, model.requests_running)
    if model.basis.breakeven_alpha is not None:
        fam.gauge(
            "specmon_breakeven_alpha_ratio",
            "Break-even alpha for (k, c): S(alpha) = (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)) "
            "= 1. Below it speculation costs time.",
        ).add_sample("specmon_breakeven_alpha_ratio", labels, model.basis.breakeven_alpha)
    if model.totals_accepted is not None:
        # Engines without a counter (TensorRT-LLM: drafts; SGLang, TGI: draft tokens) get no
        # series for it rather than a zero.
        for name, value, what in (
            ("specmon_drafts", model.totals_drafts, "drafts (num_drafts)"),
            ("specmon_draft_tokens", model.totals_draft_tokens, "draft tokens (num_draft_tokens)"),
            (
                "specmon_accepted_tokens",
                model.totals_accepted,
                "accepted draft tokens (num_accepted_tokens)",
            ),
        ):
            if value is None:
                continue
            fam.counter(
                name,
                f"Increase of the engine's {what} counter seen by specmon since it started; "
                "engine restarts are not counted as decreases.",
            ).add_sample(name + "_total", labels, float(value))
        fam.counter(
            "specmon_engine_resets",
            "Engine counter resets (restarts) detected by specmon since it started.",
        ).add_sample("specmon_engine_resets_total", labels, float(model.resets))
    for window in model.windows:
        wl = {**labels, "window": window.window}
        if window.drafts is not None:
            fam.gauge(
                "specmon_window_drafts",
                "Drafts counted in the window: the increase of the engine's num_drafts counter "
                "(SGLang: spec_verify_calls, TGI: tgi_request_skipped_tokens_count, TensorRT-LLM: "
                "drafted tokens at position 0; the sample size behind every ratio). Absent for "
                "engines that count no drafts.",
            ).add_sample("specmon_window_drafts", wl, float(window.drafts))
        if window.generated_tokens is not None and window.drafts is not None:
            fam.gauge(
                "specmon_window_generated_tokens",
                "Tokens the engine generated in the window (vllm:generation_tokens_total, "
                "llamacpp:tokens_predicted_total increase): traffic, with or without drafts.",
            ).add_sample("specmon_window_generated_tokens", wl, float(window.generated_tokens))
        if window.covered_seconds is not None:
            fam.gauge(
                "specmon_window_seconds",
                "Time covered by the window's data (oldest to newest scrape inside the window).",
            ).add_sample("specmon_window_seconds", wl, window.covered_seconds)
        report = window.report
        if report is None:
            continue
        for name, doc, getter in _WINDOW_RATIOS:
            figure = getter(report)
            if figure is not None:
                fam.gauge(name, doc).add_sample(name, wl, float(figure))
        for pos in report.positions:
            pl = {**wl, "position": str(pos.position)}
            if pos.survival is not None:
                fam.gauge(
                    "specmon_position_survival_ratio",
                    "Share of drafts accepted at least this deep: per_pos[i] / drafts over the "
                    f"window ({_SRC}; position 1 = first drafted token).",
                ).add_sample("specmon_position_survival_ratio", pl, pos.survival)
            if pos.conditional is not None:
                fam.gauge(
                    "specmon_position_conditional_ratio",
                    "Acceptance at this position given the previous one was accepted: "
                    f"per_pos[i] / per_pos[i-1] over the window ({_SRC}).",
                ).add_sample("specmon_position_conditional_ratio", pl, pos.conditional)
