"""Evidence for docs/load-signals.md: what the engines' load and speed series mean.

    python -m tests.realengines.load_evidence llamacpp [--levels 1,4] [--requests 8]
    python -m tests.realengines.load_evidence vllm     [--levels 1,4] [--requests 8]
    ... [--capture DIR] [--json FILE]

For each engine, a server without speculation and its twin with it (llama.cpp: a draft model
with ``--spec-synth-rates``; vLLM: n-gram), one at a time, get the same streamed chat
completions at each concurrency level. Around every level the ``/metrics`` page is read (raw
socket, as the fixture captures are) and, during it, sampled every 0.25 s for the gauges. The
client records for every request when it was sent, when each streamed chunk arrived and how
many tokens the server counted (``usage``). The script prints the counter increases, the
figures derived from them with the formulas of docs/load-signals.md, and the same figures
measured independently by the client, side by side.

``--capture DIR`` saves, through :class:`capture_pages.Capture` (body and raw headers, an
entry in ``capture-log.json``, as tests/fixtures/pages/README.md describes), the page right
before and right after every level and one taken half-way through the last level, and writes
``load-evidence-<engine>.json`` there with the client's records. Bounded: every request has a
timeout and the script stops its servers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specmon.parser import Page, parse
from tests.realengines import capture_pages, models, servers

SAMPLE_EVERY = 0.25
REQUEST_TIMEOUT = 300.0
SETTLE_SECONDS = 5.0

LLAMA_SERIES = (
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_busy_slots_per_decode",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:spec_decode_num_drafts_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
)
VLLM_SERIES = tuple(
    "vllm:" + name
    for name in (
        "num_requests_running",
        "num_requests_waiting",
        "generation_tokens_total",
        "prompt_tokens_total",
        "request_success_total",
        "inter_token_latency_seconds_sum",
        "inter_token_latency_seconds_count",
        "time_to_first_token_seconds_sum",
        "time_to_first_token_seconds_count",
        "request_time_per_output_token_seconds_sum",
        "request_time_per_output_token_seconds_count",
        "request_decode_time_seconds_sum",
        "request_decode_time_seconds_count",
        "request_generation_tokens_sum",
        "request_generation_tokens_count",
        "iteration_tokens_total_sum",
        "iteration_tokens_total_count",
        "spec_decode_num_drafts_total",
        "spec_decode_num_draft_tokens_total",
        "spec_decode_num_accepted_tokens_total",
    )
)


# --------------------------------------------------------------------------------------------
# Client side
# --------------------------------------------------------------------------------------------


@dataclass
class RequestRecord:
    sent: float
    chunk_times: list[float] = field(default_factory=list)
    #: Completion tokens counted by the server up to each chunk.
    chunk_tokens: list[int] = field(default_factory=list)
    done: float = 0.0
    completion_tokens: int | None = None
    error: str | None = None

    @property
    def first(self) -> float:
        return self.chunk_times[0]

    @property
    def last(self) -> float:
        return self.chunk_times[-1]


def stream_request(port: int, body: dict[str, Any]) -> RequestRecord:
    """One streamed chat completion; the arrival time of every content chunk."""
    record = RequestRecord(sent=time.monotonic())
    conn = http.client.HTTPConnection(servers.HOST, port, timeout=REQUEST_TIMEOUT)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        if resp.status != 200:
            record.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
            return record
        while True:
            line = resp.readline()
            if not line:
                break
            now = time.monotonic()
            text = line.decode("utf-8", "replace").strip()
            if not text.startswith("data:"):
                continue
            payload = text[5:].strip()
            if payload == "[DONE]":
                break
            event = json.loads(payload)
            usage = event.get("usage")
            before = record.completion_tokens
            if usage and usage.get("completion_tokens") is not None:
                record.completion_tokens = int(usage["completion_tokens"])
            timings = event.get("timings")
            if isinstance(timings, dict) and timings.get("predicted_n") is not None:
                record.completion_tokens = int(timings["predicted_n"])
            # vLLM's continuous usage / llama.cpp's per-token timings: an event that carries
            # new tokens, even when its text is empty (incomplete UTF-8).
            counted = record.completion_tokens
            if counted is not None and before != counted and event.get("choices"):
                record.chunk_times.append(now)
                record.chunk_tokens.append(counted)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    finally:
        record.done = time.monotonic()
        conn.close()
    return record


def drive(
    port: int,
    *,
    n: int,
    concurrency: int,
    max_tokens: int,
    prompts: Sequence[str] = servers.REPETITIVE_PROMPTS,
) -> list[RequestRecord]:
    def one(i: int) -> RequestRecord:
        prompt = prompts[i % len(prompts)]
        body = servers.chat_request_body(prompt, model="tiny-llama", max_tokens=max_tokens)
        body["stream"] = True
        # vLLM: usage in every chunk; llama.cpp: timings (predicted_n) in every chunk. Both
        # let the client count tokens per event, independently of the text.
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        body["timings_per_token"] = True
        return stream_request(port, body)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(one, range(n)))


def client_figures(records: Sequence[RequestRecord]) -> dict[str, float | int | None]:
    ok = [r for r in records if r.error is None and len(r.chunk_times) >= 2]
    if not ok:
        return {"completed": 0}
    start = min(r.sent for r in ok)
    end = max(r.done for r in ok)
    wall = end - start
    decode = math.fsum(r.last - r.first for r in ok)
    tokens = [r.completion_tokens for r in ok]
    known = all(t is not None for t in tokens)
    total_tokens = sum(t for t in tokens if t is not None) if known else None
    gaps = sum(len(r.chunk_times) - 1 for r in ok)
    # Tokens after the first chunk (the first chunk's tokens come from the prompt step).
    after_first = sum(r.chunk_tokens[-1] - r.chunk_tokens[0] for r in ok)
    return {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "wall_seconds": wall,
        "completion_tokens": total_tokens,
        "chunks": sum(len(r.chunk_times) for r in ok),
        # Time-averaged requests in flight (Little's law over the run).
        "in_flight_mean": math.fsum(r.done - r.sent for r in ok) / wall,
        # Time-averaged requests between their first and last token (the decode phase).
        "decoding_mean": decode / wall,
        # Decode time per output token after the first, token-weighted.
        "tpot_seconds": decode / after_first if after_first else None,
        # Mean gap between consecutive content chunks.
        "chunk_gap_seconds": decode / gaps if gaps else None,
        "tokens_per_second": total_tokens / wall if total_tokens else None,
        "ttft_mean_seconds": statistics.fmean(r.first - r.sent for r in ok),
    }


# --------------------------------------------------------------------------------------------
# Server side
# --------------------------------------------------------------------------------------------


def scrape(port: int) -> tuple[str, capture_pages.RawResponse]:
    resp = capture_pages.raw_request(port, "/metrics", timeout=30)
    return resp.body.decode("utf-8"), resp


def values(text: str, names: Sequence[str]) -> dict[str, float]:
    page: Page = parse(text, wanted=names)
    out: dict[str, float] = {}
    for name in names:
        samples = page.get(name)
        if samples:
            out[name] = math.fsum(s.value for s in samples)
    return out


class Sampler:
    """Read the page every SAMPLE_EVERY seconds in a thread; keep the gauges' values."""

    def __init__(self, port: int, gauges: Sequence[str]) -> None:
        self.port = port
        self.gauges = gauges
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text, _ = scrape(self.port)
                self.samples.append((time.monotonic(), values(text, self.gauges)))
            except OSError:
                pass
            self._stop.wait(SAMPLE_EVERY)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def mean(self, gauge: str, start: float, end: float) -> float | None:
        picked = [v[gauge] for t, v in self.samples if start <= t <= end and gauge in v]
        return statistics.fmean(picked) if picked else None


