"""Acceptance per request class: a tap's page read, class windows against hand computations,
resets, coverage; SGLang's custom-label counters (simulated from SGLang's source) against the
hand computation of its accept length per class, and its load figures."""

from __future__ import annotations

import math

import pytest

from specmon import arithmetic
from specmon.classes import ClassHistory, classes_view
from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import Engine, read_page
from specmon.engines.classes import MAX_CLASSES, OTHER, ClassCounts, ClassReading
from specmon.engines.model import SpecCounters
from specmon.engines.tap import NotATap, read_tap_page
from specmon.sim.sglang_classes import SglangClassesSim


def _reading(**classes: tuple[int, int, int | None, int | None]) -> ClassReading:
    return ClassReading(
        source="tap",
        classes=tuple(
            (name, ClassCounts(r, a, d, s)) for name, (r, a, d, s) in sorted(classes.items())
        ),
    )


def _engine(draft_tokens: int, drafts: int = 0) -> SpecCounters:
    return SpecCounters(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=0)


def test_a_tap_page_is_read_per_class() -> None:
    page = (
        'specmon_tap_requests_total{class="code"} 10.0\n'
        'specmon_tap_requests_total{class="chat",pod="b"} 4\n'
        'specmon_tap_requests_total{class="chat",pod="a"} 6\n'
        'specmon_tap_draft_tokens_total{class="code"} 300\n'
        'specmon_tap_draft_tokens_total{class="chat",pod="a"} 90\n'
        'specmon_tap_draft_tokens_total{class="chat",pod="b"} 10\n'
        'specmon_tap_accepted_tokens_total{class="code"} 200\n'
        'specmon_tap_accepted_tokens_total{class="chat",pod="a"} 20\n'
        'specmon_tap_spec_steps_total{class="code"} 100\n'
        'specmon_tap_spec_steps_total{class="chat",pod="a"} 40\n'
        'specmon_tap_info{engine="vllm",version="0.1.0"} 1\n'
        'specmon_tap_requests_total{class="bad"} -3\n'
    )
    got = read_tap_page(page)
    assert got.engine == "vllm"
    assert dict(got.classes) == {
        "chat": ClassCounts(10, 20, 100, 40),
        "code": ClassCounts(10, 200, 300, 100),
    }
    assert any("'bad' refused" in n for n in got.notes)
    with pytest.raises(NotATap):
        read_tap_page("vllm:num_requests_running 1\n")


def test_more_classes_than_kept_are_summed_into_other() -> None:
    lines = [f'specmon_tap_requests_total{{class="c{i:02d}"}} 1\n' for i in range(40)]
    got = read_tap_page("".join(lines))
    names = got.names()
    assert len(names) == MAX_CLASSES and names[-1] == OTHER
    assert dict(got.classes)[OTHER].requests == 40 - (MAX_CLASSES - 1)


def test_class_windows_against_the_hand_computation() -> None:
    """Two readings 10 s apart: per class the increase, its ratio of sums, its mean length,
    alpha at k = 3 and the margin at c = 0.1, and the coverage against the engine's."""
    history = ClassHistory(retention=120.0)
    history.add(0.0, _reading(code=(5, 100, 300, 100), chat=(2, 10, 60, 20)),
                engine=_engine(400))  # fmt: skip
    history.add(10.0, _reading(code=(9, 260, 600, 200), chat=(6, 30, 180, 60)),
                engine=_engine(850))  # fmt: skip
    view = classes_view(history, windows=(60.0,), draft_cost=0.1, configured_chain_length=None,
                        detected_chain_length=3)  # fmt: skip
    (window,) = view.windows
    figures = {c.name: c for c in window.classes}
    code, chat = figures["code"], figures["chat"]
    assert (code.requests, code.draft_tokens, code.accepted_tokens, code.steps) == (
        4,
        300,
        160,
        100,
    )
    assert code.draft_acceptance_ratio == pytest.approx(160 / 300)
    assert code.mean_acceptance_length == pytest.approx(1 + 160 / 100)
    assert code.alpha == pytest.approx(arithmetic.effective_alpha(1.6, 3))
    breakeven = arithmetic.breakeven_alpha(3, 0.1)
    assert breakeven is not None and view.breakeven_alpha == pytest.approx(breakeven)
    assert code.alpha_margin == pytest.approx(code.alpha - breakeven)  # type: ignore[operator]
    assert chat.draft_acceptance_ratio == pytest.approx(20 / 120)
    assert chat.alpha_margin is not None and chat.alpha_margin < code.alpha_margin  # type: ignore[operator]
    assert window.coverage == pytest.approx((300 + 120) / 450)
    assert window.covered_seconds == 10.0


