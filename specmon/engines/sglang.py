"""SGLang (``GET /metrics`` with ``--enable-metrics``), and sgl-router's ``/engine_metrics``.

Written from SGLang's ``python/sglang/srt/observability/metrics_collector.py`` (formerly
``srt/metrics/collector.py``); where each name comes from is recorded in
``tests/fixtures/pages/README.md``.

- Gauges over the scheduler's **last logging interval**: ``sglang:spec_accept_length`` (mean
  acceptance length, bonus token included) and ``sglang:spec_accept_rate``; newer releases add
  ``sglang:spec_num_steps`` (the active chain length: draft steps per verification, which
  adaptive speculation changes) and ``sglang:spec_num_draft_tokens`` (tokens verified per step,
  = steps + 1 with topk 1: it counts the root token, so it is *not* the chain length).
  Labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank``,
  ``dp_rank``: one series per scheduler rank, replicas (or shards) of one figure, averaged
  here, never added.
- Counters (newer releases, tokenizer process, moved when a request finishes):
  ``sglang:spec_verify_calls_total`` (verification steps summed over requests: the sample
  size), ``sglang:generation_tokens_total``, ``sglang:num_requests_total``. Every verification
  step emits its accepted drafts plus one token and each request's first token comes from
  prefill, so accepted draft tokens = generation tokens - verify calls - requests (derived,
  not counted). No draft-token counter and no per-position data.
- sgl-router's ``/engine_metrics`` aggregates its workers' pages with a ``worker_addr`` label,
  and some versions rename the ``sglang:`` prefix to ``sglang_``: both are read; counters are
  summed over workers, gauges averaged.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.engines._common import (
    count,
    labels_by_name,
    load_context,
    mean_by_model,
    note_once,
    per_model,
    sum_by,
)
from specmon.engines.model import (
    Engine,
    GaugeScope,
    ModelReading,
    Rejection,
    SpecCounters,
    SpecGauges,
)
from specmon.parser import Page

__all__ = ["SglangAdapter"]

PREFIXES = ("sglang:", "sglang_")
_LENGTH = "spec_accept_length"
_RATE = "spec_accept_rate"
_STEPS = "spec_num_steps"
_DRAFT_TOKENS = "spec_num_draft_tokens"
_VERIFY = "spec_verify_calls_total"
_GENERATED = "generation_tokens_total"
_REQUESTS = "num_requests_total"
_RUNNING = "num_running_reqs"
_ALL = (_LENGTH, _RATE, _STEPS, _DRAFT_TOKENS, _VERIFY, _GENERATED, _REQUESTS, _RUNNING)
_MAX_K = 64

NOTE = (
    "SGLang publishes gauges over its last logging interval: no draft counts (sample size), "
    "no per-position data, and no chain length (configure chain_length for alpha)"
)
NOTE_GAUGES = (
    "SGLang: acceptance from its gauges over the scheduler's last logging interval (averaged "
    "over ranks); no sample size and no per-position data"
)
NOTE_COUNTERS = (
    "SGLang: drafts = spec_verify_calls_total (verification steps, counted when requests "
    "finish); accepted tokens derived as generation_tokens_total - spec_verify_calls_total - "
    "num_requests_total; no draft-token counter and no per-position data"
)
NOTE_STEPS = (
    "SGLang: chain length from spec_num_steps (the active number of draft steps; "
    "spec_num_draft_tokens counts the root token too)"
)
NOTE_ROUTER = "sample names use the sglang_ prefix (sgl-router /engine_metrics)"


def _names() -> tuple[str, ...]:
    return tuple(prefix + name for prefix in PREFIXES for name in _ALL)


class SglangAdapter:
    engine = Engine.SGLANG
    wanted: tuple[str, ...] = _names()
    markers: tuple[str, ...] = tuple(
        prefix + name for prefix in PREFIXES for name in (_LENGTH, _RATE, "spec_verify_calls")
    )
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(
        wanted,
        (
            "model_name",
            "engine_type",
            "tp_rank",
            "pp_rank",
            "moe_ep_rank",
            "dp_rank",
            "worker_addr",
        ),
    )

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        prefix = next(
            (p for p in PREFIXES if any(page.has(p + n) for n in (_LENGTH, _RATE, _VERIFY))),
            None,
        )
        if prefix is None:
            return [], []
        lengths = mean_by_model(page, prefix + _LENGTH)
        rates = mean_by_model(page, prefix + _RATE)
        steps = mean_by_model(page, prefix + _STEPS)
        verify = sum_by(page.get(prefix + _VERIFY), "model_name")
        generated = sum_by(page.get(prefix + _GENERATED), "model_name")
        requests = sum_by(page.get(prefix + _REQUESTS), "model_name")
        running = mean_by_model(page, prefix + _RUNNING)

        notes: list[str] = []

        def build(model: str) -> ModelReading | None:
            k_raw = steps.get(model)
            chain = round(k_raw) if k_raw is not None and 1 <= k_raw <= _MAX_K else None
            if k_raw is not None and k_raw < 0.5 and model not in verify:
                return None  # spec_num_steps 0: speculation is off
            counters = self._counters(model, verify, generated, requests, notes)
            length = lengths.get(model)
            # SGLang's gauge reads 0 until its first logging interval with speculation: no
            # data, not a length. Any other value is checked by validation.
            if length == 0.0:
                length = None
            gauges = SpecGauges(
                scope=GaugeScope.LAST_INTERVAL,
                acceptance_rate=rates.get(model),
                mean_acceptance_length=length,
            )
            if counters is None:
                if gauges.acceptance_rate is None and gauges.mean_acceptance_length is None:
                    return None
                note_once(notes, NOTE if chain is None else NOTE_GAUGES)
            if chain is not None:
                note_once(notes, NOTE_STEPS)
            return ModelReading(
                model=model,
                counters=counters,
                gauges=gauges,
                context=load_context(model, running, generated),
                chain_length=chain,
            )

        models = per_model(sorted(set(lengths) | set(rates) | set(verify)), build)
        if prefix == "sglang_":
            notes.append(NOTE_ROUTER)
        return models, notes

    @staticmethod
    def _counters(
        model: str,
        verify: dict[str, float],
        generated: dict[str, float],
        requests: dict[str, float],
        notes: list[str],
    ) -> SpecCounters | None:
        if model not in verify:
            return None
        if model not in generated or model not in requests:
            notes.append(
                "SGLang: spec_verify_calls_total without generation_tokens_total and "
                "num_requests_total: accepted tokens cannot be derived; gauges used"
            )
            return None
        v = count(verify[model], "spec_verify_calls")
        g = count(generated[model], "generation_tokens")
        r = count(requests[model], "num_requests")
        accepted = g - v - r
        if accepted < 0:
            notes.append(
                f"SGLang: generation tokens ({g}) < verify calls ({v}) + requests ({r}): "
                "accepted tokens cannot be derived from this page; gauges used"
            )
            return None
        note_once(notes, NOTE_COUNTERS)
        return SpecCounters(
            drafts=v,
            draft_tokens=0,
            accepted_tokens=accepted,
            unknown=("draft_tokens",),
            derived=("accepted_tokens",),
        )
