"""Cost benchmark: what serving /metrics, the status page and scraping cost at fleet
size, for one or more source trees in the same run, so a change is measured as a ratio.

Run: ./dev.sh bench cost [--rev REV ...] [--targets 200,1000,5000] [--windows 1m,5m]
     [--measure-seconds 60] [--fetches 10] [--fetch-budget 180] [--max-seconds 900]

``--rev`` (repeatable) names what to measure: a git revision (``HEAD~3``, ``main``, a commit),
checked out with ``git worktree add --detach`` into a temporary directory removed at the end,
or ``worktree`` (also ``.``) for this checkout as it is on disk. Default: the working tree only.
Each daemon runs as ``python -m specmon run`` with ``PYTHONPATH`` and the working directory set
to its tree, in this virtualenv (the dependencies are the same). The first ``--rev`` is the
baseline: every figure of the others is also given as a ratio to it.

For each size N, one fleet of N simulated vLLM engines is started (``bench/light_fleet.py``: the
simulator's pages, real vLLM 0.32.0 format, about 56 KB, k = 3, 20 drafts/s; ``--sim specmon``
uses ``specmon simulate --shared-port`` instead) and kept for every revision of that size; the
revisions run one after the other, in the given order for the first size, reversed for the
second, and so on (ABBA), so drift in the machine's load hits both sides alike. For each
(revision, size) run:

1. the daemon starts with every target, a scrape interval of ``--interval`` (5 s), windows
   ``--windows`` (default 1m,5m; the issue's figures were for 1m,5m,15m: pass
   ``--windows 1m,5m,15m`` and expect every run to last 15 minutes more);
2. nothing is asked of it (but /readyz) until the longest window is full: ready + the longest
   window + one interval;
3. quiet measured period (``--measure-seconds``): daemon CPU from /proc/PID/stat, scrapes from
   its own ``specmon_scrapes_total`` (read from /metrics at both ends), hence CPU per target
   scrape and CPU as % of one core; VmRSS and VmHWM at both ends; the simulator's CPU; per
   target, successes in the period and the time since its last success at the end (lag);
4. fetch phase: ``--fetches`` rounds of /metrics (plain, ``Accept-Encoding: gzip``, ``Accept:
   application/openmetrics-text``), ``/``, ``/api/v1/targets`` and one page of it
   (``?per_page=200``), one after another with ``--fetch-gap`` seconds between them, while
   the daemon keeps scraping; size on the wire, time to the last byte and the daemon's CPU
   during each fetch; median and max. Bounded by ``--fetch-budget`` seconds (fewer rounds
   are reported as such);
5. the daemon is stopped (SIGTERM) and its memory at the end recorded.

What some figures mean:

- daemon CPU per target scrape: the daemon's CPU seconds (utime + stime, every thread) over the
  quiet period divided by the scrapes its ``specmon_scrapes_total`` counted in it (every
  result; the table also gives it per successful scrape, since timeouts are cheap);
- run-queue wait: how long the daemon's threads were ready to run but waiting for a core
  (/proc/PID/task/*/schedstat), as a share of the period: high means other work on the machine
  starved it, and its wall-clock figures (fetch times, lag) say more about the machine than
  about the code; the whole machine's busy and stolen share is given too;
- lag: per target, the time since its last success when the closing /metrics page was
  rendered (taken as the later of the request's time and the newest success on the page).
  With every target on time lags spread evenly over one interval (p50 about half of it, the
  worst about one interval); the healthiest target is the one with the most successes in the
  period (then the smallest lag), and "successes / allowed" compares those with the period
  divided by the interval;
- the simulator's CPU (every simulator process, and the busiest one): a busiest process near
  100 % of a core would mean the simulator, not the daemon, set the pace.

The load-aware figures: ``--twins`` makes every odd target of the fleet a twin of the
target before it without speculation (same traffic, no draft), and a revision given as
``REV+baseline`` (``worktree+baseline``) runs with every speculating target configured with
``baseline:`` its twin, so one run can compare the daemon without load figures, with its load
figures and with the bucket-by-bucket comparison against a twin:
``--twins --rev 90ac6ae~1 --rev worktree --rev worktree+baseline``. ``REV+noload`` (also
after ``+baseline``) runs the same tree without its load processing (``load_counters``
replaced by a function returning None, as ``bench load``'s "load off"), so the load signals'
share of the daemon's CPU per scrape is measured on one tree:
``--twins --rev worktree+noload --rev worktree --rev worktree+baseline``.

``REV+filter`` (combinable with the others) sets ``name_filter: true`` and scrapes every target
at ``/metrics/``, which the light fleet serves as vLLM does (``?name[]=`` honoured there):
``--rev worktree --rev worktree+filter``.

Time: with the defaults (1m,5m) a run lasts the longest window + about 2 minutes (startup,
60 s quiet period, 1 to 3 minutes of fetches); 200,1000,5000 targets with two revisions is
about 45 minutes (printed up front), with 1m,5m,15m about 1 h 45 min.

A run never lasts more than ``--max-seconds``; if the window could not fill in it, the figures
are still taken and ``windows_full`` is false. Output: one JSON line per (revision, size) on
stdout (and ``--json-out FILE``), then markdown tables ready for bench/RESULTS.md
(``--markdown-out FILE``). Every process started here stops at the end, on Ctrl-C or SIGTERM,
and if this process dies (parent-death signal).
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from specmon.config_values import format_duration, parse_duration

TICKS = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[1]
WORKTREE = ("worktree", ".")
#: A revision spec ending in this runs with every speculating target's ``baseline:`` set.
BASELINE = "+baseline"
#: A revision spec ending in this runs the daemon without its load processing
#: ("load off"): ``specmon.daemon.target.load_counters`` replaced by a function returning None
#: before ``specmon run`` starts, so no reading yields load counters (no load history, no load
#: figures; the adapters still read the series), exactly as ``bench load``'s "load off".
NOLOAD = "+noload"
#: A revision spec ending in this asks every target for only the series specmon reads
#: (``global.name_filter: true``, the targets at ``/metrics/``, which honours ``name[]`` as
#: vLLM's does).
NAME_FILTER = "+filter"
NOLOAD_MAIN = (
    "import runpy, specmon.daemon.target as t; t.load_counters = lambda *a, **k: None; "
    "runpy.run_module('specmon', run_name='__main__', alter_sys=True)"
)
#: fleet.py serves about 2,600 pages/s on a whole core here; keep each process well below.
TARGETS_PER_SIM_PROCESS = 2500


# -- processes and /proc ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def schedstat(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds waiting on a run queue) of the process's live threads, from
    /proc/PID/task/*/schedstat (nanoseconds). The first is for short intervals, where the
    clock ticks of /proc/PID/stat (10 ms) are too coarse; the second says how long the process
    was ready to run but not running: starved by other work on the machine."""
    on_cpu = waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
            on_cpu, waiting = on_cpu + int(fields[0]), waiting + int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return on_cpu / 1e9, waiting / 1e9