def test_a_tap_restart_counts_from_zero_and_a_gap_costs_the_coverage() -> None:
    history = ClassHistory(retention=120.0)
    history.add(0.0, _reading(code=(5, 50, 100, 40)), engine=_engine(1000))
    history.add(5.0, _reading(code=(8, 80, 160, 60)), engine=_engine(1060))
    history.add(10.0, _reading(code=(2, 30, 50, 20)), engine=_engine(1110))  # the tap restarted
    view = classes_view(history, windows=(60.0,), draft_cost=0.1, configured_chain_length=3,
                        detected_chain_length=None)  # fmt: skip
    (code,) = view.windows[0].classes
    assert (code.requests, code.accepted_tokens, code.draft_tokens) == (3 + 2, 30 + 30, 60 + 50)
    assert view.windows[0].coverage == pytest.approx(110 / 110)
    history.add(15.0, _reading(code=(3, 40, 60, 25)), engine=None)  # no engine counters
    view = classes_view(history, windows=(60.0,), draft_cost=0.1, configured_chain_length=3,
                        detected_chain_length=None)  # fmt: skip
    assert view.windows[0].coverage is None
    assert "lacked its counters" in (view.windows[0].coverage_note or "")


def test_coverage_above_one_is_withheld_and_llamacpp_steps_are_unknown() -> None:
    history = ClassHistory(retention=120.0)
    history.add(0.0, _reading(all=(0, 0, 0, 0)), engine=_engine(0))
    history.add(5.0, _reading(all=(3, 40, 100, 0)), engine=_engine(50))
    view = classes_view(history, windows=(60.0,), draft_cost=0.1, configured_chain_length=4,
                        detected_chain_length=None)  # fmt: skip
    window = view.windows[0]
    assert window.coverage is None and "more drafted tokens" in (window.coverage_note or "")
    (only,) = window.classes
    # llama.cpp's fields give no steps (0): drafts assumed drafted / k = 25, so the mean
    # length is 1 + 40 / 25 and alpha solves a + ... + a^4 = 1.6.
    assert only.mean_acceptance_length == pytest.approx(1 + 40 / 25)
    assert only.alpha == pytest.approx(arithmetic.effective_alpha(40 / 25, 4))


def test_a_failed_tap_read_keeps_the_windows_and_says_why() -> None:
    history = ClassHistory(retention=120.0)
    history.add(0.0, _reading(code=(1, 5, 10, 5)), engine=_engine(10))
    history.add(5.0, _reading(code=(2, 10, 20, 10)), engine=_engine(20))
    history.add(10.0, ClassReading(source="tap", classes=(), error="the tap did not answer"),
                engine=_engine(30))  # fmt: skip
    view = classes_view(history, windows=(60.0,), draft_cost=0.1, configured_chain_length=3,
                        detected_chain_length=None)  # fmt: skip
    assert view.error == "the tap did not answer"
    assert view.windows[0].classes[0].requests == 1


# -- SGLang's custom labels -----------------------------------------------------------------


SURVIVAL = {"code": (0.9, 0.8, 0.7), "chat": (0.4, 0.15, 0.05), "": (0.6, 0.3, 0.1)}


def _sglang_state(sim: SglangClassesSim) -> TargetState:
    return TargetState(
        TargetConfig(name="sg", url="http://127.0.0.1:1/metrics", engine=Engine.SGLANG),
        windows=(30.0, 120.0),
        retention=130.0,
    )


