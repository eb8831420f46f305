"""Fleet-mode benchmark: ``specmon run`` in Prometheus mode over N simulated vLLM engines read
through a real Prometheus (Debian's); what the daemon costs per read interval.

Run: ./dev.sh bench fleet [--instances 2000] [--interval 30s] [--intervals 8] [--keep all|needed]

One ``specmon simulate`` process serves N simulated vLLM 0.32.0 engines on one port (real page
format, about 56 KB and 447 series a page, 5 drafts/s each); Debian's ``prometheus`` scrapes
each as its own target (``instance`` = the engine's name) every ``--interval``, keeping every
series (``--keep all``, what a fleet's Prometheus holds) or only the ones specmon reads
(``--keep needed``). Once every engine has been scraped twice, ``specmon run`` starts with one
Prometheus source (selector ``{job="fleet"}``, read every ``--interval``, timeout 25 s, the
default windows 1m/5m/15m) and no direct target. After its first read and one more interval,
the benchmark measures ``--intervals`` read intervals, and GETs the daemon's ``/metrics`` once
per interval (in the middle of it; OpenMetrics and gzip, as Prometheus asks) as a Prometheus
scraping specmon at the same interval would (``--no-scrape``: never):

- the daemon's CPU time (``/proc/PID/stat`` utime + stime) over the whole measurement, per
  interval and as a share of one core; and the part spent answering ``/metrics`` (its CPU
  across each GET alone), the rest being the reads (queries, decoding, 2,000 observations);
- its memory: ``VmRSS`` after each interval, and ``VmHWM`` (peak) at the end;
- the simulator's and Prometheus's CPU over the same period (the other ends of the exchange:
  whether the machine can host the fleet at all);
- queries and reads per interval (``specmon_source_queries_total``, ``_reads_total``), the
  last read's duration and response size, instances up, series on ``/metrics``.

Caveat: a run of a few minutes does not fill the 5m and 15m windows (a 15m window at 30 s
keeps about 32 readings per instance); RSS is given per interval so its growth shows.
Bounded: every wait has a deadline, and the three subprocesses are stopped at the end,
whatever happens.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench.cost import PROMETHEUS_ACCEPT
from bench.promsource import (
    cpu_seconds,
    fleet_behind_prometheus,
    free_port,
    get_json,
    scraped,
    status_mib,
    wait,
)
from specmon.config_values import parse_duration


def _scrape(port: int, pid: int) -> tuple[str, float, float, int]:
    """GET /metrics as Prometheus does (OpenMetrics, gzip): the text, the wall seconds, the
    daemon's CPU seconds across the request alone, the bytes on the wire."""
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
    return body.decode(), took, used, len(raw)


