"""The whole suite as ``./dev.sh test`` runs it: the real-engine tier and every other test in
two pytest processes side by side.

Why two processes and not pytest-xdist's workers: the real-engine tests must run one after
another (two would take each other's cores, and several share a session's servers), and they
are about half of the suite's time, mostly waiting on the engines; the rest waits on
Prometheus, browsers and subprocesses as much as it computes. Side by side the two halves take
about as long as the longer one. Each process has its own ``--basetemp`` under ``.tmp/``, and
every line it prints is prefixed with its tier, so the log stays readable.

Exit status: 0 when both pass, else the first non-zero status (engines first).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (prefix, pytest arguments) of each process.
TIERS = (
    ("engines", ["-m", "realengine"]),
    ("rest", ["-m", "not realengine"]),
)


def _stream(process: subprocess.Popen[bytes], prefix: str, lock: threading.Lock) -> None:
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            print(f"[{prefix}] {line}", flush=True)


def main(argv: list[str]) -> int:
    started = time.monotonic()
    lock = threading.Lock()
    running: list[tuple[str, subprocess.Popen[bytes], threading.Thread]] = []
    for prefix, args in TIERS:
        basetemp = ROOT / ".tmp" / f"pytest-{prefix}"
        basetemp.parent.mkdir(exist_ok=True)
        command = [sys.executable, "-m", "pytest", f"--basetemp={basetemp}", *args, *argv]
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        thread = threading.Thread(target=_stream, args=(process, prefix, lock), daemon=True)
        thread.start()
        running.append((prefix, process, thread))
    statuses: list[tuple[str, int]] = []
    try:
        for prefix, process, thread in running:
            statuses.append((prefix, process.wait()))
            thread.join()
    except KeyboardInterrupt:
        for _, process, _ in running:
            process.terminate()
        raise
    elapsed = time.monotonic() - started
    summary = ", ".join(f"{prefix} exit {status}" for prefix, status in statuses)
    print(f"==> suite: {summary}; {elapsed:.0f} s side by side", flush=True)
    return next((status for _, status in statuses if status != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
