"""Adapters for TensorRT-LLM, today's SGLang (and sgl-router) and TGI, on pages written from the
engines' source (tests/fixtures/pages/written, see its README for where every name comes
from); detection over every page the project holds. Figures are checked against hand
computations from the raw numbers on the page."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from specmon import arithmetic
from specmon.cli.main import main
from specmon.engines import ADAPTERS, MARKER_STEMS, Engine, detect_engine, read_page
from specmon.report import (
    detected_chain_length,
    engine_draft_cost,
    report_from_counters,
    report_from_gauges,
)
from specmon.windows import CounterHistory, increase
from tests.support import written_pages as wp
from tests.support.strict_json import strict_loads

ROOT = Path(__file__).parent
PAGES = ROOT / "fixtures" / "pages"
WRITTEN = PAGES / "written"
TEMPLATES = ROOT.parent / "specmon" / "sim" / "templates"

#: Every page the project holds and the engine it comes from (None: no engine's page).
EXPECTED: dict[str, Engine | None] = {
    # captured from real servers
    "pages/llamacpp-501.txt": None,
    "pages/llamacpp-after.txt": Engine.LLAMACPP,
    "pages/llamacpp-before.txt": Engine.LLAMACPP,
    "pages/llamacpp-synth.txt": Engine.LLAMACPP,
    "pages/vllm-multiproc-openmetrics.txt": Engine.VLLM,
    "pages/vllm-multiproc.txt": Engine.VLLM,
    "pages/vllm-openmetrics.txt": Engine.VLLM,
    "pages/vllm-single-later.txt": Engine.VLLM,
    "pages/vllm-single.txt": Engine.VLLM,
    # captured from real servers under load, with and without speculation (docs/load-signals.md)
    **{
        f"pages/{engine.value}-load-{side}-{when}.txt": engine
        for engine in (Engine.VLLM, Engine.LLAMACPP)
        for side in ("spec", "baseline")
        for when in ("c1-before", "c1-after", "c4-before", "c4-during", "c4-after")
    },
    # written from the engines' source
    "written/sglang-current.txt": Engine.SGLANG,
    "written/sglang-router-engine-metrics.txt": Engine.SGLANG,
    "written/tgi-histogram.txt": Engine.TGI,
    "written/tgi-summary.txt": Engine.TGI,
    "written/trtllm-dynamo.txt": Engine.TRTLLM,
    "written/trtllm-serve-iteration.txt": Engine.TRTLLM,
    "written/trtllm-serve-positions.txt": Engine.TRTLLM,
    # the simulator's templates
    "templates/llamacpp-b11434.txt": Engine.LLAMACPP,
    "templates/sglang-synthetic.txt": Engine.SGLANG,
    "templates/vllm-0.32.0-multiproc.txt": Engine.VLLM,
    "templates/vllm-0.32.0-openmetrics.txt": Engine.VLLM,
    "templates/vllm-0.32.0.txt": Engine.VLLM,
    "templates/trtllm-serve.txt": Engine.TRTLLM,
    "templates/sglang-current.txt": Engine.SGLANG,
    "templates/sglang-router.txt": Engine.SGLANG,
    "templates/tgi-summary.txt": Engine.TGI,
    "templates/tgi-histogram.txt": Engine.TGI,
}
#: Log excerpts, not metrics pages.
NOT_PAGES = {"pages/llamacpp-after-log.txt", "pages/vllm-single-log.txt",
             "pages/vllm-single-full-spec-log.txt"}  # fmt: skip


def _all_pages() -> dict[str, Path]:
    found = {f"pages/{p.name}": p for p in PAGES.glob("*.txt")}
    found |= {f"written/{p.name}": p for p in WRITTEN.glob("*.txt")}
    found |= {f"templates/{p.name}": p for p in TEMPLATES.glob("*.txt")}
    return {k: v for k, v in found.items() if k not in NOT_PAGES and not k.endswith(".headers.txt")}


def test_every_page_is_listed() -> None:
    """A new fixture or template must say which engine it is."""
    assert set(_all_pages()) == set(EXPECTED)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_detection_never_confuses_engines(key: str) -> None:
    text = _all_pages()[key].read_text("utf-8")
    expected = EXPECTED[key]
    assert detect_engine(text) is expected
    reading = read_page(text)
    assert reading.engine is expected
    # Read as any other engine, the page yields no speculative data at all: no adapter
    # mistakes another engine's series for its own.
    for engine in Engine:
        if engine is not expected:
            assert read_page(text, engine=engine).models == (), engine


def test_every_marker_has_a_stem() -> None:
    """detect_engine skips the per-marker scan of a page with none of MARKER_STEMS: every
    adapter's marker must contain one, or its pages would go undetected."""
    for engine, adapter in ADAPTERS.items():
        for marker in adapter.markers:
            assert any(stem in marker for stem in MARKER_STEMS), (engine, marker)


