"""The best-evidence verdict (specmon.daemon.verdict): the basis chosen best first, the figures
on that basis, and the configured-cost figures agreeing with the cost model where they are
the basis; then through a target's state, with and without a configured draft cost."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.daemon.config import TargetConfig
from specmon.daemon.load_view import PROFILE, LoadFigures
from specmon.daemon.target import TargetState
from specmon.daemon.verdict import Evidence, at_cost, verdict
from specmon.engines import SpecCounters, read_page
from specmon.report import AcceptanceReport, report_from_counters

PAGES = Path(__file__).parents[1] / "fixtures" / "pages"


def _report(*, draft_cost: float = 0.1, unknown: tuple[str, ...] = ()) -> AcceptanceReport:
    counters = SpecCounters(
        drafts=1000, draft_tokens=4000, accepted_tokens=2300,
        accepted_per_position=(900, 700, 450, 250), unknown=unknown,
    )  # fmt: skip
    return report_from_counters(counters, draft_cost=draft_cost)


def _load(baseline: str | None, realized: float | None) -> LoadFigures:
    return LoadFigures(
        concurrency=3.2, step_seconds=0.02, time_per_output_token_seconds=0.01,
        mean_draft_length=4.0, baseline=baseline, bucket="4",
        realized_speedup=realized, measured_draft_cost=0.31,
        measured_breakeven_alpha=0.42, measured_alpha_margin=-0.05,
    )  # fmt: skip


def test_twin_beats_every_other_basis() -> None:
    got = verdict(_report(), _load("vllm-b", 0.93), engine_draft_cost=0.2,
                  draft_cost_configured=True)  # fmt: skip
    assert got is not None and got.basis is Evidence.TWIN
    assert (got.speedup, got.draft_cost, got.breakeven_alpha, got.alpha_margin) == (
        0.93, 0.31, 0.42, -0.05,
    )  # fmt: skip
    assert "twin vllm-b" in got.detail and "bucket 4" in got.detail


def test_profile_when_the_baseline_is_a_profile() -> None:
    got = verdict(_report(), _load(PROFILE, 1.4), engine_draft_cost=None,
                  draft_cost_configured=False)  # fmt: skip
    assert got is not None and got.basis is Evidence.PROFILE and got.speedup == 1.4


def test_a_twin_without_figures_at_this_load_falls_back() -> None:
    got = verdict(_report(), _load("vllm-b", None), engine_draft_cost=None,
                  draft_cost_configured=True)  # fmt: skip
    assert got is not None and got.basis is Evidence.CONFIGURED


def test_the_engines_own_cost_beats_the_configured_one() -> None:
    report = _report(draft_cost=0.1)
    got = verdict(report, None, engine_draft_cost=0.25, draft_cost_configured=True)
    assert got is not None and got.basis is Evidence.ENGINE and got.draft_cost == 0.25
    at_engine = _report(draft_cost=0.25)
    assert got.speedup == pytest.approx(at_engine.expected_speedup, rel=1e-12)
    assert got.breakeven_alpha == pytest.approx(at_engine.breakeven_alpha, rel=1e-12)
    assert got.alpha_margin == pytest.approx(at_engine.alpha_margin, rel=1e-12)


@pytest.mark.parametrize(("configured", "basis"), [(True, Evidence.CONFIGURED),
                                                   (False, Evidence.DEFAULT)])  # fmt: skip
def test_configured_or_default_is_the_reports_own_figures(
    configured: bool, basis: Evidence
) -> None:
    report = _report()
    got = verdict(report, None, engine_draft_cost=None, draft_cost_configured=configured)
    assert got is not None and got.basis is basis
    assert (got.speedup, got.breakeven_alpha, got.alpha_margin, got.draft_cost) == (
        report.expected_speedup, report.breakeven_alpha, report.alpha_margin, 0.1,
    )  # fmt: skip
    assert ("a guess" in got.detail) is (not configured)
    assert "specmon measure --profile-out" in got.detail


def test_nothing_to_judge() -> None:
    assert verdict(None, None, engine_draft_cost=0.2, draft_cost_configured=True) is None


@given(
    drafts=st.integers(1, 10_000),
    per_draft=st.integers(1, 8),
    accepted_share=st.floats(0.0, 1.0),
    cost=st.floats(0.0, 2.0),
    unknown=st.sampled_from([(), ("drafts",), ("draft_tokens",)]),
)
def test_at_cost_is_the_report_at_that_cost(
    drafts: int, per_draft: int, accepted_share: float, cost: float, unknown: tuple[str, ...]
) -> None:
    """Re-costing a report gives what a report computed at that cost gives, whichever counter
    the engine lacks."""
    draft_tokens = drafts * per_draft
    counters = SpecCounters(
        drafts=drafts, draft_tokens=draft_tokens,
        accepted_tokens=int(accepted_share * draft_tokens), unknown=unknown,
    )  # fmt: skip
    base = report_from_counters(counters, draft_cost=0.1, configured_chain_length=per_draft)
    there = report_from_counters(counters, draft_cost=cost, configured_chain_length=per_draft)
    speedup, breakeven, margin = at_cost(base, cost)
    for mine, theirs in ((speedup, there.expected_speedup),
                         (breakeven, there.breakeven_alpha), (margin, there.alpha_margin)):  # fmt: skip
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("configured", [True, False])
def test_a_target_says_whether_its_cost_is_a_guess(configured: bool) -> None:
    state = TargetState(
        TargetConfig(name="v", url="http://h/metrics", draft_cost_configured=configured),
        windows=(60.0,),
        retention=70.0,
    )
    for at, name in (
        (100.0, "vllm-load-spec-c1-before.txt"),
        (130.0, "vllm-load-spec-c1-after.txt"),
    ):
        state.observe(read_page((PAGES / name).read_text()), mono=at, wall=at, duration=0.01)
    (model,) = [m for m in state.view.models if m.speculating]
    window = model.windows[0]
    assert window.report is not None and window.verdict is not None
    assert window.verdict.basis is (Evidence.CONFIGURED if configured else Evidence.DEFAULT)
    assert window.verdict.speedup == window.report.expected_speedup
