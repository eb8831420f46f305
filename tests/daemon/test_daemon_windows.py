"""Exported windows equal a hand computation from the counters over each window.

The logic runs in-process (the simulator's pages rendered from real captured formats, read by
the adapters, fed to TargetState with explicit clocks, exported by the collector and parsed
with prometheus_client's own parser); one run of the daemon as users run it (a subprocess,
real HTTP, real sleeps) checks the wiring for the most involved page format."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget
from tests.support.daemon import Exported, daemon
from tests.support.fake_engines import manual_target, running, set_counters
from tests.support.reference import TargetCollector

CONFIG = """\
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  windows: [4s, 30s]
  draft_cost: 0.2
targets:
{targets}
"""

#: The staircase every test feeds: V0 at start, V1 from t ~ 2 s, V2 from t ~ 6 s, then frozen.
V0 = (1000, 3000, [700, 400, 200])
V1 = (1600, 4800, [1120, 640, 320])
V2 = (2000, 6000, [1300, 760, 380])


def target_yaml(name: str, url: str, **extra: object) -> str:
    lines = [f"  - name: {name}", f"    url: {url}"]
    lines += [f"    {k}: {v}" for k, v in extra.items()]
    return "\n".join(lines)


def expected_alpha(mean_accepted: float, k: int) -> float:
    """Solve alpha + ... + alpha^k = mean by bisection, written out here independently."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, k + 1)) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


class InProcess:
    """A TargetState reading a simulated engine's page, exported like the daemon does."""

    def __init__(self, engine: VirtualTarget, **config: object) -> None:
        self.engine = engine
        cfg = TargetConfig(name="eng", url="http://127.0.0.1:1/metrics", draft_cost=0.2, **config)  # type: ignore[arg-type]
        self.state = TargetState(cfg, windows=(4.0, 30.0), retention=31.0)
        self.log: list[str] = []

    def scrape(self, at: float) -> None:
        reading = read_page(self.engine.page())
        events = self.state.observe(reading, mono=at, wall=at, duration=0.001)
        self.log += [e.event for e in events]

    def metrics(self) -> Exported:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(TargetCollector(lambda: [self.state.view]))
        return Exported.parse(generate_latest(registry).decode())


def staircase_in_process(kind: PageKind) -> Exported:
    eng = manual_target("e", kind, chain_length=3, model="m-1")
    target = InProcess(eng)
    t = 0.0
    for until, values in ((2.0, V0), (6.0, V1), (13.0, V2)):
        set_counters(eng, values[0], values[1], values[2])
        while t < until:
            target.scrape(t)
            t += 0.5
    return target.metrics()


def check_staircase(m: Exported, kind: PageKind) -> None:
    labels = {"target": "eng", "model": "m-1" if kind is not PageKind.LLAMACPP else "default"}
    # 4 s window: counters frozen at V2 for > 4 s -> zero drafts, and no ratio at all.
    assert m.value("specmon_window_drafts", window="4s", **labels) == 0
    for name in (
        "specmon_alpha_ratio",
        "specmon_draft_acceptance_ratio",
        "specmon_position_survival_ratio",
        "specmon_expected_speedup_ratio",
    ):
        assert not m.series(name, window="4s", **labels), name
    # 30 s window: every reading since the start -> V2 - V0.
    drafts = V2[0] - V0[0]
    tokens = V2[1] - V0[1]
    per_pos = [b - a for a, b in zip(V0[2], V2[2], strict=True)]
    accepted = sum(per_pos)
    w = {"window": "30s", **labels}
    assert m.value("specmon_window_drafts", **w) == drafts
    assert m.value("specmon_draft_acceptance_ratio", **w) == pytest.approx(accepted / tokens)
    assert m.value("specmon_mean_acceptance_length", **w) == pytest.approx(1 + accepted / drafts)
    for i, count in enumerate(per_pos, start=1):
        assert m.value("specmon_position_survival_ratio", position=str(i), **w) == pytest.approx(
            count / drafts
        )
        previous = drafts if i == 1 else per_pos[i - 2]
        assert m.value("specmon_position_conditional_ratio", position=str(i), **w) == pytest.approx(
            count / previous
        )
    k, c = 3, 0.2
    assert m.value("specmon_chain_length", **labels) == k
    assert m.value("specmon_draft_cost_ratio", source="configured", **labels) == c
    breakeven = m.value("specmon_breakeven_alpha_ratio", **labels)
    assert breakeven is not None
    # S(breakeven) = 1 with the closed form
    a = breakeven
    assert (1 - a ** (k + 1)) / ((1 - a) * (1 + k * c)) == pytest.approx(1.0, abs=1e-9)
    alpha = m.value("specmon_alpha_ratio", **w)
    assert alpha is not None
    assert alpha == pytest.approx(expected_alpha(accepted / drafts, k), abs=1e-9)
    assert m.value("specmon_alpha_margin_ratio", **w) == pytest.approx(alpha - breakeven)
    assert m.value("specmon_expected_speedup_ratio", **w) == pytest.approx(
        (1 + accepted / drafts) / (1 + c * tokens / drafts)
    )
    survival = [p / drafts for p in per_pos]
    candidates = [(1 + sum(survival[:j])) / (1 + j * c) for j in range(k + 1)]
    best = max(range(k + 1), key=lambda j: (candidates[j], -j))
    assert m.value("specmon_best_chain_length", **w) == best
    assert m.value("specmon_best_speedup_ratio", **w) == pytest.approx(candidates[best])
    # traffic: generated tokens (the fake engine makes drafts + accepted per step)
    assert m.value("specmon_window_generated_tokens", **w) == drafts + accepted
    assert m.value("specmon_window_generated_tokens", window="4s", **labels) == 0
    assert m.value("specmon_requests_running", **labels) == 4
    # counters: increases seen since start
    assert m.value("specmon_drafts_total", **labels) == drafts
    assert m.value("specmon_accepted_tokens_total", **labels) == accepted
    assert math.isclose(m.value("specmon_up", target="eng") or 0, 1.0)
    assert m.value("specmon_page_malformed_lines", target="eng") == 0


