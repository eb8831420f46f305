"""Debian's ``prometheus`` and ``prometheus-alertmanager`` on loopback, scraping a specmon
daemon that watches simulated engines, with a webhook receiver run by the test.

Everything the stack runs comes from the shipped files, rewritten programmatically (never a
second copy):

- ``deploy/prometheus/specmon-alerts.rules.yml``: every ``for:`` and ``keep_firing_for:``
  divided by :data:`SCALE`, and every ``window="..."`` matcher mapped through :data:`WINDOWS`
  (specmon writes the ``window`` label from its configured durations, so a test with short
  windows must select them by their own labels). Nothing else changes: the minimum-traffic
  guard (400 drafts), the thresholds, the range selectors (``[5m]`` in SpecmonTargetDown,
  ``[1h:1m] offset 30m`` in SpecmonAcceptanceDrop's baseline) and the annotations stay as
  shipped. In a run of a few minutes SpecmonAcceptanceDrop therefore has no baseline and
  cannot fire; its promtool unit tests cover it.
- ``deploy/prometheus/prometheus.example.yml``: intervals of 1 s, the rewritten rules file
  only (the engine recording rules read the engines' own series, which this Prometheus does
  not scrape), this stack's Alertmanager and specmon addresses.
- ``deploy/prometheus/alertmanager.example.yml``: route timers divided by :data:`SCALE`
  (``group_wait`` 30 s -> 1 s), webhook URLs pointed at the test's receiver (paths kept:
  ``/tickets``, ``/pager``). Routing and inhibit rules stay as shipped.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.dashboards.queries import duration_seconds
from tests.rules.alert_rules import alert_rules, iter_rules, load_rules, with_durations
from tests.rules.common import PROM_DIR

__all__ = [
    "SCALE",
    "WINDOWS",
    "AlertPoller",
    "Proc",
    "Prometheus",
    "RewritingProxy",
    "Webhook",
    "alertmanager_config",
    "free_port",
    "prometheus_config",
    "require_binaries",
    "scaled",
    "shortened_rules",
    "simulate",
    "simulate_all",
    "wait_until",
]

#: Shipped durations (``for:``, ``keep_firing_for:``, Alertmanager timers) over test durations.
SCALE = 30
#: Shipped window label -> the window the test's specmon exports in its place (also / SCALE).
WINDOWS = {"1m": "2s", "5m": "10s", "15m": "30s"}

T = TypeVar("T")


# --------------------------------------------------------------------------- rewriting


def scaled(duration: str) -> str:
    """``duration`` divided by :data:`SCALE`, as a Prometheus duration."""
    seconds = duration_seconds(duration) / SCALE
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


_WINDOW_MATCHER = re.compile(r'window="([^"]*)"')


def _rewrite_windows(text: str) -> tuple[str, int]:
    def swap(match: re.Match[str]) -> str:
        shipped = match.group(1)
        if shipped not in WINDOWS:
            raise AssertionError(f"the shipped rules select window={shipped!r}: map it in WINDOWS")
        return f'window="{WINDOWS[shipped]}"'

    return _WINDOW_MATCHER.subn(swap, text)


def shortened_rules() -> dict[str, Any]:
    """The shipped alert rules with ``for``/``keep_firing_for`` / SCALE and windows mapped."""
    doc = load_rules()
    alerts = alert_rules(doc)
    fors: dict[str, str] = {}
    keeps: dict[str, str] = {}
    for rule in alerts:
        # Tiers of one alert share the name; the mapping below needs them to agree.
        for key, out in (("for", fors), ("keep_firing_for", keeps)):
            if key in rule:
                value = scaled(rule[key])
                assert out.setdefault(rule["alert"], value) == value, (rule["alert"], key)
    doc = with_durations(doc, for_=fors, keep_firing_for=keeps)
    replaced = 0
    for rule in iter_rules(doc):
        rule["expr"], count = _rewrite_windows(rule["expr"])
        replaced += count
    assert replaced >= 10, "the shipped rules no longer select windows by label"
    return doc


def prometheus_config(
    *, rules_file: Path, specmon: str, alertmanager: str, interval: str = "1s"
) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load((PROM_DIR / "prometheus.example.yml").read_text("utf-8"))
    cfg["global"] = {
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "evaluation_interval": interval,
    }
    cfg["rule_files"] = [str(rules_file)]
    ((am,),) = [c["static_configs"] for c in cfg["alerting"]["alertmanagers"]]
    am["targets"] = [alertmanager]
    (job,) = cfg["scrape_configs"]
    assert job["job_name"] == "specmon"
    job["scrape_interval"] = interval
    job["static_configs"] = [{"targets": [specmon]}]
    return cfg


def alertmanager_config(*, webhook_base: str) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load((PROM_DIR / "alertmanager.example.yml").read_text("utf-8"))

    def shorten(route: dict[str, Any]) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in route:
                route[key] = scaled(route[key])
        for child in route.get("routes") or []:
            shorten(child)

    shorten(cfg["route"])
    urls = 0
    for receiver in cfg["receivers"]:
        for hook in receiver.get("webhook_configs") or []:
            path = urllib.parse.urlsplit(hook["url"]).path
            hook["url"] = webhook_base + path
            urls += 1
    assert urls, "alertmanager.example.yml has no webhook receivers to redirect"
    return cfg


# --------------------------------------------------------------------------- processes


def require_binaries(*names: str) -> None:
    missing = [name for name in names if shutil.which(name) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found: install Debian's prometheus, "
            "prometheus-alertmanager and victoria-metrics (./dev.sh provision debian) or "
            "deselect with "
            "-m 'not prometheus'"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.2,
    alive: Callable[[], None] | None = None,
) -> T:
    """Call ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        if alive is not None:
            alive()
        last = probe()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"
            )
        time.sleep(interval)


