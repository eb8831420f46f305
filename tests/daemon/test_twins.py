"""The twin a target compares with is found through the Twins it was built with: the states
the daemon keeps current, not a call up into the daemon; and a twin is listed as a baseline,
not as a server missing its speculative data."""

from __future__ import annotations

import dataclasses
import re

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState, Twins
from specmon.engines import read_page
from specmon.surfaces.status import render_status, views_json
from specmon.surfaces.target import render_target
from tests.support.demo_fleet import DemoFleet


def _state(name: str, twins: Twins) -> TargetState:
    return TargetState(
        TargetConfig(name=name, url="http://127.0.0.1:1/metrics"),
        windows=(60.0,),
        retention=70.0,
        twins=twins,
    )


def test_a_name_is_forgotten_only_by_the_state_that_holds_it() -> None:
    twins = Twins()
    instance = _state("vllm-b", twins)
    twins.put(instance)
    direct = _state("vllm-b", twins)  # a configured target takes the name
    twins.put(direct)
    twins.drop(instance)  # the source lets its instance go: the configured target stays
    assert twins.load_window("vllm-b", "m", 60.0) is None  # no model read yet, but found
    assert twins._states["vllm-b"] is direct
    twins.drop(direct)
    assert "vllm-b" not in twins._states
    assert twins.load_window("vllm-b", "m", 60.0) is None


def _named(name: str, twins: Twins, baseline: str | None = None) -> TargetState:
    state = TargetState(
        TargetConfig(name=name, url="http://127.0.0.1:1/metrics", baseline=baseline),
        windows=(60.0,),
        retention=70.0,
        twins=twins,
    )
    twins.put(state)
    return state


def test_the_twins_know_whom_each_target_is_the_baseline_for() -> None:
    """Kept current as targets come, go and are reconfigured (a reload that changes
    ``baseline:``), in name order, without a scan of the fleet."""
    twins = Twins()
    base = _named("base", twins)
    b = _named("spec-b", twins, baseline="base")
    a = _named("spec-a", twins, baseline="base")
    assert twins.baseline_for("base") == ("spec-a", "spec-b")
    assert twins.baseline_for("spec-a") == () and twins.baseline_for("nobody") == ()
    b.reconfigure(dataclasses.replace(b.config, baseline="other"), windows=(60.0,), retention=70.0)
    assert twins.baseline_for("base") == ("spec-a",)
    assert twins.baseline_for("other") == ("spec-b",)
    twins.drop(a)
    assert twins.baseline_for("base") == ()
    twins.drop(b)
    assert twins.baseline_for("other") == ()
    assert base.view.baseline_for == ()


def test_a_baseline_is_no_missing_data() -> None:
    """The demo's fleet (its engines and config, on a simulated clock): its two twins are
    listed last on the status page as "baseline for" their target, never as "NO SPEC DATA
    ... this build is too old", and no warning is logged for them in half a minute of scrapes,
    while a server without speculation that nobody compares with is still warned about."""
    fleet = DemoFleet()
    warnings: list[tuple[str, str]] = []
    infos: list[tuple[str, str]] = []
    for now in range(1, 31):
        fleet.now = float(now)
        for name in fleet.targets:
            for event in fleet.scrape(name):
                (warnings if event.level == "warning" else infos).append((name, event.event))
    assert not [w for w in warnings if w[0].endswith("-baseline")], warnings
    assert ("vllm-baseline", "baseline_up") in infos and ("tgi-baseline", "baseline_up") in infos
    views = fleet.views()
    html = render_status(views, primary_window="30s", ready=True)
    names = re.findall(r'class="name" href="[^"]*">([^<]+)</a>', html)
    assert names[-2:] == ["tgi-baseline", "vllm-baseline"], names
    # Only vllm-switched says so: it runs without speculation until its restart with a draft
    # (60 s in), and nothing compares with it.
    rows = html.split("<tr")
    missing = [r for r in rows if "NO SPEC DATA" in r or "this build is too old" in r]
    assert [re.findall(r'href="/target/([^"]+)"', r)[0] for r in missing] == ["vllm-switched"]
    for twin, loaded in (("tgi-baseline", "tgi-loaded"), ("vllm-baseline", "vllm-loaded")):
        row = html[html.index(f'href="/target/{twin}"') :].split("</tbody>")[0]
        assert "BASELINE</span>" in row
        assert f'baseline for <a href="/target/{loaded}">{loaded}</a>' in row
        page = render_target(
            fleet.states[twin].view, primary_window="30s", series=(), events=(), now=30.0
        )
        assert f'baseline for <a href="/target/{loaded}">{loaded}</a>' in page
        assert "this build is too old" not in page
    [doc] = views_json([fleet.states["vllm-baseline"].view])
    assert doc["baseline_for"] == ["vllm-loaded"]
    # The same page from a target nobody compares with: no speculative data, warned once.
    alone = TargetState(
        TargetConfig(name="alone", url="http://127.0.0.1:1/metrics"),
        windows=(60.0,),
        retention=70.0,
        twins=Twins(),
    )
    text = fleet.targets["vllm-baseline"].page()
    events = alone.observe(read_page(text), mono=1.0, wall=1.0, duration=0.001)
    assert [(e.level, e.event) for e in events] == [
        ("info", "target_up"),
        ("warning", "no_speculation"),
    ]
    html = render_status([alone.view], primary_window="30s", ready=True)
    assert "NO SPEC DATA" in html and "this build is too old" in html
