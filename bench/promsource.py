"""Prometheus-source benchmark: the cost of reading N simulated vLLM engines through a real
Prometheus (Debian's), per read and per query strategy.

Run: ./dev.sh bench promsource [--instances 2000] [--scrape-interval 30s] [--reads 5]
     [--keep all|needed]

One ``specmon simulate`` process serves N simulated vLLM 0.32.0 engines on one port (real page
format, about 56 KB and 447 series a page); Debian's ``prometheus`` scrapes each as its own
target (``instance`` = the engine's name) every ``--scrape-interval``, keeping every series
(``--keep all``, what a fleet's Prometheus holds: about 900k series at 2,000 engines) or only
the ones specmon reads (``--keep needed``). Once every engine has been scraped, this process
reads the fleet through :class:`specmon.sources.prometheus.PrometheusSource` ``--reads`` times
per query strategy and reports, per read: queries, decoded bytes, compressed bytes on the wire
(gzip, as aiohttp asks for it), wall time, this process's CPU time (all of it: HTTP, JSON,
grouping), the CPU of the parsing alone (JSON decode + pages: ``parse_cpu_seconds``), the CPU of
the engine adapters over every page (``read_parsed``, what the daemon does next), and
Prometheus's own CPU per read (its CPU during the reads minus its idle scraping rate). Memory:
tracemalloc's peak over one read (Python allocations of the read alone) and this process's
peak RSS (VmHWM; the process only imports specmon and reads). Bounded: every wait has a
deadline and both subprocesses are stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specmon.config_values import parse_duration
from specmon.engines import wanted_names
from specmon.sources.prometheus import (
    PrometheusSource,
    QueryStrategy,
    ReadStatus,
    freshness_query,
    value_queries,
)
from specmon.sources.prometheus_config import check_sources

TICKS = os.sysconf("SC_CLK_TCK")
NEEDED = (
    r"vllm:(spec_decode_num_.*_total|num_requests_running|generation_tokens_total"
    r"|inter_token_latency_seconds_(sum|count))"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def status_mib(pid: int | str, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get_json(url: str, timeout: float = 30) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback
        return json.loads(r.read())


def wait(what: str, probe: Any, timeout: float, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = probe()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def scraped(base: str) -> int:
    query = urllib.parse.urlencode({"query": "count(vllm:spec_decode_num_drafts_total)"})
    result = get_json(f"{base}/api/v1/query?{query}")["data"]["result"]
    return int(result[0]["value"][1]) if result else 0


def query_costs(api: str, queries: dict[str, list[str]], at: float, rounds: int) -> dict[str, Any]:
    """Each group of queries alone, groups interleaved round by round: gzip and decoded size
    (asking for gzip as aiohttp does), wall time seen here and Prometheus's own evaluation
    time (``stats=all`` ``evalTotalTime``: without JSON encoding and HTTP), summed over the
    group's queries; best and median over the rounds."""
    walls: dict[str, list[float]] = {k: [] for k in queries}
    evals: dict[str, list[float]] = {k: [] for k in queries}
    sizes: dict[str, tuple[int, int]] = {}
    for _ in range(rounds):
        for key, group in queries.items():
            wall = evaluation = 0.0
            for query in group:
                form = {"query": query, "time": f"{at:.3f}", "stats": "all"}
                data = urllib.parse.urlencode(form).encode()
                request = urllib.request.Request(api, data=data)  # noqa: S310 - loopback
                started = time.perf_counter()
                with urllib.request.urlopen(request, timeout=120) as r:  # noqa: S310 - loopback
                    body = r.read()
                wall += time.perf_counter() - started
                evaluation += json.loads(body)["data"]["stats"]["timings"]["evalTotalTime"]
            walls[key].append(wall)
            evals[key].append(evaluation)
    for key, group in queries.items():
        gz = plain = 0
        for query in group:
            data = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}"}).encode()
            request = urllib.request.Request(api, data=data, headers={"Accept-Encoding": "gzip"})  # noqa: S310
            with urllib.request.urlopen(request, timeout=120) as r:  # noqa: S310 - loopback
                body = r.read()
                encoded = r.headers.get("Content-Encoding") == "gzip"
            gz += len(body)
            plain += len(gzip.decompress(body) if encoded else body)
        sizes[key] = (gz, plain)
    return {
        key: {
            "queries": len(queries[key]),
            "gzip_bytes": sizes[key][0],
            "decoded_bytes": sizes[key][1],
            "best_wall_ms": round(1000 * min(walls[key]), 1),
            "median_wall_ms": round(1000 * median(walls[key]), 1),
            "best_prometheus_eval_ms": round(1000 * min(evals[key]), 1),
            "median_prometheus_eval_ms": round(1000 * median(evals[key]), 1),
        }
        for key in queries
    }


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


