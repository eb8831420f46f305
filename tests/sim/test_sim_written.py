"""The simulator's TensorRT-LLM, SGLang (both prefixes) and TGI pages: the same shape as the
pages written from the engines' source, and specmon's figures on them equal the simulator's
truth (its exact counters, and within sampling error its configured survival)."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from specmon.engines import Engine, read_page
from specmon.report import (
    detected_chain_length,
    engine_draft_cost,
    report_from_counters,
)
from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target
from specmon.windows import increase
from tests.sim.test_sim_format import header_lines, shape

WRITTEN = Path(__file__).resolve().parent.parent / "fixtures" / "pages" / "written"

PAGES = {
    PageKind.TRTLLM: ("trtllm-serve-positions.txt", Engine.TRTLLM),
    PageKind.SGLANG_CURRENT: ("sglang-current.txt", Engine.SGLANG),
    PageKind.SGLANG_ROUTER: ("sglang-router-engine-metrics.txt", Engine.SGLANG),
    PageKind.TGI: ("tgi-summary.txt", Engine.TGI),
    PageKind.TGI_HISTOGRAM: ("tgi-histogram.txt", Engine.TGI),
}
SURVIVAL = (0.9, 0.7, 0.5, 0.3)


def target(
    kind: PageKind, *, survival: tuple[float, ...] = SURVIVAL, **kw: object
) -> VirtualTarget:
    return make_target(
        name="t", kind=kind, model="m",
        settings=SimSettings(survival=survival, drafts_per_second=400, drafts_per_request=25,
                             **kw),  # type: ignore[arg-type]
        seed=11, draft_cost=0.08,
    )  # fmt: skip


@pytest.mark.parametrize("kind", list(PAGES))
def test_same_shape_as_the_written_page(kind: PageKind) -> None:
    t = target(kind)
    t.tick(time.monotonic() + 20)
    written = (WRITTEN / PAGES[kind][0]).read_text()
    if kind is PageKind.SGLANG_ROUTER:
        # the simulated router has one worker: compare with the written page's first one
        written = "\n".join(line for line in written.splitlines() if "10.0.0.6" not in line)
    assert shape(t.page()) == shape(written)
    assert header_lines(t.page()) == header_lines(written)


@pytest.mark.parametrize("kind", list(PAGES))
def test_figures_equal_the_simulators_counters(kind: PageKind) -> None:
    t = target(kind)
    t.tick(time.monotonic() + 60)
    before_page = read_page(t.page())
    t.tick(time.monotonic() + 120)
    after_page = read_page(t.page())
    assert after_page.engine is PAGES[kind][1]
    (before,) = before_page.models
    (after,) = after_page.models
    assert before.counters is not None and after.counters is not None
    truth = t.engine.counters
    c = after.counters
    # lifetime: exactly the simulator's counts
    assert c.drafts == truth.drafts
    assert c.accepted_tokens == truth.accepted
    if kind in (PageKind.TRTLLM, PageKind.TGI_HISTOGRAM):
        assert c.accepted_per_position == tuple(truth.per_pos)
    else:
        assert c.accepted_per_position == ()
    if kind is PageKind.TRTLLM:
        assert c.draft_tokens == truth.draft_tokens
    else:
        assert "draft_tokens" in c.unknown
    k = detected_chain_length(after)
    assert k == (None if kind is PageKind.TGI else 4)
    # a window between two scrapes
    window = increase(before.counters, after.counters).as_counters()
    assert window.drafts > 1000
    report = report_from_counters(window, draft_cost=0.08, configured_chain_length=4)
    mean = report.mean_acceptance_length
    assert mean is not None
    # within 5 standard errors of the configured expectation 1 + sum(survival)
    expected = 1 + sum(SURVIVAL)
    variance = (
        sum(SURVIVAL)
        - sum(SURVIVAL) ** 2
        + 2 * sum(SURVIVAL[j] for i in range(4) for j in range(i + 1, 4))
    )
    assert abs(mean - expected) < 5 * math.sqrt(variance / window.drafts)
    if report.positions:
        for stat, s in zip(report.positions, SURVIVAL, strict=True):
            assert stat.survival is not None
            assert abs(stat.survival - s) < 5 * math.sqrt(s * (1 - s) / window.drafts)


def test_trtllm_engine_draft_cost_is_the_simulated_one() -> None:
    t = target(PageKind.TRTLLM)
    t.tick(time.monotonic() + 30)
    (model,) = read_page(t.page()).models
    assert engine_draft_cost(model.gauges, chain_length=4) == pytest.approx(0.08)


def test_lumpy_engines_publish_after_the_first_request() -> None:
    """SGLang's verify counter and TensorRT-LLM's per-position counters appear when the first
    request finishes."""
    for kind in (PageKind.TRTLLM, PageKind.SGLANG_CURRENT):
        t = target(kind)
        page = read_page(t.page())
        if kind is PageKind.TRTLLM:
            assert "spec_decode_drafted_tokens_total" not in t.page()
            assert page.models and page.models[0].counters is not None
            assert page.models[0].counters.unknown == ("drafts",)
        else:
            assert "spec_verify_calls_total" not in t.page()
        t.tick(time.monotonic() + 30)
        assert page.engine is not None
        (model,) = read_page(t.page()).models
        assert model.counters is not None and model.counters.unknown != ("drafts",)


@pytest.mark.parametrize("kind", list(PAGES))
def test_speculation_off(kind: PageKind) -> None:
    t = target(kind, speculation=False)
    t.tick(time.monotonic() + 30)
    page = read_page(t.page())
    assert page.engine is PAGES[kind][1]
    assert not page.speculation


@pytest.mark.parametrize(
    ("choice", "engine"),
    [("trtllm", Engine.TRTLLM), ("sglang", Engine.SGLANG), ("sglang-legacy", Engine.SGLANG),
     ("sglang-router", Engine.SGLANG), ("tgi", Engine.TGI), ("tgi-histogram", Engine.TGI)],
)  # fmt: skip
def test_simulate_command_line_engines(choice: str, engine: Engine) -> None:
    import argparse

    from specmon.cli.main import build_parser
    from specmon.cli.simulate import build_targets

    parser = build_parser()
    args = parser.parse_args(["simulate", "--engine", choice, "--survival", "0.8,0.5"])
    assert isinstance(args, argparse.Namespace)
    [t] = build_targets(args, None)
    t.tick(time.monotonic() + 30)
    page = read_page(t.page())
    assert page.engine is engine and page.speculation
