"""Issue 63: SpecmonChangeRegressed's condition (the upper bound of the change's speed-up
below 0.95, deploy/prometheus/specmon-alerts.rules.yml) on a server whose speed drifts
slowly across two 1-hour epochs at 8 requests, scraped every 30 s: a change that changed
nothing, and a change that made each step 10 % slower (truth 0.91x). The condition is read
at the end of the new epoch's hour, as the alert reads it after its 30 minutes' ``for``.

The drift: AR(1) of the step time, correlation 0.999 per 30 s (about 8 hours), stationary sd
3 % or 8 %, continuing across the change. Measured, 60 replications each, condition true
(no-op / 10 % regression), at < 0.95 and, for comparison, at the rule's former < 1:

| drift | < 0.95 | < 1 |
|---|---|---|
| none | 0 / 60 of 60 | 0 / 60 of 60 |
| sd 3 % | 0 / 59 | 2 / 60 |
| sd 8 % | 0 / 43 (72 %: short of 80 %) | 16 / 59 |

The change's interval itself does not carry the drift between the epochs (issue 63, left):
the margin holds the no-op's false alarms, at the price of a 10 % regression under 8 % drift
caught in 72 %, not 80 %."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from specmon.load.curve import CurveAccumulator
from specmon.load.matched import matched_buckets
from tests.support.calibration import Engine, Scenario

REPLICATIONS = 60
#: The alert's threshold on the upper bound.
MARGIN = 0.95


def _upper(scenario: Scenario, slowdown: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    engine = Engine.make(True, scenario, rng)
    epochs = []
    for factor in (1.0, slowdown):
        engine.side.scenario = replace(scenario, slowdown=factor)
        epoch = CurveAccumulator.for_epoch()
        for _ in range(120):
            engine.scrape(30.0, 8.0)
            assert engine.history.whole_row is not None
            epoch.add_row(engine.history.whole_row)
        epochs.append(epoch)
    (bucket,) = matched_buckets(*epochs, older_speculative=True, newer_speculative=True)
    assert bucket.interval is not None
    return bucket.interval[1]


def _rate(scenario: Scenario, slowdown: float, margin: float = MARGIN) -> float:
    uppers = [_upper(scenario, slowdown, seed) for seed in range(REPLICATIONS)]
    return sum(u < margin for u in uppers) / REPLICATIONS


#: (name, scenario, no-op firing rate at most, 10 % regression caught at least): issue 63's
#: bar (5 %, 80 %) where met; under 8 % drift the regression is caught in 43 of 60.
CASES = [
    ("no drift", Scenario("no drift", warmup_loads=()), 0.05, 0.80),
    ("drift sd 3 %", Scenario("drift 3", drift_sd=0.03, drift_rho=0.999, warmup_loads=()),
     0.05, 0.80),
    ("drift sd 8 %", Scenario("drift 8", drift_sd=0.08, drift_rho=0.999, warmup_loads=()),
     0.05, 0.70),
]  # fmt: skip


@pytest.mark.parametrize(("scenario", "no_op", "caught"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_no_op_change_and_a_10_percent_regression(
    scenario: Scenario, no_op: float, caught: float
) -> None:
    fired = _rate(scenario, 1.0)
    regressed = _rate(scenario, 1.1)
    assert fired <= no_op, fired
    assert regressed >= caught, regressed


def test_without_the_margin_a_no_op_change_fires_under_drift() -> None:
    """The rule's former threshold (< 1): 16 of 60 no-op changes under 8 % drift."""
    assert _rate(CASES[2][1], 1.0, margin=1.0) > 0.15


def _change(scenario: Scenario, slowdown: float, seed: int) -> tuple[float, float, float]:
    """One change: log of its speed-up, its claimed standard deviation (the interval's), and
    the variance of the server's walk between the two epochs' means read off the newer
    epoch's own minute slots (CurveAccumulator.slot_walk, as the history basis reads it:
    slope x (L_old / 3 + L_new / 3) slots, consecutive epochs)."""
    rng = np.random.default_rng(seed)
    engine = Engine.make(True, scenario, rng)
    epochs: list[CurveAccumulator] = []
    live = CurveAccumulator(retention=3600.0)
    for factor in (1.0, slowdown):
        engine.side.scenario = replace(scenario, slowdown=factor)
        epoch, live = CurveAccumulator.for_epoch(), CurveAccumulator(retention=3600.0)
        for _ in range(120):
            engine.scrape(30.0, 8.0)
            row = engine.history.whole_row
            assert row is not None
            epoch.add_row(row)
            live.add_row(row)
        epochs.append(epoch)
    (bucket,) = matched_buckets(*epochs, older_speculative=True, newer_speculative=True)
    assert bucket.interval is not None
    walk = live.slot_walk(bucket.bucket)
    assert walk is not None
    point = math.log(bucket.speedup)
    return point, (math.log(bucket.interval[1]) - point) / 1.959964, walk.slope * (20 + 20)


def test_what_an_8_percent_drift_between_epochs_allows() -> None:
    """Can a 10 % regression be told from a no-op change under a slow 8 % drift at all?
    Measured over 200 seeds (60 here): the no-op's speed-up spreads with sd 3.1 % in log
    between two consecutive hours (the drift between the epochs: the floor), the interval
    claims 1.0 %; a 10 % regression reads -9.3 % (sd 3.3 %). Knowing that spread, a
    threshold at the no-op's 5 % quantile (-5.0 %) catches 90 % of regressions: the goal
    (<= 5 % / >= 80 %) is reachable, but only just. With the spread as the newer epoch's own
    minute slots read it (the walk, above) added to the interval: upper < 1 fires on 3.5 %
    of no-ops and catches 79 % (200 seeds); upper < 0.95 on that widened interval catches
    33 %: the margin and an honest drift term together are too strict. Today's rule (0.95,
    no drift term): 0.5 % / 74 %."""
    scenario = Scenario("drift 8", drift_sd=0.08, drift_rho=0.999, warmup_loads=())
    no_op = np.array([_change(scenario, 1.0, seed) for seed in range(REPLICATIONS)])
    regressed = np.array([_change(scenario, 1.1, seed) for seed in range(REPLICATIONS)])
    spread = float(no_op[:, 0].std())
    assert 0.02 < spread < 0.045, spread
    assert float(np.median(no_op[:, 1])) < spread / 2  # the interval misses the drift
    threshold = float(np.quantile(no_op[:, 0], 0.05))
    assert float(np.mean(regressed[:, 0] < threshold)) >= 0.8
    # The walk read off the newer epoch's slots is of the drift's size (variance ~ spread^2).
    assert 0.3 < float(np.median(no_op[:, 2])) / spread**2 < 3.0

    def upper(rows: np.ndarray) -> np.ndarray:
        return np.asarray(rows[:, 0] + 1.959964 * np.sqrt(rows[:, 1] ** 2 + rows[:, 2]))

    assert float(np.mean(upper(no_op) < 0.0)) <= 0.10
    assert float(np.mean(upper(regressed) < 0.0)) >= 0.65
    assert float(np.mean(upper(regressed) < math.log(MARGIN))) < 0.5