# -- TensorRT-LLM ------------------------------------------------------------------------------


def test_trtllm_per_position_counters_give_every_figure() -> None:
    reading = read_page((WRITTEN / "trtllm-serve-positions.txt").read_text())
    (model,) = reading.models
    assert model.model == "Qwen3-8B"
    c = model.counters
    assert c is not None and c.unknown == ()
    # drafts = drafted tokens at position 0; the per-request family, not the iteration one
    assert c.drafts == wp.TRT_DRAFTED_PER_POS[0] == 1000
    assert c.draft_tokens == sum(wp.TRT_DRAFTED_PER_POS) == 4000
    assert c.accepted_per_position == wp.TRT_ACCEPTED_PER_POS
    assert c.accepted_tokens == 2170
    assert model.chain_length == wp.TRT_K
    report = report_from_counters(c, draft_cost=0.1, detected_chain_length=4)
    assert [p.survival for p in report.positions] == [0.8, 0.62, 0.45, 0.3]
    assert report.mean_acceptance_length == pytest.approx(1 + 2170 / 1000)
    assert report.draft_acceptance_ratio == pytest.approx(2170 / 4000)
    assert report.expected_speedup == pytest.approx(3.17 / (1 + 0.1 * 4))
    assert report.best_chain_length is not None


def test_trtllm_without_positions_has_no_drafts_counter() -> None:
    reading = read_page((WRITTEN / "trtllm-serve-iteration.txt").read_text())
    (model,) = reading.models
    c = model.counters
    assert c is not None and c.unknown == ("drafts",)
    assert (c.draft_tokens, c.accepted_tokens) == (4100, 2230)
    assert any("no drafts counter" in n for n in reading.notes)
    # Without k: the ratio only.
    bare = report_from_counters(c, draft_cost=0.1, detected_chain_length=0)
    assert bare.draft_acceptance_ratio == pytest.approx(2230 / 4100)
    assert bare.drafts is None
    assert bare.mean_acceptance_length is None and bare.alpha is None
    # With the k the engine publishes (speculative_config_info spec_num_tokens = 4): per-draft
    # figures under the stated assumption drafts = draft tokens / k.
    k = detected_chain_length(model)
    assert k == 4
    report = report_from_counters(c, draft_cost=0.1, detected_chain_length=k)
    assert report.mean_acceptance_length == pytest.approx(1 + 4 * 2230 / 4100)
    alpha = report.alpha
    assert alpha is not None
    assert alpha + alpha**2 + alpha**3 + alpha**4 == pytest.approx(4 * 2230 / 4100)
    assert report.positions == ()
    assert any("assume every draft carried k = 4" in n for n in report.notes)
    assert any("independent acceptance" in n for n in report.notes)


def test_trtllm_without_drafts_or_k_uses_its_own_acceptance_length() -> None:
    """No drafts counter, no position series, no k: the engine's acceptance-length gauge L
    gives the per-draft figures as estimates: drafts ~ accepted / (L - 1), mean draft length
    (L - 1) / acceptance ratio, the speed-up at that length."""
    reading = read_page((WRITTEN / "trtllm-serve-iteration.txt").read_text())
    (model,) = reading.models
    assert model.counters is not None and model.gauges is not None
    length = model.gauges.mean_acceptance_length
    assert length == 3.25
    report = report_from_counters(
        model.counters, draft_cost=0.1, detected_chain_length=0, engine_acceptance_length=length
    )
    ratio = 2230 / 4100
    assert report.engine_estimate and report.mean_acceptance_length == pytest.approx(3.25)
    assert report.mean_draft_length == pytest.approx(2.25 / ratio)
    assert report.expected_speedup == pytest.approx(3.25 / (1 + 0.1 * 2.25 / ratio))
    assert report.alpha is None and report.chain_length is None  # alpha needs k
    assert report.drafts is None  # still not a count
    assert any("an estimate, not a count" in n for n in report.notes)
    # With k known the stated assumption stays, and no estimate is made.
    with_k = report_from_counters(
        model.counters, draft_cost=0.1, detected_chain_length=4, engine_acceptance_length=length
    )
    assert not with_k.engine_estimate and with_k.mean_acceptance_length == pytest.approx(
        1 + 4 * ratio
    )
    # A gauge that has not moved yet (L <= 1) estimates nothing.
    idle = report_from_counters(
        model.counters, draft_cost=0.1, detected_chain_length=0, engine_acceptance_length=1.0
    )
    assert not idle.engine_estimate and idle.mean_acceptance_length is None


