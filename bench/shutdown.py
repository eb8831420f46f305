"""Stop benchmark: how long ``specmon run`` takes to exit after SIGTERM while sixteen Prometheus
sources fail in every way, and whether it ever hangs.

Run: ./dev.sh bench shutdown [--tries 50] [--sources 16] [--json-out FILE]

A fake ``/api/v1/query`` on loopback (aiohttp, in a thread of this process) answers each query
with a server error, an answer over the source's size cap (a compressed bomb), or too late
for the read's timeout; a real ``specmon run`` reads it through ``--sources`` sources every
500 ms. Each try sends SIGTERM between 1 and 4 s after the daemon listens, at a different
moment of its reads, and records the exit status and the seconds from the signal to the
exit. A try that has not exited 20 s after the signal is killed and counted as hung.
Goal: every try exits 0, within 11 s (the daemon's stop deadline is 10 s).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

SELECTOR = '{job="vllm"}'
BOMB = gzip.compress(
    b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * (64 << 20)
)


class FailingPrometheus:
    """Every query fails: HTTP 500, a gzip bomb over any cap, or a late answer."""

    def __init__(self) -> None:
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.queries = 0

    def __enter__(self) -> FailingPrometheus:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake Prometheus did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _query(self, request: web.Request) -> web.Response:
        self.queries += 1
        kind = self.queries % 3
        if kind == 0:
            return web.Response(status=500, text="internal server error")
        if kind == 1:
            return web.Response(
                body=BOMB,
                headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
            )
        await asyncio.sleep(1.0)
        return web.json_response({"status": "success", "data": {"result": []}})

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


def _config(path: Path, url: str, sources: int) -> None:
    doc: dict[str, Any] = {
        "global": {"scrape_interval": "5s", "windows": ["1m"]},
        "targets": [],
        "sources": [
            {
                "prometheus": {
                    "url": url,
                    "name": f"p{i}",
                    "selector": SELECTOR,
                    "interval": "500ms",
                    "timeout": "400ms",
                    "max_response_bytes": "1MiB",
                }
            }
            for i in range(sources)
        ],
    }
    path.write_text(yaml.safe_dump(doc))


def _listening(log: Path, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if log.exists() and b"specmon_started" in log.read_bytes():
            return True
        time.sleep(0.05)
    return False


def one_try(config: Path, log: Path, delay: float) -> dict[str, Any]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specmon", "run", "--config.file", str(config),
             "--web.listen-address", "127.0.0.1:0", "--log.format", "json"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        if not _listening(log, time.monotonic() + 30):
            return {"status": None, "seconds": None, "error": "did not start"}
        time.sleep(delay)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            return {"status": None, "seconds": None, "error": "hung: killed 20 s after SIGTERM"}
        text = log.read_text("utf-8", "replace")
        return {
            "status": status,
            "seconds": round(time.monotonic() - sent, 3),
            "delay": round(delay, 3),
            "abandoned": "specmon_stop_abandoned" in text,
        }
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench shutdown")
    parser.add_argument("--tries", type=int, default=50)
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--json-out", type=Path, default=None)
    args = parser.parse_args(argv)
    rng = random.Random(20261205)
    tries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, FailingPrometheus() as fake:
        config = Path(tmp) / "specmon.yml"
        _config(config, fake.url, args.sources)
        for index in range(args.tries):
            result = one_try(config, Path(tmp) / "specmon.log", rng.uniform(1.0, 4.0))
            tries.append(result)
            print(f"try {index + 1}/{args.tries}: {result}", flush=True)
    times = [t["seconds"] for t in tries if t["seconds"] is not None]
    summary = {
        "tries": len(tries),
        "sources": args.sources,
        "clean": sum(1 for t in tries if t.get("status") == 0 and not t.get("abandoned")),
        "within_11s": sum(1 for s in times if s <= 11.0),
        "max_seconds": max(times, default=None),
        "median_seconds": sorted(times)[len(times) // 2] if times else None,
        "hung": sum(1 for t in tries if t["status"] is None),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary))
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps({"summary": summary, "tries": tries}, indent=1) + "\n")
    return 0 if summary["clean"] == len(tries) else 1
