"""The cost curve is refitted the moment the set of measured buckets changes
(specmon.load.curve.twin_curve / profile_curve): besides every 8th change of either side, at
once when a bucket of either side passes the thresholds or stops passing them, so the curve
never lags the buckets the windows already compare. The set is kept by each accumulator as a
signature (``CurveAccumulator.measured``, specmon/load/curve_sums.py) brought up to date from
the buckets that changed, and must equal the set made again from every bucket, through every
change: rows, rows in older slots, slots expiring, a restore."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

import pytest

from specmon.answer import curve_crossover, read_curve
from specmon.load.buckets import DEFAULT_SCHEME, Thresholds
from specmon.load.curve import (
    CurveAccumulator,
    SidePoint,
    profile_curve,
    side_points,
    state_from_dict,
    state_to_dict,
    twin_curve,
)
from specmon.load.curve_sums import BucketSums
from tests.test_curve import SECONDS, TOKENS, accumulators, interval

LOOSE = Thresholds(min_engine_steps=50, min_request_steps=100, min_drafts=20, min_intervals=2)


def fresh(acc: CurveAccumulator, thresholds: Thresholds, *, speculative: bool) -> int:
    """The measured set made again from every bucket (what the signature must equal)."""
    points = side_points(acc.buckets(), speculative=speculative, thresholds=thresholds)
    return sum(1 << p.bucket for p in points)


def buckets_of(points: tuple[SidePoint, ...]) -> set[int]:
    return {p.bucket for p in points}


T = TypeVar("T")


class Fits(CurveAccumulator):
    """Counts the curves made (each a fit of both sides)."""

    def __init__(self) -> None:
        super().__init__()
        self.fits = 0

    def memo(self, key: object, make: Callable[[], T]) -> T:
        def counted() -> T:
            self.fits += 1
            return make()

        return super().memo(key, counted)


def test_a_bucket_becoming_measured_is_in_the_curve_at_that_very_scrape() -> None:
    """Loads 1-8 measured, then 16 (past the crossover, 10.9), one scrape of each side at a
    time as the daemon sees them: at the first scrape where bucket 16 passes the thresholds
    on both sides, the curve holds it, the crossover is reported with its range and the read
    at 16 is read off the curve (a bucket it measured), not refused."""
    rng = random.Random(21)
    spec, twin = accumulators((1, 2, 4, 8), seed=21)
    curve = twin_curve(spec, twin)
    assert curve is not None
    assert curve_crossover(curve, tokens_per_step=TOKENS, acceptance_sd=0.005) is None  # pays to 8
    sixteen = DEFAULT_SCHEME.index_of(16)
    t = 12 * 4 * SECONDS
    checked = 0
    for _ in range(30):
        t += SECONDS
        for acc, speculative in ((twin, False), (spec, True)):
            assert acc.add(t, interval(rng, 16, speculative=speculative))
            curve = twin_curve(spec, twin)
            assert curve is not None
            # The curve is the one of the buckets measured now, at every scrape.
            spec_now = side_points(spec.buckets(), speculative=True)
            base_now = side_points(twin.buckets(), speculative=False)
            assert buckets_of(curve.spec_points) == buckets_of(spec_now)
            assert buckets_of(curve.base_points) == buckets_of(base_now)
            if sixteen in buckets_of(spec_now) & buckets_of(base_now):
                checked += 1
                found = curve_crossover(curve, tokens_per_step=TOKENS, acceptance_sd=0.005)
                assert found is not None and found.low is not None and found.high is not None
                assert found.pays_up_to is not None and found.pays_up_to < found.concurrency
                read = read_curve(curve, 16, tokens_per_step=TOKENS, acceptance_sd=0.005)
                assert read is not None, curve
    assert checked > 20  # 16 became measured early and stayed


def test_the_fit_is_made_again_every_8th_change_and_at_each_change_of_the_set() -> None:
    """At one load the curve is refitted every 8th change of either side, as before; a new
    bucket adds one fit of its own when it becomes measured on each side, no more."""
    rng = random.Random(4)
    spec, twin = Fits(), CurveAccumulator()
    t = 0.0
    transitions = 0
    before = (0, 0)
    for n in (4, 4, 4, 16, 16):
        for _ in range(16):
            t += SECONDS
            spec.add(t, interval(rng, n, speculative=True))
            twin.add(t, interval(rng, n, speculative=False))
            twin_curve(spec, twin)
            now = (spec.measured(Thresholds(), speculative=True),
                   twin.measured(Thresholds(), speculative=False))  # fmt: skip
            transitions += now != before
            before = now
    # 80 scrapes, a change of each side at each: 10 keys of the versions >> 3 (both sides
    # move together), and one more fit at most per change of the set: 4, then 16, became
    # measured on each side (on the two sides at the same scrape or not). Far from a fit at
    # every scrape.
    assert 2 <= transitions <= 4
    assert 10 <= spec.fits <= 11 + transitions


def test_the_signature_is_the_measured_set_through_every_change() -> None:
    rng = random.Random(8)
    acc = CurveAccumulator(retention=300.0, slot_seconds=60.0)
    levels = (1, 2, 4, 8, 16, 32)
    t, seen = 0.0, set()
    for step in range(600):
        t += rng.uniform(1.0, 6.0)
        end = t - 70.0 if step % 41 == 40 else t  # now and then a row in an older slot
        # Long stays at a level, a visit elsewhere now and then: buckets become measured
        # and, as their slots expire, stop being measured.
        level = levels[(step // 40) % len(levels)] if step % 7 else rng.choice(levels)
        acc.add(end, interval(rng, level, speculative=step % 50 < 45))
        if step % 3 == 0:  # not asked at every change: changes pile up between asks
            for thresholds in (Thresholds(), LOOSE):
                for speculative in (True, False):
                    got = acc.measured(thresholds, speculative=speculative)
                    assert got == fresh(acc, thresholds, speculative=speculative), step
                    seen.add((thresholds, speculative, got))
        if step % 97 == 96:  # a restore starts with no signature
            acc = CurveAccumulator.from_state(state_from_dict(state_to_dict(acc.state())),
                                              scheme=DEFAULT_SCHEME)  # fmt: skip
    # Buckets came and went: many distinct sets on each side.
    assert len({s for s in seen if s[0] == Thresholds() and s[1]}) >= 6
    acc.expire(t + 10_000.0)  # everything expires: nothing is measured
    assert acc.measured(Thresholds(), speculative=True) == 0


def test_a_bucket_expiring_below_the_thresholds_refits_the_curve() -> None:
    """A bucket whose slots expire stops being measured: the curve drops it at once."""
    rng = random.Random(6)
    spec = CurveAccumulator(retention=120.0, slot_seconds=10.0)
    twin = CurveAccumulator(retention=120.0, slot_seconds=10.0)
    t = 0.0
    for n, count in ((32, 12), (4, 70)):
        for _ in range(count):
            t += SECONDS
            spec.add(t, interval(rng, n, speculative=True))
            twin.add(t, interval(rng, n, speculative=False))
            curve = twin_curve(spec, twin)
            if curve is not None:
                assert buckets_of(curve.spec_points) == buckets_of(
                    side_points(spec.buckets(), speculative=True)
                ), t
    curve = twin_curve(spec, twin)
    assert curve is not None
    assert buckets_of(curve.spec_points) == {DEFAULT_SCHEME.index_of(4)}  # 32 expired


class Levels:
    """A profile's measured levels (the curve's baseline side), fixed."""

    def __init__(self, acc: CurveAccumulator) -> None:
        self._points = side_points(acc.buckets(), speculative=False)

    def baseline_points(self) -> tuple[SidePoint, ...]:
        return self._points


def test_the_profile_curve_is_refitted_when_a_bucket_becomes_measured() -> None:
    rng = random.Random(12)
    _, twin = accumulators((1, 2, 4, 8, 16), seed=12)
    fresh_spec, _ = accumulators((1, 2, 4, 8), seed=12)
    profile = Levels(twin)
    t = 12 * 4 * SECONDS
    for _ in range(12):
        t += SECONDS
        assert fresh_spec.add(t, interval(rng, 16, speculative=True))
        curve = profile_curve(fresh_spec, profile)
        assert curve is not None
        assert buckets_of(curve.spec_points) == buckets_of(
            side_points(fresh_spec.buckets(), speculative=True)
        )
    assert curve is not None and DEFAULT_SCHEME.index_of(16) in buckets_of(curve.spec_points)


def test_a_scrape_checks_only_the_bucket_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The signature's cost: one bucket's thresholds checked per row at one load, not every
    retained bucket's."""
    spec, _ = accumulators((1, 2, 4, 8, 16, 32), seed=3)
    thresholds = Thresholds()
    spec.measured(thresholds, speculative=True)
    calls = []
    original = BucketSums.measured_totals

    def counted(self: BucketSums, thresholds: Thresholds, *, speculative: bool) -> object:
        calls.append(self.bucket)
        return original(self, thresholds, speculative=speculative)

    monkeypatch.setattr(BucketSums, "measured_totals", counted)
    rng = random.Random(3)
    t = 12 * 6 * SECONDS
    for _ in range(20):
        t += SECONDS
        spec.add(t, interval(rng, 8, speculative=True))
        spec.measured(thresholds, speculative=True)
        spec.measured(thresholds, speculative=True)  # asked again: nothing to check
    assert calls == [DEFAULT_SCHEME.index_of(8)] * 20
