"""Hostile Prometheus answers against a real ``specmon run``: its memory and its event loop.

Run: ./dev.sh bench promhostile [--seconds 30] [--json-out FILE]

A fake ``/api/v1/query`` on loopback (aiohttp, in a thread of this process) answers:

- ``empty-objects``: one source, every value query answered with 60 MB of ``{}`` in the result
  list (under the default 64 MiB byte cap), read every 2 s;
- ``bombs``: eight sources, every query answered with a gzip bomb (a few hundred KB that
  inflate past the 64 MiB cap), each read every 2 s.

While it runs, this process samples the daemon's resident memory (``/proc/PID/status``) every
100 ms and asks ``/healthz`` every 50 ms, recording the slowest answer (an event-loop stall
shows as a slow ``/healthz``). Reported per scenario: peak RSS (VmHWM), the largest RSS
sampled, the slowest ``/healthz``, the reads the fake answered. Goals: empty-objects peak RSS
under 500 MB and no ``/healthz`` slower than 0.5 s; bombs RSS under 400 MB throughout.
Bounded: each scenario lasts ``--seconds``, and the daemon is killed if SIGTERM does not end it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

SELECTOR = '{job="vllm"}'
HEAD = b'{"status":"success","data":{"resultType":"vector","result":['


class HostilePrometheus:
    def __init__(self, body: bytes, *, gzipped: bool) -> None:
        self.url = ""
        self.answers = 0
        self._body = body
        self._gzipped = gzipped
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HostilePrometheus:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake Prometheus did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _query(self, request: web.Request) -> web.StreamResponse:
        self.answers += 1
        headers = {"Content-Type": "application/json"}
        if self._gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=self._body, headers=headers)

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/api/v1/query", self._query)
        runner = web.AppRunner(app, access_log=None)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def scenario(
    name: str, body: bytes, *, gzipped: bool, sources: int, seconds: float
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, HostilePrometheus(body, gzipped=gzipped) as fake:
        config = Path(tmp) / "specmon.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {"scrape_interval": "5s", "windows": ["1m"]},
                    "targets": [],
                    "sources": [
                        {"prometheus": {"url": fake.url, "name": f"p{i}", "selector": SELECTOR,
                                        "interval": "2s", "timeout": "1500ms"}}
                        for i in range(sources)
                    ],
                }
            )
        )  # fmt: skip
        log = Path(tmp) / "specmon.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "specmon", "run", "--config.file", str(config),
                 "--web.listen-address", "127.0.0.1:0", "--log.format", "json"],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            port = _port(log, time.monotonic() + 30)
            rss_max = 0
            slowest = 0.0
            end = time.monotonic() + seconds
            next_rss = 0.0
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_rss:
                    rss_max = max(rss_max, _status(proc.pid).get("VmRSS", 0))
                    next_rss = now + 0.1
                started = time.monotonic()
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=15) as r:
                    r.read()
                slowest = max(slowest, time.monotonic() - started)
                time.sleep(0.05)
            hwm = _status(proc.pid).get("VmHWM", 0)
            text = log.read_text("utf-8", "replace")
            return {
                "scenario": name,
                "sources": sources,
                "seconds": seconds,
                "body_bytes": len(body),
                "answers": fake.answers,
                "peak_rss_bytes": hwm,
                "max_sampled_rss_bytes": rss_max,
                "slowest_healthz_seconds": round(slowest, 3),
                "too_large_lines": text.count("too_large"),
            }
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _port(log: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        if log.exists():
            for line in log.read_text("utf-8", "replace").splitlines():
                if '"specmon_started"' in line:
                    return int(json.loads(line)["port"])
        time.sleep(0.05)
    raise RuntimeError("specmon did not start: " + log.read_text("utf-8", "replace")[-2000:])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench promhostile")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    empty = HEAD + b",".join([b"{}"] * 20_000_000) + b"]}}"  # 60 MB
    bomb = gzip.compress(HEAD + b" " * (96 << 20))
    results = [
        scenario("empty-objects", empty, gzipped=False, sources=1, seconds=args.seconds),
        scenario("bombs", bomb, gzipped=True, sources=8, seconds=args.seconds),
    ]
    for r in results:
        print(json.dumps(r))
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(results, indent=1) + "\n")
    ok = (
        results[0]["peak_rss_bytes"] < 500e6
        and results[0]["slowest_healthz_seconds"] <= 0.5
        and results[1]["max_sampled_rss_bytes"] < 400e6
    )
    return 0 if ok else 1
