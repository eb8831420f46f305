"""specmon.load against hand computations: intervals, buckets, comparison, crossover, profile."""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import pytest

from specmon import arithmetic
from specmon.answer import (
    Crossover,
    at_cost,
    crossover,
    crossover_at_acceptance,
    profile_crossover,
    speedup_at_cost,
)
from specmon.engines.model import Context, SpecCounters
from specmon.load import (
    DEFAULT_SCHEME,
    PROFILE_FORMAT,
    BaselinePoint,
    BucketScheme,
    BucketTotals,
    LoadCounters,
    LoadHistory,
    LoadInterval,
    LoadWindow,
    ProfileError,
    Thresholds,
    accumulate,
    compare,
    compare_with_twin,
    interval,
    load_counters,
    measured_costs,
    profile_from_json,
    profile_to_json,
    rounding_error,
)
from specmon.report import report_from_counters
from specmon.sim.load_model import LoadModel


def lc(
    steps: float,
    seconds: float,
    tokens: float,
    engine_steps: float | None = None,
    slots: float | None = None,
    drafts: int = 0,
    draft_tokens: int = 0,
    accepted: int = 0,
    per_pos: tuple[int, ...] = (),
    running: float | None = None,
) -> LoadCounters:
    return LoadCounters(
        request_steps=steps,
        decode_seconds=seconds,
        decode_tokens=tokens,
        engine_steps=engine_steps,
        slot_steps=slots,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=per_pos,
        requests_running=running,
    )


# --------------------------------------------------------------------------------------------
# One reading
# --------------------------------------------------------------------------------------------


def test_vllm_mapping() -> None:
    context = Context(
        requests_running=3.0,
        generation_tokens=1200,
        inter_token_latency_sum_seconds=8.1,
        inter_token_latency_count=1010,
        first_token_count=8,
        engine_steps=1018,
    )
    spec = SpecCounters(122, 366, 188, (80, 60, 48))
    got = load_counters(context, spec)
    assert got is not None
    assert got.request_steps == 1010  # one ITL observation per request per step
    assert got.decode_seconds == 8.1
    assert got.decode_tokens == 1200 - 8  # the first tokens come from the prefill steps
    assert got.engine_steps == 1018
    assert got.slot_steps == 1010 + 8
    assert (got.drafts, got.draft_tokens, got.accepted_tokens) == (122, 366, 188)
    assert got.errors == (0.0, 0.0, 0.0, 0.0, 0.0)
    assert got.requests_running == 3.0


def test_vllm_mapping_without_step_counter_has_no_concurrency() -> None:
    context = Context(
        generation_tokens=100, inter_token_latency_sum_seconds=1.0, inter_token_latency_count=99
    )
    got = load_counters(context)
    assert got is not None and got.engine_steps is None and got.slot_steps is None
    assert got.decode_tokens == 100  # no first-token count: all tokens (documented bias)


def test_llamacpp_mapping_and_its_rounding() -> None:
    context = Context(
        generation_tokens=4800,
        generation_seconds=4.09413,
        engine_steps=1416,
        busy_slots_per_decode=1.0,
        significant_digits=6,
    )
    spec = SpecCounters(1394, 5552, 3384, (1250, 980, 700, 454))
    got = load_counters(context, spec)
    assert got is not None
    assert got.request_steps == 4800 - 3384  # each step emits 1 + accepted tokens
    assert got.decode_tokens == 4800
    assert got.decode_seconds == 4.09413
    assert got.engine_steps == 1416
    assert got.slot_steps == 1416.0
    # 4800 and 1416 print exactly; 4.09413 carries half a unit of its 6th digit (5e-6); the
    # ratio 1.0 (printed "1") is treated as exact; accepted comes from the exact per-pos sum.
    assert got.errors[0] == 0.0
    assert got.errors[1] == pytest.approx(5e-6)
    assert got.errors[3] == 0.0


def test_rounding_bound_of_six_significant_digits() -> None:
    assert rounding_error(4800.0, 6, integer=True) == 0.0
    assert rounding_error(123456.0, 6, integer=True) == 0.0
    assert rounding_error(1.23457e6, 6, integer=True) == 5.0  # "1.23457e+06": to the nearest 10
    assert rounding_error(1000.0, 6) == pytest.approx(0.005)  # seconds printed "1000": +-0.005
    assert rounding_error(4.09413, 6) == pytest.approx(5e-6)
    assert rounding_error(1.94213, 6) == pytest.approx(5e-6)
    assert rounding_error(0.0, 6) == 0.0
    assert rounding_error(1.23457e6, None) == 0.0


def test_no_series_no_counters() -> None:
    assert load_counters(Context(requests_running=2.0)) is None
    assert load_counters(Context(inter_token_latency_sum_seconds=1.0)) is None


# --------------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------------


def test_interval_figures_by_hand() -> None:
    before = lc(1000, 5.0, 1000, engine_steps=400, slots=1000)
    after = lc(
        1000 + 1416,
        5.0 + 4.09413,
        1000 + 4800,
        engine_steps=400 + 403,
        slots=1000 + 1475,
        drafts=1394,
        draft_tokens=5552,
        accepted=3384,
        per_pos=(1250, 980, 700, 454),
    )
    got = interval(before, after, seconds=12.0)
    assert got.resets == 0
    assert got.seconds == 12.0
    assert got.concurrency == pytest.approx(1475 / 403)
    assert got.step_seconds == pytest.approx(4.09413 / 1416)
    assert got.time_per_output_token_seconds == pytest.approx(4.09413 / 4800)
    assert got.tokens_per_step == pytest.approx(4800 / 1416)
    assert got.drafted_per_step == pytest.approx(5552 / 1416)
    assert got.counters == SpecCounters(1394, 5552, 3384, (1250, 980, 700, 454))


def test_interval_after_a_restart_counts_the_new_values() -> None:
    before = lc(5000, 50.0, 6000, engine_steps=5000, slots=9000, drafts=900)
    after = lc(300, 3.0, 400, engine_steps=320, slots=640, drafts=80)
    got = interval(before, after)
    assert got.resets == 1
    assert (got.request_steps, got.decode_seconds, got.engine_steps, got.drafts) == (
        300,
        3.0,
        320,
        80,
    )
    assert got.concurrency == pytest.approx(2.0)


def test_positions_that_appear_later_count_from_zero() -> None:
    got = interval(lc(0, 0, 0), lc(100, 1.0, 300, drafts=100, accepted=200, per_pos=(90, 70, 40)))
    assert got.accepted_per_position == (90, 70, 40)


