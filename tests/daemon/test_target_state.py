"""TargetState in-process: observe, fail, reconfigure, reset, engine change, margin events.

No HTTP, no subprocess, no sleep: readings are built by hand and fed with explicit clocks.
"""

from __future__ import annotations

from specmon.daemon.config import TargetConfig
from specmon.daemon.status_page import views_json
from specmon.daemon.target import TargetState
from specmon.engines import Engine, ModelReading, PageReading, SpecCounters


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
    """Issue 11: without chain_length in the config the window reports said "configured"."""
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
    """Issue 11: after an engine restart with a shorter chain the report claimed a configured
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
