"""Prometheus mode at fleet size without a Prometheus: the real ``specmon run`` daemon reading
a synthetic fleet from a loopback query API whose sample times advance ``--step`` (30 s) per
read, so the 15m window fills in minutes instead of a quarter of an hour.

Run: ./dev.sh bench fleetsynth [--instances 10000] [--reads 40] [--measure 8]

The answers are what Prometheus answers for ``bench fleet``'s fleet: each instance
(``instance="vllm-I"``, ``job="fleet"``) carries the series specmon's value query selects
from a simulated vLLM 0.32.0 page (:func:`bench.loadcost.simulated_pages`: the demo's load
model, ``--step`` seconds between pages, counters moving), all stamped with the read's sample
time, and the freshness query dates every instance at that time. Read ``k``'s sample time is
``start - step * (reads + 2) + step * k``, never ahead of the wall clock; the source's
``stale_after`` is set to a day so those past times are not stale. The daemon's source reads
every ``--interval`` (5 s: back to back at 10,000 instances), so its retention is the 15m
window plus two of those intervals (31 readings at a 30 s step) where a 30 s source keeps
33: a few per cent fewer rows than the real run holds.

Measured on the daemon process (``/proc/PID``): CPU per read over the last ``--measure``
reads (every window full), resident memory after each read and its peak (``VmHWM``), and
``/metrics`` fetched ``--fetches`` times at the end as Prometheus 2.42 asks for it
(OpenMetrics, gzip), the daemon's CPU across each fetch alone. The fake API runs in a thread
of this process (its CPU is not the daemon's).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bench.cost import PROMETHEUS_ACCEPT, stop
from bench.loadcost import simulated_pages
from bench.promsource import cpu_seconds, free_port, status_mib
from specmon.engines import wanted_names
from specmon.sources.prometheus.model import FRESHNESS_LABEL

#: One instance's series of one read: (name, labels, value text).
Series = list[tuple[str, dict[str, str], str]]


def page_series(page: str, wanted: frozenset[str]) -> Series:
    out: Series = []
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name in wanted:
                out.append((sample.name, dict(sample.labels), repr(float(sample.value))))
    return out


@dataclass
class FakeFleet:
    """The loopback query API: read ``k`` is the ``k``-th distinct evaluation time asked."""

    instances: int
    pages: list[Series]
    first_stamp: float
    step: float
    reads: dict[str, int] = field(default_factory=dict)
    read_times: list[float] = field(default_factory=list)
    answer_bytes: int = 0
    _cache: dict[int, bytes] = field(default_factory=dict)

    def stamp(self, k: int) -> float:
        return self.first_stamp + self.step * k

    def read_index(self, at: str) -> int:
        k = self.reads.get(at)
        if k is None:
            k = self.reads[at] = len(self.reads)
            self.read_times.append(time.monotonic())
        return k

    def values(self, k: int) -> bytes:
        cached = self._cache.get(k)
        if cached is not None:
            return cached
        stamp = round(self.stamp(k), 3)
        series = self.pages[min(k, len(self.pages) - 1)]
        result = [
            {
                "metric": {"__name__": name} | labels | {"instance": f"vllm-{i}", "job": "fleet"},
                "value": [stamp, value],
            }
            for i in range(self.instances)
            for name, labels, value in series
        ]
        body = orjson.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        )
        self._cache = {k: body}  # one read's answer at a time
        self.answer_bytes = len(body)
        return body

    def freshness(self, k: int, at: float) -> bytes:
        text = f"{self.stamp(k):.3f}"
        result = [
            {"metric": {"instance": f"vllm-{i}", FRESHNESS_LABEL: which}, "value": [at, text]}
            for i in range(self.instances)
            for which in ("newest", "oldest")
        ]
        return orjson.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        )

    async def query(self, request: web.Request) -> web.Response:
        form = await request.post() if request.method == "POST" else request.query
        query = str(form.get("query", ""))
        at = str(form.get("time", "0"))
        k = self.read_index(at)
        body = self.freshness(k, float(at)) if "label_replace" in query else self.values(k)
        response = web.Response(body=body, content_type="application/json")
        response.enable_compression(web.ContentCoding.gzip)
        return response


def serve(fake: FakeFleet, port: int) -> threading.Thread:
    started = threading.Event()

    def main() -> None:
        async def run() -> None:
            app = web.Application(client_max_size=2**20)
            app.router.add_route("*", "/api/v1/query", fake.query)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            started.set()
            await asyncio.Event().wait()

        asyncio.run(run())

    thread = threading.Thread(target=main, daemon=True, name="fake-prometheus")
    thread.start()
    if not started.wait(30):
        raise TimeoutError("the fake query API did not start")
    return thread


def fetch_metrics(port: int, pid: int) -> tuple[int, float, float, int]:
    """GET /metrics as Prometheus does: series, wall s, the daemon's CPU s, gzip bytes."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics",
        headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"},
    )
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as r:  # noqa: S310 - loopback
        raw = r.read()
        encoded = r.headers.get("Content-Encoding") == "gzip"
    took = time.perf_counter() - started
    used = cpu_seconds(pid) - cpu
    body = gzip.decompress(raw) if encoded else raw
    series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
    return series, took, used, len(raw)


