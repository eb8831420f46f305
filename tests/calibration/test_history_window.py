"""Issue 63: a ``history`` verdict takes its current side from the window it is read for,
not from the epoch's whole-life sums, so a 5m verdict follows an acceptance collapse in its
last 5 minutes; "did the change help?" keeps the epoch-long ratio. In-process, seeded, with
the truth of the generator (tests/support/calibration.py)."""

from __future__ import annotations

import numpy as np
import pytest

from specmon.answer import read_comparison
from specmon.engines import SpecCounters
from specmon.load import DEFAULT_SCHEME, BucketTotals, LoadWindow
from specmon.load.curve import CurveAccumulator
from specmon.load.matched import matched_buckets
from tests.support.calibration import Engine, K, Scenario, truth

#: Before the collapse, and after: alpha 0.15 reads 0.98x, below break-even.
HEALTHY, COLLAPSED = (0.75,), (0.15,)


def _window_counters(
    snaps: list[tuple[float, SpecCounters]], now: float, seconds: float
) -> SpecCounters:
    last = snaps[-1][1]
    first = [c for t, c in snaps if t <= now - seconds + 1e-9][-1]
    return SpecCounters(
        last.drafts - first.drafts, last.draft_tokens - first.draft_tokens,
        last.accepted_tokens - first.accepted_tokens,
        tuple(a - b for a, b in zip(last.accepted_per_position, first.accepted_per_position,
                                    strict=True)),
    )  # fmt: skip


def _run(seed: int) -> tuple[dict[float, tuple[float, tuple[float, float] | None]], float]:
    """An hour without speculation (the past epoch's sums, laid out as EpochCurves.past
    lays them), then 30 minutes with it whose last 5 collapse; each window's read, and the
    epoch-long ratio."""
    scenario = Scenario("history", warmup_loads=())
    rng = np.random.default_rng(seed)
    base = Engine.make(False, scenario, rng)
    epoch = CurveAccumulator.for_epoch()
    for _ in range(360):
        base.scrape(10.0, 8.0)
        assert base.history.whole_row is not None
        epoch.add_row(base.history.whole_row)
    buckets = tuple(
        BucketTotals(DEFAULT_SCHEME.buckets[b.bucket], b.totals) for b in epoch.buckets()
    )
    past = LoadWindow(None, buckets, None, None, epoch)
    spec = Engine.make(True, scenario, rng)
    now_epoch = CurveAccumulator.for_epoch()
    snaps = [(0.0, spec.side.spec_counters())]
    for i in range(180):
        spec.scrape(10.0, 8.0, classes=COLLAPSED if i >= 150 else None)
        assert spec.history.whole_row is not None
        now_epoch.add_row(spec.history.whole_row)
        snaps.append((spec.now, spec.side.spec_counters()))
    reads = {}
    for seconds in (60.0, 300.0, 900.0):
        read = read_comparison(
            spec.history.window(seconds), base=past,
            acceptance=_window_counters(snaps, spec.now, seconds), survival=(),
            drafted_per_draft=float(K), chain_length=K, at=8.0,
        )  # fmt: skip
        assert read.state == "measured" and read.speedup is not None, read
        reads[seconds] = (read.speedup, read.interval)
    (change,) = matched_buckets(epoch, now_epoch, older_speculative=False, newer_speculative=True)
    return reads, change.speedup


@pytest.mark.parametrize("seed", range(12))
def test_a_5m_history_verdict_follows_a_collapse_in_its_last_5_minutes(seed: int) -> None:
    reads, epoch_long = _run(seed)
    after = truth(COLLAPSED)
    speedup, interval = reads[300.0]
    assert abs(speedup / after - 1) < 0.10, (speedup, after)
    assert speedup < 1.0 + 0.05  # below or at break-even: SpecmonBelowBreakEven can fire
    assert interval is not None
    # The 1m window reads the collapse too; the 15m one mixes 10 healthy minutes in.
    assert abs(reads[60.0][0] / after - 1) < 0.10
    assert reads[900.0][0] > 1.3 * speedup
    # "Did the change help?" keeps the epoch-long ratio: 25 healthy minutes of 30.
    healthy = truth(HEALTHY)
    assert healthy > epoch_long > 2 * after, (epoch_long, healthy, after)
