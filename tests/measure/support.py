"""Simulated servers for ``specmon measure`` tests: a baseline and a with-draft twin, in-process
on their own event loop, with a middleware that records what the servers saw (requests in
flight, Authorization headers) and can demand an API key."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import SimServer, VirtualTarget, make_target

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Seen:
    """What one server saw."""

    chat_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    authorization: list[str | None] = field(default_factory=list)
    #: Chat requests: when each arrived (time.monotonic) and its body.
    arrivals: list[float] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)


def sim_target(
    name: str,
    *,
    speculation: bool,
    kind: PageKind = PageKind.LLAMACPP,
    survival: tuple[float, ...] = (0.8, 0.6, 0.4),
    seed: int = 1,
    **options: Any,
) -> VirtualTarget:
    """A simulated engine whose counters move only with chat requests (no background drafts)."""
    settings = SimSettings(survival=survival, drafts_per_second=0.0, speculation=speculation)
    return make_target(name=name, kind=kind, settings=settings, model="tiny-llama", seed=seed,
                       **options)  # fmt: skip


class SimPair:
    """Servers for a list of targets, each on its own free port, in a background thread."""

    def __init__(
        self,
        targets: list[VirtualTarget],
        *,
        require_key: str | None = None,
        echo_key_every: int = 0,
    ) -> None:
        self.targets = {t.name: t for t in targets}
        self.seen = {t.name: Seen() for t in targets}
        self.urls: dict[str, str] = {}
        self._require_key = require_key
        self._echo_key_every = echo_key_every
        self._server = SimServer(targets)
        self._runners: list[web.AppRunner] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _middleware(self, name: str) -> Any:
        seen = self.seen[name]

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            auth = request.headers.get("Authorization")
            seen.authorization.append(auth)
            if self._require_key is not None and auth != f"Bearer {self._require_key}":
                return web.json_response({"error": "missing or wrong API key"}, status=401)
            if request.path.endswith("/chat/completions"):
                seen.arrivals.append(time.monotonic())
                seen.bodies.append(await request.json())
                seen.chat_requests += 1
                if self._echo_key_every and seen.chat_requests % self._echo_key_every == 0:
                    # A careless server that echoes the request's headers in an error.
                    return web.Response(status=400, text=f"bad request; headers: {auth}")
                seen.in_flight += 1
                seen.max_in_flight = max(seen.max_in_flight, seen.in_flight)
                try:
                    return await handler(request)
                finally:
                    seen.in_flight -= 1
            return await handler(request)

        return middleware

    async def _start(self) -> None:
        for name, target in self.targets.items():
            app = self._server.app_for(target)
            app.middlewares.append(self._middleware(name))
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self._runners.append(runner)
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self.urls[name] = f"http://127.0.0.1:{port}"

    async def _stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def api(self, name: str) -> str:
        return self.urls[name] + "/v1"


@contextmanager
def sim_pair(
    baseline: VirtualTarget | None = None,
    speculative: VirtualTarget | None = None,
    **kwargs: Any,
) -> Iterator[SimPair]:
    """``baseline`` and ``speculative`` targets (defaults: llama.cpp, no step time)."""
    base = baseline or sim_target("baseline", speculation=False)
    spec = speculative or sim_target("speculative", speculation=True)
    pair = SimPair([base, spec], **kwargs)
    pair.start()
    try:
        yield pair
    finally:
        pair.stop()