def _metrics(port: int) -> tuple[dict[str, float], int, int]:
    """Selected sums from the daemon's /metrics (plain text), its series count and size."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as r:
        body = r.read().decode()
    return _parse(body)


def _parse(body: str) -> tuple[dict[str, float], int, int]:
    sums: dict[str, float] = {}
    series = 0
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            series += 1
            key = s.name
            if s.name == "specmon_source_reads_total":
                key = f"{s.name}{{result={s.labels['result']}}}"
            elif s.name == "specmon_source_instances":
                key = f"{s.name}{{state={s.labels['state']}}}"
            elif s.name == "specmon_up" and s.value != 1:
                key = "specmon_up_not_1"
            sums[key] = sums.get(key, 0.0) + s.value
    return sums, series, len(body)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if shutil.which("prometheus") is None:
        raise SystemExit("Debian's prometheus is needed (./dev.sh provision debian)")
    n = args.instances
    interval = parse_duration(args.interval)
    daemon_port = free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-bench-fleet-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        prom = fleet_behind_prometheus(
            instances=n, interval=args.interval, keep=args.keep, work=work, procs=procs
        )
        base = f"http://127.0.0.1:{prom.port}"
        wait(f"all {n} engines scraped", lambda: scraped(base) == n, 3 * interval + 120, 2.0)
        time.sleep(interval)  # a second sample of every engine
        head_series = int(get_json(f"{base}/api/v1/status/tsdb")["data"]["headStats"]["numSeries"])

        (work / "specmon.yml").write_text(
            yaml.safe_dump({"sources": [{"prometheus": {
                "url": base, "name": "fleet", "selector": '{job="fleet"}',
                "interval": args.interval, "timeout": f"{min(25.0, interval):g}s",
            }}]})
        )  # fmt: skip
        daemon = subprocess.Popen(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(work / "specmon.yml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "info",
             "--log.format", "json"],
            stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "w"),  # noqa: SIM115
        )  # fmt: skip
        procs.append(daemon)
        started = time.monotonic()

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{daemon_port}/readyz", timeout=5) as r:
                return bool(r.status == 200)

        try:
            wait("the daemon's first read", ready, 120, 0.5)
        except TimeoutError:
            print((work / "daemon.log").read_text()[-3000:], file=sys.stderr)
            raise
        first_read_after = time.monotonic() - started
        rss_after_first = status_mib(daemon.pid, "VmRSS")
        time.sleep(interval)  # a second read: windows begin
        first, _, _ = _metrics(daemon_port)
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        # The other two ends of the exchange, measured over the same period: the simulated
        # fleet (the first process started) and Prometheus.
        sim_pid = procs[0].pid
        others0 = (cpu_seconds(sim_pid), cpu_seconds(prom.pid))
        rss: list[float] = []
        get_cpu: list[float] = []
        get_wall: list[float] = []
        wire = 0
        text = ""
        for i in range(args.intervals):
            # A scrape of specmon in the middle of each interval, as Prometheus would.
            if args.scrape:
                target = t0 + (i + 0.5) * interval
                time.sleep(max(0.0, target - time.monotonic()))
                text, took, used, wire = _scrape(daemon_port, daemon.pid)
                get_cpu.append(used)
                get_wall.append(took)
            end = t0 + (i + 1) * interval
            time.sleep(max(0.0, end - time.monotonic()))
            rss.append(round(status_mib(daemon.pid, "VmRSS"), 1))
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        others1 = (cpu_seconds(sim_pid), cpu_seconds(prom.pid))
        last, series, size = _metrics(daemon_port)
        sums = last
        elapsed = t1 - t0
        intervals = elapsed / interval
        cpu = cpu1 - cpu0
        reads = sum(v for k, v in last.items() if k.startswith("specmon_source_reads_total")) - sum(
            v for k, v in first.items() if k.startswith("specmon_source_reads_total")
        )
        queries = last.get("specmon_source_queries_total", 0.0) - first.get(
            "specmon_source_queries_total", 0.0
        )
        return {
            "instances": n,
            "interval": args.interval,
            "keep": args.keep,
            "prometheus_head_series": head_series,
            "first_read_after_start_s": round(first_read_after, 1),
            "measured_intervals": round(intervals, 2),
            "daemon_cpu_s_per_interval": round(cpu / intervals, 3),
            "daemon_cpu_percent_of_one_core": round(100 * cpu / elapsed, 2),
            "scrapes_of_specmon": len(get_cpu),
            "of_which_serving_metrics_cpu_s_per_interval": round(sum(get_cpu) / intervals, 3),
            "other_cpu_s_per_interval": round((cpu - sum(get_cpu)) / intervals, 3),
            "metrics_get_cpu_s": [round(x, 2) for x in get_cpu],
            "metrics_get_wall_s": [round(x, 2) for x in get_wall],
            "metrics_gzip_bytes": wire,
            "openmetrics_bytes": len(text),
            "reads_per_interval": round(reads / intervals, 2),
            "queries_per_interval": round(queries / intervals, 2),
            "last_read_duration_s": round(sums.get("specmon_source_read_duration_seconds", 0), 3),
            "last_read_response_bytes": int(sums.get("specmon_source_response_bytes", 0)),
            "instances_current_last_read": int(
                sums.get("specmon_source_instances{state=current}", 0)
            ),
            "instances_unchanged_last_read": int(
                sums.get("specmon_source_instances{state=unchanged}", 0)
            ),
            "instances_up": int(sums.get("specmon_up", 0)),
            "instances_not_up": int(sums.get("specmon_up_not_1", 0)),
            "reads_by_result": {k: v for k, v in last.items() if "reads_total" in k},
            "metrics_series": series,
            "metrics_bytes": size,
            "daemon_rss_mib_after_first_read": round(rss_after_first, 1),
            "daemon_rss_mib_per_interval": rss,
            "daemon_vmhwm_mib": round(status_mib(daemon.pid, "VmHWM"), 1),
            "prometheus_vmrss_mib": round(status_mib(prom.pid, "VmRSS"), 1),
            "simulator_cpu_percent_of_one_core": round(
                100 * (others1[0] - others0[0]) / elapsed, 2
            ),
            "prometheus_cpu_percent_of_one_core": round(
                100 * (others1[1] - others0[1]) / elapsed, 2
            ),
            "loadavg_end": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]],
        }
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fleet")
    parser.add_argument("--instances", type=int, default=2000)
    parser.add_argument("--interval", default="30s")
    parser.add_argument("--intervals", type=int, default=8)
    parser.add_argument("--keep", choices=("all", "needed"), default="all")
    parser.add_argument(
        "--no-scrape",
        dest="scrape",
        action="store_false",
        help="do not GET the daemon's /metrics during the measurement",
    )
    args = parser.parse_args(argv)
    print(json.dumps(run(args), indent=1), flush=True)
    return 0
