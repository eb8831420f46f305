"""Overload benchmark: the daemon held to part of a core, scraping more targets than it can on
time; what the overload governor does about it.

Run: python -m bench overload [--targets 2000] [--interval 1s] [--seconds 45] [--no-competitor]
                               [--no-pin] [--prometheus] [--fixed-stretch S] [--nice N]
                               [--json-out FILE]

cgroups are read-only on the reference machine, so the daemon is held to about half a core by
pinning it (``taskset``) to one CPU beside a busy competitor pinned to the same CPU (the
kernel's fair scheduler gives each about half). The simulated fleet (``bench.light_fleet``:
real vLLM 0.32.0 pages, one port) is pinned to the other CPU. ``--no-competitor --no-pin``:
the control run, nothing pinned, every process where the kernel puts it. After the daemon is
ready and a warm-up, the run measures ``--seconds`` and reports, from the daemon's ``/metrics``
before and after:

- targets reported down (``specmon_up`` 0) and every non-success scrape by result;
- the fewest successful scrapes of one target in the measurement (every target still scraped);
- the governor's figures: ``specmon_scrape_interval_stretch``, ``specmon_scrape_delay_seconds``,
  ``specmon_scrape_interval_achieved_seconds``, timeouts excused;
- the event loop's mean lag, the daemon's CPU (share of one core) and the ``target_down``
  warnings in its log;
- how long the daemon took to answer ``/metrics`` at the end, plain and gzip (the request and
  the body read, not the bench's parse of it).

``--prometheus``: the end-to-end rule run. The config gains one target that is really down
(a closed loopback port), and Debian's ``prometheus`` (pinned beside the fleet, not the
daemon) scrapes the daemon's ``/metrics`` every 15 s with a 10 s ``scrape_timeout`` and
evaluates the project's unmodified ``deploy/prometheus/specmon-alerts.rules.yml`` (its
``for:`` as shipped, so a run needs about 17 minutes of ``--seconds`` for SpecmonOverloaded).
After the run the report adds, from Prometheus's API over the whole run: every alert series
and when it was first pending and firing, ``up`` and ``scrape_duration_seconds`` of the
daemon's job, the healthy targets ``specmon_up`` ever showed 0, and the stretch seen.

Bounded: every wait has a deadline; the three subprocesses are stopped at the end, whatever
happens. CPU figures are those of a shared 2-core machine and move with its other load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.scale import cpu_seconds, free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]
#: The project's alert rules, loaded as shipped (their recording rule is in the same file).
RULES = ROOT / "deploy" / "prometheus" / "specmon-alerts.rules.yml"
#: The one target that is really down in a ``--prometheus`` run.
DOWN = "down"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def metrics(port: int, *, took: list[float] | None = None) -> Samples:
    """The daemon's page, parsed; ``took`` gets the seconds the answer took (the request
    and the whole body read, not the parse: at 5,000 targets prometheus_client's parser
    needs half a minute for the 43 MB page)."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as response:
        raw = response.read()
    if took is not None:
        took.append(time.monotonic() - started)
    body = raw.decode()
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def light_read(port: int) -> dict[str, Any]:
    """A few figures from the daemon's page without a full parse (fast enough to read every
    few seconds at 6,000 targets): healthy targets down, successful, excused and deferred
    scrapes, the stretch, the in-flight limit and the interval achieved."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=120) as response:
        body = response.read().decode()
    down: list[str] = []
    success = judged_timeouts = 0.0
    own: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("specmon_up{"):
            labels, value = line.rsplit(" ", 1)
            if float(value) == 0.0:
                name = labels.split('target="', 1)[1].split('"', 1)[0]
                if name != DOWN:
                    down.append(name)
        elif line.startswith("specmon_scrapes_total{"):
            labels, value = line.rsplit(" ", 1)
            if 'result="success"' in labels:
                success += float(value)
            elif 'result="timeout"' in labels:
                judged_timeouts += float(value)
        elif line.startswith(
            (
                "specmon_scrape_timeouts_excused_total ",
                "specmon_scrape_interval_stretch ",
                "specmon_scrape_delay_seconds ",
                "specmon_scrape_interval_achieved_seconds{",
                "specmon_scrapes_in_flight_limit ",
                "specmon_scrapes_deferred_total ",
            )
        ):
            name, value = line.rsplit(" ", 1)
            own[name.split("{", 1)[0]] = float(value)
    return {
        "healthy_down": len(down),
        "healthy_down_examples": sorted(down)[:5],
        "success_total": success,
        "timeouts_judged_total": judged_timeouts,
        "excused_total": own.get("specmon_scrape_timeouts_excused_total", float("nan")),
        "stretch": own.get("specmon_scrape_interval_stretch", float("nan")),
        "delay_p90_s": own.get("specmon_scrape_delay_seconds", float("nan")),
        "achieved_s": own.get("specmon_scrape_interval_achieved_seconds", float("nan")),
        "in_flight_limit": own.get("specmon_scrapes_in_flight_limit", float("nan")),
        "deferred_total": own.get("specmon_scrapes_deferred_total", float("nan")),
    }


def tail_share(reads: list[dict[str, Any]], *, seconds: float) -> dict[str, Any]:
    """Excused timeouts over successful scrapes in the last ``seconds`` of the reads."""
    if len(reads) < 2:
        return {}
    end = reads[-1]
    start = next((r for r in reads if r["t"] >= end["t"] - seconds), reads[0])
    excused = end["excused_total"] - start["excused_total"]
    success = end["success_total"] - start["success_total"]
    return {
        "span_s": round(end["t"] - start["t"], 1),
        "excused": excused,
        "successful": success,
        "judged_timeouts": end["timeouts_judged_total"] - start["timeouts_judged_total"],
        "deferred": end["deferred_total"] - start["deferred_total"],
        "excused_per_successful": round(excused / success, 5) if success else None,
    }


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
    healthy_down = sorted(t for t, v in up.items() if v == 0 and t != DOWN)
    return {
        "healthy_targets_down_count": len(healthy_down),
        "healthy_targets_down": healthy_down[:20],
        "down_target_up": up.get(DOWN),
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


def prometheus_config(*, daemon: str, interval: str = "15s", timeout: str = "10s") -> str:
    """Prometheus scraping the daemon at ``daemon`` (host:port) with the shipped rules."""
    return json.dumps(
        {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "specmon",
                    "scrape_interval": interval,
                    "scrape_timeout": timeout,
                    "static_configs": [{"targets": [daemon]}],
                }
            ],
        },
        indent=1,
    )


def _api(port: int, path: str, **params: str) -> Any:
    query = urllib.parse.urlencode(params)
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{query}"
    with urllib.request.urlopen(url, timeout=60) as response:
        body = json.loads(response.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{path} {params}: {body}")
    return body["data"]["result"]


def _series(port: int, expr: str, *, start: float, end: float, step: float) -> list[Any]:
    return list(
        _api(
            port,
            "query_range",
            query=expr,
            start=f"{start:.3f}",
            end=f"{end:.3f}",
            step=f"{step:g}",
        )
    )


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "min": round(ordered[0], 4),
        "median": round(ordered[len(ordered) // 2], 4),
        "max": round(ordered[-1], 4),
        "mean": round(sum(values) / len(values), 4),
    }


def prometheus_report(port: int, *, start: float, end: float, run_start: float) -> dict[str, Any]:
    """What Prometheus saw between wall times ``start`` (its start) and ``end``: alerts and
    their first pending/firing times (seconds after ``start``), the daemon's scrapes."""
    step = 15.0
    span = f"{max(1, int(end - start))}s"
    alerts: dict[str, dict[str, Any]] = {}
    for series in _series(port, "ALERTS", start=start, end=end, step=step):
        labels = series["metric"]
        name = labels["alertname"]
        entry = alerts.setdefault(name, {"pending_targets": set(), "firing_targets": set()})
        state = labels["alertstate"]
        first = float(series["values"][0][0]) - start
        key = f"first_{state}_s"
        entry[key] = round(min(entry.get(key, first), first), 1)
        entry[f"{state}_samples"] = entry.get(f"{state}_samples", 0) + len(series["values"])
        entry[f"{state}_targets"].add(labels.get("target", labels.get("instance", "")))
    healthy_alerted: set[str] = set()
    for name, entry in alerts.items():
        for state in ("pending", "firing"):
            names = sorted(entry.pop(f"{state}_targets"))
            entry[f"{state}_count"] = len(names)
            entry[f"{state}_examples"] = names[:10]
            if name == "SpecmonTargetDown":
                healthy_alerted.update(n for n in names if n != DOWN)
    target_down = alerts.get("SpecmonTargetDown", {})
    up = _series(port, 'up{job="specmon"}', start=start, end=end, step=step)
    duration = _series(
        port, 'scrape_duration_seconds{job="specmon"}', start=start, end=end, step=step
    )
    stretch = _series(port, "specmon_scrape_interval_stretch", start=start, end=end, step=step)
    achieved = _series(
        port, "specmon_scrape_interval_achieved_seconds", start=start, end=end, step=step
    )
    in_run = [
        float(v) for t, v in (achieved[0]["values"] if achieved else []) if float(t) >= run_start
    ]
    ever_zero = _api(
        port, "query", query=f'count(min_over_time(specmon_up{{target!="{DOWN}"}}[{span}]) == 0)',
        time=f"{end:.3f}",
    )  # fmt: skip

    def values(result: list[Any]) -> list[float]:
        return [float(v) for _, v in result[0]["values"]] if result else []

    up_values = values(up)
    return {
        "alerts": alerts,
        "target_down_pending_count": target_down.get("pending_count", 0),
        "target_down_firing_count": target_down.get("firing_count", 0),
        "target_down_healthy_targets_alerted": len(healthy_alerted),
        "specmon_job_up": {
            "samples": len(up_values),
            "down_samples": sum(1 for v in up_values if v == 0),
            "mean": round(sum(up_values) / len(up_values), 4) if up_values else None,
        },
        "specmon_job_scrape_duration_s": _stats(values(duration)),
        "stretch": _stats(values(stretch)),
        "achieved_interval_in_run_s": _stats(in_run),
        "healthy_targets_specmon_up_ever_0": int(float(ever_zero[0]["value"][1]))
        if ever_zero
        else 0,
    }


