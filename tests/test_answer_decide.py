"""The answer (specmon.answer.decide): the basis chosen best first, every figure beside it at
that basis's own c, a new load said to be measuring instead of guessed, and the configured c
only where nothing was ever measured; then through a target's state, with and without a
configured draft cost."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.answer import (
    Comparison,
    Earlier,
    Evidence,
    PerLoad,
    Read,
    ReadState,
    Refusal,
    Setting,
    Standing,
    at_cost,
    decide,
    words,
)
from specmon.answer.crossover import Crossover
from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import SpecCounters, read_page
from specmon.report import AcceptanceReport, report_from_counters

PAGES = Path(__file__).parent / "fixtures" / "pages"
CONFIGURED = Setting(0.1, True)


def _report(*, draft_cost: float = 0.1, unknown: tuple[str, ...] = ()) -> AcceptanceReport:
    counters = SpecCounters(
        drafts=1000, draft_tokens=4000, accepted_tokens=2300,
        accepted_per_position=(900, 700, 450, 250), unknown=unknown,
    )  # fmt: skip
    return report_from_counters(counters, draft_cost=draft_cost)


#: Pays below 10.9 requests, costs above: the crossover of the demo's load model.
CROSSING = Crossover(10.9, 8.0, 16.0, 0.7, 30.0, 1.0, 32.0, low=10.4, high=11.3)
PER_LOAD = (
    PerLoad("8", 6.0, 12.0, 8.1, 1.3, 0.31, 2, 1.35),
    PerLoad("16", 12.0, 24.0, 16.2, 0.7, 0.98, 0, 1.0),
)


def _read(state: str, speedup: float | None, cost: float | None = 0.31) -> Read:
    return Read(state, 16.0, "16", speedup, (speedup * 0.9, speedup * 1.1) if speedup else None,
                cost, 0.01, CROSSING, PER_LOAD, progress="2 scrape intervals (needs 3)")  # fmt: skip


def test_twin_beats_every_other_basis_and_every_figure_is_at_its_c() -> None:
    report = _report()
    twin = Comparison(Evidence.TWIN, "vllm-b", _read("measured", 0.93, cost=0.31))
    got = decide(report, setting=Setting(0.1, True, 0.2), comparison=twin)
    assert got is not None and got.basis is Evidence.TWIN and got.state is ReadState.MEASURED
    there = report_from_counters(
        SpecCounters(1000, 4000, 2300, (900, 700, 450, 250)), draft_cost=0.31
    )
    # Break-even, margin and best k at the measured c, not the configured 0.1.
    assert (got.speedup, got.draft_cost) == (0.93, 0.31)
    assert got.breakeven_alpha == pytest.approx(there.breakeven_alpha)
    assert got.alpha_margin == pytest.approx(there.alpha_margin)
    assert got.best_chain_length == there.best_chain_length
    assert got.crossover == CROSSING and got.per_load == PER_LOAD
    assert got.standing is Standing.SLOWER
    assert "twin vllm-b" in words.detail(got) and "bucket 16" in words.detail(got)
    # The advice says it pays at low load: a k per load, not "switch it off".
    assert "pays below n ~ 10.9 (10.4-11.3)" in words.advice(got)
    assert "recommend" in words.advice(got)


def test_a_profile_is_a_basis_of_its_own() -> None:
    profile = Comparison(Evidence.PROFILE, "profile", _read("measured", 1.4))
    got = decide(_report(), setting=Setting(0.1, False), comparison=profile)
    assert got is not None and got.basis is Evidence.PROFILE and got.speedup == 1.4


def test_a_new_load_is_measuring_with_no_figure_and_never_a_guess() -> None:
    """The demo's first visit to 16 requests read 2.43x at the configured c (truth 0.705x):
    a comparison that has not measured the load says so, with the last figure at its load."""
    earlier = Earlier(4.0, "4", 2.28, (2.23, 2.33), 1000.0)
    twin = Comparison(Evidence.TWIN, "vllm-b", _read("measuring", None))
    got = decide(_report(), setting=CONFIGURED, comparison=twin, measured_before=earlier)
    assert got is not None and got.basis is Evidence.TWIN and got.state is ReadState.MEASURING
    assert got.speedup is None and got.interval is None and got.draft_cost is None
    assert got.breakeven_alpha is None and got.alpha_margin is None
    assert got.best_chain_length is None and got.standing is Standing.MEASURING
    assert got.earlier == earlier and got.per_load == PER_LOAD  # the loads measured stay
    assert words.measuring_words(got) == (
        "n ~ 16.0 not measured yet: 2 scrape intervals (needs 3); at n ~ 4.0: 2.28x (2.23-2.33)"
    )


def test_a_target_compared_before_never_falls_to_a_guess_when_its_twin_goes() -> None:
    earlier = Earlier(4.0, "4", 2.28, None, 1000.0)
    refused = (Refusal(Evidence.TWIN, "no data from the twin yet"),)
    got = decide(_report(), setting=CONFIGURED, refused=refused, measured_before=earlier, at=16.0)
    assert got is not None and got.state is ReadState.MEASURING and got.speedup is None
    assert got.basis is Evidence.TWIN and got.progress == "no data from the twin yet"
    # Never compared: the guess, saying why the twin was not used.
    guess = decide(_report(), setting=CONFIGURED, refused=refused)
    assert guess is not None and guess.state is ReadState.GUESS
    assert guess.basis is Evidence.CONFIGURED and guess.speedup is not None
    assert words.detail(guess).startswith("twin refused: no data from the twin yet; ")


def test_the_engines_own_cost_beats_the_configured_one() -> None:
    report = _report(draft_cost=0.1)
    got = decide(report, setting=Setting(0.1, True, 0.25))
    assert got is not None and got.basis is Evidence.ENGINE and got.draft_cost == 0.25
    assert got.state is ReadState.MODELLED
    at_engine = _report(draft_cost=0.25)
    assert got.speedup == pytest.approx(at_engine.expected_speedup, rel=1e-12)
    assert got.breakeven_alpha == pytest.approx(at_engine.breakeven_alpha, rel=1e-12)
    assert got.alpha_margin == pytest.approx(at_engine.alpha_margin, rel=1e-12)
    assert got.best_chain_length == at_engine.best_chain_length
    assert words.cost_words(got) == "at the engine's c 0.250"


@pytest.mark.parametrize(("configured", "basis"), [(True, Evidence.CONFIGURED),
                                                   (False, Evidence.DEFAULT)])  # fmt: skip
def test_configured_or_default_is_a_guess_with_the_reports_own_figures(
    configured: bool, basis: Evidence
) -> None:
    report = _report()
    got = decide(report, setting=Setting(0.1, configured))
    assert got is not None and got.basis is basis and got.state is ReadState.GUESS
    assert (got.speedup, got.breakeven_alpha, got.alpha_margin, got.draft_cost) == (
        report.expected_speedup, report.breakeven_alpha, report.alpha_margin, 0.1,
    )  # fmt: skip
    assert "a guess" in words.detail(got) and "a guess" in words.cost_words(got)
    assert "specmon measure --profile-out" in words.detail(got)
    assert "The draft cost is a guess" in words.advice(got)


def test_nothing_to_judge() -> None:
    assert decide(None, setting=Setting(0.1, True, 0.2)) is None


@given(
    drafts=st.integers(1, 2**40),
    shares=st.lists(st.floats(0.0, 1.0), min_size=0, max_size=8),
    off=st.integers(-3, 3),
    cost=st.floats(0.0, 0.5),
)
def test_the_interval_from_the_windows_counts_is_the_one_read_back_from_its_report(
    drafts: int, shares: list[float], off: int, cost: float
) -> None:
    """The daemon hands decide the counters the report was made from (no round trip through
    survival x drafts at every window of every scrape): the same interval to the last bit,
    whether the positions add up to the accepted tokens or not (the binomial fall-back)."""
    positions: list[int] = []
    for share in sorted(shares, reverse=True):
        positions.append(min(round(share * drafts), positions[-1] if positions else drafts))
    accepted = max(sum(positions) + off * (len(positions) + 1), 0)
    counters = SpecCounters(drafts=drafts, draft_tokens=drafts * max(len(positions), 1),
                            accepted_tokens=accepted, accepted_per_position=tuple(positions))  # fmt: skip
    report = report_from_counters(counters, draft_cost=cost)
    read_back = decide(report, setting=Setting(cost, True))
    given_counts = decide(report, setting=Setting(cost, True), counts=counters)
    assert read_back is not None and given_counts is not None
    assert given_counts.interval == read_back.interval
    assert given_counts == read_back


@given(
    drafts=st.integers(1, 10_000),
    per_draft=st.integers(1, 8),
    accepted_share=st.floats(0.0, 1.0),
    cost=st.floats(0.0, 2.0),
    unknown=st.sampled_from([(), ("drafts",), ("draft_tokens",)]),
)
def test_at_cost_is_the_report_at_that_cost(
    drafts: int, per_draft: int, accepted_share: float, cost: float, unknown: tuple[str, ...]
) -> None:
    """Re-costing a report gives what a report computed at that cost gives, whichever counter
    the engine lacks."""
    draft_tokens = drafts * per_draft
    counters = SpecCounters(
        drafts=drafts, draft_tokens=draft_tokens,
        accepted_tokens=int(accepted_share * draft_tokens), unknown=unknown,
    )  # fmt: skip
    base = report_from_counters(counters, draft_cost=0.1, configured_chain_length=per_draft)
    there = report_from_counters(counters, draft_cost=cost, configured_chain_length=per_draft)
    got = at_cost(base, cost)
    for mine, theirs in ((got.speedup, there.expected_speedup),
                         (got.breakeven_alpha, there.breakeven_alpha),
                         (got.alpha_margin, there.alpha_margin),
                         (got.best_chain_length, there.best_chain_length)):  # fmt: skip
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            assert mine == pytest.approx(theirs, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("configured", [True, False])
def test_a_target_says_whether_its_cost_is_a_guess(configured: bool) -> None:
    state = TargetState(
        TargetConfig(name="v", url="http://h/metrics", draft_cost_configured=configured),
        windows=(60.0,),
        retention=70.0,
    )
    for at, name in (
        (100.0, "vllm-load-spec-c1-before.txt"),
        (130.0, "vllm-load-spec-c1-after.txt"),
    ):
        state.observe(read_page((PAGES / name).read_text()), mono=at, wall=at, duration=0.01)
    (model,) = [m for m in state.view.models if m.speculating]
    window = model.windows[0]
    assert window.report is not None and window.answer is not None
    assert window.answer.basis is (Evidence.CONFIGURED if configured else Evidence.DEFAULT)
    assert window.answer.speedup == window.report.expected_speedup


def _demo_report(draft_cost: float) -> AcceptanceReport:
    """The demo's draft model: survival 0.9, 0.7, 0.5, 0.3 at k = 4."""
    counters = SpecCounters(
        drafts=1000, draft_tokens=4000, accepted_tokens=2400,
        accepted_per_position=(900, 700, 500, 300),
    )  # fmt: skip
    return report_from_counters(counters, draft_cost=draft_cost)


