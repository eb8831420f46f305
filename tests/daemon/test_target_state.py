"""TargetState in-process: observe, fail, reconfigure, reset, engine change, margin events.

No HTTP, no subprocess, no sleep: readings are built by hand and fed with explicit clocks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.daemon import metrics
from specmon.daemon.collector import target_samples
from specmon.daemon.config import TargetConfig
from specmon.daemon.target import Event, ModelView, TargetState
from specmon.engines import (
    Engine,
    ModelReading,
    PageReading,
    RejectReason,
    SpecCounters,
    read_page,
)
from specmon.sources import ScrapeResult
from specmon.surfaces.status import views_json
from tests.support.views import small_profile


def _reading(
    drafts: int, draft_tokens: int, per_pos: tuple[int, ...], *, model: str = "m"
) -> PageReading:
    counters = SpecCounters(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=sum(per_pos),
        accepted_per_position=per_pos,
    )
    return PageReading(engine=Engine.VLLM, models=(ModelReading(model=model, counters=counters),))


def _state(**overrides: object) -> TargetState:
    config = TargetConfig(name="t", url="http://127.0.0.1:1/metrics", **overrides)  # type: ignore[arg-type]
    return TargetState(config, windows=(60.0, 300.0), retention=310.0)


def test_detected_chain_length_is_reported_as_detected() -> None:
    """Without chain_length in the config the window reports said "configured"."""
    state = _state()
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    state.observe(_reading(200, 600, (160, 120, 80)), mono=5.0, wall=5.0, duration=0.01)
    [target] = views_json([state.view])
    [model] = target["models"]
    assert model["chain_length"] == 3
    assert model["chain_length_source"] == "detected"
    for window in model["windows"]:
        report = window["report"]
        assert report is not None
        assert report["chain_length"] == 3
        assert report["chain_length_source"] == "detected"


def test_restart_with_a_shorter_chain_adds_no_false_configured_note() -> None:
    """After an engine restart with a shorter chain the report claimed a configured
    chain length that differs from the position series."""
    state = _state()
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    state.observe(_reading(200, 600, (160, 120, 80)), mono=5.0, wall=5.0, duration=0.01)
    # The engine restarts with k = 2: counters start again from zero.
    state.observe(_reading(50, 100, (40, 30)), mono=10.0, wall=10.0, duration=0.01)
    [target] = views_json([state.view])
    [model] = target["models"]
    assert model["chain_length"] == 2
    assert model["chain_length_source"] == "detected"
    for window in model["windows"]:
        notes = " ".join(window["report"]["notes"])
        assert "configured" not in notes, notes
        assert window["report"]["chain_length_source"] == "detected"


def _events(events: list[Event]) -> list[str]:
    return [e.event for e in events]


def test_first_observation_is_up_and_windows_wait_for_two_readings() -> None:
    state = _state()
    events = state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=10.0, duration=0.02)
    assert _events(events) == ["target_up"]
    view = state.view
    assert view.up and view.scraped and view.speculation
    assert view.last_success == 10.0 and view.last_duration == 0.02
    [model] = view.models
    assert [w.window for w in model.windows] == ["1m", "5m"]
    assert all(w.report is None and w.covered_seconds is None for w in model.windows)
    assert model.totals_drafts == 0  # increases since specmon started: none yet


def test_windows_are_increases_between_readings_inside_them() -> None:
    state = _state(draft_cost=0.2)
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    state.observe(_reading(150, 450, (120, 80, 50)), mono=200.0, wall=200.0, duration=0.01)
    state.observe(_reading(250, 750, (200, 140, 80)), mono=230.0, wall=230.0, duration=0.01)
    [model] = state.view.models
    one, five = model.windows
    # 1m: only the last two readings (t = 200, 230): +100 drafts, +300 tokens, per_pos +80/60/30.
    assert (one.drafts, one.covered_seconds, one.readings) == (100, 30.0, 2)
    assert one.report is not None
    assert one.report.accepted_tokens == 170
    assert [p.survival for p in one.report.positions] == [0.8, 0.6, 0.3]
    # 5m: everything since t = 0.
    assert (five.drafts, five.covered_seconds, five.readings) == (150, 230.0, 3)
    assert model.totals_drafts == 150 and model.totals_accepted == 240


def test_failure_keeps_nothing_derived_and_logs_once_per_change() -> None:
    state = _state()
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    first = state.fail(
        kind=ScrapeResult.TIMEOUT, message="no complete response within 3s", duration=3.0
    )
    assert _events(first) == ["target_down"]
    assert not state.view.up and state.view.models == ()
    assert state.view.error_kind == "timeout" and state.view.last_success == 0.0
    assert (
        state.fail(
            kind=ScrapeResult.TIMEOUT, message="no complete response within 3s", duration=3.0
        )
        == []
    )
    changed = state.fail(kind=ScrapeResult.HTTP_ERROR, message="HTTP 500", duration=0.1)
    assert _events(changed) == ["target_error_changed"]
    back = state.observe(_reading(200, 600, (160, 120, 80)), mono=10.0, wall=10.0, duration=0.01)
    assert _events(back) == ["target_up"]
    # The history survived the outage: the window spans it.
    model: ModelView
    [model] = list(state.view.models)
    assert model.windows[0].drafts == 100


def test_counter_reset_is_counted_and_the_new_value_is_the_increase() -> None:
    state = _state()
    state.observe(_reading(1000, 3000, (800, 600, 400)), mono=0.0, wall=0.0, duration=0.01)
    events = state.observe(_reading(30, 90, (24, 18, 12)), mono=5.0, wall=5.0, duration=0.01)
    assert _events(events) == ["counter_reset"]
    [model] = state.view.models
    assert model.resets == 1
    assert model.windows[0].drafts == 30  # the counter started again from zero


def test_engine_change_starts_the_history_again() -> None:
    state = _state()
    state.observe(_reading(1000, 3000, (800, 600, 400)), mono=0.0, wall=0.0, duration=0.01)
    llama = PageReading(
        engine=Engine.LLAMACPP,
        models=(ModelReading("m", SpecCounters(5, 20, 10, (5, 3, 2))),),
    )
    events = state.observe(llama, mono=5.0, wall=5.0, duration=0.01)
    assert "engine_changed" in _events(events)
    [model] = state.view.models
    assert model.windows[0].report is None  # one reading of the new engine: no window yet
    assert state.view.engine is Engine.LLAMACPP


def test_reconfigure_applies_a_new_draft_cost_at_once() -> None:
    state = _state(draft_cost=0.1)
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    state.observe(_reading(200, 600, (160, 120, 80)), mono=5.0, wall=5.0, duration=0.01)
    before = state.view.models[0]
    config = TargetConfig(
        name="t", url="http://127.0.0.1:1/metrics", draft_cost=0.5, chain_length=2
    )
    state.reconfigure(config, windows=(60.0,), retention=70.0)
    after = state.view.models[0]
    assert before.basis.draft_cost == 0.1 and after.basis.draft_cost == 0.5
    assert after.basis.chain_length == 2 and after.basis.chain_length_source == "configured"
    assert [w.window for w in after.windows] == ["1m"]
    report = after.windows[0].report
    assert report is not None and report.draft_cost == 0.5


def test_margin_crossings_are_events_in_the_primary_window() -> None:
    state = _state(draft_cost=0.3)
    assert state.primary_window == "5m"
    # Good acceptance, then collapse, then recovery; each reading 100 s apart so the 1m window
    # holds two readings and the 5m window three.
    readings = [
        _reading(0, 0, (0, 0, 0)),
        _reading(100, 300, (90, 80, 70)),
        _reading(1100, 3300, (190, 100, 80)),
        _reading(2100, 6300, (290, 120, 90)),
        _reading(2200, 6600, (380, 200, 160)),
        _reading(3200, 9600, (1280, 1000, 900)),
        _reading(4200, 12600, (2180, 1800, 1640)),
    ]
    names: list[str] = []
    for i, reading in enumerate(readings):
        names += _events(state.observe(reading, mono=i * 100.0, wall=0.0, duration=0.01))
    # The first page's counters are at 0: its epoch is settled speculating at the first drafts.
    assert names == [
        "target_up", "config_epoch_settled", "margin_below_breakeven", "margin_above_breakeven",
    ]  # fmt: skip


def test_speculation_appears_and_vanishes() -> None:
    state = _state()
    assert _events(state.observe(PageReading(Engine.VLLM, ()), mono=0, wall=0, duration=0)) == [
        "target_up",
        "no_speculation",
    ]
    assert state.view.message is not None and "speculation is off" in state.view.message
    appeared = state.observe(_reading(1, 3, (1, 0, 0)), mono=1, wall=1, duration=0)
    assert _events(appeared) == ["speculation_appeared"]
    vanished = state.observe(PageReading(Engine.VLLM, ()), mono=2, wall=2, duration=0)
    assert _events(vanished) == ["speculation_vanished"]
    assert state.view.models == ()


def test_a_model_that_vanishes_loses_its_history() -> None:
    state = _state()
    two = PageReading(
        engine=Engine.VLLM,
        models=(
            ModelReading("a", SpecCounters(10, 30, 5, (3, 1, 1))),
            ModelReading("b", SpecCounters(10, 30, 5, (3, 1, 1))),
        ),
    )
    state.observe(two, mono=0, wall=0, duration=0)
    state.observe(_reading(20, 60, (6, 2, 2), model="a"), mono=5, wall=5, duration=0)
    assert [m.model for m in state.view.models] == ["a"]
    state.observe(two, mono=10, wall=10, duration=0)
    b = next(m for m in state.view.models if m.model == "b")
    assert b.windows[0].report is None  # b starts again: one reading


def test_the_daemons_targets_document_feeds_recommend() -> None:
    """The load figures of a target with a baseline twin reach /api/v1/targets in the shape
    `specmon recommend --from` reads, and give the chain length per load: the full chain
    where speculation pays twice over (concurrency 4), a single token where the measured
    c = 0.5 makes it break even at k = 3 (concurrency 16)."""
    import json

    from specmon.recommend import input_from_targets, recommend
    from tests.support.views import fleet_views

    document = json.loads(json.dumps({"targets": views_json(fleet_views())}))
    data = input_from_targets(document, target="vllm-loaded", window="5m")
    advice = {a.bucket.label: a for a in recommend(data).buckets}
    assert advice["4"].best_chain_length == 3 and advice["4"].draft_cost == pytest.approx(1 / 12)
    assert advice["16"].best_chain_length == 1 and advice["16"].draft_cost == pytest.approx(0.5)


def _baseline_info(state: TargetState) -> list[dict[str, str]]:
    return [s.labels for s in target_samples(state.view) if s.family is metrics.BASELINE_INFO]


def test_baseline_info_comes_from_the_config_whether_up_or_down() -> None:
    """specmon_baseline_info names the twin before any figure against it exists, while the
    target is down, and after a reload that changes or drops it (the rules leave the twin out
    of SpecmonSpeculationMissing by it)."""
    state = _state(baseline="t-twin")
    assert _baseline_info(state) == []  # never scraped: no series at all
    state.fail(kind=ScrapeResult.TIMEOUT, message="no complete response within 3s", duration=3)
    assert _baseline_info(state) == [{"target": "t", "baseline": "t-twin"}]
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    assert _baseline_info(state) == [{"target": "t", "baseline": "t-twin"}]
    other = TargetConfig(name="t", url="http://127.0.0.1:1/metrics", baseline="t-canary")
    state.reconfigure(other, windows=(60.0, 300.0), retention=310.0)
    assert _baseline_info(state) == [{"target": "t", "baseline": "t-canary"}]
    none = TargetConfig(name="t", url="http://127.0.0.1:1/metrics")
    state.reconfigure(none, windows=(60.0, 300.0), retention=310.0)
    assert _baseline_info(state) == []


def test_no_baseline_info_for_a_cost_profile() -> None:
    state = _state(cost_profile=small_profile())
    state.observe(_reading(100, 300, (80, 60, 40)), mono=0.0, wall=0.0, duration=0.01)
    assert _baseline_info(state) == []


def test_only_compared_targets_keep_whole_load_rows() -> None:
    """A target compared with nothing keeps lean load rows (memory at fleet size); one with
    a baseline twin or a cost profile keeps them whole; a plain server keeps them lean until
    a target takes it as its twin (load_window), which makes them whole."""
    from specmon.engines import Context

    def reading(step: int, *, spec: bool) -> PageReading:
        context = Context(
            requests_running=2.0,
            generation_tokens=300 * step,
            inter_token_latency_sum_seconds=2.0 * step,
            inter_token_latency_count=100 * step,
            first_token_count=step,
            engine_steps=50 * step,
        )
        counters = SpecCounters(10 * step, 30 * step, 20 * step, (10 * step, 6 * step, 4 * step))
        model = ModelReading(model="m", counters=counters if spec else None, context=context)
        if spec:
            return PageReading(engine=Engine.VLLM, models=(model,))
        return PageReading(engine=Engine.VLLM, models=(), plain_models=(model,))

    states = {
        "none": _state(),
        "twin": _state(baseline="t-twin"),
        "profile": _state(cost_profile=small_profile()),
        "plain": _state(),
    }
    for step in range(1, 4):
        for name, state in states.items():
            state.observe(reading(step, spec=name != "plain"), mono=5.0 * step, wall=0.0,
                          duration=0.01)  # fmt: skip
    lean = {name: state._loads["m"].lean for name, state in states.items()}
    assert lean == {"none": True, "twin": False, "profile": False, "plain": True}
    window = states["plain"].load_window("m", 60.0)
    assert window is not None and window.totals is not None and window.totals.intervals == 2
    assert not states["plain"]._loads["m"].lean


def test_trtllm_without_drafts_or_k_exports_its_estimates() -> None:
    """TensorRT-LLM with iteration counters only and no speculative-config gauge: the window
    gets a mean acceptance length and a mean draft length from the engine's own acceptance
    length, averaged over the window's scrapes, and says they are estimates."""
    page = (
        Path(__file__).parents[1] / "fixtures" / "pages" / "written" / "trtllm-serve-iteration.txt"
    )
    lines = [line for line in page.read_text().splitlines() if "speculative_config" not in line]

    def scaled(factor: float, length: float) -> str:
        out = []
        for line in lines:
            name, _, value = line.rpartition(" ")
            if "_total{" in line and "spec_decode" in line:
                value = str(float(value) * factor)
            elif "acceptance_length{" in line:
                value = str(length)
            out.append(f"{name} {value}")
        return "\n".join(out) + "\n"

    state = TargetState(
        TargetConfig(name="t", url="http://h/metrics"), windows=(60.0,), retention=70.0
    )
    for at, factor, length in ((100.0, 1.0, 3.0), (110.0, 2.0, 3.5)):
        state.observe(read_page(scaled(factor, length)), mono=at, wall=at, duration=0.01)
    (model,) = state.view.models
    report = model.windows[0].report
    assert report is not None and report.engine_estimate
    assert report.mean_acceptance_length == pytest.approx(3.25)  # (3.0 + 3.5) / 2
    assert report.mean_draft_length == pytest.approx(2.25 * 4100 / 2230)
    names = {s.family.name for s in target_samples(state.view)}
    assert {"specmon_mean_acceptance_length", "specmon_mean_draft_length"} <= names
    window = views_json([state.view])[0]["models"][0]["windows"][0]
    assert window["report"]["engine_estimate"] is True