@dataclass
class Proc:
    """A subprocess with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, args: list[str], log: Path, *, cwd: Path | None = None) -> Proc:
        with log.open("wb") as out:
            popen = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return cls(name, popen, log)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text("utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=timeout)


def simulate(
    name: str, tmp: Path, args: list[str], *, targets: int, timeout: float = 20.0
) -> tuple[Proc, dict[str, str]]:
    """``specmon simulate ARGS``; returns the process and {simulated target: metrics URL}."""
    ((proc, addresses),) = simulate_all(tmp, {name: (args, targets)}, timeout=timeout).values()
    return proc, addresses


def simulate_all(
    tmp: Path, runs: Mapping[str, tuple[list[str], int]], *, timeout: float = 30.0
) -> dict[str, tuple[Proc, dict[str, str]]]:
    """Several ``specmon simulate`` processes started at once (name -> (ARGS, number of
    targets)); returns name -> (process, {simulated target: metrics URL}). All are stopped if
    one fails to start."""
    started: dict[str, tuple[Proc, Path]] = {}
    for name, (args, _) in runs.items():
        log = tmp / f"simulate-{name}.log"
        started[name] = (
            Proc.start(
                f"specmon simulate ({name})",
                [sys.executable, "-m", "specmon", "simulate", *args],
                log,
            ),
            log,
        )

    def addresses(log: Path, targets: int) -> dict[str, str] | None:
        found = dict(
            line.split(": ", 1)
            for line in log.read_text("utf-8").splitlines()
            if re.match(r"^[\w.-]+: http://", line)
        )
        return found if len(found) == targets else None

    out: dict[str, tuple[Proc, dict[str, str]]] = {}
    try:
        for name, (proc, log) in started.items():
            probe = functools.partial(addresses, log, runs[name][1])
            out[name] = (
                proc,
                wait_until(f"{name} to listen", probe, timeout=timeout, alive=proc.check_alive),
            )
    except BaseException:
        for proc, _ in started.values():
            proc.stop()
        raise
    return out


# --------------------------------------------------------------------------- HTTP


def http_json(
    url: str, *, params: Mapping[str, str | list[str]] | None = None, timeout: float = 10.0
) -> Any:
    if params:
        url += "?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Prometheus:
    """A small client of Prometheus's HTTP API."""

    base: str

    def api(self, path: str, **params: str | list[str]) -> Any:
        body = http_json(self.base + "/api/v1/" + path, params=params)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        return list(data["result"])

    def query_range(self, expr: str, start: float, end: float, step: str) -> list[dict[str, Any]]:
        data = self.api(
            "query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step
        )
        return list(data["result"])

    def raw_samples(
        self, selector: str, seconds: float
    ) -> list[tuple[dict[str, str], float, float]]:
        """Every stored sample of ``selector`` in the last ``seconds``: (labels, time, value)."""
        out = []
        for series in self.query(f"{selector}[{max(1, int(seconds + 1))}s]"):
            for stamp, value in series["values"]:
                out.append((series["metric"], float(stamp), float(value)))
        return sorted(out, key=lambda s: s[1])

    def label_values(self, label: str, selector: str | None, start: float) -> list[str]:
        params: dict[str, str | list[str]] = {"start": f"{start:.3f}", "end": f"{time.time():.3f}"}
        if selector:
            params["match[]"] = [selector]
        return sorted(self.api(f"label/{label}/values", **params))

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def rules(self) -> list[dict[str, Any]]:
        return [rule for group in self.api("rules")["groups"] for rule in group["rules"]]


