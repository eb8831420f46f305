"""Issue 63's scenario harness in the fast tier: seeded replications of a speculating server
against its twin under the method's own assumptions and the ways real servers break them
(tests/support/calibration.py), read through specmon's own code to the answer's interval
(LoadHistory, the cost curve, specmon.answer.read_comparison); per scenario and window, the
truth's coverage by the 95 % interval and the median bias, or the read withheld with its
reason. ``python -m tests.support.calibration 200`` prints the table."""

from __future__ import annotations

import pytest

from tests.support.calibration import HISTORY_SCENARIOS, SCENARIOS, WINDOWS, Scenario, measure

#: Replications per scenario here (the table in docs/load-signals.md took 200); more where
#: the median bias sits near the bar (its standard error at 40 is about 1 %: "drift, classes
#: and twin" reads -2.7 % at 5m over 40, -1.6 % over 120, -1.5 % over 200; "history: classes"
#: -2.0 % at 1m over 40, +0.3 % over 200).
REPLICATIONS = 40
MORE = {"drift, classes and twin": 120, "history: classes 0.9 / 0.5": 120}
#: The scenarios whose every window meets issue 63's bar (coverage >= 90 %, |median bias| <=
#: 2 %, or withheld with a reason): all of them. The history basis under a slow drift (AR(1)
#: sd 3 %, 0.995 per 15 s) read 86-88 % over 200 before the walk term between epochs
#: (specmon.load.curve_sums.SlotWalk), 92-94 % with it.
ACHIEVED = {s.name for s in (*SCENARIOS, *HISTORY_SCENARIOS)}
#: The scenario whose reads are withheld, and why.
WITHHELD = {"twin at 9, target at 7, no other load": "more than its cost curve can bridge"}


@pytest.mark.parametrize("scenario", [*SCENARIOS, *HISTORY_SCENARIOS], ids=lambda s: s.name)
def test_coverage_and_bias(scenario: Scenario) -> None:
    replications = MORE.get(scenario.name, REPLICATIONS)
    tallies = measure(scenario, replications=replications)
    failures = []
    for seconds in WINDOWS:
        tally = tallies[seconds]
        withheld = sum(tally.withheld.values())
        assert tally.reads + withheld == replications
        if scenario.name in WITHHELD:
            assert tally.reads == 0 and all(WITHHELD[scenario.name] in why
                                            for why in tally.withheld), tally.withheld  # fmt: skip
            continue
        coverage, bias = tally.coverage, tally.bias
        assert coverage is not None and bias is not None
        if coverage < 0.90 or abs(bias) > 0.02:
            failures.append(f"{seconds:.0f}s: coverage {coverage:.0%}, bias {bias:+.1%}")
    if scenario.name in ACHIEVED:
        assert not failures, failures
    else:
        assert failures, f"{scenario.name} now meets the bar: add it to ACHIEVED"
