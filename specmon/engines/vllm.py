"""vLLM V1 engine (v0.8 and later): four counters, summed over the ``engine`` label per model.

Sample names carry the ``vllm:`` prefix on ``GET /metrics``; the OpenMetrics path
(``GET /metrics/``) may rewrite it to ``vllm_``. Multiprocess pages (data parallel or several
API servers) have the same names without ``_created`` siblings, one series per engine index.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.engines._common import (
    context_count,
    count,
    labels_by_name,
    per_model,
    positions_tuple,
    sum_by,
    sum_positions,
)
from specmon.engines.model import Context, Engine, ModelReading, Rejection, SpecCounters
from specmon.parser import Page

__all__ = ["VllmAdapter"]

_COUNTERS = (
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total",
)
_CONTEXT = (
    "num_requests_running",
    "num_requests_waiting",
    "generation_tokens_total",
    "inter_token_latency_seconds_sum",
    "inter_token_latency_seconds_count",
    "time_to_first_token_seconds_count",
    "iteration_tokens_total_count",
    "request_time_per_output_token_seconds_sum",
    "request_time_per_output_token_seconds_count",
)
PREFIXES = ("vllm:", "vllm_")


def _names(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + suffix for prefix in PREFIXES for suffix in suffixes)


class VllmAdapter:
    engine = Engine.VLLM
    wanted: tuple[str, ...] = _names(_COUNTERS + _CONTEXT)
    markers: tuple[str, ...] = _names(("spec_decode_num_drafts",))
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(
        wanted,
        ("model_name", "engine"),
        by_name=dict.fromkeys(
            _names(("spec_decode_num_accepted_tokens_per_pos_total",)), ("position",)
        ),
    )

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        prefix = next((p for p in PREFIXES if page.has(p + "spec_decode_num_drafts_total")), None)
        if prefix is None:
            # No speculation: the load series alone (a baseline server), as plain models.
            prefix = next(
                (p for p in PREFIXES if any(page.has(p + name) for name in _CONTEXT)), None
            )
            if prefix is None:
                return [], []
            dropped: list[Rejection] = []
            contexts = self._contexts(page, prefix, dropped)
            plain = [ModelReading(model=m, context=c) for m, c in sorted(contexts.items())]
            return [*plain, *dropped], []
        drafts = sum_by(page.get(prefix + "spec_decode_num_drafts_total"), "model_name")
        draft_tokens = sum_by(page.get(prefix + "spec_decode_num_draft_tokens_total"), "model_name")
        accepted = sum_by(page.get(prefix + "spec_decode_num_accepted_tokens_total"), "model_name")
        per_pos = sum_positions(
            page.get(prefix + "spec_decode_num_accepted_tokens_per_pos_total"), "model_name"
        )
        dropped = []
        contexts = self._contexts(page, prefix, dropped)

        def build(model: str) -> ModelReading:
            counters = SpecCounters(
                drafts=count(drafts[model], "drafts"),
                draft_tokens=count(draft_tokens.get(model, 0.0), "draft_tokens"),
                accepted_tokens=count(accepted.get(model, 0.0), "accepted_tokens"),
                accepted_per_position=positions_tuple(per_pos.get(model, {}), "per_pos"),
            )
            return ModelReading(
                model=model, counters=counters, context=contexts.get(model, Context())
            )

        models = per_model(sorted(drafts), build)
        models += [
            ModelReading(model=m, context=c) for m, c in sorted(contexts.items()) if m not in drafts
        ]
        models += dropped
        notes = []
        if prefix == "vllm_":
            notes.append("sample names use the vllm_ prefix (vLLM's OpenMetrics path)")
        return models, notes

    @staticmethod
    def _contexts(page: Page, prefix: str, dropped: list[Rejection]) -> dict[str, Context]:
        """Per model, the load series (summed over the ``engine`` label). A load counter that
        cannot be used is dropped alone (a Rejection in ``dropped``): a broken neighbour series
        must not hide the acceptance counters."""
        # Each series summed per model over the ``engine`` label, in one pass with the
        # engines seen: data parallel is one series per engine replica, and their engine
        # time adds up (specmon.load.laws).
        series: dict[str, dict[str, float]] = {}
        engines: dict[str, set[str]] = {}
        for name in _CONTEXT:
            sums: dict[str, float] = {}
            for sample in page.get(prefix + name):
                labels = sample.labels
                model = labels.get("model_name", "")
                sums[model] = sums.get(model, 0.0) + sample.value
                found = engines.get(model)
                if found is None:
                    found = engines[model] = set()
                found.add(labels.get("engine", ""))
            series[name] = sums
        out: dict[str, Context] = {}
        for model in engines:
            out[model] = Context(
                engine_replicas=len(engines.get(model, ())) or None,
                requests_running=series["num_requests_running"].get(model),
                requests_waiting=series["num_requests_waiting"].get(model),
                generation_tokens=context_count(
                    series["generation_tokens_total"], model, "generation_tokens_total", dropped
                ),
                inter_token_latency_sum_seconds=series["inter_token_latency_seconds_sum"].get(
                    model
                ),
                inter_token_latency_count=context_count(
                    series["inter_token_latency_seconds_count"],
                    model,
                    "inter_token_latency_seconds_count",
                    dropped,
                ),
                first_token_count=context_count(
                    series["time_to_first_token_seconds_count"],
                    model,
                    "time_to_first_token_seconds_count",
                    dropped,
                ),
                engine_steps=context_count(
                    series["iteration_tokens_total_count"],
                    model,
                    "iteration_tokens_total_count",
                    dropped,
                ),
                request_tpot_sum_seconds=series["request_time_per_output_token_seconds_sum"].get(
                    model
                ),
                request_tpot_count=context_count(
                    series["request_time_per_output_token_seconds_count"],
                    model,
                    "request_time_per_output_token_seconds_count",
                    dropped,
                ),
            )
        return out
