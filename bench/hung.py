"""Hung targets beside healthy ones: targets that accept and never answer must go down within
the runbook's bound, and must not hold healthy targets back (issue 67).

Run: python -m bench starve --hung 2000 [--healthy 100] [--interval 1s] [--timeout 1s]
                            [--seconds 180] [--reads-every 2] [--json-out FILE]
     python -m bench.hung serve --listen 127.0.0.1:PORT   (the hung server alone)

The daemon scrapes ``--healthy`` simulated vLLM engines (``bench.light_fleet``) and ``--hung``
targets served by one process of this module that accepts every connection, reads the
request and never answers (it keeps the socket until the daemon closes it), every
``--interval`` with ``scrape_timeout`` ``--timeout``; nothing pinned, the three processes where
the kernel puts them. Every target hangs from the start. From the daemon's start, its
``/metrics`` is read every ``--reads-every`` s and the report gives:

- per hung target, the seconds from the daemon's ``/healthz`` first answering (its targets
  start just before it listens) to the first read showing its ``specmon_up`` 0; the largest, against the runbook's bound (docs/runbook.md,
  SpecmonOverloaded: "Excuses are bounded") computed with the largest stretch seen;
- per healthy target, after the first minute: the interval it achieved (the span over its
  successful scrapes in it), and the longest it went without one (the read's time less its
  ``specmon_last_success_timestamp_seconds``, at every read); any read showing it down;
- the stretch, the in-flight limit, the busy share and the timeouts excused at every read,
  the daemon's CPU and the machine's load averages (``os.getloadavg``) before, every 30 s and
  after.

Bounded: every wait has a deadline and every process is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.cost import stop
from bench.scale import cpu_seconds, free_port, wait_http
from specmon.config_values import parse_duration, parse_listen_address

#: The daemon's in-flight limit for targets that answer (specmon.daemon.governor.Policy).
LIMIT = 256


async def _serve(host: str, port: int) -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):  # read whatever comes, answer nothing
                pass
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(hang, host, port, backlog=4096)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    async with server:
        await stopping.wait()


def _read(port: int) -> dict[str, Any]:
    """Per target ``specmon_up``, successful scrapes and last success; a few own figures."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as response:
        body = response.read().decode()
    up: dict[str, float] = {}
    success: dict[str, float] = {}
    last: dict[str, float] = {}
    own: dict[str, float] = {}

    def target(labels: str) -> str:
        return labels.split('target="', 1)[1].split('"', 1)[0]

    for line in body.splitlines():
        if line.startswith("specmon_up{"):
            labels, value = line.rsplit(" ", 1)
            up[target(labels)] = float(value)
        elif line.startswith("specmon_scrapes_total{") and 'result="success"' in line:
            labels, value = line.rsplit(" ", 1)
            success[target(labels)] = float(value)
        elif line.startswith("specmon_last_success_timestamp_seconds{"):
            labels, value = line.rsplit(" ", 1)
            last[target(labels)] = float(value)
        elif line.startswith(
            (
                "specmon_scrape_timeouts_excused_total ",
                "specmon_scrape_interval_stretch ",
                "specmon_scrapes_in_flight_limit ",
                "specmon_event_loop_busy_ratio ",
                "specmon_scrapes_deferred_total ",
            )
        ):
            name, value = line.rsplit(" ", 1)
            own[name] = float(value)
    return {"up": up, "success": success, "last": last, "own": own}


def run(
    *,
    hung: int,
    healthy: int,
    interval: str,
    timeout: str,
    seconds: float,
    reads_every: float,
) -> dict[str, Any]:
    sim_port, hung_port, daemon_port = free_port(), free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-hung-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        load_before = os.getloadavg()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.light_fleet", "--targets", str(healthy),
                 "--listen", f"127.0.0.1:{sim_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.hung", "serve", "--listen", f"127.0.0.1:{hung_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{sim_port}/stats", 30)
        _wait_listening(hung_port, 30)
        lines = ["global:", f"  scrape_interval: {interval}", f"  scrape_timeout: {timeout}"]
        lines.append("targets:")
        for i in range(healthy):
            lines += [f"  - name: h{i}", f"    url: http://127.0.0.1:{sim_port}/t/vllm-{i}/metrics"]
        for i in range(hung):
            lines += [f"  - name: x{i}", f"    url: http://127.0.0.1:{hung_port}/x/{i}/metrics"]
        (work / "config.yaml").write_text("\n".join(lines) + "\n")
        began = time.monotonic()
        daemon = subprocess.Popen(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(work / "config.yaml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "info"],
            stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "wb"),  # noqa: SIM115
        )  # fmt: skip
        procs.append(daemon)
        wait_http(f"http://127.0.0.1:{daemon_port}/healthz", 60)
        # Its targets' scrapes start just before it listens: times count from here.
        listening = time.monotonic() - began
        began += listening
        cpu0, cpu_t0 = cpu_seconds(daemon.pid), time.monotonic()
        reads: list[dict[str, Any]] = []
        loads: list[list[float]] = []
        while time.monotonic() - began < seconds:
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited with {daemon.returncode}")
            asked = time.monotonic()
            read = _read(daemon_port)
            read["t"] = round(asked - began, 2)
            read["wall"] = time.time()
            reads.append(read)
            if len(reads) % max(1, round(30 / reads_every)) == 0:
                loads.append([round(x, 2) for x in os.getloadavg()])
            time.sleep(max(0.0, reads_every - (time.monotonic() - asked)))
        cpu = (cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - cpu_t0)
        log = (work / "daemon.log").read_text(errors="replace")
        return _report(
            reads,
            hung=hung,
            healthy=healthy,
            interval=parse_duration(interval),
            timeout=parse_duration(timeout),
            daemon_cpu=cpu,
            loads={
                "before": [round(x, 2) for x in load_before],
                "every_30_s": loads,
                "after": [round(x, 2) for x in os.getloadavg()],
            },
            stretch_logged=log.count('"scrape_intervals_stretched"'),
            listening=listening,
        )
    finally:
        for proc in reversed(procs):
            stop(proc, timeout=15)
        shutil.rmtree(work, ignore_errors=True)