@dataclass(frozen=True)
class RunningPrometheus:
    pid: int
    port: int


def fleet_behind_prometheus(
    *, instances: int, interval: str, keep: str, work: Path, procs: list[subprocess.Popen[bytes]]
) -> RunningPrometheus:
    """``specmon simulate`` serving ``instances`` vLLM engines on one port and Debian's
    Prometheus scraping each as its own instance (``vllm-I``) every ``interval``, keeping
    every series or only the ones specmon reads (``keep``); both processes go into
    ``procs``. Returns once Prometheus answers (its log is printed if it never does)."""
    sim_port, prom_port = free_port(), free_port()
    seconds = parse_duration(interval)
    sim = subprocess.Popen(
        [sys.executable, "-m", "specmon", "simulate", "--engine", "vllm", "--targets",
         str(instances), "--shared-port", "--listen", f"127.0.0.1:{sim_port}",
         "--drafts-per-second", "5", "--seed", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    procs.append(sim)
    wait("the simulator", lambda: get_json(f"http://127.0.0.1:{sim_port}/targets"), 120)
    job: dict[str, Any] = {
        "job_name": "fleet",
        "scrape_interval": interval,
        "scrape_timeout": f"{min(10.0, seconds):g}s",
        "static_configs": [
            {
                "targets": [f"127.0.0.1:{sim_port}"],
                "labels": {"instance": f"vllm-{i}", "__metrics_path__": f"/t/vllm-{i}/metrics"},
            }
            for i in range(instances)
        ],
    }
    if keep == "needed":
        job["metric_relabel_configs"] = [
            {"source_labels": ["__name__"], "regex": NEEDED, "action": "keep"}
        ]
    (work / "prometheus.yml").write_text(
        yaml.safe_dump({"global": {"scrape_interval": interval}, "scrape_configs": [job]})
    )
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={work / 'prometheus.yml'}",
         f"--storage.tsdb.path={work / 'data'}", "--storage.tsdb.retention.time=1h",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"),  # noqa: SIM115
    )  # fmt: skip
    procs.append(prom)
    try:
        wait(
            "Prometheus",
            lambda: get_json(f"http://127.0.0.1:{prom_port}/api/v1/status/buildinfo"),
            60,
        )
    except TimeoutError:
        print((work / "prometheus.log").read_text()[-2000:], file=sys.stderr)
        raise
    return RunningPrometheus(pid=prom.pid, port=prom_port)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if shutil.which("prometheus") is None:
        raise SystemExit("Debian's prometheus is needed (./dev.sh provision debian)")
    n = args.instances
    interval = parse_duration(args.scrape_interval)
    work = Path(tempfile.mkdtemp(prefix="specmon-bench-promsource-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        prom = fleet_behind_prometheus(
            instances=n, interval=args.scrape_interval, keep=args.keep, work=work, procs=procs
        )
        base = f"http://127.0.0.1:{prom.port}"
        started = time.monotonic()
        wait(f"all {n} engines scraped", lambda: scraped(base) == n, 3 * interval + 120, 2.0)
        # Two more rounds so every engine has samples and the head block is warm.
        time.sleep(interval)
        ready_after = time.monotonic() - started
        series = int(get_json(f"{base}/api/v1/status/tsdb")["data"]["headStats"]["numSeries"])
        idle0, t0 = cpu_seconds(prom.pid), time.monotonic()
        time.sleep(10)
        idle_rate = (cpu_seconds(prom.pid) - idle0) / (time.monotonic() - t0)

        (config,), problems = check_sources(
            [{"prometheus": {"url": base, "selector": '{job="fleet"}', "timeout": "25s",
                             "interval": "30s"}}],
            environ={},
        )  # fmt: skip
        assert not problems, problems
        results: dict[str, Any] = {
            "instances": n,
            "scrape_interval": args.scrape_interval,
            "keep": args.keep,
            "prometheus_head_series": series,
            "ready_after_seconds": round(ready_after, 1),
            "prometheus_idle_cpu_percent": round(100 * idle_rate, 1),
            "strategies": {},
        }
        # Each query alone: Prometheus's evaluation time and the bytes.
        at = time.time()
        every = " or ".join(f'timestamp({name}{{job="fleet"}})' for name in wanted_names())
        groups = {
            **{
                f"value queries, {strategy.value}": list(value_queries(config, strategy))
                for strategy in QueryStrategy
            },
            "freshness query": [freshness_query(config)],
            "freshness over every wanted name (not used)": [
                f'label_replace(max by (instance) ({every}), "f", "newest", "", "") or '
                f'label_replace(min by (instance) ({every}), "f", "oldest", "", "")'
            ],
        }
        alone = query_costs(config.api_url, groups, at, rounds=7)
        results["queries_alone"] = alone
        print(json.dumps({"queries_alone": alone}), flush=True)
        # Whole reads, strategies interleaved round by round so noise hits them alike.
        results["strategies"] = asyncio.run(_reads(config, args.reads, prom.pid, idle_rate, n))
        # Memory of one read (Python allocations), default strategy.
        tracemalloc.start()
        asyncio.run(_one(config))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        results["tracemalloc_peak_mib_one_read"] = round(peak / 2**20, 1)
        results["reader_vmhwm_mib"] = round(status_mib("self", "VmHWM"), 1)
        results["reader_vmrss_mib"] = round(status_mib("self", "VmRSS"), 1)
        results["prometheus_vmrss_mib"] = round(status_mib(prom.pid, "VmRSS"), 1)
        return results
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


async def _one(config: Any) -> None:
    async with PrometheusSource(config) as source:
        result = await source.read()
        assert result.status is ReadStatus.OK, result.message


async def _reads(
    config: Any, reads: int, prom_pid: int, idle_rate: float, n: int
) -> dict[str, Any]:
    rows: dict[QueryStrategy, list[dict[str, float]]] = {s: [] for s in QueryStrategy}
    sources = {s: PrometheusSource(config, strategy=s) for s in QueryStrategy}
    try:
        for _ in range(reads):
            for strategy, source in sources.items():
                prom0, t0 = cpu_seconds(prom_pid), time.monotonic()
                cpu = time.process_time()
                result = await source.read()
                read_cpu = time.process_time() - cpu
                prom_cpu = cpu_seconds(prom_pid) - prom0 - idle_rate * (time.monotonic() - t0)
                assert result.status is ReadStatus.OK, (result.status, result.message)
                assert len(result.instances) == n and not result.stale, len(result.instances)
                cpu = time.process_time()
                readings = [i.reading() for i in result.instances]
                adapters_cpu = time.process_time() - cpu
                assert all(r is not None and r.speculation for r in readings)
                rows[strategy].append(
                    {
                        "queries": result.queries,
                        "bytes": result.bytes,
                        "series": result.series,
                        "wall_s": result.duration_seconds,
                        "read_cpu_s": read_cpu,
                        "parse_cpu_s": result.parse_cpu_seconds,
                        "adapters_cpu_s": adapters_cpu,
                        "prometheus_cpu_s": prom_cpu,
                    }
                )
                await asyncio.sleep(1.0)
    finally:
        for source in sources.values():
            await source.close()
    out: dict[str, Any] = {}
    for strategy, table in rows.items():

        def med(key: str, table: list[dict[str, float]] = table) -> float:
            return round(1000 * median([r[key] for r in table]), 1)

        def best(key: str, table: list[dict[str, float]] = table) -> float:
            return round(1000 * min(r[key] for r in table), 1)

        out[strategy.value] = {
            "reads": len(table),
            "queries_per_read": table[0]["queries"],
            "decoded_bytes_per_read": table[0]["bytes"],
            "series_per_read": table[0]["series"],
            "best_wall_ms": best("wall_s"),
            "median_wall_ms": med("wall_s"),
            "best_read_cpu_ms": best("read_cpu_s"),
            "median_read_cpu_ms": med("read_cpu_s"),
            "best_parse_cpu_ms": best("parse_cpu_s"),
            "median_parse_cpu_ms": med("parse_cpu_s"),
            "median_adapters_cpu_ms": med("adapters_cpu_s"),
            "median_prometheus_cpu_ms": med("prometheus_cpu_s"),
        }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench promsource")
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--scrape-interval", default="30s")
    parser.add_argument("--reads", type=int, default=5)
    parser.add_argument("--keep", choices=("all", "needed"), default="all")
    args = parser.parse_args(argv)
    results = run(args)
    print(json.dumps(results, indent=1), flush=True)
    return 0
