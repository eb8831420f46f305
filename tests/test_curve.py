"""The cost curve (specmon/load/curve.py) against a constructed truth: intervals drawn from the
demo's load model (specmon/sim/load_model.py) with noisy steps and drafts drawn chain by chain,
so the speed-up, the draft cost and the crossover at every load are known."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from specmon.answer import (
    Answer,
    Comparison,
    Evidence,
    ReadState,
    Setting,
    curve_crossover,
    decide,
    read_comparison,
    read_concurrency,
    read_curve,
)
from specmon.engines.model import SpecCounters
from specmon.load import LoadHistory, LoadInterval
from specmon.load.curve import (
    CurveAccumulator,
    acceptance_log_sd,
    fit_shape,
    side_points,
    speedup_interval,
    state_from_dict,
    state_to_dict,
    twin_curve,
)
from specmon.report import report_from_counters
from specmon.sim.load_model import DEMO_LOAD_MODEL as MODEL

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
K = 4
TOKENS = 1 + sum(SURVIVAL)
#: Seconds an interval covers, and the per-step coefficient of variation of the step time.
SECONDS, STEP_CV = 2.0, 0.3


def _chains(rng: random.Random, drafts: int) -> list[int]:
    """Drafts drawn chain by chain: accepted per position (position i needs i - 1)."""
    conditional = [SURVIVAL[0]] + [b / a for a, b in itertools.pairwise(SURVIVAL)]
    counts = [0] * K
    alive = drafts
    for i, p in enumerate(conditional):
        # binomial(alive, p) by its normal approximation (exact enough at these counts)
        mean, sd = alive * p, math.sqrt(alive * p * (1 - p))
        alive = min(alive, max(0, round(rng.gauss(mean, sd))))
        counts[i] = alive
    return counts


def interval(rng: random.Random, n: int, *, speculative: bool) -> LoadInterval:
    k = K if speculative else 0
    step = MODEL.step_seconds(n, k)
    steps = max(1, round(SECONDS / step))
    noisy = step * (1 + rng.gauss(0, STEP_CV / math.sqrt(steps)))
    request_steps = n * steps
    if speculative:
        positions = _chains(rng, request_steps)
        accepted = sum(positions)
    else:
        positions, accepted = [], 0
    return LoadInterval(
        request_steps=float(request_steps),
        decode_seconds=request_steps * noisy,
        decode_tokens=float(request_steps + accepted),
        engine_steps=float(steps),
        slot_steps=float(request_steps),
        drafts=request_steps if speculative else 0,
        draft_tokens=K * request_steps if speculative else 0,
        accepted_tokens=accepted,
        accepted_per_position=tuple(positions),
        seconds=SECONDS,
    )


def accumulators(
    levels: tuple[int, ...], *, seed: int, per_level: int = 12
) -> tuple[CurveAccumulator, CurveAccumulator]:
    rng = random.Random(seed)
    spec, twin = CurveAccumulator(), CurveAccumulator()
    t = 0.0
    for n in levels:
        for _ in range(per_level):
            t += SECONDS
            assert spec.add(t, interval(rng, n, speculative=True))
            assert twin.add(t, interval(rng, n, speculative=False))
    return spec, twin


def truth(n: float) -> float:
    return MODEL.speedup(n, K, TOKENS)


def test_the_shape_between_buckets_is_within_5_percent_and_its_interval_holds_the_truth() -> None:
    # Levels 1, 2, 4, 16, 32: bucket 8 never measured (as in the demo's first cycle). The
    # shape there serves the crossover and its range (the answer reads no figure off it).
    spec, twin = accumulators((1, 2, 4, 16, 32), seed=3)
    curve = twin_curve(spec, twin)
    assert curve is not None
    for n in (6, 8, 10, 12):
        speedup = curve.speedup_at(n, TOKENS)
        assert speedup is not None
        assert speedup == pytest.approx(truth(n), rel=0.05), n
        interval = speedup_interval(speedup, curve.log_sd(n, 0.005))
        assert interval is not None and interval[0] <= truth(n) <= interval[1], (n, interval)


def test_the_curve_is_read_only_in_buckets_it_measured() -> None:
    spec, twin = accumulators((1, 2, 4, 8), seed=5)
    curve = twin_curve(spec, twin)
    assert curve is not None
    inside = read_curve(curve, 8, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert inside is not None and inside.interval is not None
    assert inside.speedup == pytest.approx(truth(8), rel=0.05)
    assert inside.interval[0] <= truth(8) <= inside.interval[1]
    assert inside.draft_cost == pytest.approx(MODEL.draft_cost(8, K), abs=0.02)
    # 13 is in the next bucket, "16": never measured, so not read (the demo's first visit to
    # 32 was extrapolated to 0.36x for a truth of 0.69x); nor 30, two buckets past.
    assert read_curve(curve, 13, tokens_per_step=TOKENS, acceptance_sd=0.005) is None
    assert read_curve(curve, 30, tokens_per_step=TOKENS, acceptance_sd=0.005) is None
    # Between measured buckets with one never measured: not read either.
    gap_spec, gap_twin = accumulators((1, 2, 4, 16, 32), seed=3)
    gap = twin_curve(gap_spec, gap_twin)
    assert gap is not None
    assert read_curve(gap, 8, tokens_per_step=TOKENS, acceptance_sd=0.005) is None


def test_the_crossover_comes_from_the_curve_with_a_range_that_holds_the_truth() -> None:
    truth_n = MODEL.crossover(K, TOKENS)
    assert truth_n is not None
    assert truth_n == pytest.approx(10.88, abs=0.01)
    spec, twin = accumulators((1, 2, 4, 8, 16, 32), seed=11)
    curve = twin_curve(spec, twin)
    assert curve is not None
    found = curve_crossover(curve, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert found is not None
    assert found.concurrency == pytest.approx(truth_n, abs=0.5)
    assert found.low is not None and found.high is not None
    assert found.low <= truth_n <= found.high
    assert found.pays_up_to is not None and found.pays_up_to < truth_n < found.costs_from
    assert found.note is None  # buckets 8 and 16 are neighbours
    # With 8 missing, the range says the gap.
    spec, twin = accumulators((1, 2, 4, 16, 32), seed=11)
    gap = twin_curve(spec, twin)
    assert gap is not None
    wide = curve_crossover(gap, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert wide is not None and wide.note is not None and "1 bucket apart" in wide.note


def test_never_paid_is_the_lowest_measured_load() -> None:
    spec, twin = accumulators((16, 32), seed=2)
    curve = twin_curve(spec, twin)
    assert curve is not None
    found = curve_crossover(curve, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert found is not None and found.pays_up_to is None
    assert found.concurrency == pytest.approx(16, rel=0.01)


def test_the_interval_covers_the_truth_at_its_stated_rate() -> None:
    """Coverage over independent runs: a 95 % interval must hold the truth in most of them (at
    least 85 of 100 here; it is 95 in expectation; the method's own assumptions: issue 63's
    harness tests the ones real servers break)."""
    inside = 0
    for seed in range(100):
        spec, twin = accumulators((1, 4, 8, 16, 32), seed=1000 + seed, per_level=4)
        curve = twin_curve(spec, twin)
        assert curve is not None
        counters = spec.buckets()[0].totals.counters
        sd = acceptance_log_sd(counters, tokens_per_draft=K)
        assert sd is not None
        read = read_curve(curve, 8, tokens_per_step=TOKENS, acceptance_sd=sd)
        assert read is not None and read.interval is not None
        inside += read.interval[0] <= truth(8) <= read.interval[1]
    assert inside >= 85


def test_the_acceptance_variance_is_a_chains() -> None:
    """sd of log L from per-position survival equals the spread of L over repeated windows."""
    rng = random.Random(9)
    drafts = 400
    lengths = []
    for _ in range(2000):
        lengths.append(math.log(1 + sum(_chains(rng, drafts)) / drafts))
    mean = sum(lengths) / len(lengths)
    empirical = math.sqrt(sum((x - mean) ** 2 for x in lengths) / (len(lengths) - 1))
    positions = tuple(round(s * drafts) for s in SURVIVAL)
    formula = acceptance_log_sd(
        SpecCounters(drafts=drafts, draft_tokens=K * drafts, accepted_tokens=sum(positions),
                     accepted_per_position=positions),
        tokens_per_draft=K,
    )  # fmt: skip
    assert formula == pytest.approx(empirical, rel=0.1)


def test_the_shape_recovers_the_cost_model() -> None:
    spec, _ = accumulators((1, 2, 4, 8, 16, 32), seed=4)
    shape = fit_shape(side_points(spec.buckets(), speculative=True))
    assert shape is not None
    for n in (1, 3, 10, 24):
        assert shape.at(n) == pytest.approx(MODEL.step_seconds(n, K), rel=0.02)


def test_the_state_is_plain_and_round_trips() -> None:
    spec, _ = accumulators((1, 8), seed=1)
    data = json.loads(json.dumps(state_to_dict(spec.state())))
    again = CurveAccumulator.from_state(state_from_dict(data))
    assert again.buckets() == spec.buckets()
    for bad, says in (
        ({**data, "columns": ["x"]}, "columns"),
        ({**data, "slot_seconds": -1}, "slot_seconds"),
        ({**data, "slots": [{"start": 0, "bucket": -1, "values": []}]}, "bucket"),
        ({**data, "slots": [{"start": 0, "bucket": 0, "values": [1.0]}]}, "values"),
        ({**data, "slots": [{"start": 0, "bucket": 0, "values": [-1.0] * 13}]}, ">= 0"),
    ):
        with pytest.raises(ValueError, match=says):
            state_from_dict(bad)


def test_slots_older_than_the_retention_are_dropped() -> None:
    acc = CurveAccumulator(retention=600, slot_seconds=60)
    rng = random.Random(1)
    acc.add(10.0, interval(rng, 1, speculative=False))
    acc.add(500.0, interval(rng, 8, speculative=False))
    assert {b.label for b in acc.buckets()} == {"1", "8"}
    acc.add(700.0, interval(rng, 8, speculative=False))
    assert {b.label for b in acc.buckets()} == {"8"}
    assert acc.buckets()[0].intervals == 2


def test_a_compared_history_feeds_its_curve_and_a_lean_one_does_not() -> None:
    from specmon.load.counters import LoadCounters

    def reading(t: float) -> LoadCounters:
        return LoadCounters(
            request_steps=100.0 * t, decode_seconds=t, decode_tokens=100.0 * t,
            engine_steps=50.0 * t, slot_steps=100.0 * t,
        )  # fmt: skip

    whole, lean = LoadHistory(retention=60), LoadHistory(retention=60, lean=True)
    for t in range(1, 6):
        whole.add(float(t), reading(float(t)))
        lean.add(float(t), reading(float(t)))
    assert whole.curve is not None and [b.intervals for b in whole.curve.buckets()] == [4]
    assert lean.curve is None
    # A lean history made whole (a target took it as its twin) replays what it held.
    lean.window(30)
    assert lean.curve is not None and [b.intervals for b in lean.curve.buckets()] == [4]


def _feed(history: LoadHistory, items: list[tuple[float, LoadInterval]]) -> None:
    """Cumulative readings whose increases are ``items``' intervals."""
    from specmon.load.counters import LoadCounters

    totals = [0.0] * 5
    drafts = tokens = accepted = 0
    positions = [0] * K
    history.add(0.0, LoadCounters(0.0, 0.0, 0.0, 0.0, 0.0, accepted_per_position=(0,) * K))
    for t, item in items:
        for i, v in enumerate((item.request_steps, item.decode_seconds, item.decode_tokens,
                               item.engine_steps or 0.0, item.slot_steps or 0.0)):  # fmt: skip
            totals[i] += v
        drafts += item.drafts
        tokens += item.draft_tokens
        accepted += item.accepted_tokens
        for i, v in enumerate(item.accepted_per_position):
            positions[i] += v
        rs, ds, dt, es, ss = totals
        history.add(t, LoadCounters(rs, ds, dt, es, ss, drafts=drafts, draft_tokens=tokens,
                                    accepted_tokens=accepted,
                                    accepted_per_position=tuple(positions)))  # fmt: skip