def test_inspect_reports_trtllms_acceptance_length(tmp_path: Path) -> None:
    text = (WRITTEN / "trtllm-serve-iteration.txt").read_text()
    page = tmp_path / "trtllm.txt"
    page.write_text(
        "".join(line for line in text.splitlines(keepends=True) if "speculative_config" not in line)
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(page), "--json"]) == 0
    (report,) = strict_loads(out.getvalue())["models"]
    assert report["mean_acceptance_length"] == pytest.approx(3.25)
    assert report["engine_estimate"] is True
    assert report["mean_draft_length"] == pytest.approx(2.25 * 4100 / 2230)


def test_trtllm_draft_overhead_becomes_a_draft_cost() -> None:
    """o = drafting time / iteration time = k c / (1 + k c), so c = o / (k (1 - o))."""
    reading = read_page((WRITTEN / "trtllm-serve-positions.txt").read_text())
    (model,) = reading.models
    assert model.gauges is not None
    assert model.gauges.draft_overhead == wp.TRT_DRAFT_OVERHEAD
    c = engine_draft_cost(model.gauges, chain_length=4)
    assert c is not None
    assert c == pytest.approx(0.3 / (4 * 0.7))
    # round trip through the lesson's model
    assert 4 * c / (1 + 4 * c) == pytest.approx(0.3)
    # 0 means "not timed" (one-model speculation), not "free"
    assert arithmetic.draft_cost_from_overhead(0.0, 4) is None
    dynamo = read_page((WRITTEN / "trtllm-dynamo.txt").read_text())
    (dmodel,) = dynamo.models
    assert engine_draft_cost(dmodel.gauges, chain_length=3) is None
    for bad in (1.0, -0.1, float("nan"), float("inf")):
        assert arithmetic.draft_cost_from_overhead(bad, 4) is None
    assert arithmetic.draft_cost_from_overhead(0.5, 0) is None


def test_trtllm_dynamo_page_labels_in_declaration_order() -> None:
    reading = read_page((WRITTEN / "trtllm-dynamo.txt").read_text())
    (model,) = reading.models
    assert model.model == "Qwen/Qwen3-8B"
    assert model.chain_length == 3
    assert model.context.requests_running == 6.0


def test_trtllm_gauges_averaged_over_processes() -> None:
    text = (
        'trtllm_spec_decode_acceptance_length{engine_type="pytorch",model_name="m",pid="1"} 3.0\n'
        'trtllm_spec_decode_acceptance_length{engine_type="pytorch",model_name="m",pid="2"} 2.0\n'
    )
    (model,) = read_page(text).models
    assert model.counters is None
    assert model.gauges is not None and model.gauges.mean_acceptance_length == 2.5
    report = report_from_gauges(model.gauges, draft_cost=0.1, configured_chain_length=3)
    assert report.mean_acceptance_length == 2.5


def test_trtllm_hostile_positions_are_bounded() -> None:
    text = (
        'trtllm_spec_decode_drafted_tokens_total{model_name="m",token_position="0"} 10\n'
        'trtllm_spec_decode_drafted_tokens_total{model_name="m",token_position="99999999"} 1\n'
        'trtllm_spec_decode_accepted_tokens_total{model_name="m",token_position="0"} 5\n'
        'trtllm_spec_decode_accepted_tokens_total{model_name="m",token_position="x"} 5\n'
    )
    reading = read_page(text)
    # A position past any real chain refuses the model (as for every engine: docs/security.md)
    # before anything of that size is built; a position that is not a number is skipped.
    assert reading.models == ()
    [rejection] = reading.rejected
    assert rejection.reason == "position_limit"
    sane = read_page(text.replace('token_position="99999999"} 1', 'token_position="1"} 1'))
    (model,) = sane.models
    assert model.counters is not None
    assert model.counters.accepted_per_position == (5,)
    assert model.counters.drafts == 10