def run(
    *,
    targets: int,
    interval: str,
    seconds: float,
    warmup: float,
    competitor: bool,
    prometheus: str | None = None,
    pin: bool = True,
    timeout: str | None = None,
    reads_every: float = 0.0,
    reduce_to: int | None = None,
    reduce_at: float = 0.0,
    fixed_stretch: float | None = None,
    nice: int | None = None,
) -> dict[str, Any]:
    """One run (see the module docstring); ``prometheus``: the binary for an end-to-end rule
    run, None for none; ``pin``: False runs every process where the kernel puts it."""
    sim_port, daemon_port, prom_port, closed_port = (free_port() for _ in range(4))
    work = Path(tempfile.mkdtemp(prefix="specmon-overload-"))
    cpus = sorted(os.sched_getaffinity(0))
    daemon_cpu, fleet_cpu = str(cpus[0]), str(cpus[-1])
    procs: list[subprocess.Popen[bytes]] = []

    def on(cpu: str) -> list[str]:
        return ["taskset", "-c", cpu] if pin else []

    def start(argv: list[str], log: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=open(work / log, "wb"),  # noqa: SIM115 (closed with the process)
        )
        procs.append(proc)
        if nice is not None:  # every process of the run alike: their shares stay as set
            os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
        return proc

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    try:
        load_start = os.getloadavg()
        start(
            [*on(fleet_cpu), sys.executable, "-m", "bench.light_fleet",
             "--targets", str(targets), "--listen", f"127.0.0.1:{sim_port}"],
            "fleet.log",
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{sim_port}/stats", 180)  # 5,000 pages built at start

        def write_config(count: int) -> None:
            lines = ["global:", f"  scrape_interval: {interval}"]
            if timeout is not None:
                lines.append(f"  scrape_timeout: {timeout}")
            lines.append("targets:")
            for i in range(count):
                lines += [
                    f"  - name: t{i}",
                    f"    url: http://127.0.0.1:{sim_port}/t/vllm-{i}/metrics",
                ]
            if prometheus is not None:  # nothing listens there: really down
                lines += [f"  - name: {DOWN}", f"    url: http://127.0.0.1:{closed_port}/metrics"]
            (work / "config.yaml").write_text("\n".join(lines) + "\n")

        write_config(targets)
        comp = None
        if competitor:
            comp = start(
                [*on(daemon_cpu), sys.executable, "-c", "while True: pass"],
                "competitor.log",
            )
        command = ["-m", "specmon"]
        if fixed_stretch is not None:  # the sweep: the daemon's stretch held there
            command = ["-m", "bench.fixed_stretch", f"{fixed_stretch:g}"]
        daemon = start(
            [*on(daemon_cpu), sys.executable, *command, "run",
             "--config.file", str(work / "config.yaml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "info"],
            "daemon.log",
        )  # fmt: skip
        started = time.monotonic()
        wait_http(f"http://127.0.0.1:{daemon_port}/healthz", 30)
        prom_start = time.time()
        if prometheus is not None:
            (work / "prometheus.yml").write_text(
                prometheus_config(daemon=f"127.0.0.1:{daemon_port}")
            )
            start(
                [*on(fleet_cpu), prometheus,
                 f"--config.file={work / 'prometheus.yml'}",
                 f"--storage.tsdb.path={work / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                "prometheus.log",
            )  # fmt: skip
            wait_http(f"http://127.0.0.1:{prom_port}/-/ready", 60)
            prom_start = time.time()
        try:  # ready: every target's first scrape has an outcome (not an excused timeout)
            wait_http(f"http://127.0.0.1:{daemon_port}/readyz", 60)
            ready_s: float | None = round(time.monotonic() - started, 1)
        except TimeoutError:
            ready_s = None
        progress(f"ready after {ready_s} s; warm-up {warmup:g} s, then {seconds:g} s")
        time.sleep(warmup)
        before = {} if reads_every else metrics(daemon_port)  # reads: no 30 s parse now
        run_start = time.time()
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        comp0 = cpu_seconds(comp.pid) if comp is not None else 0.0
        loads: list[float] = []
        reads: list[dict[str, Any]] = []
        deadline = t0 + seconds
        last_minute = t0
        reduced_at: float | None = None
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(reads_every or 60.0, left))
            for proc in procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"process {proc.pid} exited with {proc.returncode}")
            if reduce_to is not None and reduced_at is None and time.monotonic() - t0 >= reduce_at:
                write_config(reduce_to)
                daemon.send_signal(signal.SIGHUP)
                reduced_at = round(time.monotonic() - t0, 1)
                progress(f"reduced to {reduce_to} targets (SIGHUP)")
            if reads_every:
                read = light_read(daemon_port)
                read["t"] = round(time.monotonic() - t0, 1)
                reads.append(read)
            if time.monotonic() - last_minute >= 60.0 or not reads_every:
                last_minute = time.monotonic()
                loads.append(os.getloadavg()[0])
                share = (cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - t0)
                extra = (
                    f", stretch {reads[-1]['stretch']:.2f}, healthy down {reads[-1]['healthy_down']}"
                    if reads
                    else ""
                )
                progress(
                    f"{time.monotonic() - t0:.0f} s: load {loads[-1]:.2f}, daemon {share:.2f}{extra}"
                )
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        comp1 = cpu_seconds(comp.pid) if comp is not None else 0.0
        took: list[float] = []
        after = metrics(daemon_port, took=took)
        metrics_s = took[0]
        probe = time.monotonic()  # as Prometheus asks: compressed
        request = urllib.request.Request(
            f"http://127.0.0.1:{daemon_port}/metrics", headers={"Accept-Encoding": "gzip"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback
            response.read()
        metrics_gzip_s = time.monotonic() - probe
        log = (work / "daemon.log").read_text(errors="replace")
        top = subprocess.run(
            ["ps", "-eo", "pid,pcpu,etimes,comm", "--sort=-pcpu"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout.splitlines()[:10]  # fmt: skip
        result: dict[str, Any] = {
            "processes_at_end_ps_pcpu": top,
            "targets": targets,
            "interval": interval,
            "competitor": competitor,
            "pinned": pin,
            "fixed_stretch": fixed_stretch,
            "nice": nice,
            "seconds": round(t1 - t0, 1),
            "ready_s": ready_s,
            "daemon_cpu_share_of_one_core": round((cpu1 - cpu0) / (t1 - t0), 3),
            "competitor_cpu_share_of_one_core": round((comp1 - comp0) / (t1 - t0), 3)
            if comp is not None
            else None,
            "load_average": {
                "before": [round(x, 2) for x in load_start],
                "per_minute_1m": [round(x, 2) for x in loads],
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            "metrics_answer_s": round(metrics_s, 3),
            "metrics_answer_gzip_s": round(metrics_gzip_s, 3),
            "target_down_warnings": log.count('"target_down"'),
            "target_down_warnings_healthy": sum(
                1
                for line in log.splitlines()
                if '"target_down"' in line and f'"target": "{DOWN}"' not in line
            ),
            "stretch_changes_logged": log.count('"scrape_intervals_stretched"')
            + log.count('"scrape_on_schedule"'),
            **summarize(before, after, targets=targets),
        }
        if reads:
            result["reads_every_s"] = reads_every
            result["reads"] = reads
            after_first_minute = [r for r in reads if r["t"] >= 60.0]
            result["healthy_down_max_after_first_minute"] = max(
                (r["healthy_down"] for r in after_first_minute), default=None
            )
            result["reads_with_healthy_down_after_first_minute"] = sum(
                1 for r in after_first_minute if r["healthy_down"]
            )
            loaded = [r for r in reads if reduced_at is None or r["t"] <= reduced_at]
            result["last_3_minutes"] = tail_share(loaded, seconds=180.0)
            if reduced_at is not None:
                result["reduced_to"] = reduce_to
                result["reduced_at_s"] = reduced_at
                back = next(
                    (r["t"] for r in reads if r["t"] > reduced_at and r["stretch"] == 1.0), None
                )
                result["stretch_back_to_1_after_s"] = (
                    None if back is None else round(back - reduced_at, 1)
                )
            result["stretch_over_reads"] = _stats([r["stretch"] for r in reads])
        if prometheus is not None:
            result["prometheus"] = prometheus_report(
                prom_port, start=prom_start, end=time.time(), run_start=run_start
            )
        return result
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        shutil.rmtree(work, ignore_errors=True)  # Prometheus's TSDB is hundreds of MB


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench overload")
    parser.add_argument("--targets", type=int, default=2000)
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--no-competitor", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="no taskset (no competitor)")
    parser.add_argument(
        "--prometheus", action="store_true", help="the end-to-end rule run (module docstring)"
    )
    parser.add_argument("--timeout", help="scrape_timeout (default: the daemon's)")
    parser.add_argument(
        "--reads-every", type=float, default=0.0, help="read a few figures every N s (0: none)"
    )
    parser.add_argument("--reduce-to", type=int, help="targets left after --reduce-at (SIGHUP)")
    parser.add_argument("--reduce-at", type=float, default=0.0, help="seconds into the run")
    parser.add_argument(
        "--fixed-stretch",
        type=float,
        help="hold the daemon's stretch at this value (the sweep; bench/fixed_stretch.py)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        help="run every process of the run at this niceness (e.g. -5: other sessions' work "
        "on a shared machine takes less of the pinned CPU; the daemon and its competitor "
        "still share it evenly)",
    )
    parser.add_argument("--json-out", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    binary = None
    if args.prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            parser.error("--prometheus needs Debian's prometheus on PATH")
    if args.no_pin and not args.no_competitor:
        parser.error("--no-pin needs --no-competitor (the competitor shares the daemon's CPU)")
    if not 1 <= args.seconds <= 3600 or not 0 <= args.warmup <= 600:
        parser.error("--seconds 1..3600, --warmup 0..600")
    result = run(
        targets=args.targets,
        interval=args.interval,
        seconds=args.seconds,
        warmup=args.warmup,
        competitor=not args.no_competitor,
        prometheus=binary,
        pin=not args.no_pin,
        timeout=args.timeout,
        reads_every=args.reads_every,
        reduce_to=args.reduce_to,
        reduce_at=args.reduce_at,
        fixed_stretch=args.fixed_stretch,
        nice=args.nice,
    )
    text = json.dumps(result, indent=2, sort_keys=True, default=sorted)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
