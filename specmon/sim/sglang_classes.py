"""SGLang's ``/metrics`` with a custom label and its load counters, written as SGLang's source
writes them, from simulated requests of several classes.

Written from SGLang's ``python/sglang/srt/observability/metrics_collector.py`` and the
tokenizer manager (``init_metric_collector_watchdog``), read in December 2026 (SGLang cannot
run here: it needs a GPU):

- ``TokenizerMetricsCollector`` labels ``model_name`` and ``engine_type``, plus every name in
  ``--tokenizer-metrics-allowed-custom-labels`` with ``""`` as its default; a request's
  ``x-custom-labels`` header sets them. ``observe_one_finished_request`` adds the request's
  prompt and generation tokens, increments ``num_requests_total``, and adds its
  ``spec_verify_ct`` to ``spec_verify_calls_total`` **only when it is above 0** (a label set
  that never verified has no verify series);
- ``SchedulerMetricsCollector`` labels ``model_name``, ``engine_type``, ``tp_rank``,
  ``pp_rank``, ``moe_ep_rank``, ``dp_rank`` (no custom label): the spec gauges over the last
  logging interval, ``cuda_graph_passes_total{mode}`` (``increment_decode_cuda_graph_pass``:
  ``decode_cuda_graph`` or ``decode_none``, one per decode forward pass) and
  ``forward_execution_seconds_total{category}`` (the device timer, only with
  ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``: a series at 0 otherwise);
- SGLang serves them through prometheus_client in multiprocess mode: no ``_created``
  samples, label names in sorted order, Python float formatting.

Each simulated request's first token comes from prefill; then every verification step accepts
a prefix of the draft (survival per position, drawn) and emits it plus one token, until the
request's tokens are reached. One request runs at a time (batch 1): a decode pass is a
verification step.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specmon.sim.pages import go_float

__all__ = ["ClassTotals", "SglangClassesSim"]


@dataclass
class ClassTotals:
    requests: int = 0
    prompt: int = 0
    generated: int = 0
    verify: int = 0


@dataclass
class SglangClassesSim:
    """Requests of several classes on one simulated SGLang server."""

    #: Per class, the survival of each draft position (k = its length); ``""``: requests
    #: without the header.
    survival: Mapping[str, Sequence[float]]
    model: str = "qwen3-32b"
    seed: int = 0
    step_seconds: float = 0.02
    #: SGLANG_ENABLE_METRICS_DEVICE_TIMER: without it the forward timer stays at 0.
    timer: bool = True
    label: str = "class"
    classes: dict[str, ClassTotals] = field(default_factory=dict)
    passes: int = 0
    decode_seconds: float = 0.0
    extend_seconds: float = 0.0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)  # noqa: S311 - a simulation, not a secret

    @property
    def k(self) -> int:
        return max(len(s) for s in self.survival.values())

    def request(self, name: str, tokens: int, *, prompt: int = 20) -> int:
        """One request of class ``name`` generating ``tokens``; its verify steps."""
        survival = self.survival[name]
        produced, steps = 1, 0  # the first token comes from prefill
        while produced < tokens:
            accepted = 0
            for i, s in enumerate(survival):
                conditional = s / (survival[i - 1] if i else 1.0)
                if self._rng.random() >= conditional:
                    break
                accepted += 1
            accepted = min(accepted, tokens - produced - 1)
            produced += accepted + 1
            steps += 1
        totals = self.classes.setdefault(name, ClassTotals())
        totals.requests += 1
        totals.prompt += prompt
        totals.generated += produced
        totals.verify += steps
        self.passes += steps
        if self.timer:
            self.decode_seconds += steps * self.step_seconds
            self.extend_seconds += prompt * self.step_seconds / 200.0
        return steps

    def page(self) -> str:
        sched = (
            f'dp_rank="0",engine_type="unified",model_name="{self.model}",moe_ep_rank="0",'
            'pp_rank="0",tp_rank="0"'
        )
        verify = sum(t.verify for t in self.classes.values())
        generated = sum(t.generated for t in self.classes.values())
        requests = sum(t.requests for t in self.classes.values())
        length = 1.0 + (generated - verify - requests) / verify if verify else 0.0
        out: list[str] = []

        def family(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP sglang:{name} {help_}\n# TYPE sglang:{name} {kind}\n")
            out.extend(
                f"sglang:{name}{{{labels}}} {go_float(value)}\n" for labels, value in samples
            )

        family("num_running_reqs", "gauge", "The number of running requests.", [(sched, 0.0)])
        family(
            "spec_accept_length", "gauge",
            "The average acceptance length of speculative decoding.", [(sched, length)],
        )  # fmt: skip
        family(
            "spec_accept_rate", "gauge",
            "The average acceptance rate of speculative decoding (`accepted tokens / total "
            "draft tokens` in batch).",
            [(sched, (length - 1.0) / self.k if verify else 0.0)],
        )  # fmt: skip
        family("spec_num_steps", "gauge", "Currently active speculative_num_steps.",
               [(sched, float(self.k))])  # fmt: skip
        family(
            "cuda_graph_passes_total", "counter",
            "Total number of forward passes categorized by CUDA graph.",
            [(_with(sched, mode="decode_cuda_graph"), float(self.passes))],
        )  # fmt: skip
        family(
            "forward_execution_seconds_total", "counter",
            "Total time that GPU is busy executing model forward passes. Refer to ForwardMode "
            "for category labels.",
            [(_with(sched, category="decode"), self.decode_seconds),
             (_with(sched, category="extend"), self.extend_seconds)],
        )  # fmt: skip
        per = sorted(self.classes.items())

        def tok(value: str) -> str:
            base = f'engine_type="unified",model_name="{self.model}"'
            return _with(base, **{self.label: value})

        family("prompt_tokens_total", "counter", "Number of prefill tokens processed.",
               [(tok(n), float(t.prompt)) for n, t in per])  # fmt: skip
        family("generation_tokens_total", "counter", "Number of generation tokens processed.",
               [(tok(n), float(t.generated)) for n, t in per])  # fmt: skip
        family(
            "spec_verify_calls_total", "counter",
            "Number of speculative decoding verification calls.",
            [(tok(n), float(t.verify)) for n, t in per if t.verify > 0],
        )  # fmt: skip
        family("num_requests_total", "counter", "Number of requests processed.",
               [(tok(n), float(t.requests)) for n, t in per])  # fmt: skip
        return "".join(out)


def _with(labels: str, **extra: str) -> str:
    """``labels`` with ``extra`` added, every name in sorted order (multiprocess mode)."""
    pairs = dict(part.split("=", 1) for part in labels.split(","))
    pairs.update({k: f'"{v}"' for k, v in extra.items()})
    return ",".join(f"{k}={v}" for k, v in sorted(pairs.items()))