def test_idle_interval_has_no_figures() -> None:
    same = lc(100, 1.0, 100, engine_steps=100, slots=100)
    got = interval(same, same)
    assert got.concurrency is None
    assert got.step_seconds is None
    assert got.time_per_output_token_seconds is None


def test_coarse_printed_precision_withholds_the_figure() -> None:
    # llama.cpp above a million decodes prints "1.23457e+06": +-5 per page. Over 500 decodes
    # the bound on the concurrency is about (10 + 10) / 500 = 4 % > 1 %: nothing reported.
    context = Context(
        generation_tokens=2_000_000,
        generation_seconds=1000.0,
        engine_steps=1_234_570,
        busy_slots_per_decode=3.0,
        significant_digits=6,
    )
    later = Context(
        generation_tokens=2_001_500,
        generation_seconds=1001.5,
        engine_steps=1_235_070,
        busy_slots_per_decode=3.0,
        significant_digits=6,
    )
    a, b = load_counters(context), load_counters(later)
    assert a is not None and b is not None
    got = interval(a, b)
    assert got.engine_steps == 500
    assert got.concurrency is None
    # 1500 tokens at a rounding of 5 per page: 10 / 1500 = 0.67 %, and 1001.5 - 1000 s has
    # +-0.005 per page: 0.01 / 1.5 = 0.67 %; together 1.3 % > 1 %: no TPOT either.
    assert got.time_per_output_token_seconds is None
    # Over a longer interval the same rounding is small enough.
    much_later = Context(
        generation_tokens=2_300_000,
        generation_seconds=1300.0,
        engine_steps=1_334_570,
        busy_slots_per_decode=3.0,
        significant_digits=6,
    )
    c = load_counters(much_later)
    assert c is not None
    long = interval(a, c)
    assert long.concurrency == pytest.approx(3.0)
    assert long.time_per_output_token_seconds == pytest.approx(300.0 / 300_000)


def test_interval_sum() -> None:
    x = LoadInterval(10, 1.0, 30, 5, 10, 10, 40, 20, (8, 6, 4, 2), seconds=2.0)
    y = LoadInterval(20, 3.0, 50, 10, 40, 20, 80, 30, (15, 10), seconds=3.0)
    s = x + y
    assert (s.request_steps, s.decode_seconds, s.decode_tokens) == (30, 4.0, 80)
    assert (s.engine_steps, s.slot_steps, s.seconds, s.intervals) == (15, 50, 5.0, 2)
    assert s.accepted_per_position == (23, 16, 4, 2)
    assert s.concurrency == pytest.approx(50 / 15)


# --------------------------------------------------------------------------------------------
# Buckets
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "label"),
    [(0.3, "1"), (1.0, "1"), (1.49, "1"), (1.5, "2"), (2.9, "2"), (3.0, "4"), (3.9, "4"),
     (5.99, "4"), (6.0, "8"), (7.9, "8"), (12.0, "16"), (1e9, "8192+")],
)  # fmt: skip
def test_default_buckets_are_centred_on_powers_of_two(concurrency: float, label: str) -> None:
    assert DEFAULT_SCHEME.bucket_of(concurrency).label == label


def test_bucket_batch_sizes() -> None:
    sizes = {b.label: b.batch_sizes for b in DEFAULT_SCHEME.buckets[:5]}
    assert sizes == {"1": (1, 1), "2": (2, 2), "4": (3, 5), "8": (6, 11), "16": (12, 23)}
    assert DEFAULT_SCHEME.buckets[-1].batch_sizes == (6144, None)


def test_configured_edges() -> None:
    scheme = BucketScheme.from_edges([2, 4, 8])
    assert [b.label for b in scheme.buckets] == ["<2", "2-4", "4-8", "8+"]
    assert scheme.bucket_of(3.99).label == "2-4"
    with pytest.raises(ValueError, match="increasing"):
        BucketScheme.from_edges([4, 2])
    with pytest.raises(ValueError, match="non-empty"):
        BucketScheme.from_edges([])


def test_accumulate_sums_intervals_per_bucket() -> None:
    items = [
        LoadInterval(100, 1.0, 100, 100, 100),  # concurrency 1
        LoadInterval(400, 4.4, 400, 100, 400),  # 4
        LoadInterval(390, 4.0, 390, 100, 390),  # 3.9 -> "4"
        LoadInterval(0, 0.0, 0, 0, 0),  # idle: left out
        LoadInterval(50, 0.5, 50, None, None),  # no step counter: left out
    ]
    got = accumulate(items)
    assert [b.bucket.label for b in got] == ["1", "4"]
    four = got[1].totals
    assert (four.request_steps, four.decode_seconds, four.engine_steps) == (790, 8.4, 200)
    assert got[1].concurrency == pytest.approx(790 / 200)


def test_thresholds() -> None:
    t = Thresholds(min_engine_steps=200, min_request_steps=500, min_drafts=100)
    ok = LoadInterval(
        800, 8.0, 2400, 200, 800, drafts=150, draft_tokens=600, accepted_tokens=400, intervals=3
    )
    assert t.short_of(ok, speculative=True) is None
    few_steps = LoadInterval(800, 8.0, 2400, 199, 800, drafts=150, intervals=3)
    assert "199 engine steps" in (t.short_of(few_steps, speculative=False) or "")
    few_drafts = LoadInterval(800, 8.0, 2400, 200, 800, drafts=99, intervals=3)
    assert t.short_of(few_drafts, speculative=False) is None
    assert "99 drafts" in (t.short_of(few_drafts, speculative=True) or "")
    few_intervals = LoadInterval(800, 8.0, 2400, 200, 800, drafts=150, intervals=2)
    assert t.short_of(few_intervals, speculative=True) == "2 scrape intervals (needs 3)"
    assert t.short_of(few_intervals, speculative=False) == "2 scrape intervals (needs 3)"
    no_counter = LoadInterval(499, 5.0, 499, None, None, intervals=3)
    assert "499 request-steps" in (t.short_of(no_counter, speculative=False) or "")


# --------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
SPEC = SpecCounters(1000, 3600, 2400, (900, 700, 500, 300))


def target_totals(step_seconds: float) -> LoadInterval:
    """1000 request-steps of a k = 4 target; K = 3.4 tokens per step, k̄ = 3.6."""
    return LoadInterval(
        request_steps=1000,
        decode_seconds=1000 * step_seconds,
        decode_tokens=3400,
        engine_steps=250,
        slot_steps=1000,
        drafts=1000,
        draft_tokens=3600,
        accepted_tokens=2400,
        accepted_per_position=(900, 700, 500, 300),
    )