def thread_cpu_seconds(pid: int) -> float:
    return schedstat(pid)[0]


def status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return math.nan


def machine_ticks() -> list[int]:
    """The 'cpu' line of /proc/stat: user nice system idle iowait irq softirq steal ..."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def machine_busy(before: list[int], after: list[int]) -> dict[str, float]:
    """Share of the whole machine (every core) busy and stolen between two readings."""
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8]) or 1
    idle = delta[3] + delta[4]
    return {
        "busy_percent": round(100 * (total - idle) / total, 1),
        "steal_percent": round(100 * delta[7] / total, 1) if len(delta) > 7 else 0.0,
    }


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the benchmark process dies, however it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def start(cmd: list[str], *, cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as err:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # Ctrl-C reaches this process only; it stops the rest
            preexec_fn=_die_with_parent,  # only prctl in the child
        )


def stop(proc: subprocess.Popen[bytes] | None, timeout: float = 15.0) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode


@contextmanager
def stopping(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    try:
        yield proc
    finally:
        stop(proc)


def http_get(url: str, *, headers: dict[str, str] | None = None, timeout: float = 60.0) -> Fetch:
    """One GET on a new connection. Times: to the response head and to the last byte."""
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
        head = time.perf_counter()
        body = response.read()
        done = time.perf_counter()
        return Fetch(
            status=response.status,
            body=body,
            content_type=response.headers.get("Content-Type", ""),
            content_encoding=response.headers.get("Content-Encoding", ""),
            started=started,
            head=head,
            done=done,
        )


@dataclass(frozen=True)
class Fetch:
    status: int
    body: bytes
    content_type: str
    content_encoding: str
    started: float
    head: float
    done: float

    @property
    def seconds(self) -> float:
        return self.done - self.started


def wait_http(url: str, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> float:
    """Poll until 200; returns the time it answered. Raises if the deadline passes or the
    process exits."""
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            if http_get(url, timeout=5).status == 200:
                return time.monotonic()
        except (OSError, urllib.error.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(url)
        time.sleep(0.5)


# -- revisions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rev:
    spec: str  # as given on the command line
    tree: Path
    commit: str
    subject: str
    dirty: bool  # the working tree only: uncommitted changes
    #: ``REV+baseline``: every speculating target gets ``baseline:`` its twin (``--twins``).
    baseline: bool = False
    #: ``REV+noload``: the daemon without its load processing (:data:`NOLOAD`).
    noload: bool = False
    #: ``REV+filter``: ``name_filter`` on every target (:data:`NAME_FILTER`).
    name_filter: bool = False

    @property
    def label(self) -> str:
        return _label({"rev": self.spec, "commit": self.commit, "dirty": self.dirty})


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def daemon_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree)
    env.pop("PYTHONSTARTUP", None)
    return env


def daemon_command(rev: Rev, config: Path, port: int) -> list[str]:
    """``specmon run`` of ``rev`` (without its load processing for ``REV+noload``)."""
    main = ["-c", NOLOAD_MAIN] if rev.noload else ["-m", "specmon"]
    return [sys.executable, *main, "run", "--config.file", str(config),
            "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warning"]  # fmt: skip


def prepare_rev(given: str, stack: ExitStack) -> Rev:
    spec, found = given, set[str]()
    while suffix := next((x for x in (NOLOAD, BASELINE, NAME_FILTER) if spec.endswith(x)), ""):
        spec, found = spec.removesuffix(suffix), found | {suffix}
    noload, baseline, name_filter = NOLOAD in found, BASELINE in found, NAME_FILTER in found
    if spec in WORKTREE:
        tree = ROOT
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    else:
        commit = git("rev-parse", "--verify", f"{spec}^{{commit}}")
        tree = Path(tempfile.mkdtemp(prefix="specmon-cost-rev-"))
        git("worktree", "add", "--detach", str(tree), commit)
        stack.callback(_remove_worktree, tree)
        dirty = False
    subject = git("log", "-1", "--format=%s", commit)[:100]
    # The daemon must import specmon from this tree, not from the virtualenv's install.
    where = subprocess.run(
        [sys.executable, "-c", "import specmon; print(specmon.__file__)"],
        cwd=tree,
        env=daemon_env(tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"{spec}: specmon imported from {where}, not from {tree}")
    return Rev(
        spec=given,
        tree=tree,
        commit=commit,
        subject=subject,
        dirty=dirty,
        baseline=baseline,
        noload=noload,
        name_filter=name_filter,
    )


def _remove_worktree(tree: Path) -> None:
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
        check=False,
        capture_output=True,
    )
    subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], check=False, capture_output=True)


# -- the fleet -----------------------------------------------------------------------------


@dataclass
class Fleet:
    procs: list[subprocess.Popen[bytes]]
    urls: list[str]  # one per target, in order
    kind: str
    started_seconds: float

    def cpu(self) -> list[float]:
        return [cpu_seconds(p.pid) for p in self.procs]

    def check(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"simulator process {p.pid} exited with {p.returncode}")


def start_fleet(
    n: int,
    *,
    kind: str,
    procs: int,
    work: Path,
    stack: ExitStack,
    deadline: float,
    twins: bool = False,
) -> Fleet:
    began = time.monotonic()
    per = math.ceil(n / procs)
    started: list[subprocess.Popen[bytes]] = []
    ports: list[tuple[int, int, int]] = []  # (port, first, count)
    for index in range(procs):
        first, count = index * per, min(per, n - index * per)
        if count <= 0:
            break
        port = free_port()
        if kind == "fleet":
            cmd = [sys.executable, "-m", "bench.light_fleet", "--targets", str(count),
                   "--first", str(first), "--listen", f"127.0.0.1:{port}", "--seed", "1",
                   *(["--twins"] if twins else [])]  # fmt: skip
        else:
            cmd = [sys.executable, "-m", "specmon", "simulate", "--engine", "vllm",
                   "--targets", str(count), "--shared-port", "--listen", f"127.0.0.1:{port}",
                   "--drafts-per-second", "20"]  # fmt: skip
        proc = start(cmd, cwd=ROOT, env=daemon_env(ROOT), log=work / f"sim-{index}.log")
        stack.enter_context(stopping(proc))
        started.append(proc)
        ports.append((port, first, count))
    for proc, (port, _, _) in zip(started, ports, strict=True):
        wait_http(f"http://127.0.0.1:{port}/targets", deadline, proc)
    urls = []
    for port, first, count in ports:
        for i in range(count):
            # fleet.py names targets by their index in the whole fleet; specmon simulate
            # numbers each process's targets from 0.
            name = f"vllm-{first + i}" if kind == "fleet" else f"vllm-{i}"
            urls.append(f"http://127.0.0.1:{port}/t/{name}/metrics")
    return Fleet(procs=started, urls=urls, kind=kind, started_seconds=time.monotonic() - began)


def write_config(
    path: Path,
    urls: list[str],
    *,
    interval: str,
    timeout: str,
    windows: str,
    baseline: bool = False,
    name_filter: bool = False,
) -> None:
    """``baseline``: target i (even) takes target i + 1 (its twin, ``--twins``) as baseline.
    ``name_filter``: every target asked for only what specmon reads, at ``/metrics/``."""
    lines = [
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {timeout}",
        f"  windows: [{', '.join(windows.split(','))}]",
        *(["  name_filter: true"] if name_filter else []),
        "targets:",
    ]
    for i, url in enumerate(urls):
        lines += [f"  - name: t{i}", f"    url: {url}{'/' if name_filter else ''}"]
        if baseline and i % 2 == 0 and i + 1 < len(urls):
            lines.append(f"    baseline: t{i + 1}")
    path.write_text("\n".join(lines) + "\n")


#: What Prometheus 2.42 sends when it scrapes (it also asks for gzip).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@contextmanager
def fetching(ports: list[int], every: float | None) -> Iterator[list[int]]:
    """While the block runs, GET each daemon's ``/metrics`` every ``every`` seconds (None:
    never) as a Prometheus scraping it would (its Accept header, gzip), so the daemons'
    CPU includes serving their own page in the state they run in (deployed, Prometheus
    scrapes specmon every 15 s: deploy/prometheus/prometheus.example.yml). Yields the
    count of fetches made per daemon; a failed fetch is counted as -1 there (the caller
    may report it). Daemon threads: bounded by the block, each GET by a 60 s timeout."""
    counts = [0] * len(ports)
    stop = threading.Event()

    def loop(index: int, port: int) -> None:
        url = f"http://127.0.0.1:{port}/metrics"
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        while every is not None and not stop.wait(every):
            try:
                http_get(url, headers=headers)
                counts[index] += 1
            except OSError:
                counts[index] -= 1

    threads = [
        threading.Thread(target=loop, args=(i, port), daemon=True) for i, port in enumerate(ports)
    ]
    for thread in threads:
        thread.start()
    try:
        yield counts
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=65)


# -- reading the daemon's own counters -------------------------------------------------------

_LABEL = re.compile(rb'(\w+)="((?:[^"\\]|\\.)*)"')


def _labels(line: bytes) -> dict[bytes, bytes]:
    return dict(_LABEL.findall(line[line.index(b"{") : line.rindex(b"}") + 1]))


@dataclass
class Counters:
    """What a plain /metrics page says about scraping, per target."""

    successes: dict[str, float] = field(default_factory=dict)
    scrapes: dict[str, float] = field(default_factory=dict)  # every result
    last_success: dict[str, float] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    by_result: dict[str, float] = field(default_factory=dict)  # summed over targets
    series: int = 0
    #: specmon_event_loop_lag_seconds's buckets (le -> cumulative count), its _count and
    #: _sum; specmon_gc_pause_seconds's _count and _sum by generation (absent from older revisions).
    loop_lag_buckets: dict[str, float] = field(default_factory=dict)
    loop_lag_count: float = 0.0
    loop_lag_sum: float = 0.0
    gc_pause_count: dict[str, float] = field(default_factory=dict)
    gc_pause_sum: dict[str, float] = field(default_factory=dict)


def read_counters(body: bytes) -> Counters:
    out = Counters()
    for line in body.split(b"\n"):
        if not line or line.startswith(b"#"):
            continue
        out.series += 1
        if line.startswith(b"specmon_scrapes_total{"):
            labels = _labels(line)
            target = labels.get(b"target", b"").decode()
            value = float(line.rsplit(b" ", 1)[1])
            out.scrapes[target] = out.scrapes.get(target, 0.0) + value
            result = labels.get(b"result", b"").decode()
            out.by_result[result] = out.by_result.get(result, 0.0) + value
            if result == "success":
                out.successes[target] = value
        elif line.startswith(b"specmon_last_success_timestamp_seconds{"):
            target = _labels(line).get(b"target", b"").decode()
            out.last_success[target] = float(line.rsplit(b" ", 1)[1])
        elif line.startswith(b"specmon_scrape_duration_seconds{"):
            out.durations.append(float(line.rsplit(b" ", 1)[1]))
        elif line.startswith(b"specmon_event_loop_lag_seconds"):
            value = float(line.rsplit(b" ", 1)[1])
            if line.startswith(b"specmon_event_loop_lag_seconds_bucket{"):
                out.loop_lag_buckets[_labels(line)[b"le"].decode()] = value
            elif line.startswith(b"specmon_event_loop_lag_seconds_count"):
                out.loop_lag_count = value
            elif line.startswith(b"specmon_event_loop_lag_seconds_sum"):
                out.loop_lag_sum = value
        elif line.startswith(b"specmon_gc_pause_seconds_"):
            value = float(line.rsplit(b" ", 1)[1])
            generation = _labels(line).get(b"generation", b"").decode()
            if line.startswith(b"specmon_gc_pause_seconds_count{"):
                out.gc_pause_count[generation] = value
            elif line.startswith(b"specmon_gc_pause_seconds_sum{"):
                out.gc_pause_sum[generation] = value
    return out


def loop_figures(c0: Counters, c1: Counters) -> dict[str, Any]:
    """The event loop's lag and the collector's pauses between two pages (a daemon from
    before the histograms: nothing)."""
    if not c1.loop_lag_count:
        return {}
    wakeups = c1.loop_lag_count - c0.loop_lag_count
    over = {
        le: int(wakeups - (c1.loop_lag_buckets[le] - c0.loop_lag_buckets.get(le, 0.0)))
        for le in ("0.1", "0.25", "0.5", "1.0", "2.5", "5.0")
        if le in c1.loop_lag_buckets
    }
    return {
        "loop_wakeups": int(wakeups),
        "loop_lag_mean_ms": _ms((c1.loop_lag_sum - c0.loop_lag_sum) / wakeups) if wakeups else None,
        # Wake-ups later than each bound, seconds.
        "loop_lag_over": over,
        "gc_pauses": {
            g: int(n - c0.gc_pause_count.get(g, 0.0)) for g, n in sorted(c1.gc_pause_count.items())
        },
        "gc_pause_seconds": {
            g: round(v - c0.gc_pause_sum.get(g, 0.0), 3) for g, v in sorted(c1.gc_pause_sum.items())
        },
    }


# -- one (revision, size) run ----------------------------------------------------------------

FETCHES: list[tuple[str, str, dict[str, str]]] = [
    ("metrics", "/metrics", {}),
    ("metrics_gzip", "/metrics", {"Accept-Encoding": "gzip"}),
    ("metrics_openmetrics", "/metrics", {"Accept": "application/openmetrics-text"}),
    ("status_page", "/", {}),
    ("api_targets", "/api/v1/targets", {}),
    # One page of the status page's size (a daemon before 9ceb4ea ignores the parameter and
    # answers with every target).
    ("api_targets_page", "/api/v1/targets?per_page=200", {}),
]


@dataclass(frozen=True)
class Settings:
    interval: float
    interval_text: str
    timeout_text: str
    windows: str
    longest_window: float
    measure_seconds: float
    fetches: int
    fetch_gap: float
    fetch_budget: float
    max_seconds: float


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class MemoryTrace(threading.Thread):
    """VmRSS of a process every few seconds, from /proc, until stopped."""

    def __init__(self, pid: int, every: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._halt = threading.Event()
        self._t0 = time.monotonic()

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.samples.append(
                    (round(time.monotonic() - self._t0, 1), round(status_mib(self.pid, "VmRSS"), 1))
                )
            except OSError:
                return
            self._halt.wait(self.every)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def run_one(rev: Rev, fleet: Fleet, config: Path, work: Path, s: Settings) -> dict[str, Any]:
    n = len(fleet.urls)
    began = time.monotonic()
    deadline = began + s.max_seconds
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {
        "rev": rev.spec,
        "commit": rev.commit,
        "subject": rev.subject,
        "dirty": rev.dirty,
        "targets": n,
        "windows": s.windows,
        "interval_seconds": s.interval,
        "simulator": f"{fleet.kind} x{len(fleet.procs)}",
        "measure_seconds_asked": s.measure_seconds,
        "fetch_rounds_asked": s.fetches,
        "fetch_gap_seconds": s.fetch_gap,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_start": loadavg(),
    }
    log = work / f"daemon-{rev.commit[:9]}-{n}.log"
    daemon = start(
        daemon_command(rev, config, port), cwd=rev.tree, env=daemon_env(rev.tree), log=log
    )
    trace = MemoryTrace(daemon.pid)
    trace.start()
    try:
        ready = wait_http(f"{base}/readyz", deadline, daemon)
        result["seconds_to_ready"] = round(ready - began, 1)
        result["rss_at_ready_mib"] = round(status_mib(daemon.pid, "VmRSS"), 1)

        # 2. Wait, asking nothing, until the longest window is full.
        reserve = s.measure_seconds + 10 + min(s.fetch_budget, 30)
        full_at = ready + s.longest_window + s.interval
        wait_until = min(full_at, deadline - reserve)
        result["windows_full"] = wait_until >= full_at
        _sleep_until(wait_until, daemon, fleet)
        result["seconds_from_ready_to_measure"] = round(time.monotonic() - ready, 1)

        # 3. Quiet measured period.
        result.update(_measure(daemon, fleet, base, s))

        # 4. Fetches while scraping.
        result.update(_fetch_phase(daemon, fleet, base, s, deadline))

        result["rss_end_mib"] = round(status_mib(daemon.pid, "VmRSS"), 1)
        result["hwm_end_mib"] = round(status_mib(daemon.pid, "VmHWM"), 1)
    except (RuntimeError, OSError) as exc:  # TimeoutError, HTTPError: one lost run, not all
        result["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(f"  run failed: {result['error']}", file=sys.stderr, flush=True)
    finally:
        trace.stop()
        code = stop(daemon)
        result["daemon_exit_code"] = code
        result["rss_trace_mib"] = trace.samples[:: max(1, len(trace.samples) // 40)]
        result["loadavg_end"] = loadavg()
        result["run_seconds"] = round(time.monotonic() - began, 1)
        lines = log.read_text(errors="replace").splitlines()
        errors = [
            line
            for line in lines
            if '"level": "error"' in line or '"level":"error"' in line or "Traceback" in line
        ]
        result["daemon_error_lines"] = len(errors)
        stalls = [
            json.loads(line)
            for line in lines
            if '"event_loop_stalled"' in line and line.startswith("{")
        ]
        # The whole run's (start-up and fetches included): seconds and the collector's share.
        result["loop_stalls"] = [[x.get("seconds"), x.get("collector_seconds")] for x in stalls]
        if errors:
            result["daemon_first_error"] = errors[0][:300]
    return result


def _sleep_until(when: float, daemon: subprocess.Popen[bytes], fleet: Fleet) -> None:
    while (left := when - time.monotonic()) > 0:
        if daemon.poll() is not None:
            raise RuntimeError(f"daemon exited with {daemon.returncode}")
        fleet.check()
        time.sleep(min(left, 2.0))


def _measure(
    daemon: subprocess.Popen[bytes], fleet: Fleet, base: str, s: Settings
) -> dict[str, Any]:
    pid = daemon.pid
    first = http_get(f"{base}/metrics", timeout=120)
    # The response head arrives once the page is rendered: take the start of the period
    # there, so the render's CPU stays outside it.
    cpu0, sim0, wait0 = cpu_seconds(pid), fleet.cpu(), schedstat(pid)[1]
    t0 = time.monotonic()
    rss0, hwm0 = status_mib(pid, "VmRSS"), status_mib(pid, "VmHWM")
    c0 = read_counters(first.body)
    load0, ticks0 = loadavg(), machine_ticks()
    _sleep_until(t0 + s.measure_seconds, daemon, fleet)
    # End of the period just before the closing request, so its render stays outside too.
    # Scrapes do not complete while the daemon renders (one event loop), so the counters the
    # page shows are those of this moment.
    cpu1, sim1, wait1 = cpu_seconds(pid), fleet.cpu(), schedstat(pid)[1]
    t1, wall1 = time.monotonic(), time.time()
    rss1, hwm1 = status_mib(pid, "VmRSS"), status_mib(pid, "VmHWM")
    ticks1 = machine_ticks()
    last = http_get(f"{base}/metrics", timeout=120)
    c1 = read_counters(last.body)
    period = t1 - t0
    n = len(fleet.urls)
    scrapes = sum(c1.scrapes.values()) - sum(c0.scrapes.values())
    successes = {t: c1.successes.get(t, 0.0) - c0.successes.get(t, 0.0) for t in c1.scrapes}
    allowed = period / s.interval
    # Lag: time since each target's last success, at the moment the page was rendered. That
    # moment is after the request was sent (a busy event loop can start it later, and scrapes
    # complete meanwhile) and not before the newest success on the page.
    now = max(wall1, *c1.last_success.values()) if c1.last_success else wall1
    lags = {t: now - c1.last_success[t] for t in c1.last_success}
    never = n - len(lags)  # targets never scraped successfully
    healthiest = max(successes, key=lambda t: (successes[t], -lags.get(t, math.inf)), default="")
    worst = max(lags, key=lambda t: lags[t], default="")
    on_time = sum(1 for t in successes if successes[t] >= math.floor(allowed) - 1)
    cpu = cpu1 - cpu0
    sim_cpu = [b - a for a, b in zip(sim0, sim1, strict=True)]
    return {
        "measure_seconds": round(period, 1),
        "loadavg_measure": [load0, loadavg()],
        # The whole machine (all cores, every process, other people's work included).
        "machine_cpu_measure": machine_busy(ticks0, ticks1),
        "series": c1.series,
        "scrapes_in_period": int(scrapes),
        "scrapes_allowed_in_period": round(n * allowed),
        "failed_scrapes_in_period": int(scrapes - sum(successes.values())),
        "scrapes_by_result_in_period": {
            k: int(v - c0.by_result.get(k, 0.0)) for k, v in sorted(c1.by_result.items())
        },
        "render_started_after_request_seconds_at_least": round(now - wall1, 3),
        "daemon_cpu_percent_of_one_core": round(100 * cpu / period, 2),
        # Ready to run but waiting for a core (other processes), summed over its threads.
        "daemon_runqueue_wait_percent": round(100 * (wait1 - wait0) / period, 1),
        "daemon_cpu_ms_per_scrape": round(1000 * cpu / scrapes, 3) if scrapes else None,
        "daemon_cpu_ms_per_successful_scrape": (
            round(1000 * cpu / sum(successes.values()), 3) if sum(successes.values()) else None
        ),
        "rss_window_full_mib": round(rss0, 1),
        "rss_after_measure_mib": round(rss1, 1),
        "rss_growth_measure_mib": round(rss1 - rss0, 1),
        "rss_growth_per_target_kib": round(1024 * (rss1 - rss0) / n, 2),
        "hwm_window_full_mib": round(hwm0, 1),
        "hwm_after_measure_mib": round(hwm1, 1),
        "scrape_duration_p50_ms": _ms(_pct(c1.durations, 0.5)),
        "scrape_duration_p99_ms": _ms(_pct(c1.durations, 0.99)),
        "healthiest_target": healthiest,
        "healthiest_successes": int(successes.get(healthiest, 0)),
        "healthiest_lag_seconds": _r(lags.get(healthiest)),
        "successes_allowed_per_target": round(allowed, 1),
        "worst_target": worst,
        "worst_lag_seconds": _r(lags.get(worst)),
        "worst_successes": int(successes.get(worst, 0)) if worst else None,
        "lag_p50_seconds": _r(_pct(list(lags.values()), 0.5)),
        "lag_p99_seconds": _r(_pct(list(lags.values()), 0.99)),
        "targets_never_scraped": never,
        "targets_on_time": on_time,  # successes >= floor(period / interval) - 1
        "sim_cpu_percent_of_one_core": round(100 * sum(sim_cpu) / period, 1),
        "sim_cpu_percent_busiest_process": round(100 * max(sim_cpu) / period, 1),
        **loop_figures(c0, c1),
    }


def _fetch_phase(
    daemon: subprocess.Popen[bytes], fleet: Fleet, base: str, s: Settings, deadline: float
) -> dict[str, Any]:
    pid = daemon.pid
    end = min(deadline - 5, time.monotonic() + s.fetch_budget)
    seen: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in FETCHES}
    sizes: dict[str, dict[str, Any]] = {}
    rounds = 0
    for _ in range(s.fetches):
        if time.monotonic() >= end:
            break
        for name, path, headers in FETCHES:
            if time.monotonic() >= end:
                break
            cpu0 = thread_cpu_seconds(pid)
            try:
                got = http_get(
                    base + path, headers=headers, timeout=max(5.0, end - time.monotonic())
                )
            except (OSError, urllib.error.HTTPError) as exc:
                sizes.setdefault(name, {})["error"] = f"{type(exc).__name__}: {exc}"[:200]
                continue
            cpu = thread_cpu_seconds(pid) - cpu0
            seen[name].append({"seconds": got.seconds, "cpu": cpu, "bytes": len(got.body)})
            if name not in sizes:
                sizes[name] = _describe(name, got)
            time.sleep(s.fetch_gap)
        else:
            rounds += 1
        daemon_alive = daemon.poll() is None
        if not daemon_alive:
            raise RuntimeError(f"daemon exited with {daemon.returncode}")
    out: dict[str, Any] = {"fetch_rounds": rounds}
    for name, samples in seen.items():
        times = [x["seconds"] for x in samples]
        cpus = [x["cpu"] for x in samples]
        out[name] = {
            **sizes.get(name, {}),
            "fetches": len(samples),
            "median_ms": _ms(statistics.median(times)) if times else None,
            "max_ms": _ms(max(times)) if times else None,
            "min_ms": _ms(min(times)) if times else None,
            "daemon_cpu_median_ms": _ms(statistics.median(cpus)) if cpus else None,
        }
    return out


def _describe(name: str, got: Fetch) -> dict[str, Any]:
    info: dict[str, Any] = {"bytes": len(got.body), "content_type": got.content_type}
    if name == "metrics_gzip":
        info["gzip"] = got.content_encoding == "gzip"
        if info["gzip"]:
            info["bytes_uncompressed"] = len(gzip.decompress(got.body))
    if name == "metrics_openmetrics":
        info["openmetrics"] = "openmetrics" in got.content_type
    if name == "api_targets":
        try:
            info["targets_listed"] = len(json.loads(got.body).get("targets", []))
        except (ValueError, AttributeError):
            info["targets_listed"] = None
    return info


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# -- the whole run ---------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem = status_total_gib()
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def status_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return math.nan


def plan_seconds(s: Settings, sizes: list[int], revs: int) -> tuple[float, float]:
    """(expected, at most) for the whole run."""
    per = 15 + s.longest_window + s.interval + s.measure_seconds + 10
    fetch_fast = s.fetches * len(FETCHES) * (s.fetch_gap + 0.2)
    expected = sum(revs * (per + min(s.fetch_budget, fetch_fast)) + 5 + n * 0.004 for n in sizes)
    return expected, len(sizes) * revs * s.max_seconds + sum(30 + n * 0.004 for n in sizes)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--rev", action="append", default=None, metavar="REV",
                   help="git revision, or 'worktree' (default: the working tree only); repeat to "
                   "compare; the first is the baseline of the ratios")  # fmt: skip
    p.add_argument("--targets", default="200,1000,5000")
    p.add_argument("--windows", default="1m,5m")
    p.add_argument("--interval", default="5s")
    p.add_argument("--scrape-timeout", default="3s")
    p.add_argument("--measure-seconds", type=float, default=60.0)
    p.add_argument("--fetches", type=int, default=10, help="rounds of the six fetches")
    p.add_argument("--fetch-gap", type=float, default=1.0, help="seconds between fetches")
    p.add_argument("--fetch-budget", type=float, default=180.0,
                   help="at most this many seconds of fetching per run")  # fmt: skip
    p.add_argument("--max-seconds", type=float, default=None,
                   help="cap on each run (default: the longest window + the quiet period + "
                   "the fetch budget + 3 minutes)")  # fmt: skip
    p.add_argument("--sim", choices=("fleet", "specmon"), default="fleet")
    p.add_argument("--twins", action="store_true",
                   help="every odd target is a twin of the one before it without speculation "
                   "(same model and traffic); with --rev REV+baseline the speculating target "
                   "of each pair gets baseline: its twin")  # fmt: skip
    p.add_argument("--sim-procs", type=int, default=0, help="0: one per 2,500 targets")
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--markdown-out", type=Path, default=None)
    p.add_argument("--render", type=Path, default=None, metavar="JSONL",
                   help="only print the markdown tables of recorded JSON lines")  # fmt: skip
    args = p.parse_args(argv)
    if args.render is not None:
        text = markdown([json.loads(line) for line in args.render.read_text().splitlines() if line])
        print(text)
        if args.markdown_out is not None:
            args.markdown_out.write_text(text)
        return 0

    sizes = [int(x) for x in args.targets.split(",") if x.strip()]
    windows = [parse_duration(w) for w in args.windows.split(",")]
    s = Settings(
        interval=parse_duration(args.interval),
        interval_text=args.interval,
        timeout_text=args.scrape_timeout,
        windows=",".join(format_duration(w) for w in windows),
        longest_window=max(windows),
        measure_seconds=args.measure_seconds,
        fetches=args.fetches,
        fetch_gap=args.fetch_gap,
        fetch_budget=args.fetch_budget,
        max_seconds=args.max_seconds
        or max(windows)
        + parse_duration(args.interval)
        + args.measure_seconds
        + args.fetch_budget
        + 180,
    )
    specs = args.rev or ["worktree"]
    if any(spec.endswith(BASELINE) for spec in specs) and not args.twins:
        p.error(f"--rev REV{BASELINE} needs --twins")
    if args.twins and args.sim != "fleet":
        p.error("--twins needs --sim fleet")
    expected, at_most = plan_seconds(s, sizes, len(specs))
    print(
        f"bench cost: {len(specs)} revision(s) x sizes {sizes}, windows {s.windows}, interval "
        f"{args.interval}; each run waits {s.longest_window:.0f} s for the longest window, "
        f"measures {s.measure_seconds:.0f} s quietly, then fetches (at most "
        f"{s.fetch_budget:.0f} s). Expected about {expected / 60:.0f} min, at most "
        f"{at_most / 60:.0f} min (--max-seconds {s.max_seconds:.0f} per run).",
        file=sys.stderr,
        flush=True,
    )
    if s.max_seconds < s.longest_window + s.interval + s.measure_seconds + 60:
        print("warning: --max-seconds is too short for the longest window to fill", file=sys.stderr)

    # Ctrl-C or SIGTERM: unwind, stopping every process and removing every worktree (SIGINT
    # too, even where a shell started this in the background with SIGINT ignored).
    previous = {
        sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    results: list[dict[str, Any]] = []
    info = machine()
    began = time.monotonic()
    json_out = args.json_out.open("a") if args.json_out else None
    try:
        with ExitStack() as stack:
            revs = [prepare_rev(spec, stack) for spec in specs]
            for index, n in enumerate(sizes):
                with ExitStack() as fleet_stack:
                    work = Path(tempfile.mkdtemp(prefix=f"specmon-cost-{n}-"))
                    fleet_stack.callback(shutil.rmtree, work, ignore_errors=True)
                    procs = args.sim_procs or max(1, math.ceil(n / TARGETS_PER_SIM_PROCESS))
                    fleet = start_fleet(
                        n, kind=args.sim, procs=procs, work=work, stack=fleet_stack,
                        deadline=time.monotonic() + 60 + n * 0.02, twins=args.twins,
                    )  # fmt: skip
                    configs = {}
                    for with_baseline in (False, True):
                        for with_filter in (False, True):
                            key = (with_baseline, with_filter)
                            configs[key] = (
                                work / f"specmon-{int(with_baseline)}{int(with_filter)}.yml"
                            )
                            write_config(
                                configs[key], fleet.urls, interval=args.interval,
                                timeout=args.scrape_timeout, windows=s.windows,
                                baseline=with_baseline, name_filter=with_filter,
                            )  # fmt: skip
                    order = revs if index % 2 == 0 else revs[::-1]
                    for rev in order:
                        done = len(results)
                        print(
                            f"  [{done + 1}/{len(sizes) * len(revs)}] {rev.label}, {n} targets"
                            f" ({(time.monotonic() - began) / 60:.1f} min so far)",
                            file=sys.stderr,
                            flush=True,
                        )
                        result = run_one(
                            rev, fleet, configs[rev.baseline, rev.name_filter], work, s
                        )
                        result["twins"] = args.twins
                        result["simulator_start_seconds"] = round(fleet.started_seconds, 1)
                        result["machine"] = info
                        result["argv"] = argv
                        results.append(result)
                        line = json.dumps(result)
                        print(line, flush=True)
                        if json_out is not None:
                            json_out.write(line + "\n")
                            json_out.flush()
    except KeyboardInterrupt:
        print("interrupted: every process stopped, temporary worktrees removed", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if json_out is not None:
            json_out.close()
    if not results:
        return 1
    text = markdown(results)
    print(text)
    if args.markdown_out is not None:
        args.markdown_out.write_text(text)
    return 0


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


# -- markdown ----------------------------------------------------------------------------------

Row = tuple[str, Callable[[dict[str, Any]], float | None], Callable[[float], str]]
#: Rows whose values sit near zero or change sign: the comparison column shows the difference
#: (after - before), not a ratio.
DIFFERENCE_ROWS = {
    "RSS growth over the quiet period, MiB",
    "failed scrapes in the quiet period",
    "healthiest target: lag, s",
    "daemon waiting for a core (run queue), % of the period",
    "whole machine busy / stolen, % (quiet period)",
}


def _get(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def get(result: dict[str, Any]) -> float | None:
        value: Any = result
        for key in path:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return float(value) if isinstance(value, int | float) else None

    return get


def _f(digits: int, suffix: str = "") -> Callable[[float], str]:
    return lambda v: f"{v:,.{digits}f}{suffix}"


def _kb(v: float) -> str:
    return f"{v / 1000:,.0f} KB" if v < 1e6 else f"{v / 1e6:,.2f} MB"


ROWS: list[Row] = [
    ("series on /metrics", _get("series"), _f(0)),
    ("/metrics plain: size", _get("metrics", "bytes"), _kb),
    ("/metrics plain: median / max ms", _get("metrics", "median_ms"), _f(0)),
    ("", _get("metrics", "max_ms"), _f(0)),
    ("/metrics plain: daemon CPU per fetch, ms", _get("metrics", "daemon_cpu_median_ms"), _f(0)),
    ("/metrics gzip: size on the wire", _get("metrics_gzip", "bytes"), _kb),
    ("/metrics gzip: median / max ms", _get("metrics_gzip", "median_ms"), _f(0)),
    ("", _get("metrics_gzip", "max_ms"), _f(0)),
    ("/metrics OpenMetrics: size", _get("metrics_openmetrics", "bytes"), _kb),
    ("/metrics OpenMetrics: median / max ms", _get("metrics_openmetrics", "median_ms"), _f(0)),
    ("", _get("metrics_openmetrics", "max_ms"), _f(0)),
    ("status page `/`: size", _get("status_page", "bytes"), _kb),
    ("status page `/`: median / max ms", _get("status_page", "median_ms"), _f(0)),
    ("", _get("status_page", "max_ms"), _f(0)),
    ("`/api/v1/targets`: size", _get("api_targets", "bytes"), _kb),
    ("`/api/v1/targets`: median / max ms", _get("api_targets", "median_ms"), _f(0)),
    ("", _get("api_targets", "max_ms"), _f(0)),
    ("`/api/v1/targets?per_page=200`: size", _get("api_targets_page", "bytes"), _kb),
    (
        "`/api/v1/targets?per_page=200`: median / max ms",
        _get("api_targets_page", "median_ms"),
        _f(0),
    ),
    ("", _get("api_targets_page", "max_ms"), _f(0)),
    ("daemon CPU per target scrape, ms", _get("daemon_cpu_ms_per_scrape"), _f(3)),
    (
        "daemon CPU per successful scrape, ms",
        _get("daemon_cpu_ms_per_successful_scrape"),
        _f(3),
    ),
    ("daemon CPU, % of one core (quiet period)", _get("daemon_cpu_percent_of_one_core"), _f(1)),
    (
        "daemon waiting for a core (run queue), % of the period",
        _get("daemon_runqueue_wait_percent"),
        _f(1),
    ),
    ("RSS when the longest window is full, MiB", _get("rss_window_full_mib"), _f(1)),
    ("RSS growth over the quiet period, MiB", _get("rss_growth_measure_mib"), _f(1)),
    ("RSS / VmHWM at the end (after fetches), MiB", _get("rss_end_mib"), _f(1)),
    ("", _get("hwm_end_mib"), _f(1)),
    ("scrapes done / allowed in the quiet period", _get("scrapes_in_period"), _f(0)),
    ("", _get("scrapes_allowed_in_period"), _f(0)),
    ("failed scrapes in the quiet period", _get("failed_scrapes_in_period"), _f(0)),
    ("healthiest target: successes / allowed", _get("healthiest_successes"), _f(0)),
    ("", _get("successes_allowed_per_target"), _f(1)),
    ("healthiest target: lag, s", _get("healthiest_lag_seconds"), _f(2)),
    ("worst target: lag, s", _get("worst_lag_seconds"), _f(2)),
    ("lag p50 / p99, s", _get("lag_p50_seconds"), _f(2)),
    ("", _get("lag_p99_seconds"), _f(2)),
    ("targets scraped on time (>= allowed - 1)", _get("targets_on_time"), _f(0)),
    (
        "event loop: wake-ups later than 0.5 s / 1 s (quiet period)",
        _get("loop_lag_over", "0.5"),
        _f(0),
    ),
    ("", _get("loop_lag_over", "1.0"), _f(0)),
    ("cycle collector: full collections / seconds (quiet period)", _get("gc_pauses", "2"), _f(0)),
    ("", _get("gc_pause_seconds", "2"), _f(2)),
    ("scrape duration p50 / p99, ms", _get("scrape_duration_p50_ms"), _f(1)),
    ("", _get("scrape_duration_p99_ms"), _f(1)),
    ("simulator CPU, % of one core (busiest process)", _get("sim_cpu_percent_of_one_core"), _f(1)),
    ("", _get("sim_cpu_percent_busiest_process"), _f(1)),
    (
        "whole machine busy / stolen, % (quiet period)",
        _get("machine_cpu_measure", "busy_percent"),
        _f(0),
    ),
    ("", _get("machine_cpu_measure", "steal_percent"), _f(1)),
]


def markdown(results: list[dict[str, Any]]) -> str:
    """The tables for bench/RESULTS.md, from the JSON lines alone (``--render FILE`` too)."""
    first, last = results[0], results[-1]
    info = first["machine"]
    revs: list[tuple[str, str]] = []  # (spec, commit) in the order given (the first size's)
    labels: dict[tuple[str, str], str] = {}
    for r in results:
        key = (r["rev"], r["commit"])
        if key not in labels:
            revs.append(key)
            labels[key] = _label(r)
    minutes = sum(r["run_seconds"] for r in results) / 60
    lines = [
        f"`python -m bench cost {' '.join(first['argv'])}`, {first['started_utc']}, "
        f"{minutes:.0f} min. Machine: {info['nproc']} cores ({info['cpu_model']}), "
        f"{info['memory_gib']} GiB, Python {info['python']}, load average "
        f"{_load(first['loadavg_start'])} at the start and {_load(last['loadavg_end'])} at the "
        f"end. Windows {first['windows']}, scrape interval {first['interval_seconds']:g} s; "
        f"figures after the longest window was full; quiet period "
        f"{first.get('measure_seconds_asked', first.get('measure_seconds', 0)):.0f} s; fetches: up to {first['fetch_rounds_asked']} "
        f"rounds, {first['fetch_gap_seconds']:g} s apart.",
        "",
        "Revisions: "
        + "; ".join(f"**{labels[key]}** {_subject(results, key)}" for key in revs)
        + (
            "; the last column: after / before as a ratio, or as a signed difference."
            if len(revs) > 1
            else "."
        ),
        "",
    ]
    sizes = sorted({int(r["targets"]) for r in results})
    for n in sizes:
        per_rev: list[dict[str, Any] | None] = [
            next((r for r in results if r["targets"] == n and (r["rev"], r["commit"]) == key), None)
            for key in revs
        ]
        shown = next((r for r in per_rev if r is not None), None)
        if shown is None:
            continue
        header = ["", *(labels[key] for key in revs)]
        if len(revs) > 1:
            header += [f"{spec} vs {revs[0][0]}" for spec, _ in revs[1:]]
        lines += [
            f"**{n} targets** (simulator: {shown['simulator']}; windows full: "
            + ", ".join(str(r.get("windows_full")) if r else "-" for r in per_rev)
            + "; load average during the runs: "
            + ", ".join(
                _load(r["loadavg_start"]) + " → " + _load(r["loadavg_end"]) if r else "-"
                for r in per_rev
            )
            + ")",
            "",
            *(
                f"Run failed ({labels[key]}): {r['error']}\n"
                for key, r in zip(revs, per_rev, strict=True)
                if r is not None and "error" in r
            ),
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        groups: list[list[Row]] = []
        for row in ROWS:
            if row[0] or not groups:
                groups.append([row])
            else:
                groups[-1].append(row)
        for group in groups:
            cells = [group[0][0]]
            values = [[row[1](r) if r else None for row in group] for r in per_rev]
            if all(v is None for vals in values for v in vals):
                continue  # a figure these runs did not record
            for vals in values:
                cells.append(
                    " / ".join(
                        "-" if v is None else row[2](v) for v, row in zip(vals, group, strict=True)
                    )
                )
            compare = _difference if group[0][0] in DIFFERENCE_ROWS else _ratio
            for vals in values[1:]:
                cells.append(
                    " / ".join(compare(v, b) for v, b in zip(vals, values[0], strict=True))
                )
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _ratio(after: float | None, before: float | None) -> str:
    if after is None or before is None:
        return "-"
    if before == 0:
        return "=" if after == 0 else "-"
    return f"{after / before:.2f}x"


def _label(result: dict[str, Any]) -> str:
    commit = str(result["commit"])[:9]
    if result["rev"] in WORKTREE:
        return f"worktree ({commit}{' + changes' if result['dirty'] else ''})"
    return f"{result['rev']} ({commit})"


def _subject(results: list[dict[str, Any]], key: tuple[str, str]) -> str:
    return next(str(r["subject"]) for r in results if (r["rev"], r["commit"]) == key)


def _difference(after: float | None, before: float | None) -> str:
    if after is None or before is None:
        return "-"
    return f"{after - before:+,.2f}"


def _load(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)
