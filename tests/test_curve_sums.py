"""The cost curve's memory (specmon/load/curve_sums.py): a bucket's sums read at every scrape
come from a kept sum of its older slots plus its newest, and must equal, to the last bit, the
sum of every retained slot made again in order, through every change that moves them: a new
slot, a row landing in an older slot (the clock went back), a slot expiring, a restore."""

from __future__ import annotations

import random

import pytest

from specmon.load.curve import CurveAccumulator, state_from_dict, state_to_dict
from specmon.load.curve_sums import CurveState
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


def test_the_slot_walk_tells_a_walk_from_noise() -> None:
    """Issue 63's drift between epochs: the slope of the mean squared difference per slot of
    lag is the variance a walk gains per slot, near 0 for independent noise; an epoch has
    none."""
    from specmon.load.curve_sums import _walk

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
