"""The daemon: targets, their scrape tasks, reloads, the HTTP server, and a clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import gzip
import json
import platform
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder

from specmon import __version__
from specmon.daemon.collector import TargetCollector
from specmon.daemon.config import (
    Config,
    ConfigError,
    FileSDConfig,
    TargetConfig,
    default_config,
    format_duration,
    load_config,
    load_file_sd,
)
from specmon.daemon.scraper import SCRAPE_RESULTS, TargetScraper
from specmon.daemon.status_page import render_status, views_json
from specmon.daemon.target import TargetState, TargetView
from specmon.logs import get_logger
from specmon.web.server import WebOptions, WebServer  # security: TLS, auth, header timeouts

__all__ = ["Daemon", "parse_listen_address"]


def parse_listen_address(address: str) -> tuple[str | None, int]:
    """``:10920`` (all interfaces), ``127.0.0.1:10920``, ``[::1]:10920``."""
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(f"{address!r}: expected HOST:PORT or :PORT")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"{address!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{address!r}: port out of range")
    host = host.strip("[]")
    return (host or None), port


@dataclass
class _Running:
    state: TargetState
    scraper: TargetScraper
    task: asyncio.Task[None]


class _OwnMetrics:
    """specmon's own instruments: ordinary prometheus_client metrics in the daemon's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scrapes_total = Counter(
            "specmon_scrapes",
            "Scrapes of each target by specmon, by result (success, http_error, timeout, "
            "connection_error, too_large, parse_error, internal_error).",
            ["target", "result"],
            registry=registry,
        )
        build = Gauge(
            "specmon_build_info",
            "specmon's version and Python version; always 1.",
            ["version", "python"],
            registry=registry,
        )
        build.labels(version=__version__, python=platform.python_version()).set(1)
        self.reload_ok = Gauge(
            "specmon_config_last_reload_successful",
            "1 if the last configuration (re)load succeeded; 0 means the old config is still in use.",
            registry=registry,
        )
        self.reload_time = Gauge(
            "specmon_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration (re)load.",
            registry=registry,
        )
        self.targets = Gauge(
            "specmon_targets", "Targets specmon currently scrapes.", registry=registry
        )
        self.file_sd_errors = Counter(
            "specmon_file_sd_read_errors",
            "Failed reads of file_sd files (the targets from the last good read are kept).",
            registry=registry,
        )


