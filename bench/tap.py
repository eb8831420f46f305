"""Tap benchmark: what ``specmon tap`` adds to a response, direct against through the tap.

Run (under the heavy lock; it loads both cores):
    flock /work/heavy.lock ./dev.sh bench tap [--upstream sim,llama] [--streams 1,64]
        [--rounds 6] [--per-round 64] [--memory 10000] [--json-out FILE]

Upstreams: ``specmon simulate --engine vllm`` (streamed chat completions in vLLM 0.32's
shape, paced at ``--step-seconds``, with the per-request metrics object) and a real
llama-server b11434 (the tiny model and its 5 % noise draft, ``-np 64``). The tap is a
``specmon tap`` subprocess in front of each. The client (aiohttp, this process) sends
streamed chat completions (``include_usage``), ``streams`` at a time, alternating rounds
direct and through the tap so that both see the same machine; per request it records the
time to the first byte of the response (TTFB: its head), to its first event (the first body
chunk), and the time per streamed chunk ((last - first event) / (events - 1)): a chunk's
arrival is the first event's + the sum of the gaps before it, so these say everything added. Goals (issue 65): added TTFB <= 1 ms median and 5 ms at p99, added time per
chunk <= 100 us median, at 1 and 64 streams.

Memory: ``--memory`` requests (non-streaming and streaming mixed, 16 at a time) through a tap
in front of the simulator; its resident set (VmRSS) every thousand requests. The tap's CPU
time (utime + stime) over each phase is recorded too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from specmon.cli.tap import loop_factory

REPO = Path(__file__).resolve().parents[1]
PROMPTS = (
    "one two three four one two three four one two three four",
    "Describe the harbour at dawn: gulls, ropes, a ferry leaving, fog lifting slowly.",
)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback http
                if resp.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready after {timeout:.0f} s")
        time.sleep(0.1)


@contextmanager
def _process(
    argv: list[str], ready: str, what: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(ready, proc, what)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextmanager
def simulator(tmp: Path, step_seconds: float) -> Iterator[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "specmon", "simulate", "--engine", "vllm",
            "--listen", f"127.0.0.1:{port}", "--per-request-spec-decode-metrics", "summary",
            "--drafts-per-second", "0", "--step-seconds", str(step_seconds)]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _process(argv, base + "/health", "the simulator", tmp / "sim.log"):
        yield base


@contextmanager
def llama(tmp: Path) -> Iterator[str]:
    sys.path.insert(0, str(REPO))
    from tests.realengines import servers

    srv = servers.llama_spec_server(n_parallel=64, ctx=64 * 512, log_dir=tmp)
    with srv:
        yield srv.base_url


@contextmanager
def tap(upstream: str, tmp: Path, event_loop: str = "auto") -> Iterator[tuple[str, int]]:
    port = _free_port()
    argv = [sys.executable, "-m", "specmon", "tap", "--upstream", upstream,
            "--listen", f"127.0.0.1:{port}", "--class-header", "x-class",
            "--classes", "a,b", "--log.format", "json", "--log.level", "warning",
            "--event-loop", event_loop]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _process(argv, base + "/healthz", "the tap", tmp / f"tap-{port}.log") as proc:
        yield base, proc.pid


@contextmanager
def relay(upstream: str, tmp: Path, event_loop: str = "auto") -> Iterator[tuple[str, int]]:
    """bench/relay.py in front of ``upstream``: the control (one bare process hop)."""
    port = _free_port()
    argv = [sys.executable, "-m", "bench.relay", "--upstream", upstream.split("//", 1)[1],
            "--listen", str(port), "--event-loop", event_loop]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    with _process(argv, base + "/health", "the relay", tmp / f"relay-{port}.log") as proc:
        yield base, proc.pid


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _one(
    session: aiohttp.ClientSession, url: str, i: int, *, model: str, tokens: int
) -> tuple[float, float, int, float]:
    """(TTFB seconds, seconds per chunk, events, seconds to the first event) of one streamed
    request; TTFB is the response's first byte (its head), the first event its first body
    chunk."""
    body = {"model": model, "messages": [{"role": "user", "content": PROMPTS[i % 2]}],
            "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    for attempt in (1, 2):
        try:
            return await _timed(session, url, body, {"x-class": "ab"[i % 2]})
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            # A kept-alive connection the server closed as the request went out (seen with
            # llama-server -np 64): nothing was answered, so the request is sent again, once.
            if attempt == 2:
                raise
            RETRIES[url] = RETRIES.get(url, 0) + 1
    raise AssertionError("unreachable")


#: Requests sent again after a stale connection, per URL (recorded with the results).
RETRIES: dict[str, int] = {}


async def _timed(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, float, int, float]:
    sent = time.perf_counter()
    first = last = 0.0
    events = 0
    async with session.post(url, json=body, headers=headers) as resp:
        head = time.perf_counter()
        assert resp.status == 200, resp.status
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            if not first:
                first = now
            last = now
            events += chunk.count(b"data:")
    return head - sent, (last - first) / max(events - 1, 1), events, first - sent


async def _round(
    url: str, *, streams: int, count: int, model: str, tokens: int
) -> list[tuple[float, float, int, float]]:
    # Idle connections dropped before the engines' own 5 s timeouts (as the tap does).
    connector = aiohttp.TCPConnector(limit=streams, keepalive_timeout=2.0)
    async with aiohttp.ClientSession(connector=connector) as session:
        queue = list(range(count))
        out: list[tuple[float, float, int, float]] = []

        async def worker() -> None:
            while queue:
                i = queue.pop()
                out.append(await _one(session, url, i, model=model, tokens=tokens))

        await asyncio.gather(*(worker() for _ in range(streams)))
        return out


def _tap_counters(url: str) -> dict[str, float]:
    """The tap's own retries and upstream errors so far (its /metrics), by sample."""
    base = url.split("/v1/", 1)[0]
    with urllib.request.urlopen(base + "/metrics", timeout=5) as resp:  # noqa: S310 - loopback
        page = resp.read().decode()
    wanted = ("specmon_tap_upstream_retries_total", "specmon_tap_upstream_errors_total")
    out: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith(wanted):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def compare(
    direct: str, tapped: str, tap_pid: int, *, streams: int, rounds: int, per_round: int,
    model: str, tokens: int, counters: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Rounds alternating direct and tapped; the figures of each side and what the tap adds."""
    sides: dict[str, list[tuple[float, float, int, float]]] = {"direct": [], "tap": []}
    asyncio.run(_round(direct, streams=streams, count=streams, model=model, tokens=tokens))
    asyncio.run(_round(tapped, streams=streams, count=streams, model=model, tokens=tokens))
    cpu = 0.0
    for r in range(rounds):
        order = ("direct", "tap") if r % 2 == 0 else ("tap", "direct")
        for side in order:
            url = direct if side == "direct" else tapped
            before = _cpu_seconds(tap_pid)
            sides[side] += asyncio.run(
                _round(url, streams=streams, count=per_round, model=model, tokens=tokens)
            )
            if side == "tap":
                cpu += _cpu_seconds(tap_pid) - before
    out: dict[str, Any] = {"streams": streams, "requests_per_side": len(sides["tap"])}
    for side, rows in sides.items():
        ttfb = [r[0] for r in rows]
        chunk = [r[1] for r in rows]
        event = [r[3] for r in rows]
        out[side] = {
            "ttfb_median_ms": statistics.median(ttfb) * 1e3,
            "ttfb_p99_ms": _pct(ttfb, 0.99) * 1e3,
            "first_event_median_ms": statistics.median(event) * 1e3,
            "first_event_p99_ms": _pct(event, 0.99) * 1e3,
            "per_chunk_median_us": statistics.median(chunk) * 1e6,
            "events_median": statistics.median(r[2] for r in rows),
        }
    d, t = out["direct"], out["tap"]
    out["added"] = {
        "ttfb_median_ms": t["ttfb_median_ms"] - d["ttfb_median_ms"],
        "ttfb_p99_ms": t["ttfb_p99_ms"] - d["ttfb_p99_ms"],
        "per_chunk_median_us": t["per_chunk_median_us"] - d["per_chunk_median_us"],
        "first_event_median_ms": t["first_event_median_ms"] - d["first_event_median_ms"],
        "first_event_p99_ms": t["first_event_p99_ms"] - d["first_event_p99_ms"],
    }
    out["retried_requests"] = {"direct": RETRIES.get(direct, 0), "tap": RETRIES.get(tapped, 0)}
    if counters:
        out["tap_counters"] = _tap_counters(tapped)
    events = sum(r[2] for r in sides["tap"])
    out["tap_cpu_us_per_event"] = cpu / events * 1e6 if events else None
    out["goals_met"] = (
        out["added"]["ttfb_median_ms"] <= 1.0
        and out["added"]["ttfb_p99_ms"] <= 5.0
        and out["added"]["per_chunk_median_us"] <= 100.0
    )
    return out


async def _memory_run(url: str, total: int, pid: int) -> list[tuple[int, int]]:
    connector = aiohttp.TCPConnector(limit=16, keepalive_timeout=2.0)
    samples: list[tuple[int, int]] = [(0, _rss_kib(pid))]
    sem = asyncio.Semaphore(16)
    async with aiohttp.ClientSession(connector=connector) as session:
        done = 0
        while done < total:
            batch = min(1000, total - done)

            async def one(i: int) -> None:
                stream = i % 2 == 1
                body: dict[str, Any] = {
                    "model": "m", "max_tokens": 32, "stream": stream,
                    "messages": [{"role": "user", "content": PROMPTS[i % 2]}],
                }  # fmt: skip
                if stream:
                    body["stream_options"] = {"include_usage": True}
                async with session.post(url, json=body, headers={"x-class": "ab"[i % 2]}) as r:
                    await r.read()

            async def limited(i: int) -> None:
                async with sem:
                    await one(i)

            await asyncio.gather(*(limited(done + i) for i in range(batch)))
            done += batch
            samples.append((done, _rss_kib(pid)))
    return samples


async def _heap_run(upstream: str, total: int, event_loop: str) -> dict[str, Any]:
    """The tap in this process (tracemalloc sees only this process): 2,000 requests to warm
    up (connections pooled, caches filled), then ``total`` in two halves as the memory run
    sends them, a snapshot after each (the connections of each half closed and settled): what
    the Python heap grew by over the second half, by where it was allocated. Anything held
    per request grows there; what a run leaves in flight is in both snapshots alike."""
    import gc
    import tracemalloc

    from specmon.tap.app import Tap
    from specmon.tap.config import parse_tap_config

    overrides = {"upstream": upstream, "class_header": "x-class", "classes": ["a", "b"]}
    proxy = Tap(parse_tap_config(None, overrides=overrides), listen=("127.0.0.1", 0))
    port = await proxy.start()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    half = total // 2

    async def settled() -> tracemalloc.Snapshot:
        await asyncio.sleep(0.5)
        gc.collect()
        return tracemalloc.take_snapshot()

    try:
        await _memory_run(url, 2000, os.getpid())
        tracemalloc.start(8)
        await _memory_run(url, half, os.getpid())
        middle = await settled()
        await _memory_run(url, half, os.getpid())
        end = await settled()
        tracemalloc.stop()
    finally:
        await proxy.stop()
    stats = end.compare_to(middle, "lineno")
    growth = sum(s.size_diff for s in stats)
    return {
        "requests": total,
        "event_loop": event_loop,
        "heap_growth_bytes_second_half": growth,
        "heap_growth_bytes_per_request": growth / half,
        "top": [
            {"where": str(s.traceback), "bytes": s.size_diff, "blocks": s.count_diff}
            for s in stats[:8]
        ],
    }


def _loop_used(choice: str) -> str:
    """The loop the tap runs on (the tap subprocess sees the same packages as this one)."""
    if choice != "auto":
        return choice
    import importlib.util

    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench tap", description=__doc__)
    parser.add_argument("--upstream", default="sim,llama")
    parser.add_argument("--streams", default="1,64")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--step-seconds", type=float, default=0.004)
    parser.add_argument("--memory", type=int, default=10_000)
    parser.add_argument("--relay", action="store_true",
                        help="also direct against a bare TCP relay (bench/relay.py) in the "
                        "tap's place, the control: what one more process hop costs")  # fmt: skip
    parser.add_argument("--heap", type=int, default=0,
                        help="requests through a tap in this process, traced by tracemalloc "
                        "(Python heap growth after a 2,000-request warm-up); 0: none")  # fmt: skip
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--event-loop", choices=("auto", "uvloop", "asyncio"), default="auto",
                        help="the tap's --event-loop (auto: uvloop when installed)")  # fmt: skip
    args = parser.parse_args(argv)
    levels = [int(s) for s in args.streams.split(",") if s]  # "": memory only
    result: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_start": os.getloadavg(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "tap_event_loop": _loop_used(args.event_loop),
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="specmon-bench-tap-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        for upstream in args.upstream.split(","):
            if upstream == "sim":
                base = stack.enter_context(simulator(tmp, args.step_seconds))
                model = "tiny-llama"
            else:
                base = stack.enter_context(llama(tmp))
                model = "tiny-llama"
            tapped, pid = stack.enter_context(tap(base, tmp, args.event_loop))
            for streams in levels:
                run = compare(
                    base + "/v1/chat/completions", tapped + "/v1/chat/completions", pid,
                    streams=streams, rounds=args.rounds,
                    per_round=max(args.per_round, streams), model=model, tokens=args.tokens,
                )  # fmt: skip
                run["upstream"] = upstream
                result["runs"].append(run)
                print(json.dumps(run), flush=True)
            if args.relay:
                relayed, relay_pid = stack.enter_context(relay(base, tmp, args.event_loop))
                for streams in levels:
                    run = compare(
                        base + "/v1/chat/completions", relayed + "/v1/chat/completions",
                        relay_pid, streams=streams, rounds=args.rounds,
                        per_round=max(args.per_round, streams), model=model, tokens=args.tokens,
                        counters=False,
                    )  # fmt: skip
                    run["upstream"] = upstream
                    run["through"] = "relay"
                    result["runs"].append(run)
                    print(json.dumps(run), flush=True)
            if upstream == "sim" and args.memory:
                rss_before = _rss_kib(pid)
                samples = asyncio.run(
                    _memory_run(tapped + "/v1/chat/completions", args.memory, pid)
                )
                result["memory"] = {
                    "requests": args.memory,
                    "rss_kib_before": rss_before,
                    "rss_kib": samples,
                    "growth_kib_after_first_thousand": samples[-1][1] - samples[1][1],
                    # After a warm-up of 2,000 (as the heap run): bytes a request, slope.
                    "growth_bytes_per_request_after_2000": (
                        (samples[-1][1] - samples[2][1]) * 1024 / (samples[-1][0] - samples[2][0])
                        if len(samples) > 3
                        else None
                    ),
                }
                print(json.dumps(result["memory"]), flush=True)
            if upstream == "sim" and args.heap:
                loop = _loop_used(args.event_loop)
                factory = loop_factory(loop)
                with asyncio.Runner(loop_factory=factory) as runner:
                    result["heap"] = runner.run(_heap_run(base, args.heap, loop))
                print(json.dumps(result["heap"]), flush=True)
    result["loadavg_end"] = os.getloadavg()
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n")
    return 0 if all(r["goals_met"] for r in result["runs"] if "through" not in r) else 1
