"""The anchor: specmon and a real Prometheus scraping the same simulated fleet side by side.

Run: ./dev.sh bench anchor [--targets 1000] [--interval 5s] [--windows 1m,5m,15m]
     [--warm 960] [--measure 60] [--rounds 3] [--fetch-every 15s|never] [--json-out FILE]

Why: specmon's cost per scrape means little on its own. The program every user already runs
beside it is Prometheus scraping the same pages, so that is the reference: Debian's
``prometheus`` (the one the tests use) and one specmon daemon (this tree) scrape the same
``bench/light_fleet.py`` fleet (real vLLM 0.32.0 pages) at the same interval, at the same time,
so whatever else the machine does hits both alike. Prometheus stores every series of every page
(its default); specmon keeps its windows (default 1m, 5m, 15m).

Per round, after ``--warm`` seconds (default: the longest window plus a minute, so every window
is full: the steady state specmon runs in), per process: CPU seconds (utime + stime from /proc)
over ``--measure`` seconds divided by the scrapes it made in them (specmon: its
``specmon_scrapes_total``; Prometheus: the count of its
``prometheus_target_interval_length_seconds`` summary, one per scrape after a target's first),
and the ratio specmon / Prometheus; the fleet's own CPU per page served (both scrapers' pages).
Resident memory of each at the end of each round. Throughout, specmon's ``/metrics`` is
fetched every ``--fetch-every`` (15 s, as deploy/prometheus/prometheus.example.yml scrapes it;
Prometheus's Accept header, gzip): serving its own page is part of specmon's cost. The summary: median and range over rounds.
Bounded: the run stops after warm + rounds x (measure + a few seconds), and every process stops
at the end, on Ctrl-C, or if this one dies.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from bench.cost import (
    ROOT,
    cpu_seconds,
    daemon_env,
    fetching,
    free_port,
    http_get,
    loadavg,
    read_counters,
    start,
    start_fleet,
    status_mib,
    stopping,
    wait_http,
    write_config,
)
from specmon.config_values import parse_duration

__all__ = ["main", "prometheus_scrapes"]

_INTERVAL_COUNT = re.compile(
    rb"^prometheus_target_interval_length_seconds_count\{[^}]*\} (\S+)$", re.MULTILINE
)


def prometheus_scrapes(body: bytes) -> float:
    """Scrapes Prometheus has made, from its own /metrics: the count of its
    ``prometheus_target_interval_length_seconds`` summary, summed over its ``interval`` labels
    (one observation per scrape, after each target's first)."""
    return sum(float(m.group(1)) for m in _INTERVAL_COUNT.finditer(body))


def _prometheus_config(path: Path, urls: list[str], interval: str) -> None:
    """One job scraping every fleet URL, each target with its own metrics path."""
    groups = []
    for i, url in enumerate(urls):
        host, _, metrics_path = url.removeprefix("http://").partition("/")
        groups.append(
            {"targets": [host], "labels": {"__metrics_path__": "/" + metrics_path, "t": f"t{i}"}}
        )
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": [{"job_name": "fleet", "static_configs": groups}],
    }
    path.write_text(yaml.safe_dump(config))


def _specmon_scrapes(port: int) -> float:
    return float(
        sum(read_counters(http_get(f"http://127.0.0.1:{port}/metrics").body).scrapes.values())
    )


