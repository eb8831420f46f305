"""The daemon's state and exporter on TensorRT-LLM, SGLang and TGI pages (in-process): windows
from the engines' own counters, what each engine cannot give left out rather than faked, and
the engine-measured draft cost exported as ``source="engine"``."""

from __future__ import annotations

import pytest
from prometheus_client.core import Metric

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.surfaces.status import render_status, views_json
from tests.support.reference import TargetCollector


def _state(**overrides: object) -> TargetState:
    config = TargetConfig(name="t", url="http://127.0.0.1:1/metrics", **overrides)  # type: ignore[arg-type]
    return TargetState(config, windows=(60.0, 300.0), retention=310.0)


def _samples(state: TargetState) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    families: list[Metric] = list(TargetCollector(lambda: [state.view]).collect())
    return {
        (
            s.name,
            tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("target",))),
        ): s.value
        for f in families
        for s in f.samples
    }


def _trtllm(drafts: int, per_pos: tuple[int, ...], overhead: float, *, k: int = 4) -> str:
    lines = [
        f'trtllm_spec_decode_drafted_tokens_total{{model_name="m",token_position="{i}"}} {drafts}'
        for i in range(k)
    ]
    lines += [
        f'trtllm_spec_decode_accepted_tokens_total{{model_name="m",token_position="{i}"}} {a}'
        for i, a in enumerate(per_pos)
    ]
    lines.append(f'trtllm_spec_decode_draft_overhead{{model_name="m",pid="7"}} {overhead}')
    lines.append(
        f'trtllm_speculative_config_info{{model_name="m",pid="7",spec_num_tokens="{k}"}} 1.0'
    )
    return "\n".join(lines) + "\n"


def test_trtllm_windows_and_engine_draft_cost() -> None:
    state = _state(draft_cost=0.1)
    state.observe(read_page(_trtllm(100, (80, 60, 40, 20), 0.2)), mono=0, wall=0, duration=0.01)
    state.observe(read_page(_trtllm(300, (240, 180, 120, 60), 0.4)), mono=5, wall=5, duration=0.01)
    [model] = state.view.models
    window = model.window("1m")
    assert window is not None and window.drafts == 200 and window.report is not None
    assert [p.survival for p in window.report.positions] == [0.8, 0.6, 0.4, 0.2]
    # the engine's overhead over the middle window's scrapes: mean(0.2, 0.4) = 0.3
    assert model.engine_draft_overhead == pytest.approx(0.3)
    expected_c = 0.3 / (4 * 0.7)
    assert model.engine_draft_cost == pytest.approx(expected_c)
    samples = _samples(state)
    key = (
        "specmon_draft_cost_ratio",
        (("engine", "trtllm"), ("model", "m"), ("source", "engine")),
    )
    assert abs(samples[key] - expected_c) < 1e-12
    assert samples[("specmon_draft_cost_ratio", (*key[1][:2], ("source", "configured")))] == 0.1
    [target] = views_json([state.view])
    assert abs(target["models"][0]["engine_draft_cost"] - expected_c) < 1e-12
    assert "engine 0.107" in render_status([state.view], ready=True, primary_window="5m")


def test_trtllm_without_positions_exports_no_window_drafts() -> None:
    page = (
        'trtllm_spec_decode_num_draft_tokens_total{{model_name="m"}} {t}\n'
        'trtllm_spec_decode_num_accepted_tokens_total{{model_name="m"}} {a}\n'
        'trtllm_speculative_config_info{{model_name="m",spec_num_tokens="4"}} 1.0\n'
        'trtllm_spec_decode_draft_overhead{{model_name="m"}} 0.0\n'
    )
    state = _state()
    state.observe(read_page(page.format(t=400, a=200)), mono=0, wall=0, duration=0.01)
    state.observe(read_page(page.format(t=800, a=500)), mono=5, wall=5, duration=0.01)
    [model] = state.view.models
    window = model.window("1m")
    assert window is not None and window.drafts is None
    report = window.report
    assert report is not None
    assert report.draft_acceptance_ratio == 300 / 400
    assert report.mean_acceptance_length == 1 + 4 * 300 / 400  # drafts = 400 / k assumed
    assert model.engine_draft_cost is None  # o = 0: nothing timed
    samples = _samples(state)
    names = {name for name, _ in samples}
    assert "specmon_window_drafts" not in names
    assert "specmon_drafts_total" not in names  # no drafts counter: no drafts total either
    assert "specmon_accepted_tokens_total" in names
    assert "specmon_alpha_ratio" in names
    assert not any(
        name == "specmon_draft_cost_ratio" and ("source", "engine") in labels
        for name, labels in samples
    )
    assert "drafts not counted" in render_status([state.view], ready=True, primary_window="1m")