def test_compare_by_hand() -> None:
    base = BaselinePoint(4.0, 0.010, 0.010, "twin")
    got = compare(target_totals(0.015), base, bucket=DEFAULT_SCHEME.bucket_of(4.0))
    assert got is not None
    assert got.concurrency == 4.0
    assert got.step_ratio == pytest.approx(1.5)
    assert got.tokens_per_step == pytest.approx(3.4)
    assert got.drafted_per_step == pytest.approx(3.6)
    c = (1.5 - 1.0) / 3.6
    assert got.draft_cost == pytest.approx(c)
    # TPOT = 15 s / 3400 tokens; realized = 10 ms / that.
    assert got.target_time_per_output_token_seconds == pytest.approx(15.0 / 3400)
    assert got.realized_speedup == pytest.approx(0.010 / (15.0 / 3400))
    # The cost model explains the realized speed-up exactly here: K / (1 + k̄ c) = 3.4 / 1.5.
    assert got.realized_speedup == pytest.approx(3.4 / 1.5)
    # The answer's figures at that c (specmon.answer.at_cost): a chain of k' drafts
    # k' x 3.6 / 4 tokens, so at k' = 4 the best speed-up is the expected one.
    assert got.counters is not None
    report = report_from_counters(got.counters, draft_cost=0.1, configured_chain_length=4)
    figures = at_cost(report, c)
    assert figures.breakeven_alpha == pytest.approx(arithmetic.breakeven_alpha(4, c))
    assert figures.speedup == pytest.approx(3.4 / (1 + c * 3.6))
    best = arithmetic.best_chain_length(SURVIVAL, c * 3.6 / 4)
    assert (figures.best_chain_length, figures.best_speedup) == (  # type: ignore[comparison-overlap]
        best.chain_length,
        pytest.approx(best.speedup),
    )
    assert figures.best_speedup == pytest.approx(figures.speedup)
    assert figures.alpha_margin == pytest.approx(
        arithmetic.effective_alpha(2.4, 4) - arithmetic.breakeven_alpha(4, c)  # type: ignore[operator]
    )


def test_compare_negative_cost_is_reported_and_clamped() -> None:
    base = BaselinePoint(1.0, 0.010, 0.010, "twin")
    got = compare(target_totals(0.009), base, bucket=DEFAULT_SCHEME.bucket_of(1.0))
    assert got is not None and got.draft_cost is not None and got.draft_cost < 0
    assert any("faster than the baseline" in n for n in got.notes)


def test_compare_without_drafts_has_no_cost() -> None:
    plain = LoadInterval(1000, 10.0, 1000, 250, 1000)
    got = compare(plain, BaselinePoint(4.0, 0.01, 0.01, "twin"), bucket=DEFAULT_SCHEME.buckets[2])
    assert got is not None and got.draft_cost is None and got.counters is None
    assert got.realized_speedup == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# Crossover
# --------------------------------------------------------------------------------------------


def test_crossover_interpolates_between_measured_points() -> None:
    got = crossover([(16, 0.5), (1, 2.0), (2, 1.5), (4, 1.2), (8, 0.8)])
    assert got is not None
    assert got.concurrency == pytest.approx(4 + (1.2 - 1.0) * (8 - 4) / (1.2 - 0.8))  # 6.0
    assert (got.pays_up_to, got.costs_from) == (4, 8)
    assert got.cost_percent == pytest.approx(20.0)
    assert (got.measured_from, got.measured_to) == (1, 16)


def test_no_crossover_when_it_pays_everywhere() -> None:
    assert crossover([(1, 2.0), (8, 1.01)]) is None
    assert crossover([]) is None


def test_crossover_at_the_lowest_level_when_it_never_pays() -> None:
    got = crossover([(2, 0.9), (4, 0.7)])
    assert got is not None
    assert got.concurrency == 2 and got.pays_up_to is None and got.costs_from == 2
    assert got.cost_percent == pytest.approx(10.0)


def test_speedup_exactly_one_is_the_crossover() -> None:
    got = crossover([(1, 1.5), (4, 1.0), (8, 0.5)])
    assert got is not None and got.concurrency == pytest.approx(4.0)


def test_crossover_at_current_acceptance() -> None:
    # S(c) = 3.4 / (1 + 3.6 c): 2.5 at c = 0.1, 3.4 / 2.8 at c = 0.5, 3.4 / 4.24 at c = 0.9.
    s4, s8 = 3.4 / 2.8, 3.4 / 4.24
    assert speedup_at_cost(SPEC, 0.5) == pytest.approx(s4)
    got = crossover_at_acceptance([(1, 0.1), (4, 0.5), (8, 0.9)], SPEC)
    assert got is not None
    assert got.concurrency == pytest.approx(4 + (s4 - 1) * 4 / (s4 - s8))
    # Speculation pays while c < accepted / draft tokens = 2/3: every c below it pays.
    assert crossover_at_acceptance([(1, 0.1), (8, 0.66)], SPEC) is None
    assert crossover_at_acceptance([(1, 0.1), (8, 0.67)], SPEC) is not None


@pytest.mark.parametrize(
    "counters",
    [
        SPEC,
        # TGI/SGLang: no draft-token counter, k = 4 from the position series (T = 4 D).
        SpecCounters(1000, 0, 2400, (900, 700, 500, 300), unknown=("draft_tokens",)),
        # TensorRT-LLM without drafts: D = T / k.
        SpecCounters(0, 3600, 2400, (900, 700, 500, 300), unknown=("drafts",)),
        SpecCounters(1000, 3600, 0, (0, 0, 0, 0)),
    ],
)
@pytest.mark.parametrize("cost", [-0.2, 0.0, 0.05, 0.5, 2.0])
def test_speedup_at_cost_is_the_reports(counters: SpecCounters, cost: float) -> None:
    """The closed form (both counters known) and the report's path (one assumed) agree with
    the full acceptance report at max(c, 0)."""
    got = speedup_at_cost(counters, cost)
    if counters.drafts <= 0:
        assert got is None
        return
    want = report_from_counters(counters, draft_cost=max(cost, 0.0)).expected_speedup
    assert want is not None and got == pytest.approx(want, rel=1e-12)


def test_bucket_scheme_builds_its_buckets_once() -> None:
    assert DEFAULT_SCHEME.buckets is DEFAULT_SCHEME.buckets
    assert BucketScheme.from_edges([2, 4]).buckets == BucketScheme.from_edges([2, 4]).buckets


# --------------------------------------------------------------------------------------------
# Rolling history
# --------------------------------------------------------------------------------------------


