"""The cost model's bounds on every derived figure (issue 53, specmon/bounds.py): a mean
acceptance length at most k + 1 (an engine gauge above it refused with a reason), speed-ups in
(0, k + 1] (measured from timing: withheld above (k + 1) x 1.1), draft costs finite."""

from __future__ import annotations

import math

import pytest

from specmon import bounds
from specmon.daemon.target import TargetState
from specmon.engines import SpecCounters, read_page
from specmon.load import BaselinePoint, Bucket, BucketTotals, LoadInterval, compare_with_profile
from tests.support.views import state


def _trt(i: int, lengths: list[float], *, info: bool = True) -> str:
    lines = [
        f'trtllm_spec_decode_num_draft_tokens_total{{model_name="m",engine_type="t"}} {400 * i}',
        f'trtllm_spec_decode_num_accepted_tokens_total{{model_name="m",engine_type="t"}} {240 * i}',
    ]
    lines += [
        f'trtllm_spec_decode_acceptance_length{{model_name="m",pid="{pid}"}} {value}'
        for pid, value in enumerate(lengths)
    ]
    if info:
        lines.append('trtllm_speculative_config_info{model_name="m",spec_num_tokens="4"} 1')
    return "\n".join(lines) + "\n"


def _speedups(target: TargetState) -> list[float]:
    out = []
    for model in target.view.models:
        for window in model.windows:
            for figure in (
                window.answer.speedup if window.answer else None,
                window.report.expected_speedup if window.report else None,
            ):
                if figure is not None:
                    out.append(figure)
    return out


@pytest.mark.parametrize(
    "lengths",
    [
        [[60.0]] * 6,  # a gauge of 60 with spec_num_tokens="4": a verdict of 42.9x on main
        [[1.05], [64.0]] * 3,  # alternating: 23x on main
        [[float(1 + v % 64) for v in range(200)]] * 6,  # 200 pid series 1..64: mean 31
    ],
    ids=["sixty", "alternating", "many-pids"],
)
def test_trtllm_acceptance_length_above_k_plus_1_is_refused(lengths: list[list[float]]) -> None:
    target = state("trt")
    for i, values in enumerate(lengths):
        target.observe(read_page(_trt(i + 1, values)), mono=5.0 * i, wall=1e9, duration=0.01)
        assert target.view.up
        speedups = _speedups(target)
        assert all(0 < s <= 5.0 for s in speedups), speedups
        if max(values) > 5.0:
            assert "acceptance_length_above_chain" in {r.reason.value for r in target.view.rejected}


def test_a_configured_chain_length_bounds_the_gauge_where_the_page_has_no_k() -> None:
    target = state("trt", chain_length=4)
    for i in range(4):
        page = read_page(_trt(i + 1, [30.0], info=False))
        target.observe(page, mono=5.0 * i, wall=1e9, duration=0.01)
    assert "acceptance_length_above_chain" in {r.reason.value for r in target.view.rejected}
    assert all(0 < s <= 5.0 for s in _speedups(target))


class _Profile:
    """A baseline whose time per output token is whatever the test says."""

    def __init__(self, tpot: float) -> None:
        self.tpot = tpot

    def baseline_at(self, concurrency: float) -> BaselinePoint:
        return BaselinePoint(concurrency, self.tpot * 1.5, self.tpot, "profile level")


def _bucket_totals() -> BucketTotals:
    totals = LoadInterval(
        request_steps=4000.0, decode_seconds=40.0, decode_tokens=10_000.0, engine_steps=1000.0,
        slot_steps=4000.0, drafts=4000, draft_tokens=12_000, accepted_tokens=6000,
        accepted_per_position=(3000, 2000, 1000), intervals=6,
    )  # fmt: skip
    return BucketTotals(Bucket(2, 4.0, 8.0, "4-8"), totals)


@pytest.mark.parametrize(("tpot", "shown"), [(0.006, True), (0.0175, True), (0.05, False),
                                             (1e6, False), (1e300, False)])  # fmt: skip
def test_a_timing_speedup_is_withheld_above_k_plus_1_times_1_1(tpot: float, shown: bool) -> None:
    # The target's TPOT is 4 ms: against a baseline of 17.5 ms, 4.375x (k = 3: at most 4.4).
    (verdict,) = compare_with_profile([_bucket_totals()], _Profile(tpot), chain_length=3)
    if shown:
        assert verdict.comparison is not None and verdict.reason is None
        assert verdict.comparison.realized_speedup <= 4.4
    else:
        assert verdict.comparison is None
        assert verdict.reason is not None and verdict.reason.startswith("withheld: ")


def test_k_when_unknown_is_the_adapters_largest() -> None:
    assert bounds.chain_bound(configured=3, detected=7) == 3
    assert bounds.chain_bound(configured=None, detected=7) == 7
    assert bounds.chain_bound() == bounds.ADAPTER_MAX_CHAIN
    assert bounds.chain_bound(adapter_max=None) is None
    assert bounds.speedup_refusal(70.0, chain_length=None, measured=False) is None
    assert bounds.speedup_refusal(70.0, chain_length=64, measured=False) is not None
    assert bounds.speedup_refusal(0.0, chain_length=None, measured=True) is not None
    assert bounds.speedup_refusal(math.inf, chain_length=None, measured=True) is not None
    assert bounds.draft_cost_refusal(math.nan) is not None
    assert bounds.acceptance_length_refusal(5.0, chain_length=4) is None
    assert bounds.acceptance_length_refusal(5.1, chain_length=4) is not None


def test_the_counts_speedup_is_bounded_exactly() -> None:
    from specmon.report import figure_out_of_range, report_from_counters

    counters = SpecCounters(drafts=100, draft_tokens=300, accepted_tokens=150,
                            accepted_per_position=(75, 50, 25))  # fmt: skip
    report = report_from_counters(counters, draft_cost=0.1)
    assert report is not None and figure_out_of_range(report) is None


def test_an_sglang_length_above_its_published_k_is_refused() -> None:
    from specmon.engines import Engine, GaugeScope, ModelReading, PageReading, SpecGauges

    target = state("sglang")
    for i, length in enumerate((2.5, 9.0, 2.6, 9.0)):
        gauges = SpecGauges(scope=GaugeScope.LAST_INTERVAL, mean_acceptance_length=length,
                            acceptance_rate=0.5)  # fmt: skip
        page = PageReading(engine=Engine.SGLANG,
                           models=(ModelReading("m", gauges=gauges, chain_length=3),))  # fmt: skip
        target.observe(page, mono=5.0 * i, wall=1e9, duration=0.01)
        refused = {r.reason.value for r in target.view.rejected}
        assert ("acceptance_length_above_chain" in refused) == (length > 4.0)
        for window in target.view.models[0].windows:
            report = window.report
            assert (
                report is None
                or report.mean_acceptance_length is None
                or (report.mean_acceptance_length <= 4.0)
            )