# -- SGLang ------------------------------------------------------------------------------------


def test_sglang_counters_and_ranks_as_replicas() -> None:
    reading = read_page((WRITTEN / "sglang-current.txt").read_text())
    (model,) = reading.models
    c = model.counters
    assert c is not None
    assert c.drafts == wp.SGLANG_VERIFY
    assert c.accepted_tokens == wp.SGLANG_GENERATED - wp.SGLANG_VERIFY - wp.SGLANG_REQUESTS
    assert c.unknown == ("draft_tokens",) and c.derived == ("accepted_tokens",)
    # chain length from spec_num_steps (3), not spec_num_draft_tokens (4 = steps + root)
    assert model.chain_length == wp.SGLANG_STEPS == 3
    # two data-parallel ranks: averaged, not added
    assert model.gauges is not None
    assert model.gauges.mean_acceptance_length == pytest.approx((2.62 + 2.78) / 2)
    assert model.context.requests_running == pytest.approx(8.0)
    report = report_from_counters(c, draft_cost=0.1, detected_chain_length=3)
    assert report.drafts == 9000
    assert report.draft_tokens is None
    assert report.mean_acceptance_length == pytest.approx(1 + 15300 / 9000)
    # the gauges over the last interval agree with the counters here (by construction)
    assert report.mean_acceptance_length == pytest.approx(model.gauges.mean_acceptance_length)
    assert any("derived" in n for n in report.notes)


def test_sglang_router_prefix_sums_counters_over_workers() -> None:
    reading = read_page((WRITTEN / "sglang-router-engine-metrics.txt").read_text())
    assert any("sgl-router" in n for n in reading.notes)
    (model,) = reading.models
    c = model.counters
    assert c is not None
    assert c.drafts == 9000 + 6000
    assert c.accepted_tokens == (24420 + 15500) - (9000 + 6000) - (120 + 100)
    assert model.gauges is not None
    assert model.gauges.mean_acceptance_length == pytest.approx((2.62 + 2.5) / 2)


def test_sglang_without_verify_counter_falls_back_to_gauges_with_k() -> None:
    text = (
        'sglang:spec_accept_length{model_name="q",tp_rank="0"} 2.5\n'
        'sglang:spec_accept_length{model_name="q",tp_rank="1"} 2.5\n'
        'sglang:spec_num_steps{model_name="q",tp_rank="0"} 2\n'
        'sglang:spec_num_steps{model_name="q",tp_rank="1"} 2\n'
    )
    (model,) = read_page(text).models
    assert model.counters is None and model.chain_length == 2
    assert model.gauges is not None
    report = report_from_gauges(model.gauges, draft_cost=0.1, detected_chain_length=2)
    assert report.chain_length == 2 and report.chain_length_source == "detected"
    assert report.alpha is not None
    assert report.alpha + report.alpha**2 == pytest.approx(1.5)


def test_sglang_speculation_off_and_inconsistent_counters() -> None:
    off = 'sglang:spec_accept_length{model_name="q"} 0\nsglang:spec_num_steps{model_name="q"} 0\n'
    reading = read_page(off)
    assert reading.engine is Engine.SGLANG and not reading.speculation
    broken = (
        'sglang:spec_verify_calls_total{model_name="q"} 100\n'
        'sglang:generation_tokens_total{model_name="q"} 50\n'
        'sglang:num_requests_total{model_name="q"} 5\n'
        'sglang:spec_accept_length{model_name="q"} 2.0\n'
    )
    reading = read_page(broken)
    (model,) = reading.models
    assert model.counters is None  # not derivable: falls back to the gauge
    assert any("cannot be derived" in n for n in reading.notes)


# -- TGI ---------------------------------------------------------------------------------------


