"""``specmon tap``'s process: the listening socket (secured as the daemon's, by
:mod:`specmon.web`), the proxy, the tap's own ``/metrics`` and ``/healthz``, reload and stop.

Paths the tap answers itself: ``GET /metrics`` (basic auth and the web config's headers apply
when configured) and ``GET /healthz`` (never authenticated: probes send no password). Every
other request goes to the engine untouched: the web config's basic auth and extra headers do
not apply to it (clients carry the engine's own credentials, which pass through), while TLS,
the connection limit and the request-head timeout cover the whole listener.

SIGHUP re-reads ``--config.file`` (the class rule and limits; a new ``upstream`` needs a
restart) and the web config; a file that fails its checks is refused and the running one kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics
from prometheus_client.exposition import choose_encoder

from specmon import __version__
from specmon.config_values import ConfigError
from specmon.logs import Logger, get_logger
from specmon.tap.config import TapConfig, read_tap_config
from specmon.tap.metrics import TapCollector, TapCounts
from specmon.tap.proxy import Proxy, reuse_trace
from specmon.web import WebOptions, WebServer
from specmon.web.server import WebMetrics

__all__ = ["OWN_PATHS", "Tap"]

#: The paths the tap answers itself; everything else is the engine's.
OWN_PATHS = frozenset({"/metrics", "/healthz"})
_PROBES = frozenset({"/healthz"})
#: How long an idle connection to the engine is kept for the next request.
KEEPALIVE_SECONDS = 2.0
#: Seconds a stop waits for responses in flight before it closes them.
STOP_GRACE = 10.0


def _upstream_session(connector: aiohttp.TCPConnector) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),
        trace_configs=[reuse_trace()],
    )


def _only_own(middleware: Middleware) -> Middleware:
    """``middleware`` for the tap's own paths; proxied requests pass it by."""

    @web.middleware
    async def own(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OWN_PATHS:
            return await middleware(request, handler)
        return await handler(request)

    return own


class Tap:
    """One tap: ``start`` binds and serves, ``stop`` ends it; ``serve`` runs to a signal."""

    def __init__(
        self,
        config: TapConfig,
        *,
        listen: tuple[str | None, int],
        web_options: WebOptions | None = None,
        config_path: Path | None = None,
        overrides: dict[str, Any] | None = None,
        log: Logger | None = None,
    ) -> None:
        self.config = config
        self.log = log or get_logger(component="tap")
        self._listen = listen
        self._config_path = config_path
        self._overrides = dict(overrides or {})
        # Counters need no _created siblings (the daemon's choice too; process-wide).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self.counts = TapCounts(
            config.classes.classes(), long_request_tokens=config.long_request_tokens
        )
        self.registry.register(TapCollector(self.counts, version=__version__))
        self.web = WebServer(
            web_options or WebOptions(),
            metrics=WebMetrics(
                reload_ok=Gauge(
                    "specmon_tap_web_config_last_reload_successful",
                    "1 if the last load of --web.config.file succeeded (1 without one).",
                    registry=self.registry,
                ),
                reload_time=Gauge(
                    "specmon_tap_web_config_last_reload_success_timestamp_seconds",
                    "Unix time of the last successful load of --web.config.file.",
                    registry=self.registry,
                ),
                rejections=Counter(
                    "specmon_tap_web_rejections",
                    "Requests and connections the tap refused, by reason (as "
                    "specmon_web_rejections_total).",
                    ["reason"],
                    registry=self.registry,
                ),
            ),
            log=self.log,
        )
        self.reload_ok = Gauge(
            "specmon_tap_config_last_reload_successful",
            "1 if the last load of the tap's --config.file succeeded; 0: the previous one is "
            "still in use.",
            registry=self.registry,
        )
        self.reload_ok.set(1)
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self.bound_port: int | None = None
        self.proxy = Proxy(
            config=lambda: self.config,
            counts=self.counts,
            session=self._get_session,
            fresh=self._get_fresh_session,
            log=self.log,
        )

    # -- HTTP -------------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_upstream_connections,
                limit_per_host=0,
                enable_cleanup_closed=True,
                # Below the engines' own idle timeouts (uvicorn's and cpp-httplib's 5 s): a
                # connection they closed is never reused for a request, which a POST cannot
                # be retried after.
                keepalive_timeout=KEEPALIVE_SECONDS,
            )
            self._session = _upstream_session(connector)
        return self._session

    def _get_fresh_session(self) -> aiohttp.ClientSession:
        """The session of retries: a new connection for each request, closed after it."""
        if self._fresh is None or self._fresh.closed:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_upstream_connections,
                limit_per_host=0,
                force_close=True,
                enable_cleanup_closed=True,
            )
            self._fresh = _upstream_session(connector)
        return self._fresh

    def build_app(self) -> web.Application:
        deadline, headers, auth = self.web.middlewares()
        app = web.Application(middlewares=[deadline, _only_own(headers), _only_own(auth)])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_route("*", "/{tail:.*}", self.proxy.handle)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> int:
        """Load the web config, bind and serve; the bound port (the listen port may be 0)."""
        self.web.load()
        self._runner = web.AppRunner(
            self.build_app(),
            handle_signals=False,
            access_log=None,
            handler_cancellation=True,  # a client gone: the engine's request closed at once
            **self.web.handler_options(),
        )
        await self._runner.setup()
        host, port = self._listen
        self.bound_port = await self.web.listen(self._runner, host, port)
        self.log.info(
            "tap_started",
            upstream=self.config.upstream,
            port=self.bound_port,
            classes=list(self.config.classes.classes()),
            rule=self.config.classes.source.value,
        )
        return self.bound_port

    async def stop(self) -> None:
        await self.web.close()
        if self._runner is not None:
            await self._runner.shutdown()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), STOP_GRACE)
            self._runner = None
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    def reload(self) -> bool:
        """Re-read the config file and the web config; keep what runs when either fails."""
        ok = True
        if self._config_path is not None:
            try:
                config = read_tap_config(self._config_path, overrides=self._overrides)
                if config.upstream != self.config.upstream:
                    raise ConfigError(
                        ["upstream: cannot change by a reload: restart the tap"],
                        source=str(self._config_path),
                    )
            except ConfigError as exc:
                ok = False
                self.reload_ok.set(0)
                self.log.error("tap_config_reload_failed", problems=exc.problems, kept="previous")
            else:
                self.counts.adopt(config.classes.classes())
                self.counts.long_request_tokens = config.long_request_tokens
                self.config = config
                self.reload_ok.set(1)
                self.log.info("tap_config_reloaded", file=str(self._config_path))
        web_ok, _ = self.web.reload(reason="SIGHUP")
        return ok and web_ok

    def request_stop(self) -> None:
        self._stop.set()

    async def serve(self, *, ready: Callable[[int], None] | None = None) -> int:
        """Start, run until SIGTERM or SIGINT (SIGHUP reloads), stop; the exit status."""
        try:
            port = await self.start()
        except (OSError, ConfigError) as exc:
            self.log.error("tap_start_failed", error=str(exc)[:300])
            await self.stop()
            return 1
        if ready is not None:
            ready(port)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self.reload)
        try:
            await self._stop.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            self.log.info("tap_stopping")
            await self.stop()
        return 0