def _prom_scrapes(port: int) -> float:
    return prometheus_scrapes(http_get(f"http://127.0.0.1:{port}/metrics").body)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench anchor")
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--interval", default="5s")
    p.add_argument("--windows", default="1m,5m,15m")
    p.add_argument("--warm", type=float, help="seconds before the first round (default: the "
                   "longest window plus 60 s)")  # fmt: skip
    p.add_argument("--measure", type=float, default=60.0, help="seconds per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--fetch-every",
        default="15s",
        help="GET specmon's /metrics this often, as Prometheus would ('never': not at all)",
    )
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    fetch_every = None if args.fetch_every == "never" else parse_duration(args.fetch_every)
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        p.error("needs Debian's prometheus on PATH (./dev.sh test provisions it)")
    longest = max(parse_duration(w) for w in args.windows.split(","))
    warm = longest + 60.0 if args.warm is None else args.warm
    if not 1 <= args.rounds <= 50 or not 1 <= args.measure <= 3600 or warm < 0:
        p.error("--rounds 1..50, --measure 1..3600 s, --warm >= 0")
    budget = warm + args.rounds * (args.measure + 15) + 180
    deadline = time.monotonic() + budget
    print(
        f"bench anchor: specmon and Prometheus side by side, {args.targets} targets every "
        f"{args.interval}, windows {args.windows}; warm {warm:g} s, {args.rounds} rounds of "
        f"{args.measure:g} s; specmon's /metrics fetched every {args.fetch_every}; at most "
        f"{budget / 60:.0f} min. Python {platform.python_version()}",
        flush=True,
    )
    rounds: list[dict[str, float]] = []
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specmon-anchor-")))
        fleet = start_fleet(
            args.targets, kind="fleet", procs=1, work=work, stack=stack, deadline=deadline
        )
        config = work / "specmon.yaml"
        write_config(config, fleet.urls, interval=args.interval, timeout=args.interval,
                     windows=args.windows)  # fmt: skip
        s_port = free_port()
        specmon = start(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(config),
             "--web.listen-address", f"127.0.0.1:{s_port}", "--log.level", "warning"],
            cwd=ROOT, env=daemon_env(ROOT), log=work / "specmon.log",
        )  # fmt: skip
        stack.enter_context(stopping(specmon))
        prom_cfg = work / "prometheus.yml"
        _prometheus_config(prom_cfg, fleet.urls, args.interval)
        p_port = free_port()
        prom = start(
            [prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{p_port}", "--log.level=warn"],
            cwd=work, env=daemon_env(ROOT), log=work / "prometheus.log",
        )  # fmt: skip
        stack.enter_context(stopping(prom))
        wait_http(f"http://127.0.0.1:{s_port}/readyz", deadline, specmon)
        wait_http(f"http://127.0.0.1:{p_port}/-/ready", deadline, prom)
        fetches = stack.enter_context(fetching([s_port], fetch_every))
        time.sleep(warm)
        fleet_pid = fleet.procs[0].pid
        for number in range(1, args.rounds + 1):
            fleet.check()
            for proc in (specmon, prom):
                if proc.poll() is not None:
                    raise RuntimeError(f"process {proc.pid} exited with {proc.returncode}")
            cpu0 = [cpu_seconds(pid) for pid in (specmon.pid, prom.pid, fleet_pid)]
            n0 = (_specmon_scrapes(s_port), _prom_scrapes(p_port))
            time.sleep(args.measure)
            cpu1 = [cpu_seconds(pid) for pid in (specmon.pid, prom.pid, fleet_pid)]
            n1 = (_specmon_scrapes(s_port), _prom_scrapes(p_port))
            s_n, p_n = n1[0] - n0[0], n1[1] - n0[1]
            figures = {
                "specmon_ms_per_scrape": (cpu1[0] - cpu0[0]) / s_n * 1e3,
                "prometheus_ms_per_scrape": (cpu1[1] - cpu0[1]) / p_n * 1e3,
                "fleet_ms_per_page": (cpu1[2] - cpu0[2]) / (s_n + p_n) * 1e3,
                "specmon_core_share": (cpu1[0] - cpu0[0]) / args.measure,
                "prometheus_core_share": (cpu1[1] - cpu0[1]) / args.measure,
                "specmon_scrapes": s_n,
                "prometheus_scrapes": p_n,
                "specmon_rss_mib": status_mib(specmon.pid, "VmRSS"),
                "prometheus_rss_mib": status_mib(prom.pid, "VmRSS"),
                "loadavg_1m": loadavg()[0],
            }
            figures["ratio"] = (
                figures["specmon_ms_per_scrape"] / figures["prometheus_ms_per_scrape"]
            )
            rounds.append(figures)
            print(
                f"round {number}: specmon {figures['specmon_ms_per_scrape']:.3f} ms/scrape "
                f"({s_n:.0f} scrapes, {figures['specmon_rss_mib']:.0f} MiB) | Prometheus "
                f"{figures['prometheus_ms_per_scrape']:.3f} ms/scrape ({p_n:.0f}, "
                f"{figures['prometheus_rss_mib']:.0f} MiB) | ratio {figures['ratio']:.3f} | "
                f"fleet {figures['fleet_ms_per_page']:.3f} ms/page | load {figures['loadavg_1m']:.2f}",
                flush=True,
            )
    print()
    print("| figure | median | range |")
    print("|---|---|---|")
    for key in ("specmon_ms_per_scrape", "prometheus_ms_per_scrape", "ratio", "fleet_ms_per_page",
                "specmon_core_share", "prometheus_core_share", "specmon_rss_mib",
                "prometheus_rss_mib"):  # fmt: skip
        values = [r[key] for r in rounds]
        print(f"| {key} | {statistics.median(values):.3f} | {min(values):.3f}-{max(values):.3f} |")
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps({"argv": argv, "targets": args.targets, "interval": args.interval,
                        "windows": args.windows, "warm_seconds": warm,
                        "fetch_every": args.fetch_every, "specmon_metrics_fetches": fetches[0],
                        "python": platform.python_version(), "rounds": rounds}, indent=1)
            + "\n"
        )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