def test_history_windows_and_buckets() -> None:
    h = LoadHistory(retention=100)
    assert h.add(0.0, lc(0, 0.0, 0, 0, 0, running=1)) is False
    assert h.latest is None
    h.add(10.0, lc(100, 1.0, 100, 100, 100, running=1))  # concurrency 1
    h.add(20.0, lc(500, 5.4, 500, 200, 500, running=4))  # 400 slots / 100 steps: 4
    h.add(30.0, lc(900, 9.8, 900, 300, 900, running=4))  # 4
    w = h.window(20)
    assert w.totals is not None
    assert w.totals.request_steps == 800 and w.totals.intervals == 2
    assert [b.bucket.label for b in w.buckets] == ["4"]
    # The window's readings are those at 10, 20 and 30 s (its two intervals' ends): 1, 4, 4.
    assert w.requests_running_mean == pytest.approx(3.0)
    full = h.window(1000)
    assert [b.bucket.label for b in full.buckets] == ["1", "4"]
    assert full.totals is not None and full.totals.request_steps == 900
    # Retention 100 s: at 110 s the interval 0-10 s starts before 10 s and is dropped.
    h.add(110.0, lc(1000, 10.8, 1000, 400, 1000))
    kept = h.window(1000).totals
    assert kept is not None and kept.request_steps == 1000 - 100 and kept.intervals == 3


def test_a_window_is_made_once_per_reading() -> None:
    """A twin read by several speculating targets (a canary beside a pool) makes each window
    once per reading: the same object until the next reading, then a new one that equals
    what a history fed the same readings gives."""
    readings = [
        (0.0, lc(0, 0.0, 0, 0, 0, running=1)),
        (10.0, lc(100, 1.0, 100, 100, 100, running=1)),
        (20.0, lc(500, 5.4, 500, 200, 500, running=4)),
        (30.0, lc(900, 9.8, 900, 300, 900, running=4)),
    ]
    h = LoadHistory(retention=100)
    for time, counters in readings[:3]:
        h.add(time, counters)
    first = h.window(60)
    assert h.window(60) is first and h.window(20) is not first
    assert h.window(60, buckets=False) == LoadWindow(first.totals, (), first.requests_running_mean)
    h.add(*readings[3])
    second = h.window(60)
    assert second is not first and second.totals != first.totals
    fresh = LoadHistory(retention=100)
    for time, counters in readings:
        fresh.add(time, counters)
    assert second == fresh.window(60)
    assert h.add(*readings[3]) is False and h.window(60) is second  # not newer: no change


def test_a_window_without_buckets_has_the_same_totals() -> None:
    """``buckets=False`` (no baseline reads them) leaves out only the per-bucket sums and the
    latest interval; the history keeps one row of doubles per interval (memory)."""
    h = LoadHistory(retention=100)
    h.add(0.0, lc(0, 0.0, 0, 0, 0, running=1))
    h.add(10.0, lc(100, 1.0, 100, 100, 100, running=1))
    h.add(20.0, lc(500, 5.4, 500, 200, 500, running=4))
    full, lean = h.window(60), h.window(60, buckets=False)
    assert len(full.buckets) == 2 and lean.buckets == ()
    assert (lean.totals, lean.requests_running_mean) == (full.totals, full.requests_running_mean)
    assert lean.latest is None and full.latest == h.latest
    assert full.latest is not None and full.latest.concurrency == 4.0
    assert (len(h._rows), h._rows.stride) == (2, 22)  # 22 doubles each, no positions


def test_a_hostile_count_leaving_a_window_leaves_exact_sums() -> None:
    """Counts near 2**53 (the most a page may publish) make a window's sums of doubles round
    while they are inside it; once that interval has left, the window is exact again (summed
    afresh), not off by what the rounding left behind. Every window length, with and without
    buckets."""
    big = 2**53 - 7
    h = LoadHistory(retention=1000)
    steps = 0.0
    drafts = 0
    for t, new in ((0, 0), (10, big), (20, 3), (30, 5), (40, 6), (50, 9)):
        drafts += new
        steps += 100.0
        h.add(float(t), lc(steps, steps / 100, steps, steps, steps, drafts, drafts, drafts,
                           (drafts,), running=1.0))  # fmt: skip
        for seconds in (25.0, 35.0):
            for buckets in (False, True):
                h.window(seconds, buckets=buckets)  # the sums follow every reading
    for seconds, want in ((25.0, 6 + 9), (35.0, 5 + 6 + 9)):
        for buckets in (False, True):
            w = h.window(seconds, buckets=buckets).totals
            assert w is not None
            assert (w.drafts, w.draft_tokens, w.accepted_tokens) == (want, want, want)
            assert w.accepted_per_position == (want,)


def test_history_ignores_a_reading_that_is_not_newer() -> None:
    h = LoadHistory(retention=100)
    h.add(10.0, lc(0, 0, 0))
    assert h.add(10.0, lc(5, 1, 5)) is False
    assert h.window(100).totals is None
    assert h.add(20.0, lc(8, 2, 8)) is True  # from the first reading, not the ignored one
    assert h.latest is not None
    assert (h.latest.request_steps, h.latest.decode_seconds, h.latest.seconds) == (8, 2, 10.0)


# --------------------------------------------------------------------------------------------
# Profile
# --------------------------------------------------------------------------------------------


def profile_doc() -> dict[str, object]:
    def level(n: int, base_step: float, spec_step: float, c: float) -> dict[str, object]:
        return {
            "concurrency": n,
            "baseline": {
                "time_per_output_token_seconds": base_step,
                "step_seconds": base_step,
                "tokens_per_second": n / base_step,
                "concurrency": float(n),
            },
            "speculative": {
                "time_per_output_token_seconds": spec_step / 3.4,
                "step_seconds": spec_step,
                "tokens_per_second": n * 3.4 / spec_step,
                "concurrency": float(n),
            },
            "tokens_per_step": 3.4,
            "drafted_tokens_per_step": 3.6,
            "acceptance": {
                "drafts": 1000,
                "draft_tokens": 3600,
                "accepted_tokens": 2400,
                "accepted_per_position": [900, 700, 500, 300],
            },
            "speed_ratio": base_step * 3.4 / spec_step,
            "draft_cost": {"from_step_times": c, "from_speed_ratio": c + 0.01},
        }

    return {
        "format": PROFILE_FORMAT,
        "version": 1,
        "model": "m",
        "engine": "llamacpp",
        "chain_length": 4,
        "levels": [
            level(8, 0.020, 0.020 * (1 + 3.6 * 0.9), 0.9),
            level(1, 0.010, 0.010 * (1 + 3.6 * 0.1), 0.1),
            level(4, 0.012, 0.012 * (1 + 3.6 * 0.5), 0.5),
        ],
    }


