"""The cost curve's memory (specmon/load/curve_sums.py): a bucket's sums read at every scrape
come from a kept sum of its older slots plus its newest, and must equal, to the last bit, the
sum of every retained slot made again in order, through every change that moves them: a new
slot, a row landing in an older slot (the clock went back), a slot expiring, a restore."""

from __future__ import annotations

import itertools
import math
import random
from array import array
from dataclasses import replace

import pytest

from specmon.load.buckets import DEFAULT_SCHEME
from specmon.load.curve import CurveAccumulator, state_from_dict, state_to_dict
from specmon.load.curve_sums import CurveState, ar1_mean_factor
from tests.test_curve import interval

LEVELS = (1, 2, 4, 8, 16)


def summed_again(acc: CurveAccumulator) -> dict[int, tuple[float, ...]]:
    """Every bucket's sums made from all its retained slots, oldest first (what a read
    without a kept sum computes)."""
    out: dict[int, list[float]] = {}
    for slot in acc.state().slots:
        into = out.get(slot.bucket)
        if into is None:
            out[slot.bucket] = list(slot.values)
            continue
        if len(into) < len(slot.values):
            into.extend([0.0] * (len(slot.values) - len(into)))
        for i, value in enumerate(slot.values):
            into[i] += value
    return {bucket: tuple(values) for bucket, values in out.items()}


def read(acc: CurveAccumulator) -> dict[int, tuple[float, ...]]:
    """Every bucket through ``bucket()`` (the scrape's read), checked against ``buckets()``."""
    found = {b.bucket: b.values for b in acc.buckets()}
    for bucket in range(len(found) + 8):
        one = acc.bucket(bucket)
        assert (one.values if one is not None else None) == found.get(bucket)
    return found


class Counting(CurveAccumulator):
    """Counts how often a bucket's older slots are summed again."""

    def __init__(self, *, retention: float, slot_seconds: float) -> None:
        super().__init__(retention=retention, slot_seconds=slot_seconds)
        self.resummed = 0

    def _sum_before(self, index: int, last: tuple[int, int]) -> list[float] | None:
        self.resummed += 1
        return super()._sum_before(index, last)


