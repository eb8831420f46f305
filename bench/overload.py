"""Overload benchmark: the daemon held to part of a core, scraping more targets than it can on
time; what the overload governor does about it.

Run: python -m bench overload [--targets 2000] [--interval 1s] [--seconds 45] [--no-competitor]

cgroups are read-only on the reference machine, so the daemon is held to about half a core by
pinning it (``taskset``) to one CPU beside a busy competitor pinned to the same CPU (the
kernel's fair scheduler gives each about half). The simulated fleet (``bench.light_fleet``:
real vLLM 0.32.0 pages, one port) is pinned to the other CPU. After the daemon is ready and a
warm-up, the run measures ``--seconds`` and reports, from the daemon's ``/metrics`` before and
after:

- targets reported down (``specmon_up`` 0) and every non-success scrape by result;
- the fewest successful scrapes of one target in the measurement (every target still scraped);
- the governor's figures: ``specmon_scrape_interval_stretch``, ``specmon_scrape_delay_seconds``,
  ``specmon_scrape_interval_achieved_seconds``, timeouts excused;
- the event loop's mean lag, the daemon's CPU (share of one core) and the ``target_down``
  warnings in its log.

Bounded: every wait has a deadline; the three subprocesses are stopped at the end, whatever
happens. CPU figures are those of a shared 2-core machine and move with its other load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.scale import cpu_seconds, free_port, wait_http

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as response:
        body = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _one(samples: Samples, name: str) -> float:
    return next((v for (n, _), v in samples.items() if n == name), float("nan"))


def _per_target(samples: Samples, name: str, **match: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), value in samples.items():
        d = dict(labels)
        if n == name and all(d.get(k) == v for k, v in match.items()):
            out[d["target"]] = value
    return out


def summarize(before: Samples, after: Samples, *, targets: int) -> dict[str, Any]:
    """The figures of one run from two ``/metrics`` snapshots."""
    up = _per_target(after, "specmon_up")
    ok0 = _per_target(before, "specmon_scrapes_total", result="success")
    ok1 = _per_target(after, "specmon_scrapes_total", result="success")
    failed: dict[str, float] = {}
    for (n, labels), value in after.items():
        d = dict(labels)
        if n == "specmon_scrapes_total" and d["result"] != "success":
            failed[d["result"]] = failed.get(d["result"], 0.0) + value
    achieved = {
        dict(labels).get("interval", ""): value
        for (n, labels), value in after.items()
        if n == "specmon_scrape_interval_achieved_seconds"
    }
    lag_sum = _one(after, "specmon_event_loop_lag_seconds_sum") - _one(
        before, "specmon_event_loop_lag_seconds_sum"
    )
    lag_count = _one(after, "specmon_event_loop_lag_seconds_count") - _one(
        before, "specmon_event_loop_lag_seconds_count"
    )
    scraped = [ok1.get(f"t{i}", 0.0) - ok0.get(f"t{i}", 0.0) for i in range(targets)]
    return {
        "targets_up": sum(1 for v in up.values() if v == 1),
        "targets_down": sorted(t for t, v in up.items() if v == 0)[:20],
        "targets_down_count": sum(1 for v in up.values() if v == 0),
        "failed_scrapes_by_result_since_start": failed,
        "fewest_scrapes_of_a_target": min(scraped) if scraped else 0,
        "successful_scrapes": sum(scraped),
        "stretch": _one(after, "specmon_scrape_interval_stretch"),
        "delay_p90_s": _one(after, "specmon_scrape_delay_seconds"),
        "achieved_interval_s": achieved,
        "timeouts_excused_since_start": _one(after, "specmon_scrape_timeouts_excused_total"),
        "timeouts_excused_in_run": _one(after, "specmon_scrape_timeouts_excused_total")
        - _one(before, "specmon_scrape_timeouts_excused_total"),
        "event_loop_lag_mean_s": lag_sum / lag_count if lag_count else float("nan"),
    }


def run(
    *, targets: int, interval: str, seconds: float, warmup: float, competitor: bool
) -> dict[str, Any]:
    """One run (see the module docstring)."""
    sim_port, daemon_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-overload-"))
    cpus = sorted(os.sched_getaffinity(0))
    daemon_cpu, fleet_cpu = str(cpus[0]), str(cpus[-1])
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], log: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=open(work / log, "wb"),  # noqa: SIM115 (closed with the process)
        )
        procs.append(proc)
        return proc

    try:
        start(
            ["taskset", "-c", fleet_cpu, sys.executable, "-m", "bench.light_fleet",
             "--targets", str(targets), "--listen", f"127.0.0.1:{sim_port}"],
            "fleet.log",
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{sim_port}/stats", 30)
        lines = ["global:", f"  scrape_interval: {interval}", "targets:"]
        for i in range(targets):
            lines += [f"  - name: t{i}", f"    url: http://127.0.0.1:{sim_port}/t/vllm-{i}/metrics"]
        (work / "config.yaml").write_text("\n".join(lines) + "\n")
        if competitor:
            start(
                ["taskset", "-c", daemon_cpu, sys.executable, "-c", "while True: pass"],
                "competitor.log",
            )
        daemon = start(
            ["taskset", "-c", daemon_cpu, sys.executable, "-m", "specmon", "run",
             "--config.file", str(work / "config.yaml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "info"],
            "daemon.log",
        )  # fmt: skip
        started = time.monotonic()
        wait_http(f"http://127.0.0.1:{daemon_port}/healthz", 30)
        try:  # ready: every target's first scrape has an outcome (not an excused timeout)
            wait_http(f"http://127.0.0.1:{daemon_port}/readyz", 60)
            ready_s: float | None = round(time.monotonic() - started, 1)
        except TimeoutError:
            ready_s = None
        time.sleep(warmup)
        before = metrics(daemon_port)
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(seconds)
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        probe = time.monotonic()
        after = metrics(daemon_port)
        metrics_s = time.monotonic() - probe
        log = (work / "daemon.log").read_text(errors="replace")
        return {
            "targets": targets,
            "interval": interval,
            "competitor": competitor,
            "seconds": round(t1 - t0, 1),
            "ready_s": ready_s,
            "daemon_cpu_share_of_one_core": round((cpu1 - cpu0) / (t1 - t0), 3),
            "metrics_answer_s": round(metrics_s, 3),
            "target_down_warnings": log.count('"target_down"'),
            "stretch_changes_logged": log.count('"scrape_intervals_stretched"')
            + log.count('"scrape_on_schedule"'),
            **summarize(before, after, targets=targets),
        }
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench overload")
    parser.add_argument("--targets", type=int, default=2000)
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--no-competitor", action="store_true")
    args = parser.parse_args(argv)
    result = run(
        targets=args.targets,
        interval=args.interval,
        seconds=args.seconds,
        warmup=args.warmup,
        competitor=not args.no_competitor,
    )
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