def _answer(spec: LoadHistory, twin: LoadHistory, acceptance: SpecCounters) -> Answer:
    """The answer of a 30 s window of ``spec`` against ``twin`` (the daemon's path)."""
    window, twin_window = spec.window(30), twin.window(30)
    assert window.latest is not None
    read = read_comparison(
        window, base=twin_window, acceptance=acceptance, survival=SURVIVAL,
        drafted_per_draft=None, chain_length=K,
        at=read_concurrency(latest=window.latest.concurrency, window=None),
    )  # fmt: skip
    report = report_from_counters(acceptance, draft_cost=0.1, configured_chain_length=K)
    answer = decide(report, setting=Setting(0.1, True),
                    comparison=Comparison(Evidence.TWIN, "twin", read))  # fmt: skip
    assert answer is not None
    return answer


def test_a_thin_bucket_reads_the_curve_where_its_hour_measured_it() -> None:
    """The window (30 s) holds one interval at load 8, too little; the curve's hour measured
    8 a minute earlier: the answer is read off the curve there, on the twin basis, marked
    interpolated, within 5 % of the truth and with the truth inside its interval."""
    rng = random.Random(21)
    spec_items, twin_items = [], []
    t = 0.0
    for n, count in ((1, 10), (4, 10), (8, 10), (16, 10), (4, 10), (8, 1)):
        for _ in range(count):
            t += SECONDS
            spec_items.append((t, interval(rng, n, speculative=True)))
            twin_items.append((t, interval(rng, n, speculative=False)))
    spec, twin = LoadHistory(retention=600), LoadHistory(retention=600)
    _feed(spec, spec_items)
    _feed(twin, twin_items)
    acceptance = sum((i for _, i in spec_items[-10:]), start=spec_items[-11][1]).counters
    answer = _answer(spec, twin, acceptance)
    assert answer.basis is Evidence.TWIN and answer.state is ReadState.INTERPOLATED, answer
    assert answer.bucket == "8" and answer.progress is not None
    assert "too little data" in answer.progress
    assert answer.speedup == pytest.approx(truth(8), rel=0.05)
    assert answer.interval is not None
    assert answer.interval[0] <= truth(8) <= answer.interval[1]
    # The configured c's answer, with nothing to compare: a guess, with the acceptance's
    # interval alone.
    report = report_from_counters(acceptance, draft_cost=0.1, configured_chain_length=K)
    alone = decide(report, setting=Setting(0.1, True))
    assert alone is not None and alone.basis is Evidence.CONFIGURED
    assert alone.state is ReadState.GUESS and alone.interval is not None
    assert alone.interval[0] < (alone.speedup or 0) < alone.interval[1]