def test_tgi_histogram_windows_give_survival() -> None:
    def page(zero: int, one: int, two: int, count: int) -> str:
        cumulative = (zero, zero + one, zero + one + two, count)
        lines = [
            f'tgi_request_skipped_tokens_bucket{{le="{i}"}} {c}' for i, c in enumerate(cumulative)
        ]
        lines.append(f'tgi_request_skipped_tokens_bucket{{le="+Inf"}} {count}')
        accepted = one + 2 * two + 3 * (count - zero - one - two)
        lines.append(f"tgi_request_skipped_tokens_sum {accepted}")
        lines.append(f"tgi_request_skipped_tokens_count {count}")
        return "\n".join(lines) + "\n"

    state = _state()
    state.observe(read_page(page(10, 10, 10, 100)), mono=0, wall=0, duration=0.01)
    # 100 more steps: 20 accepted nothing, 20 one, 20 two, 40 three
    state.observe(read_page(page(30, 30, 30, 200)), mono=5, wall=5, duration=0.01)
    [model] = state.view.models
    assert model.basis.chain_length == 3
    window = model.window("1m")
    assert window is not None and window.drafts == 100 and window.report is not None
    assert [p.survival for p in window.report.positions] == [0.8, 0.6, 0.4]
    assert window.report.mean_acceptance_length == 1 + (20 + 40 + 120) / 100


def test_sglang_counters_window_and_detected_chain_length() -> None:
    page = (
        'sglang:spec_verify_calls_total{{model_name="q"}} {v}\n'
        'sglang:generation_tokens_total{{model_name="q"}} {g}\n'
        'sglang:num_requests_total{{model_name="q"}} {r}\n'
        'sglang:spec_num_steps{{model_name="q",tp_rank="0"}} 3\n'
        'sglang:spec_accept_length{{model_name="q",tp_rank="0"}} 2.5\n'
    )
    state = _state()
    state.observe(read_page(page.format(v=100, g=260, r=10)), mono=0, wall=0, duration=0.01)
    # 50 more verify steps, 5 more requests, 120 more accepted: 50 + 5 + 120 tokens
    state.observe(read_page(page.format(v=150, g=435, r=15)), mono=5, wall=5, duration=0.01)
    [model] = state.view.models
    assert model.basis.chain_length == 3 and model.basis.chain_length_source == "detected"
    window = model.window("1m")
    assert window is not None and window.drafts == 50 and window.report is not None
    assert window.report.mean_acceptance_length == 1 + 120 / 50
    assert window.report.draft_tokens is None
    names = {name for name, _ in _samples(state)}
    assert "specmon_draft_tokens_total" not in names
    assert "specmon_drafts_total" in names


def test_zero_draft_overhead_readings_are_not_averaged_in() -> None:
    """o = 0: no drafter timed in that iteration (one without drafts): not a measurement."""
    state = _state()
    for mono, overhead in ((0, 0.3), (5, 0.0), (10, 0.3)):
        page = _trtllm(100 + mono, (80, 60, 40, 20), overhead)
        state.observe(read_page(page), mono=mono, wall=mono, duration=0.01)
    [model] = state.view.models
    assert model.engine_draft_overhead == pytest.approx(0.3)
