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
- Custom labels (``--tokenizer-metrics-allowed-custom-labels class``, the client's
  ``x-custom-labels: {"class": "code"}``) split those three tokenizer counters by class:
  :meth:`SglangAdapter.read_classes` sums them per ``class`` value (requests without the
  header carry ``class=""`` and are left out of the classes: the coverage says how many). They
  move when requests finish; the scheduler's gauges carry no custom label.
- Load (newer releases): ``sglang:cuda_graph_passes_total{mode}`` counts forward passes
  (decode steps: the ``decode_*`` modes) and ``sglang:forward_execution_seconds_total
  {category}`` (formerly ``gpu_execution_seconds_total``; needs
  ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``, a zero series means the timer is off) their GPU
  time (``decode``): step time = decode seconds / decode passes, concurrency = verification
  steps / decode passes. Estimates: the draft's forward passes are inside ``decode``, and the
  verify calls land when requests finish while the passes count live. One scheduler per
  data-parallel rank (``tp_rank``/``pp_rank`` 0) is read; ranks are summed as replicas.
- sgl-router's ``/engine_metrics`` aggregates its workers' pages with a ``worker_addr`` label,
  and some versions rename the ``sglang:`` prefix to ``sglang_``: both are read; counters are
  summed over workers, gauges averaged.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from specmon.engines._common import (
    AdapterError,
    count,
    labels_by_name,
    load_context,
    mean_by_model,
    note_once,
    per_model,
    sum_by,
)
from specmon.engines.classes import ClassCounts, ClassReading, capped
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
_PASSES = "cuda_graph_passes_total"
_FORWARD = "forward_execution_seconds_total"
_FORWARD_OLD = "gpu_execution_seconds_total"
_ALL = (
    _LENGTH, _RATE, _STEPS, _DRAFT_TOKENS, _VERIFY, _GENERATED, _REQUESTS, _RUNNING, _PASSES,
    _FORWARD, _FORWARD_OLD,
)  # fmt: skip
#: The custom label specmon reads classes from (the client's ``x-custom-labels`` key).
CLASS_LABEL = "class"
#: forward_execution_seconds_total categories of a decode step (newer and older names).
_DECODE_CATEGORIES = frozenset({"decode", "forward_decode"})
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
NOTE_LOAD = (
    "SGLang load figures are estimates: step time from forward_execution_seconds_total"
    '{category="decode"} (GPU time; the draft\'s forward passes are inside it) over the '
    "decode passes of cuda_graph_passes_total; concurrency from spec_verify_calls_total, "
    "which moves when requests finish"
)
NOTE_TIMER_OFF = (
    "SGLang: forward_execution_seconds_total is 0 while decode passes were counted: the device "
    "timer is off (SGLANG_ENABLE_METRICS_DEVICE_TIMER=1); no step time"
)


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
            CLASS_LABEL,
        ),
        by_name={
            prefix + name: labels
            for prefix in PREFIXES
            for name, labels in (
                (_PASSES, ("mode",)),
                (_FORWARD, ("category",)),
                (_FORWARD_OLD, ("category",)),
            )
        },
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
        load = _load(page, prefix)

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
            context = load_context(model, running, generated)
            steps_load = load.get(model)
            if steps_load is not None and counters is not None:
                engine_steps, step_seconds, replicas = steps_load
                if step_seconds is None:
                    note_once(notes, NOTE_TIMER_OFF)
                else:
                    note_once(notes, NOTE_LOAD)
                    context = replace(
                        context,
                        engine_steps=engine_steps,
                        engine_step_seconds=step_seconds,
                        request_steps=counters.drafts,
                        engine_replicas=replicas if replicas > 1 else None,
                    )
            return ModelReading(
                model=model,
                counters=counters,
                gauges=gauges,
                context=context,
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

    def read_classes(self, page: Page) -> ClassReading | None:
        """Per ``class`` custom label, the tokenizer counters summed over models and ranks;
        None when no series carries the label. Requests without the header (``class=""``)
        are no class."""
        prefix = next((p for p in PREFIXES if page.has(p + _VERIFY)), None)
        if prefix is None:
            return None
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
        labelled = False
        for index, name in enumerate((_REQUESTS, _GENERATED, _VERIFY)):
            for sample in page.get(prefix + name):
                value = sample.labels.get(CLASS_LABEL)
                if value is None:
                    continue
                labelled = True
                if value:
                    sums[value][index] += sample.value
        if not labelled:
            return None
        notes: list[str] = []
        items: list[tuple[str, ClassCounts]] = []
        for name, (requests, generated, verify) in sorted(sums.items()):
            try:
                r = count(requests, "num_requests")
                g = count(generated, "generation_tokens")
                v = count(verify, "spec_verify_calls")
            except AdapterError as exc:
                notes.append(f"SGLang class {name[:64]!r} refused: {exc}")
                continue
            if g - v - r < 0:
                notes.append(
                    f"SGLang class {name[:64]!r}: generation tokens ({g}) < verify calls ({v}) "
                    f"+ requests ({r}): its accepted tokens cannot be derived"
                )
                continue
            items.append((name, ClassCounts(r, g - v - r, None, v)))
        classes, folded = capped(items)
        if folded:
            notes.append("more SGLang classes than specmon keeps: the rest summed into 'other'")
        notes.append(NOTE_CLASSES)
        return ClassReading(
            source="sglang", classes=classes, engine="sglang", derived=True, notes=tuple(notes)
        )


NOTE_CLASSES = (
    "SGLang classes from its custom-label tokenizer counters: accept length per class = "
    "(generation tokens - requests) / verify calls, counted when requests finish"
)


def _load(page: Page, prefix: str) -> dict[str, tuple[int, float | None, int]]:
    """Per model: (decode passes, decode-step GPU seconds or None when the timer is off,
    data-parallel ranks), from the first scheduler of each rank (tp_rank and pp_rank 0)."""
    passes: dict[str, float] = defaultdict(float)
    ranks: dict[str, set[str]] = defaultdict(set)
    for sample in page.get(prefix + _PASSES):
        if not _first_scheduler(sample.labels) or not sample.label("mode").startswith("decode"):
            continue
        model = sample.label("model_name")
        passes[model] += sample.value
        ranks[model].add(sample.label("dp_rank"))
    seconds: dict[str, float] = defaultdict(float)
    timed: set[str] = set()
    name = prefix + _FORWARD if page.has(prefix + _FORWARD) else prefix + _FORWARD_OLD
    for sample in page.get(name):
        if _first_scheduler(sample.labels) and sample.label("category") in _DECODE_CATEGORIES:
            model = sample.label("model_name")
            seconds[model] += sample.value
            timed.add(model)
    out: dict[str, tuple[int, float | None, int]] = {}
    for model, value in passes.items():
        try:
            steps = count(value, "cuda_graph_passes")
        except AdapterError:
            continue
        spent = seconds.get(model) if model in timed else None
        if spent is not None and not (0.0 < spent < math.inf):  # 0: the timer is off
            spent = None
        out[model] = (steps, spent, len(ranks[model]))
    return out


def _first_scheduler(labels: Mapping[str, str]) -> bool:
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"
