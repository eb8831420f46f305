"""TensorRT-LLM (``trtllm-serve``, ``GET /prometheus/metrics``; NVIDIA Dynamo passes the same
series through on its workers' ``/metrics``).

Written from TensorRT-LLM's ``tensorrt_llm/metrics/collector.py`` (MetricsCollector) and
``tensorrt_llm/_torch/pyexecutor/py_executor.py``; where each name comes from is recorded in
``tests/fixtures/pages/README.md``. Labels ``model_name`` and ``engine_type``; the page is
prometheus_client's multiprocess output, so gauges carry a ``pid`` label (one series per
process: averaged here) and counters have no ``_created`` siblings.

- ``trtllm_spec_decode_num_draft_tokens_total`` / ``..._num_accepted_tokens_total``:
  per-iteration counters (drafted and accepted tokens of the requests in each iteration). There
  is **no drafts counter**: alone, they give the draft acceptance ratio exactly and nothing per
  draft.
- ``trtllm_spec_decode_drafted_tokens_total`` / ``..._accepted_tokens_total`` with a
  ``token_position`` label (newer releases): per-request counters added when a request
  finishes. Drafted tokens at position 0 count the verification steps that carried a draft,
  so with these specmon has drafts, draft tokens, accepted tokens and per-position survival,
  all from one consistent source, and uses them instead of the iteration counters.
- ``trtllm_spec_decode_acceptance_length``: tokens per step of the **last iteration** only.
- ``trtllm_spec_decode_draft_overhead``: the drafter's wall time / the whole iteration's wall
  time, last iteration, two-model speculation only (0 otherwise). specmon converts it to a
  draft cost c = o / (k (1 - o)) (see :func:`specmon.arithmetic.draft_cost_from_overhead`).
- ``trtllm_speculative_config_info{spec_num_tokens=...}``: the configured max draft length k.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping

from specmon.bounds import acceptance_length_refusal
from specmon.engines._common import (
    count,
    labels_by_name,
    load_context,
    max_by_model,
    mean_by_model,
    note_once,
    per_model,
    positions_tuple,
    sum_by,
    sum_positions,
)
from specmon.engines.model import (
    Engine,
    GaugeScope,
    ModelReading,
    Rejection,
    RejectReason,
    SpecCounters,
    SpecGauges,
)
from specmon.parser import Page

__all__ = ["TrtllmAdapter"]

PREFIXES = ("trtllm_", "trtllm:")
_DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
_ACCEPTED = "spec_decode_num_accepted_tokens_total"
_DRAFTED_POS = "spec_decode_drafted_tokens_total"
_ACCEPTED_POS = "spec_decode_accepted_tokens_total"
_LENGTH = "spec_decode_acceptance_length"
_OVERHEAD = "spec_decode_draft_overhead"
_INFO = "speculative_config_info"
_RUNNING = "num_requests_running"
_GENERATED = "generation_tokens_total"
_SPEC = (_DRAFT_TOKENS, _ACCEPTED, _DRAFTED_POS, _ACCEPTED_POS, _LENGTH, _OVERHEAD)
_POSITION_LABEL = "token_position"
#: Largest chain length believed from the info gauge's label.
_MAX_K = 64

NOTE_POSITIONS = (
    "TensorRT-LLM: drafts, draft tokens, accepted tokens and per-position survival come from "
    "its per-position counters (spec_decode_drafted_tokens_total / "
    "spec_decode_accepted_tokens_total by token_position), which move when a request finishes"
)
NOTE_NO_POSITIONS = (
    "TensorRT-LLM publishes no drafts counter (and this page no per-position series): the "
    "draft acceptance ratio is exact; mean acceptance length, alpha and speed-up assume every "
    "draft carried k tokens; no per-position survival"
)
NOTE_OVERHEAD = (
    "TensorRT-LLM's spec_decode_draft_overhead is one iteration's drafting time / iteration "
    "time (0 without a separate draft model); specmon reports it as a measured draft cost "
    "c = o / (k (1 - o))"
)


def _names(suffixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(prefix + suffix for prefix in PREFIXES for suffix in suffixes)


def _chain_lengths(page: Page, name: str) -> dict[str, int]:
    """Per model, ``spec_num_tokens`` of the speculative-config info gauge (when sane)."""
    found: dict[str, set[int]] = defaultdict(set)
    for sample in page.get(name):
        raw = sample.labels.get("spec_num_tokens", "")
        try:
            k = int(raw)
        except ValueError:
            continue
        if 1 <= k <= _MAX_K and sample.value == 1.0:
            found[sample.label("model_name")].add(k)
    return {model: max(ks) for model, ks in found.items()}


class TrtllmAdapter:
    engine = Engine.TRTLLM
    wanted: tuple[str, ...] = _names((*_SPEC, _INFO, _RUNNING, _GENERATED))
    markers: tuple[str, ...] = _names(
        ("spec_decode_num_draft_tokens", "spec_decode_drafted_tokens", _LENGTH)
    )
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(
        wanted,
        ("model_name", "engine_type", "pid"),
        by_name={
            **dict.fromkeys(_names((_DRAFTED_POS, _ACCEPTED_POS)), (_POSITION_LABEL,)),
            **dict.fromkeys(_names((_INFO,)), ("spec_num_tokens",)),
        },
    )

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        prefix = next((p for p in PREFIXES if any(page.has(p + n) for n in _SPEC)), None)
        if prefix is None:
            return [], []
        draft_tokens = sum_by(page.get(prefix + _DRAFT_TOKENS), "model_name")
        accepted = sum_by(page.get(prefix + _ACCEPTED), "model_name")
        drafted_pos = sum_positions(
            page.get(prefix + _DRAFTED_POS), "model_name", label=_POSITION_LABEL
        )
        accepted_pos = sum_positions(
            page.get(prefix + _ACCEPTED_POS), "model_name", label=_POSITION_LABEL
        )
        lengths = mean_by_model(page, prefix + _LENGTH)
        highest = max_by_model(page, prefix + _LENGTH)
        refused: list[Rejection] = []
        overheads = mean_by_model(page, prefix + _OVERHEAD)
        chains = _chain_lengths(page, prefix + _INFO)
        running = mean_by_model(page, prefix + _RUNNING)
        generated = sum_by(page.get(prefix + _GENERATED), "model_name")

        notes: list[str] = []

        def build(model: str) -> ModelReading | None:
            counters: SpecCounters | None = None
            if drafted_pos.get(model) or accepted_pos.get(model):
                drafted = positions_tuple(drafted_pos.get(model, {}), "drafted_per_pos")
                per_pos = positions_tuple(accepted_pos.get(model, {}), "accepted_per_pos")
                counters = SpecCounters(
                    drafts=drafted[0] if drafted else 0,
                    draft_tokens=sum(drafted),
                    accepted_tokens=sum(per_pos),
                    accepted_per_position=per_pos,
                )
                note_once(notes, NOTE_POSITIONS)
            elif model in draft_tokens or model in accepted:
                counters = SpecCounters(
                    drafts=0,
                    draft_tokens=count(draft_tokens.get(model, 0.0), "draft_tokens"),
                    accepted_tokens=count(accepted.get(model, 0.0), "accepted_tokens"),
                    unknown=("drafts",),
                )
                note_once(notes, NOTE_NO_POSITIONS)
            # The gauges read 0 until the first iteration that drafted: no data, not a value.
            # Any other value is checked by validation.
            length = lengths.get(model) or None
            k = max(chains.get(model) or 0, len(counters.accepted_per_position) if counters else 0)
            top = highest.get(model)
            if length is not None and k and top is not None and math.isfinite(top) and top >= 1:
                # Any process's value above k + 1 (the mean of many would hide one); values
                # that are not finite or below 1 are validation's (the whole model).
                why = acceptance_length_refusal(top, chain_length=k)
                if why is not None:
                    refused.append(
                        Rejection(
                            model,
                            RejectReason.LENGTH_ABOVE_CHAIN,
                            f"spec_decode_acceptance_length: {why} (spec_num_tokens); the "
                            "gauge is not used",
                            whole_model=False,
                        )
                    )
                    length = None
            overhead = overheads.get(model) or None
            gauges = SpecGauges(
                scope=GaugeScope.LAST_ITERATION,
                mean_acceptance_length=length,
                draft_overhead=overhead,
            )
            if gauges.draft_overhead is not None:
                note_once(notes, NOTE_OVERHEAD)
            if counters is None and gauges.mean_acceptance_length is None:
                return None
            return ModelReading(
                model=model,
                counters=counters,
                gauges=gauges,
                context=load_context(model, running, generated),
                chain_length=chains.get(model),
            )

        names = set(draft_tokens) | set(accepted) | set(drafted_pos) | set(accepted_pos)
        models = per_model(sorted(names | set(lengths)), build)
        models += refused
        if prefix == "trtllm:":
            notes.append("sample names use the trtllm: prefix (older NVIDIA Dynamo pass-through)")
        return models, notes
