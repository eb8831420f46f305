"""Targets read through Prometheus query sources (``sources:``, docs/fleet.md).

One asyncio task per source reads it every ``interval``
(:class:`specmon.sources.prometheus.PrometheusSource`: a few instant queries for the whole
fleet, never one per instance) and turns the answer into targets: one
:class:`~specmon.daemon.target.TargetState` per instance, fed exactly as the scraper feeds a
directly scraped target, so the windows, the arithmetic, ``/metrics``, the status page,
``/api/v1/targets``, readiness and the logs treat both alike.

What a read does to the instances:

- **Not usable** (Prometheus down, slow, an HTTP or query error, a bad answer, warnings
  without ``accept_partial``): every instance of the source fails that round with the read's
  status as its scrape result (``specmon_up 0``, nothing derived), and the source logs one
  line per change of state, not one per instance or per round.
- **Usable**: instance names are compared with the previous read's; new ones become targets,
  missing ones are removed (``instance_appeared`` / ``instance_vanished``). Per instance: a
  stale one (newest sample older than ``stale_after``) or one with unusable series fails
  (``stale``, ``bad_series``); one whose newest sample did not change since the previous read
  is left as it is (Prometheus has not scraped it since: no new reading, not a failure);
  otherwise its page is read by the engine adapters and observed at **Prometheus's sample
  time**, so its windows span the engine's scrape times as a direct target's span specmon's.
- Names: an instance whose name a configured target (config or file_sd) has is left out
  (the configured target wins; logged once), as is one an earlier source already has; with
  ``--shard I/N`` only the instances whose names hash to shard I are kept.

The per-source health families (``specmon_source_*``) and ``specmon_shard_info`` are built per
scrape of ``/metrics`` from the runners' current state (:class:`FleetCollector`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

import aiohttp
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specmon.config_values import format_duration
from specmon.daemon import metrics as m
from specmon.daemon.config import (
    LABEL_NAME,
    MAX_LABEL_VALUE,
    RESERVED_LABELS,
    Config,
    TargetConfig,
)
from specmon.daemon.ingest import Ingest
from specmon.daemon.metrics import InstanceState, Kind, MetricDef
from specmon.daemon.target import Event, TargetState, TargetView, Twins
from specmon.logs import Logger
from specmon.sharding import Shard
from specmon.sources import Failure, ScrapeResult
from specmon.sources.prometheus import (
    InstanceRead,
    PrometheusSource,
    ReadResult,
    ReadStatus,
    instance_outcome,
    read_failure,
)
from specmon.sources.prometheus_config import PrometheusSourceConfig
from specmon.state.groups import group_of

__all__ = ["Fleet", "FleetCollector", "SourceRunner", "constant_labels"]

#: Instances processed between two yields to the event loop: a read of thousands of
#: instances must not hold ``/metrics`` and the scrapers up for its whole duration.
YIELD_EVERY = 200

#: Labels never copied from an instance's labels onto its series: Prometheus's own target
#: labels (it renames them to ``exported_*`` when it scrapes specmon) and specmon's own.
_NOT_CONSTANT = frozenset({"instance", "job"}) | RESERVED_LABELS


def constant_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """An instance's identifying labels as constant labels of its series (``namespace``,
    ``pod``, ...), minus ``instance`` and ``job`` (Prometheus's own target labels) and
    specmon's own labels; values longer than a config label value may be are left out."""
    return {
        k: v
        for k, v in labels.items()
        if k not in _NOT_CONSTANT
        and not k.startswith("__")
        and LABEL_NAME.match(k)
        and len(v) <= MAX_LABEL_VALUE
    }


@dataclass
class _Instance:
    state: TargetState
    #: The instance labels and their values (the target's constant labels come from them).
    labels: Mapping[str, str]
    #: The labels overrides matched at the last read (re-matched at once on reload).
    common: Mapping[str, str]
    #: The newest sample time observed into the windows (None before the first).
    newest: float | None = None
    #: Down because the source's read failed (its recovery is one source line, not one per
    #: instance).
    source_down: bool = False


class SourceRunner:
    """One Prometheus source: its reads, its instances, its health."""

    def __init__(self, config: PrometheusSourceConfig, *, fleet: Fleet) -> None:
        self.config = config
        self.name = config.name
        self._fleet = fleet
        self.source = PrometheusSource(config, session=fleet.session())
        self.instances: dict[str, _Instance] = {}
        self.reads: dict[ReadStatus, int] = {}
        self.queries = 0
        self.last: ReadResult | None = None
        self.last_success: float | None = None
        #: None before the first read; then whether the last read was usable.
        self.up: bool | None = None
        self.counts: dict[InstanceState, int] = {}
        self.task: asyncio.Task[None] | None = None
        self._failure: tuple[ReadStatus, str] | None = None
        self._listed = False
        #: Names left out because another target has them (logged once each).
        self._taken: set[str] = set()
        self._log = fleet.log.bind(source=self.name)

    # -- settings ---------------------------------------------------------------------------

    @property
    def retention(self) -> float:
        return max(self._fleet.windows) + 2 * self.config.interval

    def _target_config(
        self, name: str, labels: Mapping[str, str], common: Mapping[str, str]
    ) -> TargetConfig:
        settings = self.config.settings_for(common)
        return TargetConfig.settled(
            settings,
            name=name,
            url=self.source.display_url,
            labels=constant_labels(labels),
            scrape_interval=self.config.interval,
            scrape_timeout=self.config.timeout,
            origin=f"{self.config.origin} ({self.name})",
            group=group_of({**common, **labels}, self.config.group_labels),
        )

    def reconfigure(self, config: PrometheusSourceConfig) -> None:
        """A reloaded config for this source (same name): new settings apply to the instances
        now; their windows stay unless the engine or model override changed."""
        if config != self.config:
            self.config = config
            self.source = PrometheusSource(config, session=self._fleet.session())
        for name, entry in list(self.instances.items()):
            old = entry.state.config
            target = self._target_config(name, entry.labels, entry.common)
            if target.identity() != old.identity():
                self._log.info(
                    "instance_restarted", target=name, reason="engine or model override changed"
                )
                self._replace_state(name, entry, target)
            else:
                entry.state.reconfigure(
                    target, windows=self._fleet.windows, retention=self.retention
                )

    # -- the task ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Read until cancelled: the first read at once, then every ``interval``."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.apply(await self.source.read())  # not held over the next read
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must cost one read, never the source or the daemon
                self._log.exception("source_read_failed")
            finally:
                self._fleet.on_read(self)
            await asyncio.sleep(max(0.0, started + self.config.interval - loop.time()))

    # -- one read ---------------------------------------------------------------------------

    async def apply(self, result: ReadResult) -> None:
        """Turn one read into the instances' states (see the module docstring)."""
        # Kept for its figures (duration, bytes); its instances' samples (about 5 KiB an
        # instance) are let go once applied, not held until the next read.
        self.last = replace(result, instances=())
        self.reads[result.status] = self.reads.get(result.status, 0) + 1
        self.queries += result.queries
        if not result.usable:
            self._source_failed(result)
            return
        recovered = self.up is False
        self.up = True
        self.last_success = time.time()
        if recovered or self._failure is not None:
            self._log.info(
                "source_up",
                status=result.status.value,
                instances=len(result.instances),
                duration_s=round(result.duration_seconds, 3),
            )
        self._failure = None
        if result.status is ReadStatus.PARTIAL:
            self._log.warning("source_partial_accepted", warnings=list(result.warnings[:3]))
        fleet = self._fleet
        counts = dict.fromkeys(InstanceState, 0)
        seen: dict[str, InstanceRead] = {}
        direct = fleet.direct()
        taken: set[str] = set()
        for inst in result.instances:
            if not fleet.shard.keeps(inst.name):
                counts[InstanceState.OTHER_SHARD] += 1
                continue
            owner = (
                "a configured target"
                if inst.name in direct
                else fleet.owner_elsewhere(inst.name, self)
            )
            if owner is not None:
                counts[InstanceState.NAME_TAKEN] += 1
                taken.add(inst.name)
                if inst.name not in self._taken:
                    self._log.warning("instance_name_taken", target=inst.name, kept=owner)
                continue
            seen[inst.name] = inst
        self._taken = taken
        for name in [n for n in self.instances if n not in seen]:
            self._remove(name, keep_counters=name in direct)
            self._log.info("instance_vanished", target=name)
        first = not self._listed
        for index, (name, inst) in enumerate(seen.items()):
            if index and not index % YIELD_EVERY:
                await asyncio.sleep(0)
            counts[self._one(name, inst, result, first=first)] += 1
        if first:
            self._listed = True
            self._log.info(
                "source_instances",
                **{state.value: count for state, count in counts.items() if count},
            )
        self.counts = counts
        fleet.changed()

    def _one(
        self, name: str, inst: InstanceRead, result: ReadResult, *, first: bool
    ) -> InstanceState:
        target = self._target_config(name, inst.labels, inst.common_labels)
        entry = self.instances.get(name)
        new = entry is None
        if entry is None:
            state = self._fleet.new_state(target, retention=self.retention)
            entry = self.instances[name] = _Instance(state, inst.labels, inst.common_labels)
            self._fleet.claim(name, self)
        elif entry.state.config.identity() != target.identity():
            self._log.info("instance_restarted", target=name, reason="engine or model changed")
            self._replace_state(name, entry, target)
        elif entry.state.config != target:
            entry.state.reconfigure(target, windows=self._fleet.windows, retention=self.retention)
        entry.common = inst.common_labels
        outcome = instance_outcome(
            inst, stale_after=self.config.stale_after, duration=result.duration_seconds
        )
        if isinstance(outcome, Failure):
            self._failed(entry, outcome, new=new, first=first)
            return (
                InstanceState.STALE
                if outcome.kind is ScrapeResult.STALE
                else InstanceState.BAD_SERIES
            )
        newest = inst.newest_sample
        assert newest is not None  # not stale
        if entry.state.view.up and entry.newest == newest:
            return InstanceState.UNCHANGED
        # Prometheus's sample time as the windows' clock: a window spans the engine's scrape
        # times in Prometheus, as a direct target's windows span specmon's own scrapes. (An
        # unchanged time after a failure restores the view without a new reading.)
        events = self._fleet.ingest.deliver(entry.state, outcome, mono=newest, wall=newest, lag=0.0)
        entry.newest = newest
        if entry.source_down:
            events = [e for e in events if e.event != "target_up"]
            entry.source_down = False
        self._emit(name, events, new=new, first=first)
        return InstanceState.CURRENT

    def _failed(self, entry: _Instance, failure: Failure, *, new: bool, first: bool) -> None:
        events = self._fleet.ingest.fail(entry.state, failure)
        entry.source_down = False
        self._emit(entry.state.config.name, events, new=new, first=first)

    def _emit(self, name: str, events: list[Event], *, new: bool, first: bool) -> None:
        if not events and not new:
            return
        log = self._log.bind(target=name)
        if new:
            # One line for a new instance, with what its first read said.
            up = next((e for e in events if e.event in ("target_up", "target_down")), None)
            fields = dict(up.fields) if up is not None else {}
            fields["up"] = up is not None and up.event == "target_up"
            if first:
                log.debug("instance_listed", **fields)
            else:
                log.info("instance_appeared", **fields)
            events = [e for e in events if e is not up]
        for event in events:
            emit = log.warning if event.level == "warning" else log.info
            emit(event.event, **event.fields)

    def _source_failed(self, result: ReadResult) -> None:
        failure = read_failure(result, source=self.name)
        key = (result.status, failure.message)
        if self.up is not False or self._failure != key:
            self._log.warning(
                "source_down" if self.up is not False else "source_error_changed",
                status=result.status.value,
                error=result.message,
                error_type=result.error_type,
                http_status=result.http_status,
                instances=len(self.instances),
                effect="every instance of the source is down until a usable read",
            )
        self.up = False
        self._failure = key
        for entry in self.instances.values():
            self._fleet.ingest.fail(entry.state, failure)
            entry.source_down = True
        self._fleet.changed()

    # -- instances --------------------------------------------------------------------------

    def _replace_state(self, name: str, entry: _Instance, target: TargetConfig) -> None:
        entry.state.on_view = None
        self._fleet.twins.drop(entry.state)
        entry.state = self._fleet.new_state(target, retention=self.retention)
        entry.newest = None

    def _remove(self, name: str, *, keep_counters: bool = False) -> None:
        entry = self.instances.pop(name, None)
        if entry is not None:
            entry.state.on_view = None
            self._fleet.twins.drop(entry.state)
        self._fleet.release(name, self)
        if not keep_counters:  # a configured target holds the name: its series stay
            self._fleet.on_remove(name)
            self._fleet.ingest.forget(name)

    def close(self) -> None:
        """The source is gone (reload): drop its instances and their series."""
        for name in list(self.instances):
            self._remove(name, keep_counters=name in self._fleet.direct())
        if self.task is not None:
            self.task.cancel()

    def views(self) -> Iterator[TargetView]:
        for entry in self.instances.values():
            yield entry.state.view


class Fleet:
    """Every Prometheus source's runner and instances; what the daemon registers beside its
    direct targets."""

    def __init__(
        self,
        *,
        session: Callable[[], aiohttp.ClientSession | None],
        direct: Callable[[], Collection[str]],
        ingest: Ingest,
        log: Logger,
        shard: Shard | None = None,
        on_first_read: Callable[[str], None] = lambda key: None,
        on_change: Callable[[], None] = lambda: None,
        on_view: Callable[[TargetView], None] = lambda view: None,
        on_remove: Callable[[str], None] = lambda name: None,
        twins: Twins | None = None,
    ) -> None:
        self.session = session
        self.direct = direct
        self.ingest = ingest
        self.log = log
        self.shard = shard or Shard()
        self.windows: tuple[float, ...] = (60.0, 300.0, 900.0)
        self.curve_retention = 3600.0
        self.runners: dict[str, SourceRunner] = {}
        self._owners: dict[str, SourceRunner] = {}
        self._pending: set[str] = set()
        self._on_first_read = on_first_read
        self._on_change = on_change
        self._on_view = on_view
        self.on_remove = on_remove
        self.twins = twins if twins is not None else Twins()
        #: Told of every instance's new state (the daemon restores its saved epochs).
        self.on_state: Callable[[TargetState], None] = lambda state: None

    def new_state(self, target: TargetConfig, *, retention: float) -> TargetState:
        """An instance's state, exported as a direct target's is (its view goes to the
        daemon's exposition on every change)."""
        state = TargetState(
            target,
            windows=self.windows,
            retention=retention,
            curve_retention=self.curve_retention,
            on_view=self._view,
            twins=self.twins,
        )
        self.twins.put(state)
        self.on_state(state)
        return state

    def states(self) -> list[TargetState]:
        return [e.state for r in self.runners.values() for e in r.instances.values()]

    def _view(self, view: TargetView) -> None:
        # A configured target that took the name since the last read wins: its series stay.
        if view.name not in self.direct():
            self._on_view(view)

    @staticmethod
    def pending_key(name: str) -> str:
        """The daemon's readiness key for a source's first read."""
        return f"source {name}"

    def apply(self, config: Config, *, start: bool = True) -> list[str]:
        """Match the runners to ``config.sources``: new ones start (their first read at once),
        removed ones stop and drop their instances, kept ones take the new settings without
        losing their instances' windows. Returns the readiness keys of the new sources."""
        self.windows = config.global_.windows
        self.curve_retention = config.global_.curve_retention
        wanted = {source.name: source for source in config.sources}
        for name in [n for n in self.runners if n not in wanted]:
            removed = self.runners.pop(name)
            count = len(removed.instances)
            removed.close()
            self._pending.discard(name)
            self.log.info("source_removed", source=name, instances=count)
        started: list[str] = []
        for name, source in wanted.items():
            kept = self.runners.get(name)
            if kept is not None:
                kept.reconfigure(source)
                continue
            runner = self.runners[name] = SourceRunner(source, fleet=self)
            self.log.info(
                "source_added",
                source=name,
                url=runner.source.display_url,
                selector=str(source.selector),
                instance_labels=list(source.instance_labels),
                interval=format_duration(source.interval),
                shard=str(self.shard),
            )
            if start:
                runner.task = asyncio.create_task(runner.run(), name=f"source:{name}")
            self._pending.add(name)
            started.append(self.pending_key(name))
        self.changed()
        return started

    def on_read(self, runner: SourceRunner) -> None:
        if runner.name in self._pending:
            self._pending.discard(runner.name)
            self._on_first_read(self.pending_key(runner.name))

    def changed(self) -> None:
        self._on_change()

    # -- names ------------------------------------------------------------------------------

    def owner_elsewhere(self, name: str, runner: SourceRunner) -> str | None:
        """Which other source holds ``name`` (None: free or held by ``runner``)."""
        owner = self._owners.get(name)
        if owner is None or owner is runner or owner.name not in self.runners:
            return None
        return f"source {owner.name}"

    def claim(self, name: str, runner: SourceRunner) -> None:
        self._owners[name] = runner

    def release(self, name: str, runner: SourceRunner) -> None:
        if self._owners.get(name) is runner:
            del self._owners[name]

    # -- readers ----------------------------------------------------------------------------

    def count(self) -> int:
        return sum(len(r.instances) for r in self.runners.values())

    def views(self, *, exclude: Collection[str] = ()) -> list[TargetView]:
        """Every instance's view, except those whose names ``exclude`` holds (a configured
        target that took the name since the last read)."""
        return [v for r in self.runners.values() for v in r.views() if v.name not in exclude]

    def tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in self.runners.values() if r.task is not None]


