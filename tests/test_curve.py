"""The cost curve (specmon/load/curve.py) against a constructed truth: intervals drawn from the
demo's load model (specmon/sim/load_model.py) with noisy steps and drafts drawn chain by chain,
so the speed-up, the draft cost and the crossover at every load are known."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from specmon.engines.model import SpecCounters
from specmon.load import LoadHistory, LoadInterval
from specmon.load.curve import (
    CurveAccumulator,
    CurveRead,
    acceptance_log_sd,
    fit_shape,
    side_points,
    state_from_dict,
    state_to_dict,
    twin_curve,
)
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


def test_a_read_between_buckets_is_within_5_percent_and_its_interval_holds_the_truth() -> None:
    # Levels 1, 2, 4, 16, 32: bucket 8 never measured (as in the demo's first cycle).
    spec, twin = accumulators((1, 2, 4, 16, 32), seed=3)
    curve = twin_curve(spec, twin)
    assert curve is not None
    for n in (6, 8, 10, 12):
        read = curve.read(n, tokens_per_step=TOKENS, acceptance_sd=0.005)
        assert isinstance(read, CurveRead), read
        assert read.how == "interpolated"
        assert read.speedup == pytest.approx(truth(n), rel=0.05), n
        assert read.interval is not None and read.interval[0] <= truth(n) <= read.interval[1], (
            n,
            read,
        )
        assert read.draft_cost == pytest.approx(MODEL.draft_cost(n, K), abs=0.02)


def test_the_curve_extrapolates_one_bucket_and_no_further() -> None:
    spec, twin = accumulators((1, 2, 4, 8), seed=5)
    curve = twin_curve(spec, twin)
    assert curve is not None
    # 8 is bucket "8" = [6, 12); 13 is in the next bucket, "16": extrapolated, marked.
    read = curve.read(13, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert isinstance(read, CurveRead) and read.how == "extrapolated"
    inside = curve.read(8, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert isinstance(inside, CurveRead)
    assert read.interval is not None and inside.interval is not None
    assert read.interval[1] - read.interval[0] > inside.interval[1] - inside.interval[0]
    # 30 is in bucket "32", two past: no read, a reason.
    beyond = curve.read(30, tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert isinstance(beyond, str) and "more than a bucket above" in beyond


def test_the_crossover_comes_from_the_curve_with_a_range_that_holds_the_truth() -> None:
    truth_n = MODEL.crossover(K, TOKENS)
    assert truth_n is not None
    assert truth_n == pytest.approx(10.88, abs=0.01)
    spec, twin = accumulators((1, 2, 4, 8, 16, 32), seed=11)
    curve = twin_curve(spec, twin)
    assert curve is not None
    found = curve.crossover(tokens_per_step=TOKENS, acceptance_sd=0.005)
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
    wide = gap.crossover(tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert wide is not None and wide.note is not None and "1 bucket apart" in wide.note


def test_never_paid_is_the_lowest_measured_load() -> None:
    spec, twin = accumulators((16, 32), seed=2)
    curve = twin_curve(spec, twin)
    assert curve is not None
    found = curve.crossover(tokens_per_step=TOKENS, acceptance_sd=0.005)
    assert found is not None and found.pays_up_to is None
    assert found.concurrency == pytest.approx(16, rel=0.01)


def test_the_interval_covers_the_truth_at_its_stated_rate() -> None:
    """Coverage over independent runs: a 95 % interval must hold the truth in most of them (at
    least 85 of 100 here; it is 95 in expectation, and a read between buckets is widened by the
    shape's disagreement with straight lines)."""
    inside = 0
    for seed in range(100):
        spec, twin = accumulators((1, 4, 16, 32), seed=1000 + seed, per_level=4)
        curve = twin_curve(spec, twin)
        assert curve is not None
        counters = spec.buckets()[0].totals.counters
        sd = acceptance_log_sd(counters, tokens_per_draft=K)
        assert sd is not None
        read = curve.read(8, tokens_per_step=TOKENS, acceptance_sd=sd)
        assert isinstance(read, CurveRead)
        assert read.interval is not None
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


def test_a_thin_bucket_reads_the_curve_and_keeps_the_twin_basis() -> None:
    """The window's bucket at load 8 has one interval (too little): the verdict is read off
    the curve measured at 1, 4 and 16, on the twin basis, marked interpolated, within 5 % of
    the truth and with the truth inside its interval; it was the configured c before."""
    from specmon.daemon.load_view import load_figures
    from specmon.daemon.verdict import Evidence, verdict
    from specmon.report import report_from_counters

    rng = random.Random(21)
    spec_items, twin_items = [], []
    t = 0.0
    for n in (1, 4, 16, 8):
        for _ in range(10 if n != 8 else 1):
            t += SECONDS
            spec_items.append((t, interval(rng, n, speculative=True)))
            twin_items.append((t, interval(rng, n, speculative=False)))
    spec, twin = LoadHistory(retention=600), LoadHistory(retention=600)
    _feed(spec, spec_items)
    _feed(twin, twin_items)
    window, twin_window = spec.window(30), twin.window(30)
    acceptance = sum((i for _, i in spec_items[-10:]), start=spec_items[-11][1]).counters
    load = load_figures(window, acceptance=acceptance, chain_length=K, baseline="twin",
                        twin=twin_window)  # fmt: skip
    assert load is not None and load.read == "interpolated", load
    assert load.bucket == "8" and load.reason is not None and "too little data" in load.reason
    report = report_from_counters(acceptance, draft_cost=0.1, configured_chain_length=K)
    answer = verdict(report, load, engine_draft_cost=None, draft_cost_configured=True)
    assert answer is not None and answer.basis is Evidence.TWIN
    assert answer.read == "interpolated" and "interpolated" in answer.detail
    assert answer.speedup == pytest.approx(truth(8), rel=0.05)
    assert answer.speedup_interval is not None
    low, high = answer.speedup_interval
    assert low <= truth(8) <= high
    # The configured c's verdict gets an interval too: from the acceptance alone.
    alone = verdict(report, None, engine_draft_cost=None, draft_cost_configured=True)
    assert alone is not None and alone.basis is Evidence.CONFIGURED
    assert alone.speedup_interval is not None
    assert alone.speedup_interval[0] < (alone.speedup or 0) < alone.speedup_interval[1]


def test_past_the_next_bucket_the_verdict_falls_back_saying_why() -> None:
    """Measured at 1 and 2 only: a load of 16 is two buckets past the curve, so the verdict
    falls back to the configured c, its detail saying so and why."""
    from specmon.daemon.load_view import load_figures
    from specmon.daemon.verdict import Evidence, verdict
    from specmon.report import report_from_counters

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
    acceptance = spec_items[-1][1].counters
    load = load_figures(spec.window(30), acceptance=acceptance, chain_length=K, baseline="twin",
                        twin=twin.window(30))  # fmt: skip
    assert load is not None and load.realized_speedup is None and load.read is None
    assert load.reason is not None and "more than a bucket above" in load.reason
    report = report_from_counters(acceptance, draft_cost=0.1, configured_chain_length=K)
    answer = verdict(report, load, engine_draft_cost=None, draft_cost_configured=True)
    assert answer is not None and answer.basis is Evidence.CONFIGURED
    assert "more than a bucket above" in answer.detail
