"""Engine adapters on hand-written pages that exercise each rule (real captures: test_fixtures)."""

from __future__ import annotations

import pytest

from specmon.engines import Engine, RejectReason, detect_engine, read_page
from specmon.report import report_from_counters, report_from_gauges

VLLM_TWO_ENGINES = """\
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="tiny"} 60.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 300.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="tiny"} 180.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="other"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 150.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="tiny"} 90.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="other"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 80.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="0",engine="1"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="1",engine="1"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",position="2",engine="1"} 15.0
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
"""


def test_vllm_sums_over_engine_per_model() -> None:
    reading = read_page(VLLM_TWO_ENGINES)
    assert reading.engine is Engine.VLLM
    by_model = {m.model: m for m in reading.models}
    assert set(by_model) == {"tiny", "other"}
    tiny = by_model["tiny"].counters
    assert tiny is not None
    assert (tiny.drafts, tiny.draft_tokens, tiny.accepted_tokens) == (160, 480, 240)
    assert tiny.accepted_per_position == (130, 70, 40)
    assert sum(tiny.accepted_per_position) == tiny.accepted_tokens
    assert by_model["tiny"].context.requests_running == 5.0
    other = by_model["other"].counters
    assert other is not None
    assert other.accepted_per_position == ()


def test_vllm_openmetrics_prefix() -> None:
    text = (
        VLLM_TWO_ENGINES.replace("vllm:", "vllm_")
        + 'vllm_spec_decode_num_drafts_created{engine="0",model_name="tiny"} 1.7e+09\n# EOF\n'
    )
    reading = read_page(text)
    assert reading.engine is Engine.VLLM
    tiny = next(m for m in reading.models if m.model == "tiny").counters
    assert tiny is not None and tiny.drafts == 160
    assert any("vllm_ prefix" in note for note in reading.notes)


def test_vllm_large_values_are_exact_integers() -> None:
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.8432e+06\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 9007199254740991.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 5529601.0\n'
    )
    counters = read_page(text).models[0].counters
    assert counters is not None
    assert counters.drafts == 1843200
    assert counters.draft_tokens == 9007199254740991  # 2^53 - 1: the largest exact count
    assert counters.accepted_tokens == 5529601


def test_vllm_v0_lifetime_gauges() -> None:
    text = (
        'vllm:spec_decode_draft_acceptance_rate{model_name="big"} 0.6\n'
        'vllm:spec_decode_efficiency{model_name="big"} 0.4\n'
        'vllm:spec_decode_num_accepted_tokens_total{model_name="big"} 99999.0\n'
    )
    reading = read_page(text)
    assert reading.engine is Engine.VLLM_V0
    (model,) = reading.models
    assert model.counters is None
    assert model.gauges is not None and model.gauges.scope == "lifetime"
    assert any("no window and no per-position data" in n for n in reading.notes)
    report = report_from_gauges(model.gauges, draft_cost=0.1, configured_chain_length=4)
    assert report.alpha == 0.6
    assert report.positions == ()
    # mean acceptance length from efficiency: emitted / steps = efficiency * (k + 1)
    assert report.mean_acceptance_length == pytest.approx(2.0)


def test_vllm_v0_infers_chain_length_from_efficiency() -> None:
    # alpha 0.6, k 3: E = 1 + .6 + .36 + .216 = 2.176, efficiency = E / 4 = 0.544
    text = (
        'vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6\n'
        'vllm:spec_decode_efficiency{model_name="m"} 0.544\n'
    )
    gauges = read_page(text).models[0].gauges
    assert gauges is not None
    report = report_from_gauges(gauges, draft_cost=0.1)
    assert report.chain_length == 3
    assert report.chain_length_source == "inferred"


LLAMACPP_ROUNDED = """\
# HELP llamacpp:spec_decode_num_drafts_total Number of drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 1.23457e+06
llamacpp:spec_decode_num_draft_tokens_total 3.70371e+06
llamacpp:spec_decode_num_accepted_tokens_total 2.46914e+06
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 1111111
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 876543
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 481486
llamacpp:requests_processing 2
"""


