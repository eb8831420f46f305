"""Render the fixture pages of engines that cannot run here, written from their source.

TensorRT-LLM's ``trtllm-serve`` and SGLang serve their metrics through prometheus_client in
multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, ``MultiProcessCollector``). Rather than
typing such pages by hand, this script declares the engines' metrics exactly as their source
does (names, HELP texts, label names, gauge multiprocess modes; see
``tests/fixtures/pages/README.md`` for the repository, path and commit of each) with the real
prometheus_client, sets values, and lets the real MultiProcessCollector render the page. Only
the values are invented; they are chosen so that every figure is known by hand (the README
has the arithmetic). The process id in gauge labels is pinned to 4242.

    python -m tests.support.written_pages OUTDIR

writes ``trtllm-serve-positions.txt``, ``trtllm-serve-iteration.txt`` and
``sglang-current.txt`` into OUTDIR. It must run in its own process: multiprocess mode is
chosen when prometheus_client creates a metric value.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

PID = 4242

# TensorRT-LLM: tensorrt_llm/metrics/collector.py (MetricsCollector); labels set by
# tensorrt_llm/serve/openai_server.py: model_name = the served model, engine_type = backend.
TRT_LABELS = {"model_name": "Qwen3-8B", "engine_type": "pytorch"}
TRT_K = 4
TRT_DRAFTED_PER_POS = (1000, 1000, 1000, 1000)
TRT_ACCEPTED_PER_POS = (800, 620, 450, 300)
#: Iteration counters also count requests still running (their tokens so far).
TRT_ITER_DRAFT_TOKENS = 4100
TRT_ITER_ACCEPTED = 2230
TRT_ACCEPTANCE_LENGTH = 3.25
TRT_DRAFT_OVERHEAD = 0.3

# SGLang: python/sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector,
# TokenizerMetricsCollector). Scheduler labels from scheduler.py; two data-parallel ranks.
SGLANG_MODEL = "qwen3-32b"
SGLANG_RANKS = (
    {"dp_rank": "0", "accept_length": 2.62, "accept_rate": 0.54, "running": 7},
    {"dp_rank": "1", "accept_length": 2.78, "accept_rate": 0.5933333333333334, "running": 9},
)
SGLANG_STEPS = 3
SGLANG_REQUESTS = 120
SGLANG_VERIFY = 9000
SGLANG_ACCEPTED = 15300
SGLANG_GENERATED = SGLANG_ACCEPTED + SGLANG_VERIFY + SGLANG_REQUESTS


def _render(build: Any) -> str:
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    build()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    return generate_latest(registry).decode("utf-8")


def trtllm_page(*, positions: bool) -> str:
    from prometheus_client import Counter, Gauge

    labels = TRT_LABELS
    names = list(labels)

    def build() -> None:
        success = Counter(
            "trtllm_request_success_total",
            "Count of successfully processed requests.",
            labelnames=[*names, "finished_reason"],
            registry=None,
        )
        success.labels(**labels, finished_reason="length").inc(96)
        success.labels(**labels, finished_reason="stop").inc(24)
        Counter(
            "trtllm_generation_tokens_total",
            "Cumulative number of generation (output) tokens produced.",
            labelnames=names,
            registry=None,
        ).labels(**labels).inc(3170)
        Gauge(
            "trtllm_num_requests_running", "Number of active requests", labelnames=names,
            registry=None,
        ).labels(**labels).set(6)  # fmt: skip
        Gauge(
            "trtllm_iteration_latency_seconds", "Iteration latency in seconds",
            labelnames=names, registry=None,
        ).labels(**labels).set(0.0213)  # fmt: skip
        Counter(
            "trtllm_spec_decode_num_draft_tokens_total",
            "Total number of draft tokens in speculative decoding",
            labelnames=names,
            registry=None,
        ).labels(**labels).inc(TRT_ITER_DRAFT_TOKENS)
        Counter(
            "trtllm_spec_decode_num_accepted_tokens_total",
            "Total number of accepted tokens in speculative decoding",
            labelnames=names,
            registry=None,
        ).labels(**labels).inc(TRT_ITER_ACCEPTED)
        Gauge(
            "trtllm_spec_decode_acceptance_length",
            "Acceptance length in speculative decoding",
            labelnames=names,
            registry=None,
        ).labels(**labels).set(TRT_ACCEPTANCE_LENGTH)
        Gauge(
            "trtllm_spec_decode_draft_overhead",
            "Draft overhead in speculative decoding",
            labelnames=names,
            registry=None,
        ).labels(**labels).set(TRT_DRAFT_OVERHEAD)
        if positions:
            drafted = Counter(
                "trtllm_spec_decode_drafted_tokens_total",
                "Total drafted tokens per speculative decoding position.",
                labelnames=[*names, "token_position"],
                registry=None,
            )
            accepted = Counter(
                "trtllm_spec_decode_accepted_tokens_total",
                "Total accepted tokens per speculative decoding position.",
                labelnames=[*names, "token_position"],
                registry=None,
            )
            for pos, (d, a) in enumerate(
                zip(TRT_DRAFTED_PER_POS, TRT_ACCEPTED_PER_POS, strict=True)
            ):
                drafted.labels(**labels, token_position=pos).inc(d)
                accepted.labels(**labels, token_position=pos).inc(a)
        info = {
            "spec_enabled": "true",
            "spec_method": "DRAFT_TARGET",
            "spec_num_tokens": str(TRT_K),
            "spec_draft_model": "Qwen3-0.6B",
        }
        Gauge(
            "trtllm_speculative_config_info",
            "Speculative decoding configuration info",
            labelnames=[*names, *info],
            registry=None,
        ).labels(**labels, **info).set(1)

    return _render(build)


def sglang_page() -> str:
    from prometheus_client import Counter, Gauge

    sched_names = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"]

    def build() -> None:
        def gauge(name: str, doc: str) -> Any:
            return Gauge(
                name, doc, labelnames=sched_names, multiprocess_mode="mostrecent", registry=None
            )

        running = gauge("sglang:num_running_reqs", "The number of running requests.")
        length = gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token "
            "per forward).",
        )
        rate = gauge(
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
        )
        steps = gauge("sglang:spec_num_steps", "Currently active speculative_num_steps.")
        draft_tokens = gauge(
            "sglang:spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
        )
        for rank in SGLANG_RANKS:
            labels = {
                "model_name": SGLANG_MODEL, "engine_type": "unified", "tp_rank": "0",
                "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": rank["dp_rank"],
            }  # fmt: skip
            running.labels(**labels).set(rank["running"])
            length.labels(**labels).set(rank["accept_length"])
            rate.labels(**labels).set(rank["accept_rate"])
            steps.labels(**labels).set(SGLANG_STEPS)
            draft_tokens.labels(**labels).set(SGLANG_STEPS + 1)
        tok = {"model_name": SGLANG_MODEL}
        for name, doc, value in (
            ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", 61440),
            ("sglang:generation_tokens_total", "Number of generation tokens processed.",
             SGLANG_GENERATED),
            ("sglang:spec_verify_calls_total",
             "Number of speculative decoding verification calls.", SGLANG_VERIFY),
            ("sglang:num_requests_total", "Number of requests processed.", SGLANG_REQUESTS),
        ):  # fmt: skip
            Counter(name, doc, labelnames=list(tok), registry=None).labels(**tok).inc(value)

    return _render(build)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tests.support.written_pages OUTDIR\n")
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    pages = {
        "trtllm-serve-positions.txt": lambda: trtllm_page(positions=True),
        "trtllm-serve-iteration.txt": lambda: trtllm_page(positions=False),
        "sglang-current.txt": sglang_page,
    }
    for file, render in pages.items():
        with tempfile.TemporaryDirectory() as directory:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
            from prometheus_client import values

            values.ValueClass = values.MultiProcessValue(lambda: PID)  # type: ignore[no-untyped-call]
            (out / file).write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
