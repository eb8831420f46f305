"""Scale benchmark: one daemon scraping N simulated vLLM targets; CPU and memory it costs.

Run: ./dev.sh bench scale [--targets 100,500,1000] [--seconds 60] [--interval 5s]
Bounded: each size runs for --seconds after the daemon is ready, then everything stops.

The simulator (one process, all targets on one port, real vLLM 0.32.0 page format, ~56 KB a
page) runs beside the daemon on the same machine, so both compete for its cores; the figure
that matters is the daemon's own CPU time, read from /proc/PID/stat.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(url)


def run_size(n: int, *, seconds: float, interval: str) -> dict[str, float]:
    sim_port, daemon_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-scale-"))
    sim = subprocess.Popen(
        [sys.executable, "-m", "specmon", "simulate", "--engine", "vllm", "--targets", str(n),
         "--shared-port", "--listen", f"127.0.0.1:{sim_port}", "--drafts-per-second", "20"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    daemon = None
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/targets", 30)
        lines = ["global:", f"  scrape_interval: {interval}", "  scrape_timeout: 3s", "targets:"]
        for i in range(n):
            lines += [f"  - name: t{i}", f"    url: http://127.0.0.1:{sim_port}/t/vllm-{i}/metrics"]
        (work / "c.yaml").write_text("\n".join(lines) + "\n")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(work / "c.yaml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "warning"],
            stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "w"),  # noqa: SIM115
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{daemon_port}/readyz", 120)
        time.sleep(10)  # let windows fill a little
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        rss = rss_mib(daemon.pid)
        started = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{daemon_port}/metrics", timeout=30) as r:
            body = r.read().decode()
        exposition_ms = (time.perf_counter() - started) * 1000
        durations, ups, series = [], 0.0, 0
        for family in text_string_to_metric_families(body):
            for s in family.samples:
                series += 1
                if s.name == "specmon_scrape_duration_seconds":
                    durations.append(s.value)
                elif s.name == "specmon_up":
                    ups += s.value
        durations.sort()
        return {
            "targets": n,
            "up": ups,
            "daemon_cpu_percent_of_one_core": 100 * (cpu1 - cpu0) / (t1 - t0),
            "daemon_rss_mib": rss,
            "scrape_duration_p50_ms": 1000 * durations[len(durations) // 2],
            "scrape_duration_p99_ms": 1000
            * durations[min(len(durations) - 1, int(len(durations) * 0.99))],
            "exported_series": series,
            "metrics_page_ms": exposition_ms,
        }
    finally:
        for proc in (daemon, sim):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--targets", default="100,500,1000")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--interval", default="5s")
    args = parser.parse_args(argv)
    for n in (int(x) for x in args.targets.split(",")):
        result = run_size(n, seconds=args.seconds, interval=args.interval)
        print(json.dumps(result), flush=True)
    return 0