def delta(before: dict[str, float], after: dict[str, float], name: str) -> float | None:
    if name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def llamacpp_figures(
    before: dict[str, float], after: dict[str, float], n_requests: int
) -> dict[str, float | None]:
    p = "llamacpp:"
    tokens = delta(before, after, p + "tokens_predicted_total")
    seconds = delta(before, after, p + "tokens_predicted_seconds_total")
    accepted = delta(before, after, p + "spec_decode_num_accepted_tokens_total") or 0.0
    decodes = delta(before, after, p + "n_decode_total")
    busy_after = after[p + "n_busy_slots_per_decode"] * after[p + "n_decode_total"]
    busy_before = before.get(p + "n_busy_slots_per_decode", 0.0) * before.get(
        p + "n_decode_total", 0.0
    )
    steps = None if tokens is None else tokens - accepted
    return {
        "tokens": tokens,
        "seconds": seconds,
        "decodes": decodes,
        "busy_slot_decodes": busy_after - busy_before,
        "drafts": delta(before, after, p + "spec_decode_num_drafts_total"),
        "draft_tokens": delta(before, after, p + "spec_decode_num_draft_tokens_total"),
        "accepted": accepted,
        # Formulas of docs/load-signals.md (window form: no request count on the page).
        "concurrency_per_decode": _ratio(busy_after - busy_before, decodes),
        "tpot_seconds": _ratio(seconds, tokens),
        "step_seconds": _ratio(seconds, steps),
        "tokens_per_step": _ratio(tokens, steps),
        # The same with the client's request count (exact per llama.cpp's own definition).
        "tpot_exact_seconds": _ratio(seconds, None if tokens is None else tokens - n_requests),
        "step_exact_seconds": _ratio(seconds, None if steps is None else steps - n_requests),
    }