def test_profile_round_trip_and_interpolation() -> None:
    profile = profile_from_json(profile_doc())
    assert [lv.concurrency for lv in profile.levels] == [1, 4, 8]
    assert profile_from_json(profile_to_json(profile)) == profile
    assert profile.draft_cost_at(4.0) == (pytest.approx(0.5), "measured")  # type: ignore[comparison-overlap]
    assert profile.draft_cost_at(2.0) == (pytest.approx(0.1 + (0.5 - 0.1) / 3), "interpolated")  # type: ignore[comparison-overlap]
    assert profile.draft_cost_at(0.5) is None  # below the measured range
    assert profile.draft_cost_at(9.0) is None  # above: never extrapolated
    point = profile.baseline_at(6.0)
    assert point is not None
    assert point.step_seconds == pytest.approx(0.016)
    assert point.source == "profile, interpolated"
    assert profile.levels[0].draft_cost_source == "step times"
    acceptance = profile.acceptance()
    assert acceptance is not None and acceptance.drafts == 3000
    # The profile's crossover is its cost curve's (the daemon's function, on its data):
    # between the levels where the speed-up at its acceptance falls through 1.
    got = profile_crossover(profile)
    linear = crossover_at_acceptance([(1, 0.1), (4, 0.5), (8, 0.9)], SPEC)
    assert got is not None and linear is not None
    assert got.pays_up_to is not None and got.pays_up_to < got.concurrency < got.costs_from
    assert got.low is not None and got.high is not None


def test_profile_problems_are_listed_at_once() -> None:
    doc = profile_doc()
    doc["version"] = 7
    levels = doc["levels"]
    assert isinstance(levels, list)
    levels[0]["concurrency"] = 0
    levels[1]["baseline"] = {"step_seconds": "fast"}
    levels[2]["acceptance"] = {"drafts": -1, "draft_tokens": 1, "accepted_tokens": 1}
    with pytest.raises(ProfileError) as exc:
        profile_from_json(doc)
    problems = exc.value.problems
    assert any(p.startswith("version:") for p in problems)
    assert "levels[0].concurrency: must be an integer >= 1" in problems
    assert "levels[1].baseline.step_seconds: must be a number or null" in problems
    assert "levels[2].acceptance.drafts: must be an integer >= 0" in problems


@pytest.mark.parametrize("bad", [None, [], {"format": "x"}, {"format": PROFILE_FORMAT}])
def test_profile_garbage(bad: object) -> None:
    with pytest.raises(ProfileError):
        profile_from_json(bad)


def test_profile_rejects_non_finite_numbers() -> None:
    doc = profile_doc()
    levels = doc["levels"]
    assert isinstance(levels, list)
    levels[0]["draft_cost"] = {"from_step_times": math.inf}
    levels[1]["speed_ratio"] = 10**400  # JSON allows it; a float cannot hold it
    with pytest.raises(ProfileError) as exc:
        profile_from_json(doc)
    assert "levels[0].draft_cost.from_step_times: must be finite" in exc.value.problems
    assert "levels[1].speed_ratio: must be finite and >= 0" in exc.value.problems


def test_a_broken_load_series_does_not_hide_acceptance() -> None:
    from specmon.engines import read_page

    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} NaN\n'
        'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} -1.0\n'
        'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 9.0\n'
    )
    (model,) = read_page(text).models
    assert model.counters is not None and model.counters.drafts == 10
    assert model.context.generation_tokens is None
    assert model.context.inter_token_latency_sum_seconds is None
    assert model.context.inter_token_latency_count == 9
    assert load_counters(model.context, model.counters) is None


# --------------------------------------------------------------------------------------------
# Per-bucket verdicts (what the daemon calls per window)
# --------------------------------------------------------------------------------------------


def bucket_totals(
    concurrency: float, step: float, *, spec: bool, steps: float = 1000, intervals: int = 3
) -> BucketTotals:
    totals = LoadInterval(
        request_steps=steps,
        decode_seconds=steps * step,
        decode_tokens=steps * (3.4 if spec else 1.0),
        engine_steps=steps / concurrency,
        slot_steps=steps,
        drafts=int(steps) if spec else 0,
        draft_tokens=int(4 * steps) if spec else 0,
        accepted_tokens=int(2.4 * steps) if spec else 0,
        accepted_per_position=(
            (int(0.9 * steps), int(0.7 * steps), int(0.5 * steps), int(0.3 * steps)) if spec else ()
        ),
        intervals=intervals,
    )
    return BucketTotals(DEFAULT_SCHEME.bucket_of(concurrency), totals)


def test_compare_with_twin_like_with_like() -> None:
    from specmon.load import compare_with_twin, measured_costs

    target = [
        bucket_totals(1.0, 0.012, spec=True),  # enough
        bucket_totals(4.0, 0.020, spec=True),  # enough, the twin has no "4" bucket
        bucket_totals(8.0, 0.060, spec=True, steps=400),  # 400 / 8 = 50 engine steps: short
        bucket_totals(16.0, 0.090, spec=True, steps=8000),  # the twin's "16" is short
    ]
    twin = [
        bucket_totals(1.0, 0.010, spec=False),
        bucket_totals(8.0, 0.030, spec=False),
        bucket_totals(16.0, 0.040, spec=False, steps=1000),  # 62.5 engine steps
    ]
    got = compare_with_twin(target, twin, chain_length=4)
    assert [v.bucket.label for v in got] == ["1", "4", "8", "16"]
    one = got[0].comparison
    assert one is not None and got[0].reason is None
    assert one.draft_cost == pytest.approx((0.012 / 0.010 - 1) / 4)
    assert one.realized_speedup == pytest.approx(0.010 / (0.012 / 3.4))
    assert got[1].comparison is None and got[1].reason == "no matching baseline bucket yet"
    assert got[2].reason == "too little data: 50 engine steps (needs 200)"
    assert got[3].reason == "baseline bucket: too little data: 62 engine steps (needs 200)"
    assert measured_costs(got) == [(pytest.approx(1.0), pytest.approx(0.05))]  # type: ignore[comparison-overlap]


#: The e2e test's load model (specmon.sim.load_model): 2 requests per step, then 16.
STRADDLE_MODEL = LoadModel(
    weights_seconds=0.0008,
    token_seconds=0.00005,
    fixed_seconds=0.0001,
    draft_fixed_seconds=0.00006,
)


