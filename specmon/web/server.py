"""specmon's listening socket: TLS, basic auth, headers, connection limits, header timeouts.

:class:`WebServer` owns everything between the network and the daemon's aiohttp handlers:

- the web config (``--web.config.file``), loaded at start, re-read with the daemon's config
  on SIGHUP or ``POST /-/reload`` and whenever the web config or a file it names (certificate,
  key, client CA) changes on disk; a bad new one is refused and the running one kept, as for
  the main config (see docs/security.md, "Reloading");
- the listening socket, created with ``loop.create_server`` around aiohttp's own
  :class:`aiohttp.web.Server`, each connection wrapped in :class:`_Connection`, which
  enforces the header read timeout (aiohttp has none: a client that never finishes its request
  head would otherwise hold the connection until the keep-alive timeout), the connection limit
  and ``client_allowed_sans``;
- the middlewares for basic auth and extra headers.

A deadline per request head: from the moment the connection is ready (after the TLS
handshake, itself bounded by the same timeout) for the first request, and from the first byte
of each later request on a kept-alive connection (the idle time between requests is aiohttp's
keep-alive timeout). A request reaching the application stops the clock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ipaddress
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client import Counter, Gauge

from specmon.web.config import WebConfig, WebConfigError, read_web_config
from specmon.web.security import (
    BasicAuth,
    ReloadableSSLContext,
    allowed_peer,
    auth_middleware,
    build_ssl_context,
    headers_middleware,
)

__all__ = [
    "PROBE_PATHS",
    "REJECTION_REASONS",
    "WebMetrics",
    "WebOptions",
    "WebServer",
    "WebSettings",
    "load_web_settings",
]

#: Served without basic authentication: Kubernetes' and Docker's probes send no password.
#: They answer "ok" and "ready"/"not ready (why)" and nothing else.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
REJECTION_REASONS = (
    "unauthorized",
    "auth_busy",
    "header_timeout",
    "too_many_connections",
    "client_san",
    "lifecycle_disabled",
)
#: Request line and each header line at most 8 KiB (aiohttp's defaults, made explicit), at
#: most 100 header fields: a request head is at most about 800 KiB, then 400 and closed.
MAX_LINE_BYTES = 8190
MAX_HEADERS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class WebOptions:
    """The ``--web.*`` flags of ``specmon run`` besides the listen address."""

    config_file: Path | None = None
    enable_lifecycle: bool = False
    read_header_timeout: float = 10.0
    max_connections: int = 512
    #: Idle time allowed between requests on a kept-alive connection (above Prometheus'
    #: usual scrape intervals, so that scrapes reuse their connection).
    keepalive_timeout: float = 120.0
    #: How often the web config and the files it names are checked for changes.
    watch_interval: float = 5.0


@dataclass(frozen=True, slots=True)
class WebSettings:
    """A web config with what was built from it."""

    config: WebConfig
    ssl_context: ssl.SSLContext | None
    auth: BasicAuth | None

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None


def load_web_settings(path: Path, *, executor: concurrent.futures.Executor) -> WebSettings:
    """Read ``path`` and build its TLS context; :class:`WebConfigError` lists every problem."""
    try:
        config = read_web_config(path)
    except WebConfigError as exc:
        if exc.tls is not None:  # list the certificate files' problems too
            try:
                build_ssl_context(exc.tls, source=str(path))
            except WebConfigError as files:
                error = WebConfigError([*exc.problems, *files.problems], source=str(path))
                error.tls = exc.tls
                raise error from None
        raise
    try:
        context = build_ssl_context(config.tls, source=str(path)) if config.tls else None
    except WebConfigError as exc:
        exc.tls = config.tls  # its files are worth watching: one may be on its way
        raise
    auth = BasicAuth(config.users, executor=executor) if config.users else None
    return WebSettings(config=config, ssl_context=context, auth=auth)


def _stamp(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class WebMetrics:
    """The server's own instruments, created by the daemon from its metric table
    (specmon/daemon/metrics.py): reload state and refusals by reason."""

    reload_ok: Gauge
    reload_time: Gauge
    rejections: Counter

    def __post_init__(self) -> None:
        for reason in REJECTION_REASONS:
            self.rejections.labels(reason=reason)


class WebServer:
    def __init__(
        self,
        options: WebOptions,
        *,
        metrics: WebMetrics | None = None,
        log: Any = None,
    ) -> None:
        self.options = options
        self.log = log if log is not None else structlog.get_logger()
        self._metrics = metrics
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="specmon-bcrypt"
        )
        self.settings = WebSettings(config=WebConfig(), ssl_context=None, auth=None)
        self._listening_context: ReloadableSSLContext | None = None
        self._stamps: dict[Path, tuple[int, int, int, int] | None] = {}
        self._servers: list[asyncio.AbstractServer] = []
        self._watch_task: asyncio.Task[None] | None = None
        self._connections: dict[object, _Connection] = {}
        self._open = 0

    # -- config -----------------------------------------------------------------------------

    def _watched(self, settings: WebSettings) -> list[Path]:
        assert self.options.config_file is not None
        return [self.options.config_file, *settings.config.files]

    def load(self) -> None:
        """Load the web config at start; raise :class:`WebConfigError` when it is invalid."""
        if self.options.config_file is None:
            if self._metrics is not None:
                self._metrics.reload_ok.set(1)
            return
        before = _stamp(self.options.config_file)  # a change while reading: seen next check
        settings = load_web_settings(self.options.config_file, executor=self._executor)
        self._stamps = {p: _stamp(p) for p in self._watched(settings)}
        self._stamps[self.options.config_file] = before
        self.settings = settings
        self._loaded(settings)

    def _loaded(self, settings: WebSettings) -> None:
        if self._metrics is not None:
            self._metrics.reload_ok.set(1)
            self._metrics.reload_time.set(time.time())
        tls = settings.config.tls
        self.log.info(
            "web_config_loaded",
            file=settings.config.source,
            tls=tls is not None,
            client_auth=tls.client_auth.value if tls else None,
            basic_auth_users=len(settings.config.users),
            headers=[name for name, _ in settings.config.http.headers],
        )

    def reload(self, *, reason: str = "reload") -> tuple[bool, str]:
        """Re-read the web config; keep the running one if the new one is invalid."""
        path = self.options.config_file
        if path is None:
            return True, ""
        before = _stamp(path)  # a change while reading: seen at the next check
        try:
            settings = load_web_settings(path, executor=self._executor)
            if settings.tls != self.settings.tls:
                raise WebConfigError(
                    [
                        "TLS cannot be turned "
                        + ("on" if settings.tls else "off")
                        + " by a reload: restart specmon to change it"
                    ],
                    source=str(path),
                )
        except WebConfigError as exc:
            # Watch the running config's files and the ones the rejected file names: a
            # certificate written after the config that names it fixes it without a signal.
            named = list(exc.tls.files) if exc.tls is not None else []
            self._stamps = {p: _stamp(p) for p in [*self._watched(self.settings), *named]}
            self._stamps[path] = before
            if self._metrics is not None:
                self._metrics.reload_ok.set(0)
            self.log.error(
                "web_config_reload_failed",
                file=str(path),
                trigger=reason,
                problems=exc.problems,
                kept="previous web configuration",
            )
            return False, f"web config {exc}"
        self._stamps = {p: _stamp(p) for p in self._watched(settings)}
        self._stamps[path] = before
        self.settings = settings
        if self._listening_context is not None and settings.ssl_context is not None:
            self._listening_context.install(settings.ssl_context)
        self._loaded(settings)
        return True, f"loaded web config {path}"

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.options.watch_interval)
            try:
                if any(_stamp(p) != stamp for p, stamp in self._stamps.items()):
                    self.reload(reason="file changed")
            except Exception:  # keep watching whatever happens
                self.log.exception("web_config_watch_failed")

    # -- pieces for the daemon --------------------------------------------------------------

    @property
    def lifecycle_enabled(self) -> bool:
        return self.options.enable_lifecycle

    def reject(self, reason: str) -> None:
        if self._metrics is not None:
            self._metrics.rejections.labels(reason=reason).inc()

    def middlewares(self) -> list[Middleware]:
        """For ``web.Application(middlewares=...)``, in this order."""
        return [
            self._deadline_middleware,
            headers_middleware(lambda: self.settings.config.http.headers),
            auth_middleware(lambda: self.settings.auth, exempt=PROBE_PATHS, on_reject=self.reject),
        ]

    def handler_options(self) -> dict[str, Any]:
        """For ``web.AppRunner(app, **...)``: aiohttp's per-connection limits."""
        return {
            "keepalive_timeout": self.options.keepalive_timeout,
            "max_line_size": MAX_LINE_BYTES,
            "max_field_size": MAX_LINE_BYTES,
            "max_headers": MAX_HEADERS,
        }

    @web.middleware
    async def _deadline_middleware(
        self, request: web.Request, handler: Handler
    ) -> web.StreamResponse:
        connection = self._connections.get(request.protocol)
        if connection is not None:
            connection.request_started()
        try:
            return await handler(request)
        finally:
            if connection is not None:
                connection.request_finished()

    # -- listening --------------------------------------------------------------------------

    async def listen(self, runner: web.BaseRunner, host: str | None, port: int) -> int:
        """Serve ``runner``'s application on host:port; return the bound port."""
        server = runner.server
        assert server is not None, "runner.setup() first"
        loop = asyncio.get_running_loop()
        context = None
        if self.settings.ssl_context is not None:
            context = self._listening_context = ReloadableSSLContext(self.settings.ssl_context)
        listening = await loop.create_server(
            lambda: _Connection(self, server()),
            host=host,
            port=port,
            ssl=context,
            ssl_handshake_timeout=self.options.read_header_timeout if context else None,
            reuse_address=True,
            backlog=128,
        )
        self._servers.append(listening)
        sockets = listening.sockets or ()
        bound = int(sockets[0].getsockname()[1]) if sockets else port
        if self.options.config_file is not None and self._watch_task is None:
            self._watch_task = asyncio.create_task(self._watch(), name="web-config-watch")
        config = self.settings.config
        self.log.info(
            "web_serving",
            scheme="https" if context else "http",
            client_auth=config.tls.client_auth.value if config.tls else None,
            basic_auth=bool(config.users),
            lifecycle=self.options.enable_lifecycle,
            read_header_timeout=self.options.read_header_timeout,
            max_connections=self.options.max_connections,
        )
        if context is None and not config.users and not _is_loopback(host):
            self.log.warning(
                "web_unprotected",
                listen=f"{host or ''}:{bound}",
                hint="anyone who can reach this address can read the metrics and status "
                "page; see docs/security.md for --web.config.file (TLS, basic auth) or "
                "listen on 127.0.0.1",
            )
        return bound

    async def close(self) -> None:
        """Stop listening and watching (the daemon's runner closes open connections)."""
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
            self._watch_task = None
        for listening in self._servers:
            listening.close()
        self._servers.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- connections ------------------------------------------------------------------------

    def admit(self, connection: _Connection, inner: object) -> bool:
        if self._open >= self.options.max_connections:
            self.reject("too_many_connections")
            return False
        self._open += 1
        self._connections[inner] = connection
        return True

    def release(self, inner: object) -> None:
        if self._connections.pop(inner, None) is not None:
            self._open -= 1


