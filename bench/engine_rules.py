"""Engine recording rules at fleet size: what evaluating them costs a Prometheus.

Run: ./dev.sh bench rules [--targets 1000] [--interval 15s] [--seconds 360]
Bounded: each size runs for --seconds (at least the 5m window plus a minute, so the window
is full when measured), then everything stops.

N simulated vLLM targets (one simulator process, all on one port, the real vLLM 0.32.0 page
format, k = 3, 20 drafts/s each) are scraped by Debian's Prometheus at --interval, which
evaluates the shipped ``deploy/prometheus/engine-recording.rules.yml`` unchanged (5m window)
at the same interval. Measured over the last minute: each group's evaluation time, mean and
max (Prometheus's own ``prometheus_rule_group_last_duration_seconds``), each rule's (the
``evaluationTime`` of /api/v1/rules, read once per interval), the series the rules
record, and Prometheus's CPU (from /proc) and RSS. The simulator competes for the same cores.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.scale import cpu_seconds, free_port, rss_mib, wait_http

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "deploy" / "prometheus" / "engine-recording.rules.yml"


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - loopback
        body = json.loads(response.read())
    return list(body["data"]["result"])


def _rules(base: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(base + "/api/v1/rules", timeout=30) as response:  # noqa: S310
        body = json.loads(response.read())
    return [rule for group in body["data"]["groups"] for rule in group["rules"]]


def run_size(n: int, *, seconds: float, interval: str) -> dict[str, Any]:
    interval_seconds = float(interval.removesuffix("s"))
    sim_port, prom_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-rules-bench-"))
    sim = subprocess.Popen(
        [sys.executable, "-m", "specmon", "simulate", "--engine", "vllm", "--targets", str(n),
         "--shared-port", "--listen", f"127.0.0.1:{sim_port}", "--drafts-per-second", "20"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    prom = None
    try:
        wait_http(f"http://127.0.0.1:{sim_port}/targets", 60)
        host = f"127.0.0.1:{sim_port}"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "vllm",
                    "static_configs": [
                        {
                            "targets": [host],
                            "labels": {
                                "__metrics_path__": f"/t/vllm-{i}/metrics",
                                "instance": f"vllm-{i}",
                            },
                        }
                        for i in range(n)
                    ],
                },
                {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]},
            ],
        }  # fmt: skip
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "w"),  # noqa: SIM115
        )  # fmt: skip
        base = f"http://127.0.0.1:{prom_port}"
        wait_http(base + "/-/ready", 60)
        time.sleep(max(0.0, seconds - 60))
        cpu0, t0 = cpu_seconds(prom.pid), time.monotonic()
        per_rule: dict[str, list[float]] = {}
        while time.monotonic() < t0 + 60:
            for rule in _rules(base):
                per_rule.setdefault(rule["name"], []).append(float(rule["evaluationTime"]))
            time.sleep(interval_seconds)
        cpu1, t1 = cpu_seconds(prom.pid), time.monotonic()
        last = "prometheus_rule_group_last_duration_seconds"
        durations = {
            s["metric"]["rule_group"].split(";")[-1]: {
                "mean": float(s["value"][1]),
                "max": float(m["value"][1]),
            }
            for s in _query(base, f"avg_over_time({last}[1m])")
            for m in _query(base, f"max_over_time({last}[1m])")
            if m["metric"]["rule_group"] == s["metric"]["rule_group"]
        }
        recorded = {
            s["metric"]["__name__"]: int(float(s["value"][1]))
            for s in _query(base, 'count by (__name__) ({__name__=~".+:.+:.+"})')
        }
        up = sum(float(s["value"][1]) for s in _query(base, 'up{job="vllm"}'))
        scraped = _query(base, 'count({__name__=~"vllm:.+", job="vllm"})')
        return {
            "targets": n,
            "up": up,
            "interval": interval,
            "engine_series_scraped": int(float(scraped[0]["value"][1])) if scraped else 0,
            "rule_group_evaluation_seconds_last_minute": durations,
            "rule_evaluation_seconds_mean": {
                name: sum(times) / len(times) for name, times in per_rule.items()
            },
            "recorded_series": sum(recorded.values()),
            "recorded_by_name": recorded,
            "prometheus_cpu_percent_of_one_core": 100 * (cpu1 - cpu0) / (t1 - t0),
            "prometheus_rss_mib": rss_mib(prom.pid),
        }
    finally:
        for proc in (prom, sim):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench rules")
    parser.add_argument("--targets", default="1000")
    parser.add_argument("--seconds", type=float, default=360.0)
    parser.add_argument("--interval", default="15s")
    args = parser.parse_args(argv)
    if args.seconds < 360:
        print("--seconds below 360 measures a window that is not yet full", file=sys.stderr)
    for n in (int(x) for x in args.targets.split(",")):
        print(json.dumps(run_size(n, seconds=args.seconds, interval=args.interval)), flush=True)
    return 0
