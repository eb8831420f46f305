"""Starvation benchmark: a hung target must go down even while specmon itself is starved.

Run: python -m bench starve [--healthy 20] [--stop 0.7] [--cycles 3] [--hang 45] [--recover 30]
                            [--json-out FILE]
     python -m bench starve --hung N ...: many targets that never answer beside healthy ones,
                            no starvation (bench/hung.py)

Issue 53's case, with real signals. The daemon scrapes ``--healthy`` simulated vLLM engines
(``bench.light_fleet``) and one more target, every 2 s with ``scrape_timeout: 1500ms``. The
extra target is served from this process: a vLLM page while it is well, and, while it hangs,
a server that accepts the connection, reads the request and never answers. From the moment
the daemon is ready, this process stops it ``--stop`` seconds in every second (SIGSTOP, then
SIGCONT) until the end. After a starved warm-up the target hangs for ``--hang`` seconds and
is well for ``--recover``, ``--cycles`` times. Every second the daemon's ``/metrics`` is read
(as Prometheus would: whenever the daemon runs; a read waits out a stop) and the report gives,
per hang: the seconds from the hang to the first read showing the target's ``specmon_up`` 0,
and from its recovery to 1; every healthy target ever read with ``specmon_up`` 0; the timeouts
excused, the stretch, the daemon's CPU and the machine's load averages (a shared machine: other
work shifts the figures).

Bounded: every wait has a deadline, the daemon is always sent SIGCONT before it is stopped,
and every process is stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.cost import stop
from bench.scale import cpu_seconds, free_port, wait_http

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "pages" / "vllm-load-spec-c1-after.txt").read_bytes()
#: The target that hangs.
HUNG = "hung"


class _Hangable:
    """An engine page on a loopback port, served from a thread of this process; while
    :attr:`hung` is set it accepts, reads the request and never answers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.hung = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._ready = threading.Event()
        self._server: asyncio.Server | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    return
                if self.hung.is_set():
                    await asyncio.sleep(3600)  # accepted, never answered
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    + f"Content-Length: {len(PAGE)}\r\n\r\n".encode()
                    + PAGE
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            return
        finally:
            writer.close()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("hangable server did not start")

    def close(self) -> None:
        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()
            self._loop.call_soon(self._loop.stop)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(shut(), self._loop)
            self._thread.join(timeout=5)


