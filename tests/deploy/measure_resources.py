"""Measure specmon's memory and CPU against N simulated targets (the figures behind the
Kubernetes requests and limits in deploy/kubernetes/ and the table in deploy/README.md).

    python -m tests.deploy.measure_resources --targets 50 --duration 1200

Starts ``specmon simulate --targets N --shared-port`` (vLLM pages, k = 3, 20 drafts/s each)
and ``specmon run`` scraping every target every 5 s with the default windows (1m, 5m, 15m),
scrapes specmon's own /metrics every 15 s as Prometheus would, and reports specmon's resident
memory (``process_resident_memory_bytes`` and /proc's VmHWM peak) and CPU
(``process_cpu_seconds_total`` rate). The 15m window holds its full history only after 15
minutes, so steady-state memory needs ``--duration`` of at least 1000 s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["Measurement", "measure"]

_SAMPLE = re.compile(r"^(process_resident_memory_bytes|process_cpu_seconds_total) (\S+)$", re.M)


@dataclass
class Measurement:
    targets: int
    seconds: float
    rss_mib_last: float
    rss_mib_peak: float
    cpu_cores_avg: float
    cpu_cores_last_5m: float
    metrics_bytes: int
    series_ok: bool


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # loopback only
        return str(response.read().decode())


def _vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def _process(args: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def measure(
    targets: int,
    duration: float,
    *,
    specmon: list[str] | None = None,
    workdir: Path | None = None,
    progress: bool = False,
) -> Measurement:
    """Run the daemon against ``targets`` simulated engines for ``duration`` seconds."""
    cmd = specmon or [sys.executable, "-m", "specmon"]
    work = workdir or Path(tempfile.mkdtemp(prefix="specmon-measure-"))
    sim_port, own_port = _free_port(), _free_port()
    config = work / "specmon.yml"
    lines = ["targets:"]
    for index in range(targets):
        lines += [
            f"  - name: vllm-{index}",
            f"    url: http://127.0.0.1:{sim_port}/t/vllm-{index}/metrics",
        ]
    config.write_text("\n".join(lines) + "\n")
    sim_args = [
        *cmd,
        "simulate",
        "--engine",
        "vllm",
        "--targets",
        str(targets),
        "--shared-port",
        "--listen",
        f"127.0.0.1:{sim_port}",
        "--survival",
        "0.9,0.7,0.5",
        "--seed",
        "1",
    ]
    run_args = [
        *cmd,
        "run",
        "--config.file",
        str(config),
        "--web.listen-address",
        f"127.0.0.1:{own_port}",
        "--log.format",
        "json",
        "--log.level",
        "warning",
    ]
    base = f"http://127.0.0.1:{own_port}"
    with (
        _process(sim_args, work / "simulate.log"),
        _process(run_args, work / "specmon.log") as daemon,
    ):
        deadline = time.monotonic() + 30
        while True:
            try:
                if _get(base + "/readyz").startswith("ready"):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or daemon.poll() is not None:
                raise RuntimeError(
                    "specmon did not become ready:\n" + (work / "specmon.log").read_text()
                )
            time.sleep(0.2)
        started = time.monotonic()
        history: list[tuple[float, float, float]] = []  # (t, rss bytes, cpu seconds)
        body = ""
        while True:
            body = _get(base + "/metrics")
            values = dict(_SAMPLE.findall(body))
            now = time.monotonic() - started
            history.append(
                (
                    now,
                    float(values["process_resident_memory_bytes"]),
                    float(values["process_cpu_seconds_total"]),
                )
            )
            if progress:
                print(
                    f"t={now:6.0f}s rss={history[-1][1] / 2**20:6.1f} MiB "
                    f"cpu={history[-1][2]:7.2f}s",
                    file=sys.stderr,
                    flush=True,
                )
            if now >= duration:
                break
            time.sleep(min(15.0, max(0.5, duration - now)))
        peak = _vm_hwm_mib(daemon.pid)
        series_ok = all(f'target="vllm-{i}"' in body for i in (0, targets - 1)) and (
            "specmon_alpha_ratio{" in body
        )
    t0, _, c0 = history[0]
    t1, rss1, c1 = history[-1]
    recent = [h for h in history if h[0] >= t1 - 300] or history
    tr, _, cr = recent[0]
    return Measurement(
        targets=targets,
        seconds=round(t1 - t0, 1),
        rss_mib_last=round(rss1 / 2**20, 1),
        rss_mib_peak=round(peak, 1),
        cpu_cores_avg=round((c1 - c0) / max(t1 - t0, 1e-9), 4),
        cpu_cores_last_5m=round((c1 - cr) / max(t1 - tr, 1e-9), 4),
        metrics_bytes=len(body.encode()),
        series_ok=series_ok,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[4, 50])
    parser.add_argument("--duration", type=float, default=1200.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    results = []
    for n in args.targets:
        result = measure(n, args.duration, progress=True)
        print(json.dumps(asdict(result)), flush=True)
        results.append(result)
    return 0 if all(r.series_ok for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
