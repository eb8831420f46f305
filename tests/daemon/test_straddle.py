"""A window that straddles a configuration change (specmon.daemon.window_rules): read from the
new configuration's intervals only, or withheld with the reason while it holds too little of
it, the same story on every surface. On the demo's simulated engines (a virtual clock,
tests/support/demo_fleet.py) against their load model's constructed truth."""

from __future__ import annotations

import html
from dataclasses import replace

from specmon.answer import Evidence, words
from specmon.cli.demo import FAST_LOAD_MODEL, render_rows
from specmon.daemon.collector import target_samples
from specmon.daemon.target import TargetState, WindowView
from specmon.surfaces.status import render_status
from specmon.surfaces.target import render_target
from tests.support.demo_fleet import DemoFleet

NAME = "vllm-switched"
#: vllm-switched runs 4 requests without speculation until 60 s, then restarts with its
#: k = 4 draft: the change is first seen on the page read at 61 s (1 s scrapes).
N, CHANGE = 4, 61.0


def _fleet(until: float) -> DemoFleet:
    fleet = DemoFleet(names=(NAME,))
    fleet.advance(until)
    return fleet


def _truth(survival: tuple[float, ...]) -> float:
    return FAST_LOAD_MODEL.speedup(N, len(survival), 1 + sum(survival))


def _windows(state: TargetState) -> dict[str, WindowView]:
    return {w.window: w for w in state.view.models[0].windows}


def _reconfigure(fleet: DemoFleet, **changes: object) -> None:
    engine = fleet.targets[NAME].engine
    engine.configure(replace(engine.settings, **changes), now=fleet.now, wall=fleet.now)  # type: ignore[arg-type]


def test_the_longest_window_just_after_the_switch_reads_the_new_configuration_only() -> None:
    """14 s after the draft turned on, the 2 m window holds 106 s without speculation: read
    whole it said 0.91x (0.90-0.93) against a truth of 2.28x, its interval narrow around the
    mixture. Cut at the change it agrees with the truth and with the 10 s window."""
    fleet = _fleet(CHANGE + 14)
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    windows = _windows(fleet.states[NAME])
    longest, shortest = windows["2m"], windows["10s"]
    v = longest.answer
    assert v is not None and v.speedup is not None and v.interval is not None
    assert v.basis is Evidence.HISTORY, words.detail(v)
    assert abs(v.speedup / truth - 1) < 0.05, (v.speedup, truth)
    assert v.interval[0] < truth < v.interval[1], (v.interval, truth)
    short = shortest.answer
    assert short is not None and short.speedup is not None
    assert abs(v.speedup / short.speedup - 1) < 0.02
    # It says what it rests on: the time since the change, which it covers.
    assert longest.straddle is not None and longest.straddle.held is None
    assert longest.covered_seconds is not None and longest.covered_seconds <= 15
    assert longest.straddle.seconds == longest.covered_seconds
    assert "read from the 15 s since the configuration change at 00:01:01 UTC" in words.detail(v)
    assert "(now speculating, k = 4)" in words.detail(v)
    # The 10 s window lies wholly after the change: not cut.
    assert shortest.straddle is None


def test_too_little_of_the_new_configuration_is_withheld_on_every_surface() -> None:
    """2 s after the change (2 scrape intervals, 3 needed) every window is withheld, and the
    API, /metrics, the status page, the target page and the terminal view say why."""
    fleet = _fleet(CHANGE + 1)
    state = fleet.states[NAME]
    reason = (
        "window straddles the configuration change at 00:01:01 UTC (now speculating, k = 4); "
        "2 s of the new configuration so far: 2 scrape intervals (needs 3)"
    )
    for window in _windows(state).values():
        assert window.report is None and window.answer is None and window.load is None
        assert window.straddle is not None and window.straddle.text() == reason
        assert window.covered_seconds == 2.0 and window.drafts  # the new drafts, counted
    api = fleet.api(NAME)["targets"][0]["models"][0]["windows"]
    assert {w["window"] for w in api} == {"10s", "30s", "2m"}
    for window in api:
        assert window["verdict"] is None and window["report"] is None
        assert window["straddle"]["held"] == "2 scrape intervals (needs 3)"
        assert window["straddle"]["text"] == reason
    samples = {(s.family.name, s.values[-1]): s for s in target_samples(state.view)}
    assert not any(name.startswith("specmon_verdict_") for name, _ in samples)
    assert samples[("specmon_window_seconds", "2m")].value == 2.0
    status = render_status([state.view], primary_window="30s", ready=True)
    assert html.escape(reason) in status and "changed 2 s ago: too little yet" in status
    page = render_target(state.view, primary_window="30s", series=(), events=(), now=fleet.now)
    assert html.escape(reason) in page
    rows = "\n".join(render_rows([state.view], window="2m", color=False))
    assert reason in rows
    # Three intervals on, the verdict is back on every surface, saying since when.
    fleet.advance(CHANGE + 4)
    window = _windows(state)["2m"]
    assert window.answer is not None and window.straddle is not None
    assert window.straddle.held is None
    api_window = fleet.api(NAME)["targets"][0]["models"][0]["windows"][2]
    assert api_window["straddle"]["text"] in api_window["verdict"]["detail"]
    status = render_status([state.view], primary_window="2m", ready=True)
    assert "since the 00:01:01 change" in status
    rows = "\n".join(render_rows([state.view], window="2m", color=False))
    assert "read from the 5 s since the configuration change at 00:01:01 UTC" in rows


