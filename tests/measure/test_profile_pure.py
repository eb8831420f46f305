"""measure's load figures, crossover line and profile, from hand-made runs (no I/O)."""

from __future__ import annotations

import pytest

from specmon.answer import profile_crossover
from specmon.engines.model import SpecCounters
from specmon.load import LoadInterval, profile_from_json, profile_to_json
from specmon.measure.analysis import analyse
from specmon.measure.endpoints import ServerInfo, endpoint
from specmon.measure.levels import LoadLevel
from specmon.measure.profile import build_profile, crossover_line, report_crossover
from specmon.measure.render import render_text
from specmon.measure.results import (
    MetricsDelta,
    Outcome,
    RawMeasurement,
    Settings,
    SideRun,
    WorkloadRun,
)
from tests.measure.test_pure import _answer

COUNTERS = SpecCounters(100, 400, 240, (90, 70, 50, 30))


def load(step: float, *, concurrency: float, spec: bool) -> LoadInterval:
    """1000 request-steps at ``step`` seconds; with speculation K = 3.4 and k̄ = 4."""
    tokens = 3400.0 if spec else 1000.0
    return LoadInterval(
        request_steps=1000,
        decode_seconds=1000 * step,
        decode_tokens=tokens,
        engine_steps=1000 / concurrency,
        slot_steps=1000,
        drafts=1000 if spec else 0,
        draft_tokens=4000 if spec else 0,
        accepted_tokens=2400 if spec else 0,
    )


def raw(levels: list[tuple[int, float, float, bool]]) -> RawMeasurement:
    """Per level: (concurrency, baseline seconds, with-draft seconds for the same 80 tokens,
    whether both servers' load counters are there). Baseline steps: 10 ms."""
    settings = Settings(model="m", max_tokens=8, seed=0, repeats=1,
                        concurrency=tuple(n for n, *_ in levels), workloads=("a",))  # fmt: skip
    runs = []
    for n, base_s, spec_s, counted in levels:
        # Ten requests each lasting n tenths of the run: n in flight on average (the
        # client's measure of the level, used where a server's counters are missing).
        def outcomes_of(seconds: float, n: int = n) -> tuple[Outcome, ...]:
            return tuple(
                Outcome("a", i, 0, n * seconds / 10, _answer(f"t{i}", 8)) for i in range(10)
            )

        # The speculative step time that gives the realized speed-up base_s / spec_s:
        # TPOT(spec) = step / 3.4 = 0.010 * spec_s / base_s.
        spec_step = 0.010 * spec_s / base_s * 3.4
        runs.append(
            WorkloadRun(
                "a", LoadLevel(concurrency=n), 10, SideRun(outcomes_of(base_s), base_s),
                SideRun(outcomes_of(spec_s), spec_s),
                MetricsDelta(COUNTERS, engine="llamacpp"),
                baseline_load=load(0.010, concurrency=n, spec=False) if counted else None,
                speculative_load=load(spec_step, concurrency=n * 0.9, spec=True)
                if counted else None,
            )
        )  # fmt: skip
    return RawMeasurement(
        settings=settings,
        baseline=endpoint("http://127.0.0.1:1/v1"),
        speculative=endpoint("http://127.0.0.1:2/v1"),
        baseline_info=ServerInfo("llamacpp", "b1", ()),
        speculative_info=ServerInfo("llamacpp", "b1", ()),
        runs=tuple(runs),
        started="2026-11-30T10:00:00+00:00",
        finished="2026-11-30T10:00:05+00:00",
        baseline_drafts=0,
    )