def _modelled(start: float, end: float, rise: float, *, k: int) -> LoadInterval:
    """One scrape interval of a simulated engine running 2 requests per step until ``rise``
    and 16 after it (k = 4 with K = 3.4, or k = 0)."""
    total: LoadInterval | None = None
    for n, seconds in ((2, min(end, rise) - start), (16, end - max(start, rise))):
        if seconds <= 0:
            continue
        step = STRADDLE_MODEL.step_seconds(n, k)
        rs = n * seconds / step
        part = LoadInterval(
            request_steps=rs,
            decode_seconds=rs * step,
            decode_tokens=rs * (3.4 if k else 1.0),
            engine_steps=seconds / step,
            slot_steps=rs,
            drafts=round(rs) if k else 0,
            draft_tokens=round(4 * rs) if k else 0,
            accepted_tokens=round(2.4 * rs) if k else 0,
            accepted_per_position=tuple(round(p * rs) for p in SURVIVAL) if k else (),
        )
        total = part if total is None else total + part
    assert total is not None
    return dataclasses.replace(total, intervals=1)  # one scrape interval, however mixed


def test_the_interval_that_straddles_a_load_rise_forms_no_bucket() -> None:
    """An end-to-end flake, in-process: load rises from 2 to 16 requests per step on
    both servers (the twin's rise 0.6 s before the target's, their scrapes 0.2 s apart). Each
    side's 0.5 s interval across the rise lands in bucket "4" with its own mixture; alone, the
    target's against the twin's gave c for a bucket no load ever ran at, and a crossover of 4.75
    that the window's mean concurrency (5.2) passed 16 s after the rise, 12 s before the high
    load dominated the window: a false SpecmonAboveCrossover. Three intervals per bucket and
    side keep the passage out; the crossover is then the loads' own (2 pays, 16 does not)."""
    rise, now = 100.0, 116.0

    def window(phase: float, rise: float, k: int) -> list[LoadInterval]:
        starts = [phase + 0.5 * i for i in range(int((now - phase) / 0.5))]
        return [_modelled(t, t + 0.5, rise, k=k) for t in starts if t >= now - 30]

    target = window(0.2, rise, 4)
    twin = window(0.0, rise - 0.6, 0)
    mean = functools.reduce(operator.add, target).concurrency
    assert mean is not None and 5.0 < mean < 5.5
    acceptance = SpecCounters(1000, 4000, 2400, (900, 700, 500, 300))

    def crossing(thresholds: Thresholds) -> Crossover | None:
        verdicts = compare_with_twin(
            accumulate(target), accumulate(twin), chain_length=4, thresholds=thresholds
        )
        return crossover_at_acceptance(measured_costs(verdicts), acceptance)

    loose = crossing(Thresholds(min_intervals=1))
    assert loose is not None and loose.concurrency < mean  # the false page
    assert loose.pays_up_to is not None and 4.0 <= loose.pays_up_to < 4.2
    guarded = crossing(Thresholds())
    assert guarded is not None
    assert (guarded.pays_up_to, guarded.costs_from) == (2.0, 16.0)
    assert guarded.concurrency > 13.0 > mean
    assert [b.bucket.label for b in accumulate(target)] == ["2", "4", "16"]
    (four,) = (b for b in accumulate(target) if b.bucket.label == "4")
    assert four.totals.intervals == 1


def test_a_compare_memo_gives_the_same_verdicts_and_reuses_unchanged_buckets() -> None:
    """With a CompareMemo, a window's comparison with its twin is the one made without it,
    scrape after scrape; a bucket whose sums did not change on either side keeps its verdict
    object (its comparison and report are not made again); the memo holds only the buckets
    of the last call, and a new chain length starts afresh."""
    import random

    from specmon.load import CompareMemo, compare_with_twin

    rng = random.Random(3)
    histories = {True: LoadHistory(retention=600.0), False: LoadHistory(retention=600.0)}
    totals = {spec: [0.0] * 7 for spec in histories}
    memo = CompareMemo()
    previous: tuple[object, ...] = ()
    reused = compared = 0
    concurrency = 1.0
    for tick in range(240):
        if tick % 6 == 0:
            concurrency = rng.choice((1.0, 4.0, 16.0))
        for spec, history in histories.items():
            t = totals[spec]
            engine = 200.0
            slots = engine * concurrency
            t[0] += slots  # request-steps
            t[1] += slots * 0.01 * (1.0 + 0.02 * concurrency if spec else 1.0)
            t[2] += slots * (2.0 if spec else 1.0)
            t[3] += engine
            t[4] += slots
            t[5] += slots if spec else 0.0  # drafts; accepted = drafts (one each)
            drafts = int(t[5])
            history.add(
                5.0 * tick,
                lc(t[0], t[1], t[2], t[3], t[4], drafts, 3 * drafts, drafts,
                   (drafts,) if spec else (), running=concurrency),
            )  # fmt: skip
        w, tw = histories[True].window(300.0), histories[False].window(300.0)
        plain = compare_with_twin(w.buckets, tw.buckets, chain_length=3)
        memoed = compare_with_twin(w.buckets, tw.buckets, chain_length=3, memo=memo)
        assert memoed == plain
        assert len(memo._entries) == len(w.buckets)
        reused += sum(1 for v in memoed if any(v is p for p in previous))
        compared += len(memoed)
        previous = memoed
    assert compared > 0 and 0.3 < reused / compared < 1.0  # most buckets sit still
    w, tw = histories[True].window(300.0), histories[False].window(300.0)
    again = compare_with_twin(w.buckets, tw.buckets, chain_length=4, memo=memo)
    assert again == compare_with_twin(w.buckets, tw.buckets, chain_length=4)
    assert not any(v is p for v in again for p in previous)