class FleetCollector(Collector):
    """The per-source health families and ``specmon_shard_info``, built per scrape from the
    runners' state. Every family is yielded even when empty (its HELP says what it is)."""

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        fleet = self._fleet
        runners = sorted(fleet.runners.values(), key=lambda r: r.name)
        up = _family(m.SOURCE_UP)
        reads = _family(m.SOURCE_READS)
        queries = _family(m.SOURCE_QUERIES)
        duration = _family(m.SOURCE_READ_DURATION)
        last_success = _family(m.SOURCE_LAST_SUCCESS)
        size = _family(m.SOURCE_RESPONSE_BYTES)
        instances = _family(m.SOURCE_INSTANCES)
        for runner in runners:
            source = [runner.name]
            if runner.up is not None:
                up.add_metric(source, 1.0 if runner.up else 0.0)
            for status in ReadStatus:
                if status in runner.reads:
                    reads.add_metric([runner.name, status.value], runner.reads[status])
            queries.add_metric(source, runner.queries)
            if runner.last is not None:
                duration.add_metric(source, runner.last.duration_seconds)
                size.add_metric(source, runner.last.bytes)
            if runner.last_success is not None:
                last_success.add_metric(source, runner.last_success)
            for state, count in runner.counts.items():
                instances.add_metric([runner.name, state.value], count)
        yield from (up, reads, queries, duration, last_success, size, instances)
        info = _family(m.SHARD_INFO)
        info.add_metric([str(fleet.shard.index), str(fleet.shard.count)], 1.0)
        yield info


def _family(definition: MetricDef) -> GaugeMetricFamily | CounterMetricFamily:
    if definition.kind is Kind.COUNTER:
        return CounterMetricFamily(definition.name, definition.help, labels=definition.labels)
    return GaugeMetricFamily(definition.name, definition.help, labels=definition.labels)