def test_sglang_custom_labels_give_per_class_accept_lengths() -> None:
    """(Δ generation tokens - Δ requests) / Δ verify calls per class, computed by hand from
    the simulated requests between two pages."""
    sim = SglangClassesSim(survival=SURVIVAL, seed=3)
    state = _sglang_state(sim)
    for name in ("code", "chat", ""):
        sim.request(name, 64)
    before = {n: (t.requests, t.generated, t.verify) for n, t in sim.classes.items()}
    state.observe(read_page(sim.page()), mono=0.0, wall=0.0, duration=0.01)
    for i in range(12):
        sim.request("code", 200 + i)
        sim.request("chat", 150 + i)
        sim.request("", 90)
    after = {n: (t.requests, t.generated, t.verify) for n, t in sim.classes.items()}
    state.observe(read_page(sim.page()), mono=20.0, wall=20.0, duration=0.01)
    view = state.view.classes
    assert view is not None and view.source == "sglang"
    window = view.window("30s")
    assert window is not None
    figures = {c.name: c for c in window.classes}
    assert set(figures) == {"code", "chat"}  # requests without the header are no class
    for name, c in figures.items():
        dreq, dgen, dver = (a - b for a, b in zip(after[name], before[name], strict=True))
        assert c.mean_acceptance_length == pytest.approx((dgen - dreq) / dver), name
        assert (c.requests, c.steps, c.draft_tokens) == (dreq, dver, None)
        # k = 3 from SGLang's spec_num_steps: alpha from the mean accepted per verify call.
        assert c.alpha == pytest.approx(arithmetic.effective_alpha((dgen - dreq) / dver - 1, 3))
    assert figures["code"].mean_acceptance_length > figures["chat"].mean_acceptance_length  # type: ignore[operator]
    labelled = sum(after[n][2] - before[n][2] for n in ("code", "chat"))
    everything = sum(after[n][2] - before[n][2] for n in after)
    assert window.coverage == pytest.approx(labelled / everything)


def test_sglang_with_the_step_counter_has_load_figures() -> None:
    sim = SglangClassesSim(survival=SURVIVAL, seed=4, step_seconds=0.025)
    state = _sglang_state(sim)
    readings = []
    for t in range(0, 30, 5):
        for name in ("code", "chat"):
            sim.request(name, 120)
        readings.append((sim.passes, sim.decode_seconds))
        state.observe(read_page(sim.page()), mono=float(t), wall=float(t), duration=0.01)
    (model,) = state.view.models
    load = model.windows[0].load
    assert load is not None and load.step_seconds is not None
    passes = readings[-1][0] - readings[0][0]
    seconds = readings[-1][1] - readings[0][1]
    assert load.step_seconds == pytest.approx(seconds / passes)
    assert load.concurrency == pytest.approx(1.0)  # one request at a time: a pass per verify
    assert any("estimates" in n for n in state.view.notes)


def test_sglang_with_the_timer_off_has_no_step_time() -> None:
    sim = SglangClassesSim(survival=SURVIVAL, seed=5, timer=False)
    state = _sglang_state(sim)
    for t in range(0, 20, 5):
        sim.request("code", 50)
        state.observe(read_page(sim.page()), mono=float(t), wall=float(t), duration=0.01)
    (model,) = state.view.models
    assert model.windows[0].load is None or model.windows[0].load.step_seconds is None
    assert any("timer is off" in n for n in state.view.notes)
    assert not math.isnan(model.windows[0].report.alpha or 0.0)  # type: ignore[union-attr]


def test_the_target_page_and_the_api_show_the_classes() -> None:
    from specmon.surfaces.api import views_json
    from specmon.surfaces.target import render_target
    from tests.support.views import fleet_views

    view = next(v for v in fleet_views() if v.name == "vllm-a")
    html = render_target(view, primary_window="1m", series=(), events=(), now=1_700_000_100.0)
    assert "Acceptance per request class" in html
    assert "<td>code</td><td>15</td><td>1,500</td><td>500</td><td>0.333</td>" in html
    assert "coverage 90%" in html
    (doc,) = views_json([view])
    (window, _) = doc["classes"]["windows"]
    assert {c["name"]: c["draft_acceptance_ratio"] for c in window["classes"]} == {
        "chat": pytest.approx(280 / 1400),
        "code": pytest.approx(500 / 1500),
    }
    assert window["coverage"] == pytest.approx(2900 / 3240)
    other = next(v for v in fleet_views() if v.name == "llama-b")
    assert views_json([other])[0]["classes"] is None
    assert "per request class" not in render_target(
        other, primary_window="1m", series=(), events=()
    )