# --------------------------------------------------------------------------- receivers


@dataclass(frozen=True)
class Notification:
    received: float  # Unix time
    path: str
    payload: dict[str, Any]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.payload.get("alerts") or [])


@dataclass
class Webhook:
    """Alertmanager's webhook receiver: records every POST with its arrival time."""

    notifications: list[Notification] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                received = time.time()
                try:
                    payload = json.loads(body)
                except json.JSONDecodeError:
                    payload = {"invalid": body.decode("utf-8", "replace")}
                with hook._lock:
                    hook.notifications.append(Notification(received, self.path, payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self.notifications)


@dataclass
class RewritingProxy:
    """An HTTP GET proxy in front of one simulated engine that rewrites its pages: a stand-in
    for a buggy engine or a proxy that mixes pages, which no real engine here produces."""

    upstream: str  # scheme://host:port
    rewrite: Callable[[str], str]
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                request = urllib.request.Request(proxy.upstream + self.path)
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:
                        body = proxy.rewrite(response.read().decode("utf-8")).encode("utf-8")
                        kind = response.headers.get("Content-Type", "text/plain")
                        status = response.status
                except urllib.error.HTTPError as exc:
                    body, kind, status = exc.read(), "text/plain", exc.code
                except (urllib.error.URLError, OSError):
                    body, kind, status = b"upstream unreachable\n", "text/plain", 502
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


@dataclass(frozen=True)
class Seen:
    """An alert as Prometheus's /api/v1/alerts showed it at one poll."""

    at: float  # Unix time of the poll
    state: str
    labels: dict[str, str]
    active_at: str


class AlertPoller:
    """Polls /api/v1/alerts in the background for the whole run and keeps every observation."""

    def __init__(self, prometheus: Prometheus, interval: float = 0.25) -> None:
        self._prometheus = prometheus
        self._interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        self.errors = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                alerts = self._prometheus.alerts()
            except (urllib.error.URLError, OSError, ValueError, AssertionError):
                self.errors += 1
            else:
                now = time.time()
                with self._lock:
                    self._seen.extend(
                        Seen(now, a["state"], dict(a["labels"]), a["activeAt"]) for a in alerts
                    )
            self._stop.wait(self._interval)

    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def first(self, state: str, **labels: str) -> Seen | None:
        want = set(labels.items())
        return next(
            (s for s in self.seen() if s.state == state and want <= set(s.labels.items())), None
        )
