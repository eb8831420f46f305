"""vLLM V1 engine (v0.8 and later): four counters, summed over the ``engine`` label per model.

Sample names carry the ``vllm:`` prefix on ``GET /metrics``; the OpenMetrics path
(``GET /metrics/``) may rewrite it to ``vllm_``. Multiprocess pages (data parallel or several
API servers) have the same names without ``_created`` siblings, one series per engine index.
"""

from __future__ import annotations

from specmon.engines._common import count, per_model, positions_tuple, sum_by, sum_positions
from specmon.engines.model import Context, Engine, ModelReading, Rejection, SpecCounters
from specmon.exposition import Page

__all__ = ["VllmAdapter"]

_COUNTERS = (
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total",
)
_CONTEXT = (
    "num_requests_running",
    "generation_tokens_total",
    "inter_token_latency_seconds_sum",
    "inter_token_latency_seconds_count",
)
PREFIXES = ("vllm:", "vllm_")


def _names(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + suffix for prefix in PREFIXES for suffix in suffixes)


class VllmAdapter:
    engine = Engine.VLLM
    wanted: tuple[str, ...] = _names(_COUNTERS + _CONTEXT)
    markers: tuple[str, ...] = _names(("spec_decode_num_drafts",))

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        prefix = next((p for p in PREFIXES if page.has(p + "spec_decode_num_drafts_total")), None)
        if prefix is None:
            return [], []
        drafts = sum_by(page.get(prefix + "spec_decode_num_drafts_total"), "model_name")
        draft_tokens = sum_by(page.get(prefix + "spec_decode_num_draft_tokens_total"), "model_name")
        accepted = sum_by(page.get(prefix + "spec_decode_num_accepted_tokens_total"), "model_name")
        per_pos = sum_positions(
            page.get(prefix + "spec_decode_num_accepted_tokens_per_pos_total"), "model_name"
        )
        running = sum_by(page.get(prefix + "num_requests_running"), "model_name")
        generated = sum_by(page.get(prefix + "generation_tokens_total"), "model_name")
        itl_sum = sum_by(page.get(prefix + "inter_token_latency_seconds_sum"), "model_name")
        itl_count = sum_by(page.get(prefix + "inter_token_latency_seconds_count"), "model_name")

        def build(model: str) -> ModelReading:
            counters = SpecCounters(
                drafts=count(drafts[model], "drafts"),
                draft_tokens=count(draft_tokens.get(model, 0.0), "draft_tokens"),
                accepted_tokens=count(accepted.get(model, 0.0), "accepted_tokens"),
                accepted_per_position=positions_tuple(per_pos.get(model, {}), "per_pos"),
            )
            context = Context(
                requests_running=running.get(model),
                generation_tokens=(
                    count(generated[model], "generation_tokens") if model in generated else None
                ),
                inter_token_latency_sum_seconds=itl_sum.get(model),
                inter_token_latency_count=(
                    count(itl_count[model], "itl_count") if model in itl_count else None
                ),
            )
            return ModelReading(model=model, counters=counters, context=context)

        models = per_model(sorted(drafts), build)
        notes = []
        if prefix == "vllm_":
            notes.append("sample names use the vllm_ prefix (vLLM's OpenMetrics path)")
        return models, notes