class _Connection(asyncio.Protocol):
    """One client connection: aiohttp's request handler, with a deadline per request head."""

    def __init__(self, owner: WebServer, inner: asyncio.Protocol) -> None:
        self._owner = owner
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._admitted = False
        self._timer: asyncio.TimerHandle | None = None
        self._in_request = False
        self._data_in_request = False

    # asyncio.Protocol, forwarded to aiohttp -------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport, but are one).
        self._transport = cast(asyncio.Transport, transport)
        transport = self._transport
        if not self._owner.admit(self, self._inner):
            transport.abort()
            return
        self._admitted = True
        tls = self._owner.settings.config.tls
        if (
            tls is not None
            and tls.client_allowed_sans
            and not allowed_peer(transport.get_extra_info("peercert"), tls.client_allowed_sans)
        ):
            self._owner.reject("client_san")
            self._owner.log.debug("web_client_san_refused")
            transport.abort()
            return
        self._inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if not self._admitted:
            return
        if self._in_request:
            self._data_in_request = True
        elif self._timer is None and data:
            self._arm()  # the first byte of the next request head on a kept-alive connection
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if not self._admitted:
            return None
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if not self._admitted:
            return
        self._owner.release(self._inner)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._admitted:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._admitted:
            self._inner.resume_writing()

    # request heads ----------------------------------------------------------------------------

    def request_started(self) -> None:
        self._disarm()
        self._in_request = True
        self._data_in_request = False

    def request_finished(self) -> None:
        self._in_request = False
        if self._data_in_request:  # (part of) the next request arrived meanwhile
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._owner.options.read_header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._in_request or self._transport is None:
            return
        self._owner.reject("header_timeout")
        self._owner.log.debug("web_header_timeout", timeout=self._owner.options.read_header_timeout)
        self._transport.abort()