def run(args: argparse.Namespace) -> dict[str, Any]:
    wanted = frozenset(wanted_names(None))
    pages = [
        page_series(p, wanted)
        for p in simulated_pages(
            speculation=True, scrapes=args.reads + 2, interval=args.step, seed=1
        )
    ]
    fake = FakeFleet(
        instances=args.instances,
        pages=pages,
        first_stamp=time.time() - args.step * (args.reads + 2),
        step=args.step,
    )
    api_port, daemon_port = free_port(), free_port()
    serve(fake, api_port)
    work = Path(tempfile.mkdtemp(prefix="specmon-bench-fleetsynth-"))
    (work / "specmon.yml").write_text(
        yaml.safe_dump({"sources": [{"prometheus": {
            "url": f"http://127.0.0.1:{api_port}", "name": "fleet",
            "selector": '{job="fleet"}', "interval": args.interval, "timeout": args.interval,
            "stale_after": "24h", "max_series": args.max_series,
            "max_instances": max(10_000, args.instances),
        }}]})
    )  # fmt: skip
    daemon = subprocess.Popen(
        [sys.executable, *(args.launcher or ["-m", "specmon"]), "run", "--config.file", str(work / "specmon.yml"),
         "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "warning",
         "--log.format", "json"],
        stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "w"),  # noqa: SIM115
    )  # fmt: skip
    try:
        rss: list[float] = []
        cpu_at: list[float] = []
        seen = 0
        deadline = time.monotonic() + args.reads * 120 + 120
        # A read's queries arriving mark the previous read's end (the daemon reads back to
        # back): sample the daemon then.
        while seen < args.reads + 1:
            if daemon.poll() is not None:
                print((work / "daemon.log").read_text()[-3000:], file=sys.stderr)
                raise RuntimeError("the daemon exited")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{seen} reads of {args.reads}")
            if len(fake.reads) > seen:
                seen = len(fake.reads)
                cpu_at.append(cpu_seconds(daemon.pid))
                rss.append(round(status_mib(daemon.pid, "VmRSS"), 1))
                print(f"read {seen}: rss {rss[-1]} MiB", file=sys.stderr, flush=True)
                if seen - 1 in args.signal_after:  # the previous read has ended
                    daemon.send_signal(signal.SIGUSR1)
            time.sleep(0.05)
        # The last read is under way: let it finish before fetching /metrics.
        time.sleep(float(args.interval.rstrip("s")) + 1)
        measured = cpu_at[-1] - cpu_at[-1 - args.measure]
        per_read = measured / args.measure
        fetches = [fetch_metrics(daemon_port, daemon.pid) for _ in range(args.fetches)]
        errors = [
            line for line in (work / "daemon.log").read_text().splitlines() if '"error"' in line
        ]
        return {
            "instances": args.instances,
            "reads": seen,
            "step_s": args.step,
            "source_interval": args.interval,
            "series_per_instance_in_answer": len(pages[-1]),
            "value_answer_bytes": fake.answer_bytes,
            "daemon_cpu_s_per_read": round(per_read, 3),
            "daemon_cpu_percent_of_one_core_at_30s": round(100 * per_read / 30.0, 2),
            "metrics_series": fetches[-1][0],
            "metrics_gzip_bytes": fetches[-1][3],
            "metrics_fetch_cpu_s": [round(f[2], 3) for f in fetches],
            "metrics_fetch_wall_s": [round(f[1], 3) for f in fetches],
            "percent_of_one_core_at_30s_with_one_fetch": round(
                100 * (per_read + min(f[2] for f in fetches)) / 30.0, 2
            ),
            "daemon_rss_mib_per_read": rss,
            "daemon_rss_mib_end": round(status_mib(daemon.pid, "VmRSS"), 1),
            "daemon_vmhwm_mib": round(status_mib(daemon.pid, "VmHWM"), 1),
            "daemon_error_lines": len(errors),
            "first_error": errors[0][:500] if errors else None,
        }
    finally:
        stop(daemon, timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fleetsynth")
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--reads", type=int, default=40)
    parser.add_argument("--measure", type=int, default=8)
    parser.add_argument("--step", type=float, default=30.0)
    parser.add_argument("--interval", default="5s")
    parser.add_argument("--fetches", type=int, default=3)
    parser.add_argument("--max-series", type=int, default=1_000_000)
    # For profiling: a script run in place of ``-m specmon`` and SIGUSR1 sent to the daemon
    # once the given reads have ended (e.g. a tracemalloc wrapper's snapshot).
    parser.add_argument("--launcher", nargs="*", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--signal-after",
        type=lambda text: {int(x) for x in text.split(",")},
        default=set(),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args(argv)
    print(json.dumps(run(args), indent=1), flush=True)
    return 0