def test_tgi_histogram_gives_survival_per_position() -> None:
    reading = read_page((WRITTEN / "tgi-histogram.txt").read_text())
    (model,) = reading.models
    assert model.model == "default"
    c = model.counters
    assert c is not None
    # cumulative buckets 220, 400, 600, 1000 of 1000 observations
    assert c.drafts == 1000
    assert c.accepted_per_position == (1000 - 220, 1000 - 400, 1000 - 600)
    assert c.accepted_tokens == 1780 == sum(c.accepted_per_position)
    assert model.chain_length == 3
    report = report_from_counters(c, draft_cost=0.1, detected_chain_length=3)
    assert [p.survival for p in report.positions] == [0.78, 0.6, 0.4]
    assert report.mean_acceptance_length == pytest.approx(2.78)
    assert report.draft_tokens is None
    assert report.draft_acceptance_ratio == pytest.approx(1780 / 3000)  # assumes k per step
    assert report.best_chain_length is not None


def test_tgi_summary_has_mean_only() -> None:
    reading = read_page((WRITTEN / "tgi-summary.txt").read_text())
    (model,) = reading.models
    c = model.counters
    assert c is not None and c.accepted_per_position == ()
    assert (c.drafts, c.accepted_tokens) == (1000, 1780)
    assert model.chain_length is None
    assert any("summary" in n for n in reading.notes)
    report = report_from_counters(c, draft_cost=0.1, configured_chain_length=3)
    assert report.mean_acceptance_length == pytest.approx(2.78)
    assert report.alpha is not None


def test_tgi_without_speculation_is_not_speculating() -> None:
    histogram = (
        'tgi_request_skipped_tokens_bucket{le="0"} 50\n'
        'tgi_request_skipped_tokens_bucket{le="+Inf"} 50\n'
        "tgi_request_skipped_tokens_sum 0\ntgi_request_skipped_tokens_count 50\n"
    )
    summary = "tgi_request_skipped_tokens_sum 0\ntgi_request_skipped_tokens_count 50\n"
    for text in (histogram, summary):
        reading = read_page(text)
        assert reading.engine is Engine.TGI
        assert not reading.speculation
        assert reading.message is not None and "speculation is off" in reading.message


def test_tgi_broken_buckets_are_reported_not_raised() -> None:
    text = (
        'tgi_request_skipped_tokens_bucket{le="0"} 80\n'
        'tgi_request_skipped_tokens_bucket{le="1"} 60\n'
        'tgi_request_skipped_tokens_bucket{le="+Inf"} 100\n'
        "tgi_request_skipped_tokens_sum 40\ntgi_request_skipped_tokens_count 100\n"
    )
    reading = read_page(text)
    assert reading.models == ()
    [rejection] = reading.rejected
    assert rejection.reason == "positions_rise" and "not cumulative" in rejection.detail


# -- windows across a change of counter set ------------------------------------------------------


def test_counter_set_change_restarts_the_window() -> None:
    """TensorRT-LLM's per-position series appear with the first finished request: the drafts
    then come from another source, so differences across the change would mix two counts."""
    iteration = read_page((WRITTEN / "trtllm-serve-iteration.txt").read_text()).models[0]
    positions = read_page((WRITTEN / "trtllm-serve-positions.txt").read_text()).models[0]
    assert iteration.counters is not None and positions.counters is not None
    history = CounterHistory(retention=600)
    history.add(0.0, iteration.counters)
    history.add(5.0, iteration.counters)
    observed = history.add(10.0, positions.counters)
    assert observed.accepted and not observed.reset
    assert "counter set changed" in observed.reason
    assert history.window(600) is None  # one reading of the new kind so far
    history.add(15.0, positions.counters)
    window = history.window(600)
    assert window is not None and window.drafts == 0 and window.unknown == ()
    with pytest.raises(ValueError, match="different set of counters"):
        increase(iteration.counters, positions.counters)


def test_written_pages_are_what_the_generator_renders(tmp_path: Path) -> None:
    """The prometheus_client-rendered fixtures come from tests/support/written_pages.py: the
    same samples (by name, labels and value) as a fresh rendering."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-m", "tests.support.written_pages", str(tmp_path)],
        check=True,
        cwd=ROOT.parent,
        timeout=120,
    )
    from specmon.parser import parse

    for name in ("trtllm-serve-positions.txt", "trtllm-serve-iteration.txt", "sglang-current.txt"):
        fresh = parse((tmp_path / name).read_text())
        stored = parse((WRITTEN / name).read_text())

        def samples(page: object) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
            return {
                (s.name, tuple(sorted(s.labels.items())), s.value)
                for group in page.samples.values()  # type: ignore[attr-defined]
                for s in group
            }

        assert samples(fresh) == samples(stored), name