def test_a_window_across_a_change_of_k_counts_the_new_chain_only() -> None:
    """k = 4, then restarted with k = 2 (counters reset): the 2 m window 10 s later holds no
    position 3 or 4 (the k = 4 reading it would start from had them, frozen since) and the
    acceptance of the k = 2 draft alone."""
    fleet = _fleet(90)
    fleet.advance(200)
    _reconfigure(fleet, survival=(0.9, 0.7))
    fleet.advance(212)
    state = fleet.states[NAME]
    (epochs,) = state.view.epochs
    assert epochs.current.chain_length == 2 and epochs.current.start == 201.0
    window = _windows(state)["2m"]
    report = window.report
    assert report is not None
    assert [round(p.survival or 0, 1) for p in report.positions] == [0.9, 0.7]
    assert window.covered_seconds == 12.0  # from the reading at 200, before the restart
    assert window.straddle is not None
    truth = _truth((0.9, 0.7))
    assert window.answer is not None and window.answer.speedup is not None
    assert abs(window.answer.speedup / truth - 1) < 0.05, (window.answer.speedup, truth)


def test_a_window_across_speculation_stopping_reads_the_server_without_it() -> None:
    """Speculation stops (the simulated vLLM drops its speculative series, no restart): once
    the epoch without speculation is confirmed, the 2 m window's load is the server's without
    speculation only: its time per output token that of the 10 s window, which lies wholly
    after the change, not a mixture with the faster speculating minute before."""
    fleet = _fleet(200)
    state = fleet.states[NAME]
    mixed = _windows(state)["2m"].load
    assert mixed is not None and mixed.time_per_output_token_seconds is not None
    _reconfigure(fleet, speculation=False)
    fleet.advance(215)
    (epochs,) = state.view.epochs
    assert not epochs.current.speculation and epochs.current.start == 201.0
    windows = _windows(state)
    cut, short = windows["2m"], windows["10s"]
    assert cut.load is not None and short.load is not None
    tpot, recent = cut.load.time_per_output_token_seconds, short.load.time_per_output_token_seconds
    assert tpot is not None and recent is not None
    assert abs(tpot / recent - 1) < 0.02, (tpot, recent)
    assert tpot > 1.5 * mixed.time_per_output_token_seconds  # slower without its draft
    assert cut.straddle is not None and cut.straddle.held is None and short.straddle is None
    assert "(now without speculation)" in cut.straddle.text()


def test_a_change_marked_by_hand_cuts_the_windows_at_the_last_reading_before_it() -> None:
    fleet = _fleet(150)
    state = fleet.states[NAME]
    fleet.now += 0.5
    (marked,) = state.mark(wall=fleet.now, note="draft model: Qwen3-0.6B")
    fleet.now = 150.0
    fleet.advance(156)
    window = _windows(state)["30s"]
    assert window.covered_seconds == 6.0  # from the reading at 150
    assert window.straddle is not None and window.straddle.held is None
    assert window.straddle.change == marked.start == 150.5
    assert "(now speculating, k = 4 (draft model: Qwen3-0.6B))" in window.straddle.text()


def test_a_twin_compared_window_and_its_cost_curve_start_at_the_change() -> None:
    """vllm-loaded (compared with its twin vllm-baseline) restarted with k = 2 after k = 4 at
    400 s, in the load cycle's phase of 8 requests from 420 s: at 424 s its 2 m window's twin
    verdict is the k = 2 draft's at that load (read whole, 1.38x against a truth of 1.65x), and
    its cost curve holds only the intervals since the change."""
    fleet = DemoFleet(names=("vllm-loaded", "vllm-baseline"))
    fleet.advance(400)
    engine = fleet.targets["vllm-loaded"].engine
    engine.configure(replace(engine.settings, survival=(0.9, 0.7)), now=fleet.now, wall=fleet.now)
    fleet.advance(424)
    assert engine.settings.requests_running == 8
    truth = FAST_LOAD_MODEL.speedup(8, 2, 1 + 0.9 + 0.7)
    state = fleet.states["vllm-loaded"]
    window = _windows(state)["2m"]
    v = window.answer
    assert v is not None and v.speedup is not None and v.basis is Evidence.TWIN, v
    assert abs(v.speedup / truth - 1) < 0.05, (v.speedup, truth)
    assert window.covered_seconds == 24.0  # from the reading at 400, before the restart
    curve = state.load_window(state.view.models[0].model, 120.0)
    assert curve is not None and curve.curve is not None
    assert sum(b.values[0] for b in curve.curve.buckets()) <= 24  # intervals since 400 s
    assert window.straddle is not None and window.straddle.held is None


def test_a_cut_window_says_what_a_settled_epoch_turned_out_to_be() -> None:
    """Marked by hand while the first epoch is not yet known to speculate, then settled in
    place (no draft over 5 scrapes): the cut window's text follows the settled epoch."""
    fleet = _fleet(3)
    state = fleet.states[NAME]
    current = state.epochs.current("llama-3.1-8b")
    assert current is not None and current.speculation is None
    fleet.now += 0.5
    state.mark(wall=fleet.now, note="warm-up done")
    fleet.now = 3.0
    fleet.advance(20)
    current = state.epochs.current("llama-3.1-8b")
    assert current is not None and current.speculation is False
    window = _windows(state)["30s"]
    assert window.straddle is not None
    text = window.straddle.text()
    assert "(now without speculation" in text and "not yet known" not in text, text