@pytest.mark.parametrize("kind", [PageKind.VLLM, PageKind.LLAMACPP, PageKind.VLLM_MULTIPROC])
def test_windows_equal_hand_computation(kind: PageKind) -> None:
    check_staircase(staircase_in_process(kind), kind)


def test_windows_equal_hand_computation_through_the_running_daemon(tmp_path: Path) -> None:
    """The same staircase through the daemon as users run it: real HTTP, real clocks."""
    kind = PageKind.VLLM_MULTIPROC
    eng = manual_target("e", kind, chain_length=3, model="m-1")
    set_counters(eng, V0[0], V0[1], V0[2])
    with running([eng]) as engines:
        cfg = tmp_path / "specmon.yaml"
        cfg.write_text(CONFIG.format(targets=target_yaml("eng", engines.url("e"))))
        with daemon(cfg, tmp_path) as d:
            time.sleep(2.0)
            set_counters(eng, V1[0], V1[1], V1[2])
            time.sleep(4.0)
            set_counters(eng, V2[0], V2[1], V2[2])
            # Wait until the 4 s window holds only V2 readings (drafts 0), i.e. > 4 s after.
            time.sleep(6.0)
            m = d.metrics()
    check_staircase(m, kind)


def test_counter_reset_never_exports_negative_or_absurd_values() -> None:
    eng = manual_target("e", PageKind.VLLM, chain_length=2)
    target = InProcess(eng)
    seen_bad: list[str] = []

    def scan() -> Exported:
        m = target.metrics()
        for name, series in m.samples.items():
            for labels, value in series.items():
                if value < 0 and "margin" not in name:
                    seen_bad.append(f"{name}{labels}={value}")
                if name.endswith("_ratio") and "speedup" not in name and value > 1.0:
                    seen_bad.append(f"{name}{labels}={value}")
        return m

    set_counters(eng, 50_000, 100_000, [30_000, 15_000])
    target.scrape(0.0)
    scan()
    set_counters(eng, 50_100, 100_200, [30_060, 15_030])
    target.scrape(1.5)
    scan()
    # the engine restarts and has served 40 drafts since
    set_counters(eng, 40, 80, [20, 8])
    for step in range(6):
        target.scrape(3.0 + step * 0.5)
        m = scan()
    assert not seen_bad
    w = {"target": "eng", "window": "30s"}
    # 100 drafts before the restart + 40 after it
    assert m.value("specmon_window_drafts", **w) == 140
    assert m.value("specmon_position_survival_ratio", position="1", **w) == pytest.approx(
        (60 + 20) / 140
    )
    assert m.value("specmon_engine_resets_total", target="eng") == 1
    assert target.log.count("counter_reset") == 1