@pytest.mark.parametrize(
    ("cost", "speedup", "interval", "best"),
    [
        # 32 requests a few intervals in: c read 0.7 (truth 0.976, k 1 at 0.96x); the
        # interval's low end implies c ~ 1.06, where no chain pays: off, not k 1.
        (0.7, 0.885, (0.63, 1.24), 0),
        # The same c measured tightly: k 1 pays at its pessimistic end too, so it stays.
        (0.7, 0.885, (0.87, 0.90), 1),
        # 32 requests settled (c 0.976): off either way.
        (0.976, 0.69, (0.66, 0.72), 0),
        # 8 requests (c 0.4, the load model's best k 2 at 1.44x): a usual interval keeps it.
        (0.4, 1.31, (1.25, 1.37), 2),
        # ... and so does TGI's wide one there: the chain pays by measure (1.28x), so some
        # chain does; "off" beside it would contradict the verdict.
        (0.4, 1.28, (0.65, 2.5), 2),
    ],
)
def test_best_k_is_off_unless_a_chain_pays_at_the_pessimistic_c(
    cost: float, speedup: float, interval: tuple[float, float], best: int
) -> None:
    """Where the chain runs slower than without speculation, the verdict's best k is above 0
    only when some chain still pays at the c that the speed-up's 95 % lower bound implies
    (the demo's 4 reads of k 1 at 32 requests, where its load model says 0, came from a c
    measured a few intervals into the load); where it pays, the point c's best k."""
    report = _demo_report(0.1)
    read = Read("measured", 32.0, "32", speedup, interval, cost, 0.01, CROSSING, PER_LOAD)
    got = decide(report, setting=CONFIGURED, comparison=Comparison(Evidence.TWIN, "b", read))
    assert got is not None and got.draft_cost == cost
    assert got.best_chain_length == best
    unguarded = at_cost(report, cost)
    if best == 0:
        assert got.best_speedup == 1.0
        assert got.speedup == speedup and got.alpha_margin == unguarded.alpha_margin
    else:  # kept: the figures at the point c, untouched
        assert (got.best_chain_length, got.best_speedup) == (
            unguarded.best_chain_length, unguarded.best_speedup,
        )  # fmt: skip
    # Without an interval nothing is known of c's spread: the point c's k.
    bare = decide(report, setting=CONFIGURED, comparison=Comparison(
        Evidence.TWIN, "b", Read("measured", 32.0, "32", speedup, None, cost)))  # fmt: skip
    assert bare is not None and bare.best_chain_length == unguarded.best_chain_length
