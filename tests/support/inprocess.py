"""Target states fed page texts with explicit clocks and exported like the daemon does: the
in-process path (page text -> read_page -> TargetState -> collector -> prometheus_client's
parser) that the hostile-page and fuzz tests share."""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.surfaces.status import views_json
from tests.support.daemon import Exported
from tests.support.reference import TargetCollector

__all__ = ["Fleet", "assert_sane"]


class Fleet:
    """Target states fed page texts with explicit clocks, exported like the daemon does."""

    def __init__(self, *names: str) -> None:
        self.states = {
            n: TargetState(
                TargetConfig(name=n, url=f"http://127.0.0.1:1/{n}"), windows=(60.0,), retention=70.0
            )
            for n in names
        }
        self.events: dict[str, list[str]] = {n: [] for n in names}

    def feed(self, name: str, text: str, at: float) -> None:
        state = self.states[name]
        events = state.observe(read_page(text), mono=at, wall=at, duration=0.001)
        self.events[name] += [e.event for e in events]

    def export(self) -> Exported:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(TargetCollector(lambda: [s.view for s in self.states.values()]))
        return Exported.parse(generate_latest(registry).decode())

    def api(self, name: str) -> dict[str, Any]:
        [doc] = views_json([self.states[name].view])
        return doc


def assert_sane(m: Exported) -> None:
    """No impossible figure on the page: every ratio of 0..1 within it, lengths and speed-ups
    within what k = 64 allows, everything finite."""
    for name, series in m.samples.items():
        for labels, value in series.items():
            assert math.isfinite(value), (name, labels, value)
            if name.endswith("_ratio") and "speedup" not in name and "margin" not in name:
                assert 0.0 <= value <= 1.0, (name, labels, value)
            if "speedup" in name:
                assert 0.0 < value <= 65.0, (name, labels, value)
            if name == "specmon_mean_acceptance_length":
                assert 1.0 <= value <= 65.0, (name, labels, value)