def test_level_load_figures_by_hand() -> None:
    report = analyse(raw([(1, 1.0, 0.5, True)]))
    level = report.levels[0]
    # Realized: TPOT 10 ms / (step / 3.4) with step = 10 ms * 0.5 * 3.4 = 17 ms: 2.0.
    assert level.load.realized_speedup == pytest.approx(2.0)
    assert level.load.step_ratio == pytest.approx(1.7)
    assert level.load.draft_cost == pytest.approx((1.7 - 1) / 4)
    assert level.summary.speed_ratio == pytest.approx(2.0)
    assert level.load.as_dict()["draft_cost_from_step_times"] == pytest.approx(0.175)


def test_crossover_line_from_counters_by_engine_concurrency() -> None:
    report = analyse(raw([(1, 1.0, 0.5, True), (4, 1.0, 0.8, True), (8, 1.0, 1.25, True)]))
    found = report_crossover(report)
    assert found is not None
    # The profile's cost curve (the daemon's function, on this measurement): points at the
    # speculative engine's concurrency (0.9 n), realized (3.6, 1.25) and (7.2, 0.8): it stops
    # paying between them, with a range.
    assert found == profile_crossover(build_profile(report))
    assert found.pays_up_to == pytest.approx(3.6) and found.costs_from == pytest.approx(7.2)
    assert 3.6 < found.concurrency < 7.2 and found.low is not None and found.high is not None
    line = crossover_line(report)
    assert line == (
        f"speculation pays up to concurrency {found.concurrency:.1f}, costs "
        f"{found.cost_percent:.0f} % from 7.2 (the cost curve of both servers' step times, by "
        "engine concurrency)"
    )
    assert "Crossover: " + line in " ".join(render_text(report).split("\n"))


def test_crossover_line_falls_back_to_the_tokens_ratio() -> None:
    # One level without counters: the ratios at the levels, (1, 2.0) and (8, 0.8):
    # 1 + (2.0 - 1) * 7 / 1.2 = 6.8.
    report = analyse(raw([(1, 1.0, 0.5, False), (8, 1.0, 1.25, True)]))
    assert crossover_line(report) == (
        "speculation pays up to concurrency 6.8, costs 20 % from 8 (tokens/s ratio, by "
        "requests in flight)"
    )


@pytest.mark.parametrize(
    ("levels", "text"),
    [
        ([(1, 1.0, 0.5, True), (8, 1.0, 0.9, True)],
         "speculation pays at every measured concurrency (0.9 to 7.2)"),
        ([(1, 1.0, 0.5, True)], "speculation pays at concurrency 0.9 (the only level measured)"),
        ([(1, 1.0, 1.1, True), (4, 1.0, 2.0, True)],
         "speculation does not pay at any measured concurrency: it costs 9 % from 0.9, the "
         "lowest measured"),
    ],
)  # fmt: skip
def test_crossover_line_other_forms(
    levels: list[tuple[int, float, float, bool]], text: str
) -> None:
    line = crossover_line(analyse(raw(levels)))
    assert line is not None and line.startswith(text)


def test_profile_of_a_report_round_trips() -> None:
    report = analyse(raw([(1, 1.0, 0.5, True), (4, 1.0, 0.8, False)]))
    profile = build_profile(report)
    assert profile.model == "m" and profile.engine == "llamacpp" and profile.chain_length == 4
    first, second = profile.levels
    assert first.draft_cost_source == "step times"
    assert first.draft_cost == pytest.approx(0.175)
    assert first.baseline.step_seconds == pytest.approx(0.010)
    assert first.speculative.concurrency == pytest.approx(0.9)
    assert first.tokens_per_step == pytest.approx(3.4)
    assert first.drafted_per_step == pytest.approx(4.0)
    assert first.acceptance == COUNTERS
    # Without counters the level keeps the implied c of the measured break-even reading.
    assert second.draft_cost_source == "speed ratio"
    k_kept, k_drafted = 1 + 240 / 100, 400 / 100
    assert second.draft_cost == pytest.approx((k_kept / (1.0 / 0.8) - 1) / k_drafted)
    assert second.speculative.step_seconds is None
    assert profile_from_json(profile_to_json(profile)) == profile
