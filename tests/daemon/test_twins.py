"""The twin a target compares with is found through the Twins it was built with: the states
the daemon keeps current, not a call up into the daemon."""

from __future__ import annotations

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState, Twins


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
