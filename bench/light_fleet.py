"""A light fleet server for ``python -m bench cost``: N simulated vLLM engines on one port.

Run: python -m bench.light_fleet --targets N [--first I] [--listen 127.0.0.1:PORT] [--gzip-level 1]
     [--twins]

Why not ``specmon simulate --shared-port``: measured on a 2-core machine, the
stock simulator costs about 1.06 ms of CPU per page served, 0.77 ms of it compressing the
56 KB page with zlib level 6 (aiohttp's default, because the daemon asks for gzip, as
Prometheus does). 5,000 targets every 5 s is 1,000 pages/s: more than one core for the
simulator alone, on a machine whose other core the daemon needs. This server renders exactly
the same pages (the same :class:`specmon.sim.server.VirtualTarget`, real vLLM 0.32.0 page
format, the same counters model) and still gzips them when asked, but at zlib level 1
(0.21 ms a page; the daemon inflates either in about 0.1 ms), with no routing beyond one path.
The daemon sees the same bytes after decompression; only the compressed size differs
(about 7.2 KB instead of 6.1 KB). The daemon asks for gzip only with
``enable_compression: true``, so by default this server sends the page as it is. Several of
these processes can share a fleet
(``--first``), so the simulator can use a second core.

Targets are named ``vllm-I`` for I in [first, first + targets) and served at
``/t/vllm-I/metrics`` (and ``/t/vllm-I/metrics/``, which honours ``?name[]=`` as vLLM's does);
``/stats`` answers ``{"targets": N, "pages": served}``.
Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import zlib
from dataclasses import replace

from aiohttp import web

from specmon.config_values import parse_listen_address
from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind, restrict_page
from specmon.sim.server import VirtualTarget, make_target

__all__ = ["FleetServer", "main"]


class FleetServer:
    def __init__(self, targets: list[VirtualTarget], *, gzip_level: int) -> None:
        self.targets = {t.name: t for t in targets}
        self.gzip_level = gzip_level
        self.pages = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/t/{name}/metrics", self._metrics)
        # As vLLM: /metrics/ is prometheus_client's app and honours ?name[]= (specmon's
        # name_filter); /metrics ignores it.
        app.router.add_get("/t/{name}/metrics/", self._metrics)
        app.router.add_get("/stats", self._stats)
        app.router.add_get("/targets", self._stats)  # readiness, as specmon simulate
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        target = self.targets.get(request.match_info["name"])
        if target is None:
            raise web.HTTPNotFound(text="no such target\n")
        target.tick()
        page = target.page()
        names = request.query.getall("name[]", [])
        if names and request.path.endswith("/"):
            page = restrict_page(page, names)
        body = page.encode("utf-8")
        headers = {"Content-Type": target.template.content_type}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            compressor = zlib.compressobj(self.gzip_level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            body = compressor.compress(body) + compressor.flush()
            headers["Content-Encoding"] = "gzip"
        self.pages += 1
        return web.Response(body=body, headers=headers)

    async def _stats(self, request: web.Request) -> web.Response:
        return web.Response(
            text=json.dumps({"targets": len(self.targets), "pages": self.pages}),
            content_type="application/json",
        )


def build(
    *, first: int, count: int, drafts_per_second: float, seed: int, twins: bool = False
) -> list[VirtualTarget]:
    """``twins``: every odd target (by its index in the whole fleet) does not speculate: the
    twin of the target before it, serving the same traffic without a draft."""
    settings = SimSettings(survival=(0.8, 0.6, 0.4), drafts_per_second=drafts_per_second)
    settings.validate()
    plain = replace(settings, speculation=False)
    return [
        make_target(
            name=f"vllm-{i}",
            kind=PageKind.VLLM,
            settings=plain if twins and i % 2 else settings,
            seed=seed + i,
        )
        for i in range(first, first + count)
    ]


async def serve(server: FleetServer, host: str, port: int) -> None:
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.light_fleet")
    p.add_argument("--targets", type=int, required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--listen", default="127.0.0.1:0")
    p.add_argument("--gzip-level", type=int, default=1, choices=range(1, 10))
    p.add_argument("--drafts-per-second", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--twins", action="store_true", help="every odd target does not speculate")
    args = p.parse_args(argv)
    host, port = parse_listen_address(args.listen)
    targets = build(
        first=args.first,
        count=args.targets,
        drafts_per_second=args.drafts_per_second,
        seed=args.seed,
        twins=args.twins,
    )
    server = FleetServer(targets, gzip_level=args.gzip_level)
    asyncio.run(serve(server, host or "127.0.0.1", port))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