def _wait_listening(port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


def _report(
    reads: list[dict[str, Any]],
    *,
    hung: int,
    healthy: int,
    interval: float,
    timeout: float,
    daemon_cpu: float,
    loads: dict[str, Any],
    stretch_logged: int,
    listening: float,
) -> dict[str, Any]:
    down_at: dict[str, float] = {}
    for read in reads:
        for name, value in read["up"].items():
            if name.startswith("x") and value == 0.0:
                down_at.setdefault(name, read["t"])
    stretches = [r["own"].get("specmon_scrape_interval_stretch", math.nan) for r in reads]
    stretch_max = max((s for s in stretches if math.isfinite(s)), default=1.0)
    # The runbook's bound (SpecmonOverloaded, "Excuses are bounded"), with the largest stretch
    # seen: a stretched interval, the first scrape's wait at the limit while all hang at once
    # (hung / limit timeouts), its timeout, and once excused one interval and one timeout.
    bound = interval * stretch_max + (1 + math.ceil(hung / LIMIT)) * timeout + interval + timeout
    late = [r for r in reads if r["t"] >= 60.0]
    achieved: dict[str, float] = {}
    stale: dict[str, float] = {}
    down_reads = 0
    if late:
        first, last = late[0], late[-1]
        span = last["t"] - first["t"]
        for i in range(healthy):
            name = f"h{i}"
            count = last["success"].get(name, 0.0) - first["success"].get(name, 0.0)
            achieved[name] = span / count if count > 0 else math.inf
            stale[name] = max(r["wall"] - r["last"].get(name, 0.0) for r in late)
        down_reads = sum(
            1 for r in late for n, v in r["up"].items() if n.startswith("h") and v == 0.0
        )
    worst_achieved = max(achieved.values(), default=math.nan)
    worst_stale = max(stale.values(), default=math.nan)
    down_times = sorted(down_at.values())
    return {
        "hung_targets": hung,
        "healthy_targets": healthy,
        "interval_s": interval,
        "timeout_s": timeout,
        "reads": len(reads),
        "daemon_listening_after_start_s": round(listening, 2),
        "seconds": reads[-1]["t"] if reads else 0.0,
        "hung_down_count": len(down_at),
        "hung_down_after_s": {
            "median": down_times[len(down_times) // 2] if down_times else None,
            "max": down_times[-1] if down_times else None,
        },
        "runbook_bound_s": round(bound, 1),
        "every_hung_down_within_bound": len(down_at) == hung
        and bool(down_times)
        and down_times[-1] <= bound,
        "healthy_after_first_minute": {
            "achieved_interval_worst_s": round(worst_achieved, 3),
            "achieved_interval_median_s": round(sorted(achieved.values())[len(achieved) // 2], 3)
            if achieved
            else None,
            "longest_without_a_read_s": round(worst_stale, 2),
            "within_1_5x": worst_achieved <= 1.5 * interval,
            "down_reads": down_reads,
        },
        "stretch": {"max": stretch_max, "last": stretches[-1] if stretches else None},
        "stretch_changes_logged": stretch_logged,
        "in_flight_limit_min": min(
            (r["own"].get("specmon_scrapes_in_flight_limit", math.inf) for r in reads),
            default=None,
        ),
        "busy_share": [r["own"].get("specmon_event_loop_busy_ratio") for r in reads][::5],
        "timeouts_excused": reads[-1]["own"].get("specmon_scrape_timeouts_excused_total")
        if reads
        else None,
        "deferred": reads[-1]["own"].get("specmon_scrapes_deferred_total") if reads else None,
        "daemon_cpu_share_of_one_core": round(daemon_cpu, 3),
        "load_average": loads,
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        parser = argparse.ArgumentParser(prog="python -m bench.hung serve")
        parser.add_argument("--listen", required=True)
        args = parser.parse_args(argv[1:])
        host, port = parse_listen_address(args.listen)
        asyncio.run(_serve(host or "127.0.0.1", port))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench starve --hung N")
    parser.add_argument("--hung", type=int, required=True)
    parser.add_argument("--healthy", type=int, default=100)
    parser.add_argument("--interval", default="1s")
    parser.add_argument("--timeout", default="1s")
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--reads-every", type=float, default=2.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if not 1 <= args.hung <= 20000 or not 1 <= args.healthy <= 2000:
        parser.error("--hung 1..20000, --healthy 1..2000")
    if not 61 <= args.seconds <= 3600 or not 0.5 <= args.reads_every <= 30:
        parser.error("--seconds 61..3600 (the first minute is left out), --reads-every 0.5..30")
    result = run(
        hung=args.hung,
        healthy=args.healthy,
        interval=args.interval,
        timeout=args.timeout,
        seconds=args.seconds,
        reads_every=args.reads_every,
    )
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