def vllm_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    p = "vllm:"

    def d(name: str) -> float | None:
        return delta(before, after, p + name)

    gen = d("generation_tokens_total")
    itl_sum = d("inter_token_latency_seconds_sum")
    itl_count = d("inter_token_latency_seconds_count")
    first = d("time_to_first_token_seconds_count")
    iterations = d("iteration_tokens_total_count")
    decode_tokens = None if gen is None or first is None else gen - first
    req_tokens = d("request_generation_tokens_sum")
    req_count = d("request_generation_tokens_count")
    return {
        "generation_tokens": gen,
        "itl_sum": itl_sum,
        "itl_count": itl_count,
        "first_tokens": first,
        "iterations": iterations,
        "iteration_tokens": d("iteration_tokens_total_sum"),
        "requests_finished": d("request_success_total"),
        "drafts": d("spec_decode_num_drafts_total"),
        "draft_tokens": d("spec_decode_num_draft_tokens_total"),
        "accepted": d("spec_decode_num_accepted_tokens_total"),
        "step_seconds": _ratio(itl_sum, itl_count),
        "tpot_seconds": _ratio(itl_sum, decode_tokens),
        "tokens_per_step": _ratio(decode_tokens, itl_count),
        "concurrency_per_step": _ratio(itl_count, iterations),
        "request_tpot_mean_seconds": _ratio(
            d("request_time_per_output_token_seconds_sum"),
            d("request_time_per_output_token_seconds_count"),
        ),
        "request_decode_tpot_seconds": _ratio(
            d("request_decode_time_seconds_sum"),
            None if req_tokens is None or req_count is None else req_tokens - req_count,
        ),
    }


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------


@dataclass
class LevelResult:
    server: str
    concurrency: int
    requests: int
    max_tokens: int
    scrape_seconds: float
    client: dict[str, Any]
    server_figures: dict[str, Any]
    gauge_means: dict[str, float | None]
    raw_deltas: dict[str, float | None]
    records: list[dict[str, Any]] = field(default_factory=list)