def test_llamacpp_prefers_exact_per_position_sum() -> None:
    reading = read_page(LLAMACPP_ROUNDED)
    assert reading.engine is Engine.LLAMACPP
    (model,) = reading.models
    assert model.model == "default"
    counters = model.counters
    assert counters is not None
    assert counters.accepted_tokens == 1111111 + 876543 + 481486  # not 2469140
    assert counters.drafts == 1234570
    assert set(counters.rounded) == {"drafts", "draft_tokens"}
    assert any("exact per-position sum" in n for n in reading.notes)
    assert any("6 significant digits" in n for n in reading.notes)
    assert model.context.requests_running == 2.0


def test_llamacpp_without_total_suffix_and_without_positions() -> None:
    text = (
        "llamacpp:spec_decode_num_drafts 10\n"
        "llamacpp:spec_decode_num_draft_tokens 30\n"
        "llamacpp:spec_decode_num_accepted_tokens 12\n"
    )
    reading = read_page(text, model="qwen")
    (model,) = reading.models
    assert model.model == "qwen"
    assert model.counters is not None
    assert model.counters.accepted_per_position == ()
    assert model.counters.rounded == ()
    report = report_from_counters(model.counters, draft_cost=0.1)
    assert report.chain_length is None
    assert report.alpha is None
    assert report.expected_speedup == pytest.approx((1 + 1.2) / (1 + 0.1 * 3))
    assert any("chain length unknown" in n for n in report.notes)


def test_sglang_gauges_need_configured_chain_length() -> None:
    text = (
        'sglang:spec_accept_length{model_name="qwen",tp_rank="0"} 2.8\n'
        'sglang:spec_accept_rate{model_name="qwen",tp_rank="0"} 0.6\n'
    )
    reading = read_page(text)
    assert reading.engine is Engine.SGLANG
    (model,) = reading.models
    assert model.gauges is not None
    unknown = report_from_gauges(model.gauges, draft_cost=0.1)
    assert unknown.alpha is None and unknown.chain_length is None
    known = report_from_gauges(model.gauges, draft_cost=0.1, configured_chain_length=3)
    assert known.alpha is not None
    # alpha + alpha^2 + alpha^3 == 1.8
    assert known.alpha + known.alpha**2 + known.alpha**3 == pytest.approx(1.8)
    assert known.expected_speedup == pytest.approx(2.8 / 1.3)


@pytest.mark.parametrize(
    ("text", "engine"),
    [
        ("vllm:num_requests_running 1\n", Engine.VLLM),
        ("llamacpp:prompt_tokens_total 3\n", Engine.LLAMACPP),
        ("sglang:num_running_reqs 1\n", Engine.SGLANG),
        ("process_cpu_seconds_total 1\n", None),
    ],
)
def test_no_speculation_message(text: str, engine: Engine | None) -> None:
    assert detect_engine(text) is engine
    reading = read_page(text)
    assert not reading.speculation
    assert reading.message is not None
    if engine is not None:
        assert "speculation is off, or this build is too old" in reading.message
        assert engine.value in reading.message


def test_garbage_is_not_an_exposition_page() -> None:
    reading = read_page("<html>oops</html>\n")
    assert not reading.is_exposition
    assert reading.message == (
        "the response is not a Prometheus exposition page (line 1: not a sample line)"
    )


def test_negative_counter_is_reported_not_raised() -> None:
    text = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} -5\n'
    reading = read_page(text)
    assert reading.models == ()
    [rejection] = reading.rejected
    assert (rejection.model, rejection.reason) == ("m", RejectReason.NEGATIVE)
    assert "drafts is -5; a counter must be >= 0" in rejection.detail
    assert reading.message is not None and "rejected" in reading.message