def test_every_read_equals_the_slots_summed_again_through_every_change() -> None:
    rng = random.Random(5)
    acc = CurveAccumulator(retention=300.0, slot_seconds=60.0)
    t, late = 0.0, 0
    for step in range(400):
        t += rng.uniform(1.0, 9.0)
        end = t
        if step % 37 == 36:  # a row in an older slot than its bucket's newest
            end, late = t - 70.0, late + 1
        level = LEVELS[(step // 15) % len(LEVELS)] if step % 5 else rng.choice(LEVELS)
        speculative = step % 90 < 80  # some rows without positions: the width varies
        acc.add(end, interval(rng, level, speculative=speculative))
        assert read(acc) == summed_again(acc), f"step {step}"
        if step % 50 == 49:  # a restore starts from the state, with no kept sum
            acc = CurveAccumulator.from_state(state_from_dict(state_to_dict(acc.state())))
            assert read(acc) == summed_again(acc)
    assert late > 5
    # Slots expired all along: the retention kept at most 6 of them.
    assert {round(s.start) for s in acc.state().slots} <= {
        60 * i for i in range(int(t // 60) - 5, int(t // 60) + 1)
    }


def test_the_older_slots_are_summed_again_only_when_they_change() -> None:
    rng = random.Random(9)
    acc = Counting(retention=3600.0, slot_seconds=60.0)
    t = 0.0
    for _ in range(119):  # 10 minutes at one load: 10 slots of one bucket
        t += 5.0
        acc.add(t, interval(rng, 4, speculative=True))
        read(acc)
    assert len(acc.state().slots) == 10
    assert acc.resummed == 0  # every new slot extended the kept sum
    acc.add(t - 200.0, interval(rng, 4, speculative=True))  # an older slot changes
    read(acc)
    assert acc.resummed == 1
    acc.expire(t + 3600.0 - 120.0)  # the 7 oldest slots expire
    assert len(acc.state().slots) == 3
    read(acc)
    assert acc.resummed == 2
    assert read(acc) == summed_again(acc)


def test_a_restored_state_reads_the_same_as_the_one_saved() -> None:
    rng = random.Random(11)
    acc = CurveAccumulator()
    for i in range(200):
        acc.add(7.0 * i, interval(rng, LEVELS[i % len(LEVELS)], speculative=True))
    state = acc.state()
    # A state made field by field (as the state file's reader does), not the saved object.
    restored = CurveAccumulator.from_state(
        CurveState(state.retention, state.slot_seconds, tuple(state.slots))
    )
    assert read(restored) == read(acc) == summed_again(acc)


def test_a_weeks_retention_keeps_every_interval_in_a_days_slots() -> None:
    """Issue 61: curve_retention 7d cost 8 MB an accumulator (10,000 one-minute slots of
    about 800 bytes, and the slot cap cut the week to 6.9 days). Slots now last a 1,440th of
    a retention past a day: a week in 1,441 slots a bucket, every interval of it kept."""
    from specmon.load.curve_sums import SLOTS_PER_RETENTION, retention_bytes
    from specmon.load.interval import LoadInterval

    week = 7 * 86400.0
    acc = CurveAccumulator(retention=week)
    interval = LoadInterval(
        request_steps=400.0, decode_seconds=8.0, decode_tokens=1600.0, engine_steps=100.0,
        slot_steps=400.0, drafts=300, draft_tokens=1200, accepted_tokens=500,
        accepted_per_position=(200, 150, 100, 50), seconds=60.0,
    )  # fmt: skip
    minutes = int(week // 60)
    for i in range(minutes):
        acc.add(60.0 * i + 30.0, interval)
    assert len(acc.state().slots) <= SLOTS_PER_RETENTION + 1
    (bucket,) = acc.buckets()
    assert bucket.totals.intervals >= minutes - 7  # the oldest slot may have gone
    assert retention_bytes(week) < 600_000  # 1,441 slots of 400 bytes


def test_the_ar1_factor_of_a_mean_and_the_slot_drift() -> None:
    """Issue 63's drift term: Var(mean of w AR(1) steps) / Var(one step), and a bucket's
    spread between minute slots (none on an epoch's single slot)."""
    from specmon.load.curve_sums import ar1_mean_factor

    assert ar1_mean_factor(1.0, 0.9) == 1.0 and ar1_mean_factor(0.5, 0.0) == 1.0
    assert ar1_mean_factor(10.0, 0.0) == pytest.approx(0.1)
    # rho 0.5 over 4 steps: (1/4)(1 + 2 (3/4 0.5 + 2/4 0.25 + 1/4 0.125)) = 0.515625.
    assert ar1_mean_factor(4.0, 0.5) == pytest.approx(0.515625)
    assert ar1_mean_factor(100.0, 0.9) > 10 * ar1_mean_factor(100.0, 0.0)
    epoch = CurveAccumulator.for_epoch()
    assert epoch.slot_drift(3) is None


def _reference_rho(series: list[tuple[int, float]]) -> float:
    """The slot drift's autocorrelation as first written (pairs of (slot, value))."""
    from specmon.load.curve_sums import MIN_DRIFT_SLOTS

    m = len(series)
    mean = sum(x for _, x in series) / m
    dev = [(i, x - mean) for i, x in series]
    total = sum(d * d for _, d in dev)
    pairs = [(a[1], b[1]) for a, b in itertools.pairwise(dev) if b[0] == a[0] + 1]
    if total <= 0 or len(pairs) < MIN_DRIFT_SLOTS - 1:
        return 0.0
    rho = min(max(sum(a * b for a, b in pairs) / len(pairs) / (total / m), 0.0), 0.97)
    return min(rho + 1.96 * math.sqrt((1.0 - rho * rho) / len(pairs)), 0.97)


def test_the_drift_read_from_lists_is_the_drift_of_pairs_bit_for_bit() -> None:
    """The slot drift read from parallel lists (each read of each scrape) equals, bit for
    bit, the computation as first written on (slot, value) pairs: gaps between slots, flat
    series, short ones."""
    from specmon.load.slot_drift import MIN_DRIFT_SLOTS, SlotDrift, _drift_of, _rho

    rng = random.Random(3)
    for _ in range(2000):
        m = rng.randint(1, 40)
        slots = sorted(rng.sample(range(60), m)) if rng.random() < 0.5 else list(range(m))
        steps = [rng.gauss(0.0, rng.choice([0.0, 0.01, 0.3])) for _ in range(m)]
        tokens = [rng.gauss(1.0, 0.05) for _ in range(m)]
        pairs = list(zip(slots, steps, strict=True))
        assert _rho(pairs) == _reference_rho(pairs)
        got = _drift_of(slots, steps, tokens, 60.0)
        if m < MIN_DRIFT_SLOTS:
            assert got is None
            continue
        differences = sorted(abs(b - a) for a, b in itertools.pairwise(tokens))
        middle = differences[len(differences) // 2]
        tokens_variance = (middle / (0.6745 * math.sqrt(2.0))) ** 2
        tokens_rho = _reference_rho(list(zip(slots, tokens, strict=True)))
        mean = sum(steps) / m
        total = sum((x - mean) ** 2 for x in steps)
        if total <= 0:
            assert got == SlotDrift(0.0, 0.0, m, 60.0, tokens_variance, tokens_rho)
            continue
        rho = _reference_rho(pairs)
        shrink = max(1.0 - ar1_mean_factor(float(m), rho), 0.2)
        assert got == SlotDrift(total / m / shrink, rho, m, 60.0, tokens_variance, tokens_rho)


def test_the_slot_drift_kept_between_intervals_is_the_drift_made_afresh() -> None:
    """Each read keeps a bucket's logs before its newest slot and their sums (only the newest
    changes from one interval to the next): after intervals in order, out-of-order ones and
    slots expiring among them, every bucket's drift equals the drift read as first written
    (the median exactly, the sums' figures to a few units in the last place)."""
    rng = random.Random(11)
    acc = CurveAccumulator(retention=1800.0, slot_seconds=60.0)
    end = 0.0
    for step in range(1500):
        late = rng.random() < 0.03 and end > 300.0  # an interval ending in an older slot
        at = end - rng.uniform(60.0, 240.0) if late else end + rng.uniform(4.0, 6.0)
        end = end if late else at
        acc.add(at, interval(rng, rng.choice((2, 4, 8, 16)), speculative=True))
        if step % 7 and step < 1400:
            continue
        for bucket in range(8):
            got, first = acc.slot_drift(bucket), _drift_as_first_read(acc, bucket)
            assert _same_drift(got, first), (step, bucket, got, first)
    assert any(acc.slot_drift(b) is not None for b in range(8))


def test_the_newest_slot_added_to_the_sums_is_the_drift_of_the_whole_series() -> None:
    """A read adds the newest slot to the closed slots' sums (O(1), issue 62's cost): the
    same drift as the pass over every slot, over gaps between slots, flat series (read with
    the pass) and short ones; the median of the differences exactly."""
    from specmon.load.slot_drift import _Closed, _drift_of

    rng = random.Random(5)
    for _ in range(3000):
        m = rng.randint(1, 60)
        slots = sorted(rng.sample(range(90), m)) if rng.random() < 0.5 else list(range(m))
        spread = rng.choice([0.0, 1e-9, 0.01, 0.3])
        level = rng.choice([0.0, -3.9, 0.7])
        steps = [level + rng.gauss(0.0, spread) for _ in range(m)]
        tokens = [rng.gauss(1.0, rng.choice([0.0, 0.05])) for _ in range(m)]
        closed = _Closed(array("q", slots[:-1]), array("d", steps[:-1]), array("d", tokens[:-1]))
        got = closed.with_newest(slots[-1], steps[-1], tokens[-1], 60.0)
        assert _same_drift(got, _drift_of(slots, steps, tokens, 60.0)), (m, spread, level)


def _same_drift(got: object, first: object) -> bool:
    """The same drift: slots and the median's variance exactly; what a window reads off it
    (:meth:`SlotDrift.window_log_var`, half a slot to 120; within _FLAT) and, for one not
    flat, its variance and correlations to a few units in the last place (the newest slot
    added to the closed slots' sums: a different order of the same additions); a flat one
    (below ``_FLAT`` a slot: rounding) reads as flat."""
    from specmon.load.slot_drift import _FLAT, SlotDrift

    if not isinstance(got, SlotDrift) or not isinstance(first, SlotDrift):
        return got == first
    if (got.slots, got.slot_seconds, got.tokens_variance) != (
        first.slots, first.slot_seconds, first.tokens_variance
    ):  # fmt: skip
        return False
    windows = [s * got.slot_seconds for s in (0.5, 1.0, 3.0, 15.0, 120.0)]
    if [got.window_log_var(s) for s in windows] != pytest.approx(
        [first.window_log_var(s) for s in windows], rel=1e-9, abs=_FLAT
    ):
        return False
    if first.variance >= _FLAT:
        return (got.variance, got.rho) == pytest.approx((first.variance, first.rho), rel=1e-9)
    return got.variance == 0.0 and got.rho == 0.0


def _drift_as_first_read(acc: CurveAccumulator, index: int) -> object:
    """:meth:`CurveAccumulator.slot_drift` as first written: every slot looked up and its
    logs taken again at each read."""
    from specmon.load.curve_sums import _DS, _DT, _RS
    from specmon.load.slot_drift import _drift

    last = acc._last.get(index)
    if last is None or not acc._slots:
        return None
    first = next(iter(acc._slots))[0]
    steps, tokens = [], []
    for slot in range(min(first, last[0]), last[0] + 1):
        values = acc._slots.get((slot, index))
        if values is not None and values[_RS] > 0 and values[_DT] > 0 and values[_DS] > 0:
            steps.append((slot, math.log(values[_DS] / values[_RS])))
            tokens.append(math.log(values[_DT] / values[_RS]))
    return _drift(steps, tokens, acc._slot)


def test_the_slot_walk_tells_a_walk_from_noise() -> None:
    """Issue 63's drift between epochs: the slope of the mean squared difference per slot of
    lag is the variance a walk gains per slot, near 0 for independent noise; an epoch has
    none."""
    from specmon.load.slot_drift import _walk

    rng = random.Random(7)
    walks, noises = [], []
    for _ in range(200):
        level, series, noise = 0.0, [], []
        for i in range(30):
            level += rng.gauss(0, 0.01)
            series.append((i, level))
            noise.append((i, rng.gauss(0, 0.01)))
        walk, flat = _walk(series, 60.0), _walk(noise, 60.0)
        assert walk is not None and flat is not None and walk.span == 30
        walks.append(walk.slope)
        noises.append(flat.slope)
    walks.sort()
    noises.sort()
    # The walk's increments have variance 1e-4 a slot: read within a factor of 2 mostly
    # (30 slots of a walk carry few independent long differences).
    assert 0.5e-4 < walks[100] < 1.5e-4 and walks[20] > 0.2e-4
    # Noise of variance 1e-4 a slot: a slope of a few percent of that at the median.
    assert noises[100] < 0.1e-4
    assert _walk([(i, 0.0) for i in range(5)], 60.0) is None
    assert CurveAccumulator.for_epoch().slot_walk(3) is None


def test_the_drift_pooled_over_buckets_reads_the_machines_variance() -> None:
    """Issue 63: a bucket a cycling load visits once a cycle has too few slots of its own
    for a drift; the machine's drift, the same at every load, pools over the buckets: each
    bucket's slots about its own mean, over the buckets' degrees of freedom."""
    from specmon.load.slot_drift import pooled_drift

    rng = random.Random(11)
    found = []
    for _ in range(300):
        series = []
        for bucket in range(5):
            slots = [bucket + 7 * j for j in range(3)]  # three visits, never adjacent
            steps = [math.log(0.01 * (1 + bucket)) + rng.gauss(0, 0.03) for _ in slots]
            series.append((slots, steps, [0.5] * len(slots)))
        drift = pooled_drift(series, 60.0)
        assert drift is not None and drift.slots == 15 and drift.rho == 0.0
        found.append(drift.variance)
    found.sort()
    # Independent slots of sd 3 %: variance 9e-4, read without the buckets' levels (their
    # step times differ by 5x) and without the shrink of deviations about a mean of three.
    assert 0.8e-3 < found[150] < 1.0e-3
    assert sum(found) / len(found) == pytest.approx(9e-4, rel=0.1)
    # Too few degrees of freedom (two buckets of two slots, one of one): none.
    few = [([0, 5], [0.1, 0.2], [0.5, 0.5]), ([1, 6], [0.3, 0.1], [0.5, 0.5]), ([2], [0.0], [0.5])]
    assert pooled_drift(few, 60.0) is None
    flat = [([0, 5, 9], [0.1] * 3, [0.5] * 3), ([1, 6, 8], [0.2] * 3, [0.5] * 3)] * 2
    drift = pooled_drift(flat, 60.0)
    assert drift is not None and drift.variance == 0.0


def test_a_cycling_load_reads_the_pooled_drift_where_a_bucket_has_too_few_slots() -> None:
    """The accumulator's pooled drift: made from complete slots (the newest minute, still
    filling, left out), present while a bucket's own is not, none on an epoch."""
    rng = random.Random(3)
    acc = CurveAccumulator(retention=3600.0, slot_seconds=60.0)
    loads = (2, 4, 16, 8)
    end = 0.0
    for _ in range(4):  # four cycles of 30 s a load, 15 s intervals: 8 minutes
        for n in loads:
            for _ in range(2):
                end += 15.0
                sample = interval(rng, n, speculative=False)
                drifted = sample.decode_seconds * (1 + rng.gauss(0, 0.03))
                acc.add(end, replace(sample, decode_seconds=drifted))
    index = DEFAULT_SCHEME.index_of(16)
    assert acc.slot_drift(index) is None  # 4-5 slots of its own
    pooled = acc.pooled_drift()
    assert pooled is not None and 0 < pooled.variance < 0.01
    assert pooled.slots < sum(1 for s in acc.state().slots)  # the newest minute left out
    assert acc.pooled_drift() is pooled  # kept until a slot changes
    assert CurveAccumulator.for_epoch().pooled_drift() is None


def test_a_sliver_of_a_visit_does_not_count_in_the_pooled_drift() -> None:
    """A slot holding a phase's last seconds (one interval, here straddling a change of load
    at three times the step time) is no batch mean: only slots with at least half the
    intervals of the bucket's fullest count (the demo without noise read 14-35 % with them)."""
    rng = random.Random(5)
    acc = CurveAccumulator(retention=3600.0, slot_seconds=60.0)

    def visit(start: float, n: int, count: int, factor: float = 1.0) -> None:
        for i in range(count):
            sample = interval(rng, n, speculative=False)
            acc.add(
                start + 15.0 * (i + 1) - 1.0,
                replace(sample, decode_seconds=sample.decode_seconds * factor),
            )

    for minute in (0, 2, 4, 6):
        visit(60.0 * minute, 2, 4)
        visit(60.0 * minute + 60.0, 16, 4)
    visit(60.0 * 9, 2, 1, factor=3.0)  # the sliver
    visit(60.0 * 12, 16, 1)  # the newest minute, still filling
    pooled = acc.pooled_drift()
    assert pooled is not None and pooled.variance < 1e-3, pooled
    assert pooled.slots == 8