def run_level(
    srv: servers.EngineServer,
    label: str,
    *,
    engine: str,
    concurrency: int,
    n: int,
    max_tokens: int,
    capture: capture_pages.Capture | None,
    during_at: float | None = None,
) -> LevelResult:
    names = LLAMA_SERIES if engine == "llamacpp" else VLLM_SERIES
    gauges = (
        ("llamacpp:requests_processing", "llamacpp:requests_deferred")
        if engine == "llamacpp"
        else ("vllm:num_requests_running", "vllm:num_requests_waiting")
    )
    gen_name = "llamacpp:tokens_predicted_total" if engine == "llamacpp" else names[2]
    stem = f"{engine}-load-{label}-c{concurrency}"
    before_text, before_raw = scrape(srv.port)
    before = values(before_text, names)
    traffic = {
        "endpoint": "POST /v1/chat/completions (stream, continuous usage / per-token timings)",
        "n_requests": n,
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "prompts": "servers.REPETITIVE_PROMPTS, round robin",
    }
    if capture is not None:
        capture.save(f"{stem}-before.txt", before_raw, traffic="none since the previous page")
    t0 = time.monotonic()
    with Sampler(srv.port, gauges) as sampler:
        mid: threading.Timer | None = None
        if capture is not None and during_at is not None:
            # ``during_at`` seconds into the run: requests are in flight.
            def grab() -> None:
                _, raw_mid = scrape(srv.port)
                capture.save(f"{stem}-during.txt", raw_mid, traffic=["in flight", traffic])

            mid = threading.Timer(during_at, grab)
            mid.start()
        records = drive(srv.port, n=n, concurrency=concurrency, max_tokens=max_tokens)
        if mid is not None:
            mid.join()
    client = client_figures(records)
    # Counters may land a moment after the answers: wait until the generated tokens match.
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        after_text, raw = scrape(srv.port)
        after = values(after_text, names)
        got = delta(before, after, gen_name)
        if got is not None and got >= (client.get("completion_tokens") or 0):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    t1 = time.monotonic()
    ok = [r for r in records if r.error is None and r.chunk_times]
    start = min(r.sent for r in ok) if ok else t0
    end = max(r.done for r in ok) if ok else t1
    figures = (
        llamacpp_figures(before, after, len(ok))
        if engine == "llamacpp"
        else vllm_figures(before, after)
    )
    if capture is not None:
        capture.save(f"{stem}-after.txt", raw, traffic=[traffic, client])
    return LevelResult(
        server=label,
        concurrency=concurrency,
        requests=n,
        max_tokens=max_tokens,
        scrape_seconds=t1 - t0,
        client=client,
        server_figures=figures,
        gauge_means={g: sampler.mean(g, start, end) for g in gauges},
        raw_deltas={name: delta(before, after, name) for name in names},
        records=[
            {
                "sent": r.sent - start,
                "first": r.first - start if r.chunk_times else None,
                "last": r.last - start if r.chunk_times else None,
                "done": r.done - start,
                "chunks": len(r.chunk_times),
                "first_chunk_tokens": r.chunk_tokens[0] if r.chunk_tokens else None,
                "tokens": r.completion_tokens,
                "error": r.error,
            }
            for r in records
        ],
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def print_level(result: LevelResult) -> None:
    print(f"\n== {result.server} concurrency {result.concurrency} "
          f"({result.requests} requests x {result.max_tokens} tokens)")  # fmt: skip
    print("  client:  " + ", ".join(f"{k}={_fmt(v)}" for k, v in result.client.items()))
    print("  server:  " + ", ".join(f"{k}={_fmt(v)}" for k, v in result.server_figures.items()))
    print("  gauges (mean of 0.25 s samples during the run): "
          + ", ".join(f"{k}={_fmt(v)}" for k, v in result.gauge_means.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realengines.load_evidence")
    parser.add_argument("engine", choices=["llamacpp", "vllm"])
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--n-parallel", type=int, default=8)
    parser.add_argument("--capture", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", choices=["baseline", "spec"], default=None)
    parser.add_argument(
        "--during-at",
        type=float,
        default=None,
        help="with --capture: seconds into the last level to take the 'during' page",
    )
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    results: list[LevelResult] = []
    capture = capture_pages.Capture(args.capture) if args.capture is not None else None
    configs: list[tuple[str, Callable[[], servers.EngineServer]]]
    if args.engine == "llamacpp":
        draft = models.ensure_tiny_gguf(noise=0.05)
        configs = [
            ("baseline", lambda: servers.llama_baseline_server(n_parallel=args.n_parallel)),
            (
                "spec",
                lambda: servers.llama_server(
                    draft=draft,
                    n_max=4,
                    synth_rates=(0.9, 0.7, 0.5, 0.3),
                    n_parallel=args.n_parallel,
                ),
            ),
        ]
    else:
        configs = [
            ("baseline", lambda: servers.vllm_server(k=None, max_num_seqs=args.n_parallel)),
            ("spec", lambda: servers.vllm_server(k=3, max_num_seqs=args.n_parallel)),
        ]
    for label, make in configs:
        if args.only and label != args.only:
            continue
        with make() as srv:
            print(f"[{label}] {' '.join(srv.argv)}", flush=True)
            # Warm-up: one short request, not measured.
            drive(srv.port, n=1, concurrency=1, max_tokens=8)
            if capture is not None:
                capture.note(f"{args.engine}-load-{label}.command", srv.argv)
            for level in levels:
                result = run_level(
                    srv,
                    label,
                    engine=args.engine,
                    concurrency=level,
                    n=max(args.requests, level),
                    max_tokens=args.max_tokens,
                    capture=capture,
                    during_at=args.during_at if level == levels[-1] else None,
                )
                print_level(result)
                results.append(result)
    if capture is not None:
        capture.flush()
        out = capture.out / f"load-evidence-{args.engine}.json"
        out.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
