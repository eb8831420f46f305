"""Start ``specmon run`` as users do: a subprocess, real HTTP, and read what it exports."""

from __future__ import annotations

import json
import os
import resource
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]


def get(
    url: str,
    *,
    timeout: float = 5.0,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def post(url: str, *, timeout: float = 10.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@dataclass
class Exported:
    """The daemon's /metrics, parsed with prometheus_client's own parser (independent of ours)."""

    samples: dict[str, dict[Labels, float]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Exported:
        out = cls()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
        return out

    def value(self, name: str, **labels: str) -> float | None:
        want = set(labels.items())
        found = [v for k, v in self.samples.get(name, {}).items() if want <= set(k)]
        if len(found) > 1:
            raise AssertionError(f"{name}{labels} matches {len(found)} series")
        return found[0] if found else None

    def series(self, name: str, **labels: str) -> dict[Labels, float]:
        want = set(labels.items())
        return {k: v for k, v in self.samples.get(name, {}).items() if want <= set(k)}


class Daemon:
    def __init__(
        self,
        proc: subprocess.Popen[str],
        log_path: Path,
        port: int,
        *,
        context: ssl.SSLContext | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.proc = proc
        self.log_path = log_path
        self.port = port
        # With TLS (a web config): the client context and, with basic auth, its header.
        self.context = context
        self.headers = headers or {}
        self.base = f"{'https' if context else 'http'}://127.0.0.1:{port}"

    def metrics(self) -> Exported:
        status, body, _ = get(self.base + "/metrics", context=self.context, headers=self.headers)
        assert status == 200, status
        return Exported.parse(body.decode())

    def targets(self) -> dict[str, Any]:
        status, body, _ = get(
            self.base + "/api/v1/targets", context=self.context, headers=self.headers
        )
        assert status == 200
        return {t["target"]: t for t in json.loads(body)["targets"]}

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for line in self.log_path.read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                lines.append({"raw": line})
        return lines

    def log_text(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, predicate: Any, *, timeout: float = 20.0, interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = predicate()
            if last:
                return last
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}"
                )
            time.sleep(interval)
        raise AssertionError(
            f"condition not met within {timeout}s; last={last!r}\n{self.log_text()[-3000:]}"
        )

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _started_port(log_path: Path) -> int:
    for line in log_path.read_text().splitlines():
        if '"specmon_started"' in line:
            try:
                return int(json.loads(line)["port"])
            except (json.JSONDecodeError, KeyError, ValueError):
                return 0
    return 0


def _limit_files(limits: tuple[int, int]) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


@contextmanager
def daemon(
    config: Path | None,
    tmp: Path,
    *,
    extra: list[str] | None = None,
    env: dict[str, str] | None = None,
    ready: bool = True,
    context: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    nofile: tuple[int, int] | None = None,
) -> Iterator[Daemon]:
    """``context`` (and ``headers``): how to reach a daemon run with a --web.config.file;
    ``nofile``: the (soft, hard) open-files limit the daemon starts with."""
    log_path = tmp / f"daemon-{time.monotonic_ns()}.log"
    args = [
        sys.executable,
        "-m",
        "specmon",
        "run",
        "--web.listen-address",
        "127.0.0.1:0",
        "--log.format",
        "json",
        "--log.level",
        "debug",
    ]
    if config is not None:
        args += ["--config.file", str(config)]
    args += extra or []
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
        )
    port = 0
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not port:
        port = _started_port(log_path)
        if port:
            break
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited with {proc.returncode}:\n{log_path.read_text()}")
        time.sleep(0.05)
    if not port:
        proc.kill()
        raise AssertionError("daemon did not start:\n" + log_path.read_text())
    d = Daemon(proc, log_path, port, context=context, headers=headers)
    try:
        if ready:
            d.wait_for(lambda: get(d.base + "/readyz", context=context)[0] == 200)
        yield d
    finally:
        d.stop()
