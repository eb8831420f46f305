"""The whole suite as ``./dev.sh test`` runs it: three pytest processes side by side.

- ``engines``: the real-engine tier, one test after another (two would take each other's
  cores, and several share a session's servers): the longest part, mostly waiting on the
  engines' decoding;
- ``services``: the tests that run Prometheus, Alertmanager, Chromium and the deployment
  tools, mostly waiting on them (rule evaluation, scrapes, page loads);
- ``fast``: the fast tier, in-process and CPU-bound.

Why processes and not pytest-xdist's workers: xdist's ``loadgroup`` cannot keep the real
engines on one worker with pytest 9.2 (its group suffix on node ids no longer takes), and
what is to run side by side is exactly these three kinds. Side by side the suite takes about
as long as its longest part. Each process has its own ``--basetemp`` under ``.tmp/``, and
every line it prints is prefixed with its tier, so the log stays readable.

Then, once all three have ended, ``alone``: the tests marked ``alone`` (a real server compared
with its own past minutes earlier, tests/realengines/test_history_daemon.py), with the machine
to themselves. Side by side with the other tiers the machine's speed moves between their
phases by as much as what they measure (one CI run: +20.7 % at concurrency 4 with the load
average near 5, where every quiet run was within 5.6 %).

``--fast``: the fast tier alone, in two processes (``./dev.sh test-fast``).

Exit status: 0 when every process passes, else the first non-zero status in the order above.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FAST = "not realengine and not prometheus and not browser and not deploytools"
#: (prefix, pytest arguments) of each process of the whole suite.
TIERS = (
    ("engines", ["-m", "realengine and not alone"]),
    ("services", ["-m", "not realengine and (prometheus or browser or deploytools)"]),
    ("fast", ["-m", FAST]),
)
#: Run after the side-by-side tiers, one after another, each with the machine to itself.
SERIAL = (("alone", ["-m", "alone"]),)
#: The fast tier alone (``--fast``, ``./dev.sh test-fast``) in two halves: the daemon and web
#: tests (in-process daemons and a few subprocess ones) and everything else.
_HEAVY = ("tests/daemon", "tests/web")
FAST_TIERS = (
    ("fast-daemon", ["-m", FAST, *_HEAVY]),
    ("fast-rest", ["-m", FAST, *(f"--ignore={path}" for path in _HEAVY)]),
)


def _stream(process: subprocess.Popen[bytes], prefix: str, lock: threading.Lock) -> None:
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            print(f"[{prefix}] {line}", flush=True)


def _start(
    prefix: str, args: list[str], argv: list[str], lock: threading.Lock
) -> tuple[str, subprocess.Popen[bytes], threading.Thread]:
    basetemp = ROOT / ".tmp" / f"pytest-{prefix}"
    basetemp.parent.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "pytest", f"--basetemp={basetemp}", *args, *argv]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    thread = threading.Thread(target=_stream, args=(process, prefix, lock), daemon=True)
    thread.start()
    return prefix, process, thread


def _wait(running: list[tuple[str, subprocess.Popen[bytes], threading.Thread]]) -> list[int]:
    statuses: list[int] = []
    try:
        for _, process, thread in running:
            statuses.append(process.wait())
            thread.join()
    except KeyboardInterrupt:
        for _, process, _ in running:
            process.terminate()
        raise
    return statuses


def main(argv: list[str]) -> int:
    tiers: tuple[tuple[str, list[str]], ...] = TIERS
    serial: tuple[tuple[str, list[str]], ...] = SERIAL
    if argv[:1] == ["--fast"]:
        tiers, serial, argv = FAST_TIERS, (), argv[1:]
    started = time.monotonic()
    lock = threading.Lock()
    running = [_start(prefix, args, argv, lock) for prefix, args in tiers]
    statuses = list(zip([p for p, _, _ in running], _wait(running), strict=True))
    elapsed = time.monotonic() - started
    summary = ", ".join(f"{prefix} exit {status}" for prefix, status in statuses)
    print(f"==> suite: {summary}; {elapsed:.0f} s side by side", flush=True)
    for prefix, args in serial:
        began = time.monotonic()
        (status,) = _wait([_start(prefix, args, argv, lock)])
        statuses.append((prefix, status))
        print(f"==> {prefix}: exit {status}; {time.monotonic() - began:.0f} s", flush=True)
    return next((status for _, status in statuses if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
