"""The daemon: targets, their scrape tasks, reloads, the HTTP server, and a clean shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    disable_created_metrics,
)
from prometheus_client.exposition import choose_encoder

from specmon import __version__, jsontext
from specmon.config_values import format_duration, parse_listen_address
from specmon.daemon.config import (
    Config,
    ConfigError,
    GlobalConfig,
    TargetConfig,
    curve_memory_warning,
    default_config,
    load_config,
)
from specmon.daemon.exposition import Exposition
from specmon.daemon.file_sd import FileSD
from specmon.daemon.governor import Governor, Period, defers
from specmon.daemon.history import History
from specmon.daemon.ingest import Ingest
from specmon.daemon.own_metrics import OwnMetrics
from specmon.daemon.persist import (
    GroupPasts,
    StateKeeper,
    carry_past,
    mark_targets,
)
from specmon.daemon.prometheus_sources import Fleet, FleetCollector
from specmon.daemon.scraper import TargetScraper, gate
from specmon.daemon.target import TargetState, TargetView, Twins
from specmon.logs import LIMIT, get_logger
from specmon.process.loopwatch import LoopWatch
from specmon.process.memory import CollectorSchedule, collector_paused
from specmon.process.nofile import files_short
from specmon.sharding import Shard
from specmon.sources import Source
from specmon.sources.http import open_session
from specmon.sources.page import HttpPageSource
from specmon.sources.tap import with_tap
from specmon.surfaces.status import (
    MAX_PER_PAGE,
    StatusCache,
    parse_targets_query,
    render_status,
    targets_document,
)
from specmon.surfaces.target import render_missing, render_target
from specmon.web.server import WebOptions, WebServer

__all__ = ["Daemon"]


@dataclass
class _Running:
    state: TargetState
    scraper: TargetScraper
    task: asyncio.Task[None]


#: Seconds a stop waits for the daemon's tasks and servers before it abandons what is left
#: and the process exits with status 1: under the 15 s most deployments allow between SIGTERM
#: and SIGKILL, so the line naming what hung is always written.
STOP_DEADLINE = 10.0


class Daemon:
    def __init__(
        self,
        *,
        config_path: Path | None,
        listen: str = ":10920",
        shutdown_timeout: float = 3.0,
        stop_deadline: float = STOP_DEADLINE,
        web_options: WebOptions | None = None,  # security: --web.* flags (specmon/web)
        shard: Shard | None = None,  # fleet: --shard I/N (specmon/sharding.py)
        gc_schedule: CollectorSchedule | None = None,  # the cycle collector's runs (malloc.py)
        state_dir: Path | None = None,  # --state.dir (wins over global.state_dir)
    ) -> None:
        self.state_dir = state_dir
        #: The state file's keeper (specmon/daemon/persist.py); None without a state_dir.
        self.keeper: StateKeeper | None = None
        self._keeper_task: asyncio.Task[None] | None = None
        self.config_path = config_path
        self.listen = listen
        self.shutdown_timeout = shutdown_timeout
        self.stop_deadline = stop_deadline
        #: What the last stop abandoned (see :meth:`stop`).
        self.abandoned: list[str] = []
        self.log = get_logger()
        #: None: CPython's own schedule (tests in-process); ``specmon run`` passes one.
        self.gc_schedule = gc_schedule
        self._collector_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._governor_task: asyncio.Task[None] | None = None
        self.loop_watch: LoopWatch | None = None
        self._files_warned: tuple[int, int] | None = None
        # specmon_scrapes_total etc. need no _created siblings (they double the series count).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            with contextlib.suppress(ValueError):
                self.registry.register(collector)
        self.metrics = OwnMetrics(self.registry)
        #: The overload governor: every direct target's interval is stretched by one factor
        #: when the process cannot scrape on time (specmon/daemon/governor.py).
        self.governor = Governor(
            on_excuse=self.metrics.scrape_excused.inc, on_defer=self.metrics.scrape_deferred.inc
        )
        self.metrics.scrape_limit.set(self.governor.limit)
        dropped = self.metrics.log_lines_dropped
        LIMIT.on_drop = lambda event: dropped.labels(event=event).inc()
        self._export_errors_logged: set[tuple[str, str]] = set()
        #: The target half of /metrics, rendered at each target's change.
        self.exposition = Exposition(on_error=self._export_failed)
        #: The status page's and the API's per-target pieces, made once per view.
        self._status = StatusCache()
        #: The last 15 minutes of every target's verdict, for its page's charts.
        self.history = History()
        # security: the listening socket, --web.config.file, lifecycle flag (specmon/web)
        self.web = WebServer(web_options or WebOptions(), metrics=self.metrics.web, log=self.log)
        self.config: Config | None = None
        self._running: dict[str, _Running] = {}
        self._file_sd = FileSD(on_error=self._file_sd_error, on_loaded=self._file_sd_loaded)
        self._file_sd_task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pending_first: set[str] = set()
        self._stopping = asyncio.Event()
        self._shutting_down = False
        self._reload_lock = asyncio.Lock()
        self._background: set[asyncio.Task[tuple[bool, str]]] = set()
        self._runner: web.AppRunner | None = None
        self.bound_port: int | None = None
        # fleet: Prometheus sources' instances, served beside the direct targets (fleet.py)
        self.shard = shard or Shard()
        #: Every target's state by name, where a target finds its baseline twin.
        self.twins = Twins()
        #: Each group's members: where a new member finds its past (specmon.state.groups).
        self.groups = GroupPasts()
        #: The one path from a read to a target, for scraped targets and fleet instances.
        self.ingest = Ingest(
            scrapes_total=self.metrics.scrapes_total,
            rejected_total=self.metrics.rejected_total,
            log=self.log,
            before=self.groups.first_page,
        )
        self.fleet = Fleet(
            session=self._get_session,
            direct=self._running.keys,
            ingest=self.ingest,
            log=self.log,
            shard=self.shard,
            on_first_read=self._pending_first.discard,
            on_change=self._count_targets,
            on_view=self._view_changed,
            on_remove=self._fleet_instance_removed,
            twins=self.twins,
        )
        self.registry.register(FleetCollector(self.fleet))
        self.fleet.on_state = self._restore

    # -- state for readers ------------------------------------------------------------------

    def views(self) -> list[TargetView]:
        direct = [r.state.view for r in self._running.values()]
        fleet = self.fleet.views(exclude=self._running)  # fleet: a configured target wins
        return sorted(direct + fleet, key=lambda v: v.name)

    def _export_failed(self, target: str, exc: BaseException) -> None:
        """A target's view could not be exported (a bug): log it once per target and kind."""
        key = (target, type(exc).__name__)
        if key in self._export_errors_logged:
            return
        self._export_errors_logged.add(key)
        self.log.error(
            "export_failed",
            target=target,
            error=f"{type(exc).__name__}: {str(exc)[:200]}",
            kept="specmon_up and the scrape duration; the target's figures are left out",
        )

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
                return self._reload_failed(exc.problems, str(exc))
            except Exception as exc:  # whatever a file does to the parser, the daemon stays
                problem = f"cannot load the configuration: {type(exc).__name__}"
                return self._reload_failed([problem], problem)
            try:
                self._apply(config)
            except Exception as exc:  # a bug: keep running with what is applied, say so
                self.log.exception("config_apply_failed")
                problem = f"internal error applying the configuration: {type(exc).__name__}"
                return self._reload_failed([problem], problem)
            self.metrics.reload_ok.set(1)
            self.metrics.reload_time.set(time.time())
            self.log.info(
                "config_loaded",
                file=config.source,
                targets=len(self._running),
                sources=len(config.sources),
            )
            return True, f"loaded {config.source}: {len(self._running)} target(s)"

    def _reload_failed(self, problems: list[str], message: str) -> tuple[bool, str]:
        self.metrics.reload_ok.set(0)
        self.log.error(
            "config_reload_failed",
            file=str(self.config_path),
            problems=problems,
            kept="previous configuration",
        )
        return False, message

    def _reload_in_background(self) -> None:
        """SIGHUP: reload without blocking the signal handler; nothing escapes unlogged."""
        task = asyncio.get_running_loop().create_task(self._reload_all())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _desired_targets(self, config: Config) -> list[TargetConfig]:
        desired: dict[str, TargetConfig] = {t.name: t for t in config.targets}
        for path, target in self._file_sd.targets():
            if target.name in desired:
                self.log.warning("file_sd_duplicate_target", target=target.name, file=path,
                                 kept=desired[target.name].origin)  # fmt: skip
                continue
            desired[target.name] = target
        return self.shard.select(desired.values(), key=lambda t: t.name)  # fleet: --shard

    def _apply(self, config: Config) -> None:
        first = self.config is None
        self.config = config
        if (warning := curve_memory_warning(config)) is not None:
            self.log.warning("curve_retention_memory", warning=warning)
        if self.config_path is not None and not config.file_sd:
            self._file_sd.clear()
        self._file_sd.refresh(config)
        self._sync_targets(config, initial=first)
        started = self.fleet.apply(config)  # fleet: Prometheus sources (fleet.py)
        if first:
            self._pending_first.update(started)
        if self._file_sd_task is None and config.file_sd:
            self._file_sd_task = asyncio.create_task(
                self._file_sd.watch(
                    config=lambda: self.config,
                    on_change=lambda c: self._sync_targets(c, initial=False),
                    on_failure=lambda: self.log.exception("file_sd_refresh_failed"),
                )
            )

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
                self.groups.join(running.state)  # its labels, so its group, may have changed
                continue
            past = None
            if running is not None:  # the same name: its past carried over (persist.carry_past)
                past = running.state
                self._stop_target(name, retire=False)
                self.log.info(
                    "target_restarted", target=name, reason="url, engine or model changed",
                    address_changed=past.config.url != target.url,
                )  # fmt: skip
            self._start_target(target, config, past=past)
            if initial:
                self._pending_first.add(name)
        self._count_targets()
        self._check_open_files()

    def _check_open_files(self) -> None:
        """Warn (once per change) when the open-files limit is below what the targets and the
        web server's connections may need (specmon/process/nofile.py)."""
        short = files_short(
            targets=len(self._running), web_connections=self.web.options.max_connections
        )
        if short is not None and self._files_warned != short:
            needed, limit = short
            self.log.warning(
                "open_files_limit_low",
                limit=limit,
                needed=needed,
                hint="a target beyond the limit fails with connection_error (too many open "
                "files): raise LimitNOFILE= (systemd) or ulimit -n",
            )
        self._files_warned = short

    def _view_changed(self, view: TargetView) -> None:
        """A target's new view (its scrape, a failure, a reload): its series are rendered,
        and the status page's and the API's pieces made from the old view are let go."""
        self.exposition.update(view)
        self._status.changed(view.name)
        self.history.record(view, window=self.primary_window(), now=time.time())

    def _count_targets(self) -> None:
        self.metrics.targets.set(len(self._running) + self.fleet.count())

    def _restore(self, state: TargetState) -> None:
        """A new target's past: its name's saved record, else its group's (state.groups)."""
        if self.keeper is not None and self.keeper.lock.held:
            self.keeper.restore(state)
        self.groups.join(state)

    def states(self) -> list[TargetState]:
        return [r.state for r in self._running.values()] + self.fleet.states()

    def _start_target(
        self, target: TargetConfig, config: Config, *, past: TargetState | None = None
    ) -> None:
        state = TargetState(
            target,
            windows=config.global_.windows,
            retention=config.retention,
            curve_retention=config.global_.curve_retention,
            on_view=self._view_changed,
            twins=self.twins,
        )
        if past is not None:
            carry_past(state, past, wall=time.time())
        self._restore(state)
        self.twins.put(state)
        scraper = TargetScraper(
            state,
            source=self._source_for,
            ingest=self.ingest,
            log=self.log,
            on_scraped=self._pending_first.discard,
            governor=self.governor,
        )
        task = asyncio.create_task(scraper.run(), name=f"scrape:{target.name}")
        self._running[target.name] = _Running(state, scraper, task)

    def _stop_target(self, name: str, *, retire: bool = True) -> None:
        running = self._running.pop(name)
        self.groups.leave(name)
        if self.keeper is not None and retire:
            self.keeper.retire(running.state)  # its epochs stay in the state file
        self.twins.drop(running.state)
        running.task.cancel()
        self._thaw()
        running.state.on_view = None
        self.exposition.remove(name)
        self.history.forget(name)
        self._pending_first.discard(name)
        self.ingest.forget(name)

    def _fleet_instance_removed(self, name: str) -> None:
        self.groups.leave(name)
        self.exposition.remove(name)
        self.history.forget(name)
        self._thaw()

    def _thaw(self) -> None:
        """A target's state may now be garbage in a reference cycle among frozen objects:
        hand them back to the collector (its next scheduled run)."""
        if self.gc_schedule is not None:
            self.gc_schedule.thaw()

    # -- file_sd ----------------------------------------------------------------------------

    def _file_sd_error(self, path: str, problems: list[str]) -> None:
        self.metrics.file_sd_errors.inc()
        self.log.error("file_sd_invalid", file=path, problems=problems, kept="previous targets")

    def _file_sd_loaded(self, path: str, count: int) -> None:
        self.log.info("file_sd_loaded", file=path, targets=count)

    # -- HTTP -------------------------------------------------------------------------------

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            policy = self.governor.policy  # both lanes of the in-flight limit (governor)
            self._session = open_session(max_connections=policy.inflight_max + policy.suspect_max)
        return self._session

    def _source_for(self, target: TargetConfig) -> Source:
        """The source a target is read from, with its current settings (and its tap's page
        beside it: specmon.sources.tap)."""
        glob = self.config.global_ if self.config else GlobalConfig()
        return with_tap(HttpPageSource(
            limits=glob.limits,
            url=target.url,
            session=self._get_session,
            timeout=target.scrape_timeout,
            max_bytes=glob.max_response_bytes,
            compression=(
                glob.enable_compression
                if target.enable_compression is None
                else target.enable_compression
            ),
            client=target.client,
            engine=target.engine,
            model=target.model,
            name_filter=glob.name_filter if target.name_filter is None else target.name_filter,
        ), target.tap, session=self._get_session, timeout=target.scrape_timeout,
           client=target.client)  # fmt: skip

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=self.web.middlewares())  # security: auth, headers
        app.router.add_get("/", self._index)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_post("/-/reload", self._reload_http)
        app.router.add_put("/-/reload", self._reload_http)  # as Prometheus
        app.router.add_post("/-/mark", self._mark_http)  # a configuration change, by hand
        app.router.add_get("/api/v1/targets", self._targets_json)
        # One target's page: the name percent-encoded whole (surfaces.status.target_href); a
        # name of dots only comes as ?name=.
        app.router.add_get("/target", self._target_page)
        app.router.add_get("/target/{name:.+}", self._target_page)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        openmetrics = content_type.startswith("application/openmetrics-text")
        # Targets whose view changed since the last fetch are rendered now, in slices
        # between which scrapes go on; the others' text is ready.
        await self.exposition.refresh()
        own = encoder(self.registry)
        headers = {"Content-Type": content_type}
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            body = self.exposition.gzip_page(own, openmetrics=openmetrics)
            headers["Content-Encoding"] = "gzip"
        else:
            body = self.exposition.page(own, openmetrics=openmetrics)
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

    async def _mark_http(self, request: web.Request) -> web.Response:
        """``POST /-/mark?target=NAME&note=TEXT[&model=M]``: a new epoch (lifecycle-gated)."""
        if not self.web.lifecycle_enabled:
            self.web.reject("lifecycle_disabled")
            return web.Response(status=403, text="Lifecycle API is not enabled.\n")
        status, text = mark_targets(request.query, self.states(), log=self.log)
        return web.Response(status=status, text=text + "\n")

    async def _index(self, request: web.Request) -> web.Response:
        query = request.query
        with collector_paused():  # many containers, all alive until the page is done
            views = self.views()
            self._status.forget(v.name for v in views)
            html = render_status(
                views,
                primary_window=self.primary_window(),
                ready=self.ready,
                page=_int_param(query.get("page"), 1, 1, 1_000_000),
                per_page=_int_param(query.get("per_page"), 200, 10, MAX_PER_PAGE),
                query=query.get("q", "")[:200],
                problems_only=query.get("problems") == "1",
                cache=self._status,
            )
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    def view_of(self, name: str) -> TargetView | None:
        """One target's current view, scraped directly or read through a fleet source."""
        running = self._running.get(name)
        if running is not None:
            return running.state.view
        return next((v for v in self.fleet.views(exclude=self._running) if v.name == name), None)

    async def _target_page(self, request: web.Request) -> web.Response:
        """``/target/NAME`` (or ``/target?name=NAME``): one target's page; 404 for a name no
        target has. The name is at most ``MAX_NAME`` characters (a longer one is no name)."""
        name = request.match_info.get("name")
        if name is None:
            name = request.query.get("name", "")
        view = self.view_of(name) if 0 < len(name) <= _MAX_NAME else None
        if view is None:
            return web.Response(
                status=404, text=render_missing(name), content_type="text/html", charset="utf-8"
            )
        html = render_target(
            view,
            primary_window=self.primary_window(),
            series=self.history.series(name),
            events=self.history.events(name),
        )
        return web.Response(text=html, content_type="text/html", charset="utf-8")

    async def _targets_json(self, request: web.Request) -> web.Response:
        """Every target's document (each made once per change of its view); ``?target=NAME``
        for one; ``q``, ``problems``, ``page`` and ``per_page`` as on the status page
        (surfaces.status.parse_targets_query); 400 naming every bad parameter."""
        asked = parse_targets_query(request.query)
        if isinstance(asked, list):
            return web.json_response({"error": "; ".join(asked)}, status=400, dumps=jsontext.dumps)
        with collector_paused():  # each changed view's document: many containers at once
            body = targets_document(
                self.views(),
                ready=self.ready,
                asked=asked,
                cache=self._status,
                primary_window=self.primary_window(),
            )
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
        state_dir = self.state_dir or config.global_.state_dir
        if state_dir is not None:  # before the targets, so each is restored as it starts
            self.keeper = StateKeeper(
                directory=state_dir, shard=self.shard, log=self.log,
                max_age=config.global_.state_max_age, metrics=self.metrics.state,
            )  # fmt: skip
            self.groups.keeper = self.keeper
            await asyncio.to_thread(self.keeper.open, config.targets)  # off the loop
            self._keeper_task = asyncio.create_task(self.keeper.run(self.states), name="state")
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
        loop = asyncio.get_running_loop()
        if self.gc_schedule is not None:
            self._collector_task = asyncio.create_task(self.gc_schedule.run(), name="gc")
        # The loop's lag and the collector's pauses, always measured (specmon/process/loopwatch.py).
        self.loop_watch = LoopWatch(
            lag=self.metrics.loop_lag,
            gc_pause=lambda generation: self.metrics.gc_pause.labels(generation=str(generation)),
            log=self.log,
            on_lag=lambda lag: self.governor.watched(at=loop.time(), lag=lag),
            on_ran=lambda span, idle: self.governor.ran(span=span, idle=idle),
        )
        self.loop_watch.install()
        self.loop_watch.time_idle(loop)  # the governor's "short of CPU" (module governor)
        self._watch_task = asyncio.create_task(self.loop_watch.run(), name="loop-watch")
        self._governor_task = asyncio.create_task(self._govern(), name="governor")
        self.log.info(
            "specmon_started",
            version=__version__,
            listen=self.listen,
            port=self.bound_port,
            config=config.source,
            targets=len(self._running),
            sources=len(config.sources),
            shard=str(self.shard),
            windows=[format_duration(w) for w in config.global_.windows],
        )

    async def _govern(self) -> None:
        """Close the governor's period every few seconds: its stretch applies from each
        target's next scrape; the figures it measured are exported and a change is logged."""
        governor = self.governor
        while True:
            await asyncio.sleep(governor.policy.period)
            try:
                self._governed(governor.close())
            except Exception:  # the governor must not stop over a bug in its reporting
                self.log.exception("governor_failed")

    def _governed(self, period: Period) -> None:
        governor, metrics = self.governor, self.metrics
        metrics.scrape_stretch.set(governor.stretch)
        metrics.scrape_delay.set(governor.delay)
        metrics.scrape_limit.set(governor.limit)
        if period.busy is not None:
            metrics.loop_busy.set(period.busy)
        self.exposition.defer = defers(period, governor.policy)
        if period.deferred or len(
            gate(governor)
        ):  # the limit may have grown: start whom it now lets in
            gate(governor).admit_waiting()
        configured = {r.state.config.scrape_interval for r in self._running.values()}
        for interval in governor.forget_intervals(configured):
            with contextlib.suppress(KeyError):
                metrics.scrape_interval.remove(format_duration(interval))
        for interval, achieved in governor.achieved.items():
            metrics.scrape_interval.labels(interval=format_duration(interval)).set(achieved)
        if period.changed:
            log = self.log.warning if period.stretch > 1.0 else self.log.info
            log(
                "scrape_intervals_stretched" if period.stretch > 1.0 else "scrape_on_schedule",
                stretch=round(period.stretch, 3),
                late_median_s=round(period.median, 3),
                late_p90_s=round(period.p90, 3),
                slip=round(period.slip, 3),
                scrapes=period.scrapes,
                excused=period.excused,
                stalled_share=round(period.stall, 3),
                busy=None if period.busy is None else round(period.busy, 3),
                in_flight_limit=period.limit,
                deferred=period.deferred,
                state=period.state,
                hint="specmon cannot scrape every target on time: every interval is stretched "
                "evenly (runbook: SpecmonOverloaded)"
                if period.stretch > 1.0
                else "every target is scraped at its configured interval again",
            )

    def request_stop(self) -> None:
        self._stopping.set()

    async def wait(self) -> None:
        await self._stopping.wait()

    async def stop(self) -> list[str]:
        """Cancel every task, close the client session and the HTTP server, within
        ``stop_deadline`` seconds in all. Returns what did not end by then (task names, or
        the step that hung), logged as ``specmon_stop_abandoned``; empty on a clean stop."""
        self._shutting_down = True
        self.log.info("specmon_stopping")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.stop_deadline
        tasks = [r.task for r in self._running.values()] + self.fleet.tasks()
        for task in (
            self._file_sd_task,
            self._collector_task,
            self._watch_task,
            self._governor_task,
            self._keeper_task,
        ):
            if task is not None:
                tasks.append(task)
        for task in tasks:
            task.cancel()
        hung: list[str] = []
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.stop_deadline)
            hung.extend(sorted(task.get_name() for task in pending))
        if self.loop_watch is not None:
            self.loop_watch.uninstall()  # its task may have been cancelled before it ran
        if self.keeper is not None:  # the last write, the scrapes stopped
            try:
                async with asyncio.timeout_at(max(deadline, loop.time() + 0.5)):
                    await self.keeper.save(self.states)
            except TimeoutError:
                hung.append("state write")
            self.keeper.close()
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        session, runner = self._session, self._runner
        if session is not None:
            steps.append(("client session", session.close))
        steps.append(("listener", self.web.close))  # stop listening before closing connections
        if runner is not None:
            steps.append(("http server", runner.cleanup))
        for name, step in steps:
            try:
                async with asyncio.timeout_at(max(deadline, loop.time() + 0.5)):
                    await step()
            except TimeoutError:
                hung.append(name)
        self.abandoned = hung
        LIMIT.flush()
        if hung:
            self.log.error(
                "specmon_stop_abandoned",
                hung=hung,
                deadline_s=self.stop_deadline,
                effect="left to the operating system; exiting with status 1",
            )
        else:
            self.log.info("specmon_stopped")
        return hung

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
        loop.add_signal_handler(signal.SIGHUP, self._reload_in_background)
        try:
            await self.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            hung = await self.stop()
        return 1 if hung else 0


#: Longest target name the target page looks up.
_MAX_NAME = 2048


def _int_param(raw: str | None, default: int, low: int, high: int) -> int:
    """A query parameter as a bounded integer; anything else is the default."""
    if raw is None or not raw.isdigit() or len(raw) > 9:
        return default
    return min(max(int(raw), low), high)
