"""The demo's fleet watched by target states on a virtual clock: what ``specmon demo``'s daemon
sees, without its wall-clock waits. The demo's own engines (``specmon.cli.demo.demo_fleet``)
and its own configuration (the YAML ``specmon demo`` writes) are scraped once a simulated
second, in the demo's order, each state finding its twin through one :class:`Twins`; a
minute of the demo takes a fraction of a second. Deterministic: seeded engines, no I/O."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from specmon.cli.demo import LOAD_CYCLE, LOAD_PHASE, _config_yaml, demo_fleet
from specmon.daemon.config import Config, parse_config
from specmon.daemon.target import Event, TargetState, TargetView, Twins
from specmon.engines import read_page
from specmon.sim.server import VirtualTarget
from specmon.surfaces.status import views_json

__all__ = ["DemoFleet"]


@dataclass
class _Addresses:
    """What ``_config_yaml`` reads of a SimServer: each target's base URL."""

    addresses: dict[str, str]


@dataclass
class DemoFleet:
    """The demo's targets (all, or ``names``) and the states that watch them."""

    names: tuple[str, ...] | None = None
    load_phase: float = LOAD_PHASE
    #: Simulated seconds since the engines started.
    now: float = 0.0
    targets: dict[str, VirtualTarget] = field(default_factory=dict)
    states: dict[str, TargetState] = field(default_factory=dict)
    config: Config | None = None

    def __post_init__(self) -> None:
        fleet = [
            t
            for t in demo_fleet(load_phase=self.load_phase)
            if self.names is None or t.name in self.names
        ]
        for target in fleet:
            # The virtual clock starts at 0: the engines' counters and scenarios follow it.
            target.engine.restart(now=0.0, wall=0.0)
            target.started = 0.0
            self.targets[target.name] = target
        addresses = {t.name: f"http://127.0.0.1:9/{t.name}" for t in fleet}
        config = parse_config(_config_yaml(_Addresses(addresses)))  # type: ignore[arg-type]
        self.config = config
        twins = Twins()
        for cfg in config.targets:
            state = TargetState(
                cfg, windows=config.global_.windows, retention=config.retention, twins=twins
            )
            twins.put(state)
            self.states[cfg.name] = state

    @property
    def cycle_seconds(self) -> float:
        return self.load_phase * len(LOAD_CYCLE)

    def run_until(self, until: float, *, interval: float = 1.0) -> Iterator[float]:
        """Scrape every target each ``interval`` simulated seconds up to ``until``; yields
        the time after each round (the caller may look at the states between rounds)."""
        while self.now + interval <= until + 1e-9:
            self.now += interval
            for name in self.targets:
                self.scrape(name)
            yield self.now

    def scrape(self, name: str) -> list[Event]:
        """One scrape of target ``name`` at :attr:`now`, read as the daemon reads it (the
        configured engine and model override); the state's events."""
        target, state = self.targets[name], self.states[name]
        target.tick(self.now)
        cfg = state.config
        reading = read_page(target.page(), engine=cfg.engine, model=cfg.model)
        return state.observe(reading, mono=self.now, wall=self.now, duration=0.001)

    def advance(self, until: float) -> None:
        for _ in self.run_until(until):
            pass

    def views(self) -> list[TargetView]:
        return [s.view for s in self.states.values()]

    def api(self, *names: str) -> dict[str, Any]:
        """``/api/v1/targets`` as the daemon serves it (only ``names``, if given)."""
        views = [s.view for n, s in self.states.items() if not names or n in names]
        document: dict[str, Any] = json.loads(json.dumps({"targets": views_json(views)}))
        return document