def test_a_load_nothing_measured_is_measuring_not_a_guess() -> None:
    """Measured at 1 and 2 only: at 16 (one interval so far) there is no figure: the answer
    stays on the twin, ``measuring``, says what the bucket lacks, and never falls to the
    configured c (the demo's first visit to 16 read 2.43x at the configured c: truth 0.705)."""
    rng = random.Random(5)
    spec_items, twin_items = [], []
    t = 0.0
    for n in (1, 2, 16):
        for _ in range(10 if n != 16 else 1):
            t += SECONDS
            spec_items.append((t, interval(rng, n, speculative=True)))
            twin_items.append((t, interval(rng, n, speculative=False)))
    spec, twin = LoadHistory(retention=600), LoadHistory(retention=600)
    _feed(spec, spec_items)
    _feed(twin, twin_items)
    answer = _answer(spec, twin, spec_items[-1][1].counters)
    assert answer.basis is Evidence.TWIN and answer.state is ReadState.MEASURING
    assert answer.speedup is None and answer.interval is None and answer.draft_cost is None
    assert answer.best_chain_length is None and answer.bucket == "16"
    assert answer.progress is not None and "too little data" in answer.progress
    # The loads measured keep their figures per load.
    assert {p.label for p in answer.per_load if p.speedup is not None} == {"1", "2"}