class Daemon:
    def __init__(
        self,
        *,
        config_path: Path | None,
        listen: str = ":10920",
        shutdown_timeout: float = 3.0,
        web_options: WebOptions | None = None,  # security: --web.* flags (specmon/web)
    ) -> None:
        self.config_path = config_path
        self.listen = listen
        self.shutdown_timeout = shutdown_timeout
        self.log = get_logger()
        # specmon_scrapes_total etc. need no _created siblings (they double the series count).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            with contextlib.suppress(ValueError):
                self.registry.register(collector)
        self.metrics = _OwnMetrics(self.registry)
        self.registry.register(TargetCollector(self.views))
        # security: the listening socket, --web.config.file, lifecycle flag (specmon/web)
        self.web = WebServer(web_options or WebOptions(), registry=self.registry, log=self.log)
        self.config: Config | None = None
        self._running: dict[str, _Running] = {}
        self._file_sd_targets: dict[str, list[TargetConfig]] = {}
        self._file_sd_mtimes: dict[str, tuple[float, int]] = {}
        self._file_sd_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pending_first: set[str] = set()
        self._stopping = asyncio.Event()
        self._shutting_down = False
        self._reload_lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None

    # -- state for readers ------------------------------------------------------------------

    def views(self) -> list[TargetView]:
        return [
            r.state.view for r in sorted(self._running.values(), key=lambda r: r.state.config.name)
        ]

    @property
    def ready(self) -> bool:
        return self.config is not None and not self._pending_first and not self._shutting_down

    def primary_window(self) -> str:
        if self.config is None:
            return "5m"
        windows = self.config.global_.windows
        return format_duration(windows[len(windows) // 2])

    # -- config -----------------------------------------------------------------------------

    def _read_config(self) -> Config:
        if self.config_path is None:
            return default_config()
        return load_config(self.config_path)

    async def reload(self) -> tuple[bool, str]:
        """Load the config file again; keep the running config if the new one is invalid."""
        async with self._reload_lock:
            try:
                config = self._read_config()
            except ConfigError as exc:
                self.metrics.reload_ok.set(0)
                self.log.error(
                    "config_reload_failed",
                    file=str(self.config_path),
                    problems=exc.problems,
                    kept="previous configuration",
                )
                return False, str(exc)
            self._apply(config)
            self.metrics.reload_ok.set(1)
            self.metrics.reload_time.set(time.time())
            self.log.info(
                "config_loaded",
                file=config.source,
                targets=len(self._running),
            )
            return True, f"loaded {config.source}: {len(self._running)} target(s)"

    def _desired_targets(self, config: Config) -> list[TargetConfig]:
        desired: dict[str, TargetConfig] = {t.name: t for t in config.targets}
        for path in sorted(self._file_sd_targets):
            for target in self._file_sd_targets[path]:
                if target.name in desired:
                    self.log.warning(
                        "file_sd_duplicate_target",
                        target=target.name,
                        file=path,
                        kept=desired[target.name].origin,
                    )
                    continue
                desired[target.name] = target
        return list(desired.values())

    def _apply(self, config: Config) -> None:
        first = self.config is None
        self.config = config
        if self.config_path is not None and not config.file_sd:
            self._file_sd_targets.clear()
        self._refresh_file_sd(config)
        self._sync_targets(config, initial=first)
        if self._file_sd_task is None and config.file_sd:
            self._file_sd_task = asyncio.create_task(self._watch_file_sd())

    def _sync_targets(self, config: Config, *, initial: bool) -> None:
        glob_cfg = config.global_
        desired = {t.name: t for t in self._desired_targets(config)}
        for name in list(self._running):
            if name not in desired:
                self._stop_target(name)
                self.log.info("target_removed", target=name)
        for name, target in desired.items():
            running = self._running.get(name)
            if running is not None and running.state.config.identity() == target.identity():
                running.state.reconfigure(
                    target, windows=glob_cfg.windows, retention=config.retention
                )
                continue
            if running is not None:
                self._stop_target(name)
                self.log.info(
                    "target_restarted", target=name, reason="url, engine or model changed"
                )
            self._start_target(target, config)
            if initial:
                self._pending_first.add(name)
        self.metrics.targets.set(len(self._running))

    def _start_target(self, target: TargetConfig, config: Config) -> None:
        state = TargetState(target, windows=config.global_.windows, retention=config.retention)
        scraper = TargetScraper(
            state,
            session=self._get_session,
            max_bytes=lambda: self.config.global_.max_response_bytes if self.config else 10 * 2**20,
            scrapes_total=self.metrics.scrapes_total,
            log=self.log,
            on_scraped=self._pending_first.discard,
        )
        task = asyncio.create_task(scraper.run(), name=f"scrape:{target.name}")
        self._running[target.name] = _Running(state, scraper, task)

    def _stop_target(self, name: str) -> None:
        running = self._running.pop(name)
        running.task.cancel()
        self._pending_first.discard(name)
        for result in SCRAPE_RESULTS:
            with contextlib.suppress(KeyError):
                self.metrics.scrapes_total.remove(name, result)

    # -- file_sd ----------------------------------------------------------------------------

    def _refresh_file_sd(self, config: Config) -> bool:
        """Re-read changed file_sd files. Returns True when the target list changed."""
        changed = False
        seen: set[str] = set()
        for sd in config.file_sd:
            for pattern in sd.files:
                for path in sorted(glob.glob(pattern)):
                    seen.add(path)
                    changed |= self._read_file_sd(Path(path), sd, config)
        for gone in set(self._file_sd_targets) - seen:
            del self._file_sd_targets[gone]
            self._file_sd_mtimes.pop(gone, None)
            changed = True
        return changed

    def _read_file_sd(self, path: Path, sd: FileSDConfig, config: Config) -> bool:
        try:
            stat = path.stat()
        except OSError:
            return False
        key = str(path)
        stamp = (stat.st_mtime, stat.st_size)
        if self._file_sd_mtimes.get(key) == stamp:
            return False
        self._file_sd_mtimes[key] = stamp
        targets, problems = load_file_sd(path, sd, config.global_)
        if problems:
            self.metrics.file_sd_errors.inc()
            self.log.error("file_sd_invalid", file=key, problems=problems, kept="previous targets")
            return False
        self._file_sd_targets[key] = targets
        self.log.info("file_sd_loaded", file=key, targets=len(targets))
        return True

    async def _watch_file_sd(self) -> None:
        while True:
            config = self.config
            interval = (
                min((sd.refresh_interval for sd in config.file_sd), default=30.0)
                if config
                else 30.0
            )
            await asyncio.sleep(interval)
            config = self.config
            if config is None or not config.file_sd:
                continue
            try:
                if self._refresh_file_sd(config):
                    self._sync_targets(config, initial=False)
            except Exception:  # keep watching whatever happens
                self.log.exception("file_sd_refresh_failed")

    # -- HTTP -------------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, ttl_dns_cache=60),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=True,
                trust_env=False,
                headers={"User-Agent": f"specmon/{__version__}"},
            )
        return self._session

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=self.web.middlewares())  # security: auth, headers
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_post("/-/reload", self._reload_http)
        app.router.add_put("/-/reload", self._reload_http)  # as Prometheus
        app.router.add_get("/api/v1/targets", self._targets_json)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = encoder(self.registry)
        headers = {"Content-Type": content_type}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._shutting_down:
            return web.Response(status=503, text="shutting down\n")
        if self.config is None:
            return web.Response(status=503, text="configuration not loaded\n")
        if self._pending_first:
            return web.Response(
                status=503,
                text=f"waiting for the first scrape of {len(self._pending_first)} target(s)\n",
            )
        return web.Response(text="ready\n")

    async def _reload_http(self, request: web.Request) -> web.Response:
        # security: as Prometheus, only with --web.enable-lifecycle (SIGHUP always works).
        if not self.web.lifecycle_enabled:
            self.web.reject("lifecycle_disabled")
            return web.Response(status=403, text="Lifecycle API is not enabled.\n")
        ok, message = await self._reload_all()
        return web.Response(status=200 if ok else 500, text=message + "\n")

    async def _index(self, request: web.Request) -> web.Response:
        html = render_status(self.views(), primary_window=self.primary_window(), ready=self.ready)
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    async def _targets_json(self, request: web.Request) -> web.Response:
        body = json.dumps({"ready": self.ready, "targets": views_json(self.views())})
        return web.Response(text=body, content_type="application/json")

    async def _reload_all(self) -> tuple[bool, str]:
        """security: the config and the web config (--web.config.file), each keeping its
        previous version when the new one is invalid."""
        web_ok, web_message = self.web.reload()
        ok, message = await self.reload()
        return ok and web_ok, "\n".join(m for m in (message, web_message) if m)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the config (raises ConfigError), start scraping, and listen."""
        self.web.load()  # security: raises WebConfigError (a ConfigError) when invalid
        config = self._read_config()
        self._apply(config)
        self.metrics.reload_ok.set(1)
        self.metrics.reload_time.set(time.time())
        host, port = parse_listen_address(self.listen)
        self._runner = web.AppRunner(
            self.build_app(),
            access_log=None,
            shutdown_timeout=self.shutdown_timeout,
            **self.web.handler_options(),  # security: keep-alive and header size limits
        )
        await self._runner.setup()
        # security: specmon/web listens (TLS, connection limit, header read timeout).
        self.bound_port = await self.web.listen(self._runner, host, port)
        self.log.info(
            "specmon_started",
            version=__version__,
            listen=self.listen,
            port=self.bound_port,
            config=config.source,
            targets=len(self._running),
            windows=[format_duration(w) for w in config.global_.windows],
        )

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait(self) -> None:
        await self._stopping.wait()

    async def stop(self) -> None:
        self._shutting_down = True
        self.log.info("specmon_stopping")
        tasks = [r.task for r in self._running.values()]
        if self._file_sd_task is not None:
            tasks.append(self._file_sd_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        await self.web.close()  # security: stop listening before the runner closes connections
        if self._runner is not None:
            await self._runner.cleanup()
        self.log.info("specmon_stopped")

    async def serve(self) -> int:
        """Run until SIGTERM/SIGINT; SIGHUP reloads. Returns the exit status."""
        loop = asyncio.get_running_loop()
        try:
            await self.start()
        except ConfigError as exc:
            self.log.error("config_invalid", file=exc.source, problems=exc.problems)
            return 1
        except OSError as exc:
            self.log.error("listen_failed", listen=self.listen, error=str(exc))
            await self.stop()
            return 1
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: asyncio.ensure_future(self._reload_all()))
        try:
            await self.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            await self.stop()
        return 0