class _Starver(threading.Thread):
    """Stops ``pid`` ``stop`` seconds in every second until :meth:`halt`; always leaves it
    running."""

    def __init__(self, pid: int, stop: float) -> None:
        super().__init__(daemon=True)
        self._pid = pid
        self._stop_s = stop
        self._halt = threading.Event()
        self.cycles = 0

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                os.kill(self._pid, signal.SIGSTOP)
                self._halt.wait(self._stop_s)
                os.kill(self._pid, signal.SIGCONT)
                self.cycles += 1
                self._halt.wait(1.0 - self._stop_s)
        except ProcessLookupError:
            return
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGCONT)

    def halt(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def _read(port: int) -> dict[str, Any]:
    """``specmon_up`` per target and a few of the daemon's own figures, from ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        body = response.read().decode()
    up: dict[str, float] = {}
    own: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("specmon_up{"):
            labels, value = line.rsplit(" ", 1)
            name = labels.split('target="', 1)[1].split('"', 1)[0]
            up[name] = float(value)
        elif line.startswith(
            (
                "specmon_scrape_timeouts_excused_total ",
                "specmon_scrape_interval_stretch ",
                "specmon_scrape_delay_seconds ",
            )
        ):
            name, value = line.rsplit(" ", 1)
            own[name] = float(value)
    return {"up": up, **own}


def run(
    *, healthy: int, stop_s: float, cycles: int, hang_s: float, recover_s: float, warmup: float
) -> dict[str, Any]:
    sim_port, daemon_port, hang_port = free_port(), free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="specmon-starve-"))
    procs: list[subprocess.Popen[bytes]] = []
    hangable = _Hangable(hang_port)
    starver: _Starver | None = None
    try:
        load_before = os.getloadavg()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.light_fleet", "--targets", str(healthy),
                 "--listen", f"127.0.0.1:{sim_port}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        wait_http(f"http://127.0.0.1:{sim_port}/stats", 30)
        hangable.start()
        lines = ["global:", "  scrape_interval: 2s", "  scrape_timeout: 1500ms", "targets:"]
        for i in range(healthy):
            lines += [f"  - name: h{i}", f"    url: http://127.0.0.1:{sim_port}/t/vllm-{i}/metrics"]
        lines += [f"  - name: {HUNG}", f"    url: http://127.0.0.1:{hang_port}/metrics"]
        (work / "config.yaml").write_text("\n".join(lines) + "\n")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(work / "config.yaml"),
             "--web.listen-address", f"127.0.0.1:{daemon_port}", "--log.level", "info"],
            stdout=subprocess.DEVNULL, stderr=open(work / "daemon.log", "wb"),  # noqa: SIM115
        )  # fmt: skip
        procs.append(daemon)
        wait_http(f"http://127.0.0.1:{daemon_port}/readyz", 60)
        starver = _Starver(daemon.pid, stop_s)
        began = time.monotonic()
        cpu0 = cpu_seconds(daemon.pid)
        starver.start()
        reads: list[dict[str, Any]] = []
        # The schedule: warm-up, then (hang, recover) x cycles, seconds after ``began``.
        events: list[tuple[float, str]] = []
        at = warmup
        for _ in range(cycles):
            events += [(at, "hang"), (at + hang_s, "recover")]
            at += hang_s + recover_s
        end = at
        done: list[tuple[float, str]] = []
        loads: list[list[float]] = []
        while (now := time.monotonic() - began) < end:
            while events and events[0][0] <= now:
                _, what = events.pop(0)
                (hangable.hung.set if what == "hang" else hangable.hung.clear)()
                done.append((round(time.monotonic() - began, 2), what))
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited with {daemon.returncode}")
            asked = time.monotonic()
            read = _read(daemon_port)
            read["t"] = round(asked - began, 2)
            read["answered_s"] = round(time.monotonic() - asked, 2)
            reads.append(read)
            if len(reads) % 30 == 0:
                loads.append([round(x, 2) for x in os.getloadavg()])
            time.sleep(max(0.0, 1.0 - (time.monotonic() - asked)))
        cpu = (cpu_seconds(daemon.pid) - cpu0) / (time.monotonic() - began)
        starver.halt()
        return _report(
            reads,
            done,
            healthy=healthy,
            stop_s=stop_s,
            starved_cycles=starver.cycles,
            daemon_cpu=cpu,
            loads={
                "before": [round(x, 2) for x in load_before],
                "every_30_reads": loads,
                "after": [round(x, 2) for x in os.getloadavg()],
            },
        )
    finally:
        if starver is not None:
            starver.halt()
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            stop(proc, timeout=15)
        hangable.close()
        shutil.rmtree(work, ignore_errors=True)


def _report(
    reads: list[dict[str, Any]],
    events: list[tuple[float, str]],
    *,
    healthy: int,
    stop_s: float,
    starved_cycles: int,
    daemon_cpu: float,
    loads: dict[str, Any],
) -> dict[str, Any]:
    hangs: list[dict[str, Any]] = []
    for index, (at, what) in enumerate(events):
        if what != "hang":
            continue
        until = events[index + 1][0] if index + 1 < len(events) else float("inf")
        down = next(
            (r["t"] for r in reads if at <= r["t"] < until and r["up"].get(HUNG) == 0.0), None
        )
        back = next((r["t"] for r in reads if r["t"] >= until and r["up"].get(HUNG) == 1.0), None)
        hangs.append(
            {
                "hung_at_s": at,
                "down_after_s": None if down is None else round(down - at, 2),
                "hang_lasted_s": None if until == float("inf") else round(until - at, 2),
                "up_again_after_recovery_s": None if back is None else round(back - until, 2),
            }
        )
    healthy_down = sorted(
        {name for r in reads for name, v in r["up"].items() if v == 0.0 and name != HUNG}
    )
    stretch = [r.get("specmon_scrape_interval_stretch", float("nan")) for r in reads]
    answered = sorted(r["answered_s"] for r in reads)
    return {
        "healthy_targets": healthy,
        "stopped_s_in_every_second": stop_s,
        "stop_cycles_sent": starved_cycles,
        "reads": len(reads),
        "hangs": hangs,
        "healthy_targets_ever_down": healthy_down,
        "healthy_down_reads": sum(
            1 for r in reads for n, v in r["up"].items() if v == 0.0 and n != HUNG
        ),
        "timeouts_excused": reads[-1].get("specmon_scrape_timeouts_excused_total")
        if reads
        else None,
        "stretch": {
            "min": min(stretch, default=None),
            "max": max(stretch, default=None),
            "last": stretch[-1] if stretch else None,
        },
        "metrics_answer_s": {
            "median": answered[len(answered) // 2] if answered else None,
            "max": answered[-1] if answered else None,
        },
        "daemon_cpu_share_of_one_core": round(daemon_cpu, 3),
        "load_average": loads,
    }


def main(argv: list[str]) -> int:
    if any(arg == "--hung" or arg.startswith("--hung=") for arg in argv):
        from bench import hung  # many hung targets beside healthy ones (issue 67)

        return hung.main(argv)
    parser = argparse.ArgumentParser(prog="python -m bench starve")
    parser.add_argument("--healthy", type=int, default=20)
    parser.add_argument("--stop", type=float, default=0.7, help="seconds stopped in each second")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--hang", type=float, default=45.0)
    parser.add_argument("--recover", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=30.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(argv)
    if not 0 < args.stop < 1 or not 1 <= args.cycles <= 10 or not 1 <= args.healthy <= 2000:
        parser.error("--stop in (0, 1), --cycles 1..10, --healthy 1..2000")
    result = run(
        healthy=args.healthy,
        stop_s=args.stop,
        cycles=args.cycles,
        hang_s=args.hang,
        recover_s=args.recover,
        warmup=args.warmup,
    )
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.json_out is not None:
        args.json_out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