def test_buckets_asked_for_late_are_summed_from_the_whole_window() -> None:
    """A window read without buckets (no baseline) keeps no per-bucket sums; asked for them
    later (a baseline configured), it has them for every interval inside, as accumulate()."""
    h = LoadHistory(retention=500.0)
    seen = []
    for tick in range(60):
        running = (1.0, 4.0, 8.0)[tick // 10 % 3]
        steps = 100.0 * tick * running
        if h.add(5.0 * tick, lc(steps, steps / 100, steps, 100.0 * tick, steps,
                                running=running)):  # fmt: skip
            assert h.latest is not None
            seen.append((5.0 * tick, h.latest))
        assert h.window(120.0, buckets=False).buckets == ()
    late = h.window(120.0)
    expected = accumulate([i for end, i in seen if end - (i.seconds or 0) >= 295.0 - 120.0])
    assert [(b.bucket.label, b.totals) for b in late.buckets] == [
        (b.bucket.label, b.totals) for b in expected
    ]
    assert len(late.buckets) >= 2


def test_compare_with_profile_inside_its_range_only() -> None:
    from specmon.load import compare_with_profile

    profile = profile_from_json(profile_doc())  # baseline steps 10 / 12 / 20 ms at 1 / 4 / 8
    target = [
        bucket_totals(2.0, 0.020, spec=True),
        bucket_totals(16.0, 0.100, spec=True, steps=8000),
    ]
    got = compare_with_profile(target, profile)
    two = got[0].comparison
    assert two is not None
    base = 0.010 + (0.012 - 0.010) * (2.0 - 1.0) / 3.0  # interpolated at concurrency 2
    assert two.baseline.step_seconds == pytest.approx(base)
    assert two.baseline.source == "profile, interpolated"
    assert two.draft_cost == pytest.approx((0.020 / base - 1) / 4)
    assert got[1].comparison is None
    assert got[1].reason == "outside the profile's measured concurrencies"


def test_non_finite_context_gives_no_load_figures() -> None:
    context = Context(
        generation_tokens=10,
        generation_seconds=math.nan,
        engine_steps=10,
        busy_slots_per_decode=1.0,
    )
    assert load_counters(context) is None


def _naive(
    history: list[tuple[float, LoadInterval]], now: float, seconds: float
) -> LoadInterval | None:
    """The window summed from scratch, the way the sliding sums must agree with."""
    total: LoadInterval | None = None
    for end, item in history:
        if end - (item.seconds or 0.0) >= now - seconds - 1e-9:
            total = item if total is None else total + item
    return total


def test_sliding_window_sums_equal_a_fresh_sum() -> None:
    """LoadHistory keeps one sliding sum per window length; over a long random run (resets,
    engines losing their step counter, more changes than the re-summing period, readings
    past the retention, the number of position series growing and shrinking, which re-lays
    the held rows) every window equals the same intervals summed afresh, bucket by bucket,
    and the latest interval is the one the two readings give."""
    import random

    rng = random.Random(7)
    history = LoadHistory(retention=300.0)
    seen: list[tuple[float, LoadInterval]] = []
    steps = seconds = tokens = engine = slots = 0.0
    drafts = accepted = 0
    per_pos = [0, 0, 0]
    t = 0.0
    last: tuple[float, LoadCounters] | None = None
    for n in range(1500):
        t += rng.choice((1.0, 5.0, 5.0, 7.5))
        if rng.random() < 0.01:  # the engine restarts
            steps = seconds = tokens = engine = slots = 0.0
            drafts = accepted = 0
            per_pos = [0] * len(per_pos)
        if n % 250 == 120:  # the draft length changes: position series appear or go
            k = rng.choice((1, 2, 3, 5))
            per_pos = (per_pos + [0] * k)[:k]
        concurrency = rng.choice((1, 2, 4, 8, 16))
        new_engine = rng.randint(50, 400)
        engine += new_engine
        slots += new_engine * concurrency
        steps += new_engine * concurrency
        seconds += new_engine * concurrency * rng.uniform(0.005, 0.03)
        d = new_engine * concurrency
        drafts += d
        hits = [d * 3 // 4, d // 2, d // 4, d // 8, d // 16][: len(per_pos)]
        per_pos = [a + b for a, b in zip(per_pos, hits, strict=True)]
        accepted += sum(hits)
        tokens += new_engine * concurrency + sum(hits)
        no_steps = n % 300 > 280  # a stretch without the step counter
        before = history.latest
        reading = lc(
            steps, seconds, tokens, None if no_steps else engine, None if no_steps else slots,
            drafts, 3 * drafts, accepted, tuple(per_pos), running=float(concurrency),
        )  # fmt: skip
        if history.add(t, reading):
            got = history.latest
            assert got is not None and got is not before
            assert last is not None and got == interval(last[1], reading, seconds=t - last[0])
            seen.append((t, got))
        last = (t, reading)
        if n % 37 == 0 or n > 1480:
            for window in (60.0, 300.0, 900.0):
                w = history.window(window)
                fresh = _naive(
                    [(e, i) for e, i in seen if e - (i.seconds or 0) >= t - 300.0], t, window
                )
                if fresh is None:
                    assert w.totals is None
                    continue
                assert w.totals is not None
                for field in ("request_steps", "decode_seconds", "decode_tokens", "slot_steps"):
                    a, b = getattr(w.totals, field), getattr(fresh, field)
                    assert (a is None) == (b is None), field
                    assert a is None or a == pytest.approx(b, rel=1e-9), field
                assert (w.totals.drafts, w.totals.accepted_tokens, w.totals.intervals) == (
                    fresh.drafts,
                    fresh.accepted_tokens,
                    fresh.intervals,
                )
                assert w.totals.accepted_per_position == fresh.accepted_per_position
                inside = [
                    i for e, i in seen
                    if e - (i.seconds or 0) >= max(t - window, t - 300.0) - 1e-9
                ]  # fmt: skip
                expected = accumulate(inside)
                assert [b.bucket.label for b in w.buckets] == [b.bucket.label for b in expected]
                for got_b, want_b in zip(w.buckets, expected, strict=True):
                    assert got_b.totals.drafts == want_b.totals.drafts
                    assert got_b.totals.decode_seconds == pytest.approx(
                        want_b.totals.decode_seconds, rel=1e-9
                    )


def test_speeds_read_off_the_sums_equal_the_windows_figures() -> None:
    """LoadHistory.speeds (the per-scrape path with no baseline) gives exactly the floats a
    window's totals give through LoadInterval, with the requests-running fallback, over a
    random run: resets, stretches without the step counter or the running gauge, idle
    intervals, windows of every length, before the first interval and after a gap longer
    than the window."""
    import random

    rng = random.Random(11)
    history = LoadHistory(retention=400.0)
    for window in (60.0, 300.0):
        assert history.speeds(window) is None  # no reading at all
    steps = seconds = tokens = engine = slots = 0.0
    t = 0.0
    checked = 0
    for n in range(1200):
        t += rng.choice((1.0, 5.0, 5.0, 7.5, 90.0 if n % 200 == 199 else 5.0))
        if rng.random() < 0.02:  # the engine restarts
            steps = seconds = tokens = engine = slots = 0.0
        concurrency = rng.choice((0, 1, 2, 4, 8, 16))
        new_engine = rng.randint(0, 400) if concurrency else 0
        engine += new_engine
        slots += new_engine * concurrency
        steps += new_engine * concurrency
        seconds += new_engine * concurrency * rng.uniform(0.005, 0.03)
        tokens += new_engine * concurrency * rng.choice((1, 2))
        no_steps = n % 150 > 120
        running = None if n % 90 > 70 else float(concurrency)
        history.add(
            t,
            lc(steps, seconds, tokens, None if no_steps else engine, None if no_steps else slots,
               running=running),
        )  # fmt: skip
        for window in (10.0, 60.0, 300.0):
            w = history.window(window, buckets=False)
            got = history.speeds(window)
            if w.totals is None:
                assert got is None
                continue
            concurrency_now = w.totals.concurrency
            if concurrency_now is None:
                concurrency_now = w.requests_running_mean
            want = (concurrency_now, w.totals.step_seconds, w.totals.time_per_output_token_seconds)
            assert got == want, (n, window)
            checked += 1
    assert checked > 2000


def _readings(seed: int, count: int, *, speculating: bool) -> list[tuple[float, LoadCounters]]:
    """A random run of readings: resets, stretches without the step counter or the running
    gauge, idle intervals; with ``speculating``, drafts and three positions."""
    import random

    rng = random.Random(seed)
    out = []
    steps = seconds = tokens = engine = slots = 0.0
    drafts = accepted = 0
    per_pos = [0, 0, 0]
    t = 0.0
    for n in range(count):
        t += rng.choice((1.0, 5.0, 5.0, 7.5))
        if rng.random() < 0.02:  # the engine restarts
            steps = seconds = tokens = engine = slots = 0.0
            drafts = accepted = 0
            per_pos = [0, 0, 0]
        concurrency = rng.choice((0, 1, 2, 4, 8, 16))
        new_engine = rng.randint(0, 400) if concurrency else 0
        engine += new_engine
        slots += new_engine * concurrency
        steps += new_engine * concurrency
        seconds += new_engine * concurrency * rng.uniform(0.005, 0.03)
        tokens += new_engine * concurrency
        if speculating:
            d = new_engine * concurrency
            hits = [d * 3 // 4, d // 2, d // 4]
            drafts += d
            per_pos = [a + b for a, b in zip(per_pos, hits, strict=True)]
            accepted += sum(hits)
            tokens += sum(hits)
        no_steps = n % 150 > 120
        out.append(
            (
                t,
                lc(steps, seconds, tokens, None if no_steps else engine,
                   None if no_steps else slots, drafts, 3 * drafts, accepted,
                   tuple(per_pos) if speculating else (),
                   running=None if n % 90 > 70 else float(concurrency)),
            )
        )  # fmt: skip
    return out


@pytest.mark.parametrize("speculating", [False, True])
def test_a_lean_history_gives_the_same_speeds(speculating: bool) -> None:
    """A lean history (a target compared with nothing: the memory it saves) keeps 17 doubles
    an interval and gives exactly the speeds a whole history gives, every window, every
    reading."""
    lean, whole = LoadHistory(retention=300.0, lean=True), LoadHistory(retention=300.0)
    for t, reading in _readings(3, 600, speculating=speculating):
        assert lean.add(t, reading) == whole.add(t, reading)
        for window in (10.0, 60.0, 300.0):
            assert lean.speeds(window) == whole.speeds(window), (t, window)
    assert lean.lean and not whole.lean
    assert lean._rows.stride == 17 and whole._rows.stride >= 22
    assert len(lean._rows) == len(whole._rows) > 40


def test_a_lean_baseline_is_made_whole_exactly() -> None:
    """A server without speculation, held lean, then asked for its windows (another target
    took it as its twin): every dropped column was 0, so the held rows are laid out again
    with their buckets and every window equals a history that was whole all along."""
    readings = _readings(5, 400, speculating=False)
    lean, whole = LoadHistory(retention=300.0, lean=True), LoadHistory(retention=300.0)
    for t, reading in readings[:250]:
        lean.add(t, reading)
        whole.add(t, reading)
        lean.speeds(60.0)  # a slide made while lean
        whole.speeds(60.0)
    for window in (60.0, 300.0, 900.0):
        assert lean.window(window) == whole.window(window)
    assert not lean.lean and lean._rows.stride == whole._rows.stride
    assert lean.window(60.0).buckets  # the buckets are back
    for t, reading in readings[250:]:
        lean.add(t, reading)
        whole.add(t, reading)
        for window in (60.0, 300.0):
            assert lean.window(window) == whole.window(window)
            assert lean.speeds(window) == whole.speeds(window)


def test_a_lean_speculating_history_starts_again_when_made_whole() -> None:
    """A speculating target held lean, then given a baseline (a reload): its drafts were
    not kept, so its held intervals are let go and its windows start again from the last
    reading: never a window with load but no drafts. From then on its windows are those of
    a whole history that started at that reading."""
    readings = _readings(9, 300, speculating=True)
    lean = LoadHistory(retention=300.0, lean=True)
    for t, reading in readings[:200]:
        lean.add(t, reading)
    assert lean.speeds(60.0) is not None
    assert lean.window(60.0).totals is None and lean.latest is None
    assert not lean.lean
    whole = LoadHistory(retention=300.0)
    whole.add(*readings[199])
    for t, reading in readings[200:]:
        lean.add(t, reading)
        whole.add(t, reading)
        for window in (60.0, 300.0):
            got, want = lean.window(window), whole.window(window)
            assert (got.totals, got.buckets, got.latest) == (want.totals, want.buckets, want.latest)
    totals = lean.window(300.0).totals
    assert totals is not None and totals.drafts > 0 and totals.intervals > 40


@pytest.mark.parametrize("lean", [False, True])
def test_a_window_anchored_at_a_change_sums_the_intervals_since_it(lean: bool) -> None:
    """``since`` (a configuration change's opening reading) cuts a window: its sums are those
    of the window that starts exactly there, whatever the window's length, kept as readings
    arrive and leave the retention; a window that starts after it is its own."""
    readings = _readings(11, 400, speculating=True)
    history = LoadHistory(retention=600.0, lean=lean)
    since = readings[200][0]
    for index, (t, counters) in enumerate(readings):
        history.add(t, counters)
        if index < 200:
            continue
        elapsed = t - since
        for seconds in (60.0, 300.0, 900.0):
            cut = history.speeds(seconds, since=since)
            exact = history.speeds(min(seconds, elapsed), since=None) if elapsed else None
            # Step time and time per output token alike (the requests-running fallback of
            # the concurrency leaves out the gauge read at ``since``: the old configuration's).
            if cut is None or exact is None:
                assert cut is exact, (index, seconds)
            else:
                assert cut[1:] == pytest.approx(exact[1:], rel=1e-9), (index, seconds)
            intervals, _, _ = history.counts(seconds, since=since)
            assert intervals <= index - 200
    if not lean:
        window = history.window(900.0, since=readings[390][0])
        assert window.totals is not None and window.totals.intervals <= 9