def test_a_window_shorter_than_two_achieved_intervals_says_so_instead_of_a_figure() -> None:
    """Readings every 40 s (a 5 s interval stretched 8x): the 1m window holds one interval
    of data, and is withheld as ``sparse_window``; the 5m window keeps its figures."""
    state = _state()
    for index in range(5):
        n = 100 * (index + 1)
        state.observe(
            _reading(n, 3 * n, (n * 8 // 10, n * 6 // 10, n * 4 // 10)),
            mono=40.0 * index,
            wall=40.0 * index,
            duration=0.01,
        )
    assert state.read_interval == 40.0
    [model] = state.view.models
    one, five = model.windows
    assert one.report is None and one.readings == 2  # data, but too sparse for a figure
    assert five.report is not None
    [why] = [r for r in state.view.rejected if r.reason is RejectReason.SPARSE_WINDOW]
    assert why.detail.startswith("1m: shorter than two of the intervals achieved") and not (
        why.whole_model
    )
    # Back on schedule (every 5 s): the 1m window has figures again.
    for index in range(5, 12):
        n = 100 * (index + 1)
        state.observe(
            _reading(n, 3 * n, (n * 8 // 10, n * 6 // 10, n * 4 // 10)),
            mono=160.0 + 5.0 * (index - 4),
            wall=0.0,
            duration=0.01,
        )
    assert state.read_interval == 5.0
    assert state.view.models[0].windows[0].report is not None
    assert not any(r.reason is RejectReason.SPARSE_WINDOW for r in state.view.rejected)
