"""Issue 63: the change's acceptance interval ("did the change help?") under chain
acceptance and under request classes that accept differently: how often a no-op change's
interval holds 0, over 200 seeded pairs of 5-minute epochs at 8 requests. Measured: chain
(alpha 0.75) 190 of 200 (a binomial per drafted token: 152); classes alpha 0.9 / 0.5 turning
over every ~30 s, 144 of 200 (binomial: 8): the spread of tokens per step between intervals
takes them as independent, and the classes persist over several intervals (an epoch keeps
no time slots to measure that correlation: left open in issue 63)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specmon.load.curve import CurveAccumulator
from specmon.load.matched import matched_buckets
from tests.support.calibration import Engine, Scenario

REPLICATIONS = 200


def _epoch(scenario: Scenario, rng: np.random.Generator) -> CurveAccumulator:
    engine = Engine.make(True, scenario, rng)
    epoch = CurveAccumulator.for_epoch()
    for _ in range(20):  # 5 minutes, scraped every 15 s
        engine.scrape(15.0, 8.0)
        assert engine.history.whole_row is not None
        epoch.add_row(engine.history.whole_row)
    return epoch


@pytest.mark.parametrize(
    ("classes", "at_least", "binomial_below"),
    [((0.75,), 0.90, 0.85), ((0.9, 0.5), 0.70, 0.10)],
    ids=["chain", "classes"],
)
def test_a_no_op_changes_acceptance_interval_holds_0(
    classes: tuple[float, ...], at_least: float, binomial_below: float
) -> None:
    scenario = Scenario("no-op change", classes=classes, warmup_loads=())
    inside = binomial = 0
    for seed in range(REPLICATIONS):
        rng = np.random.default_rng(seed)
        old, new = _epoch(scenario, rng), _epoch(scenario, rng)
        (bucket,) = matched_buckets(old, new, older_speculative=True, newer_speculative=True)
        low, high = bucket.acceptance_interval or (1.0, -1.0)
        inside += low <= 0.0 <= high
        # What a binomial per drafted token would have said (the interval before issue 63).
        change = bucket.acceptance_change
        assert change is not None
        drafted = [b.values[7] for b in (old.buckets()[0], new.buckets()[0])]
        p = [a for a in bucket.acceptance if a is not None]
        half = 1.959964 * math.sqrt(sum(q * (1 - q) / d for q, d in zip(p, drafted, strict=True)))
        binomial += abs(change) <= half
    assert inside >= at_least * REPLICATIONS, inside
    assert binomial < binomial_below * REPLICATIONS, binomial  # the harness can fail
