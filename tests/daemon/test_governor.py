"""specmon.daemon.governor: the overload governor's decisions, in-process (no loop, no I/O),
and the scraper's use of them (the stretch applied evenly, timeouts that are specmon's own
not counted against a target)."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.governor import SLOT, Governor, Policy
from specmon.daemon.ingest import Ingest
from specmon.daemon.scraper import TargetScraper
from specmon.daemon.target import TargetState
from specmon.sources import Reading, ScrapeResult
from specmon.sources.http import FetchError


def _period(
    governor: Governor,
    *,
    late: float,
    scrapes: int = 200,
    interval: float = 5.0,
    slip: float = 1.0,
    at: float = 0.0,
) -> None:
    """``scrapes`` scrapes, each ``late`` seconds late, each target's gap ``slip`` times what
    it asked for (the stretched interval)."""
    asked = interval * governor.stretch
    for index in range(scrapes):
        governor.started(
            at=at + index * 0.01, late=late, interval=interval, asked=asked, gap=asked * slip
        )


def test_on_schedule_nothing_changes() -> None:
    governor = Governor(seed=1)
    for _ in range(20):
        _period(governor, late=0.004)
        period = governor.close()
        assert not period.changed
    assert governor.stretch == 1.0
    assert governor.delay == pytest.approx(0.004)
    assert governor.achieved == {5.0: pytest.approx(5.0)}


def test_behind_it_stretches_by_the_slip_over_the_headroom_within_bounds() -> None:
    governor = Governor(seed=1)
    _period(governor, late=0.8, slip=1.5)  # the schedule slips by half: 1.5 / 0.8 = 1.875
    period = governor.close()
    assert period.changed and period.median == pytest.approx(0.8)
    assert governor.stretch == pytest.approx(1.875)
    _period(governor, late=0.8, slip=1.0)  # behind without slipping: the smallest step
    governor.close()
    assert governor.stretch == pytest.approx(1.875 * 1.25)
    _period(governor, late=3.0, slip=9.0)  # far behind: at most doubled in one period
    governor.close()
    assert governor.stretch == pytest.approx(1.875 * 1.25 * 2.0)
    for _ in range(5):
        _period(governor, late=3.0, slip=9.0)
        governor.close()
    assert governor.stretch == 8.0  # the cap


def test_a_few_late_scrapes_a_held_loop_now_and_then_do_not_stretch() -> None:
    governor = Governor(seed=1)
    for _ in range(10):
        _period(governor, late=0.003, scrapes=170)
        _period(governor, late=0.6, scrapes=30)  # a cycle collection held 15 % of them
        assert not governor.close().changed
    assert governor.stretch == 1.0
    assert governor.delay == pytest.approx(0.6)  # but the p90 shows it


def test_it_relaxes_back_in_steps_after_calm_periods_and_holds_between_thresholds() -> None:
    policy = Policy()
    governor = Governor(seed=1)
    _period(governor, late=1.0, slip=2.0)
    governor.close()
    assert governor.stretch == 2.0
    # Between the thresholds (p90 0.15 s: not calm, median not behind): it holds.
    for _ in range(10):
        _period(governor, late=0.15)
        assert not governor.close().changed
    assert governor.stretch == 2.0
    # Calm: one step down every relax_after periods, and back to exactly 1.
    history = []
    for _ in range(40):
        _period(governor, late=0.01)
        governor.close()
        history.append(governor.stretch)
    assert history[policy.relax_after - 2] == 2.0
    assert history[policy.relax_after - 1] == pytest.approx(2.0 * policy.relax_step)
    assert history == sorted(history, reverse=True)
    assert history[-1] == 1.0


def test_a_calm_streak_is_broken_by_a_period_between_the_thresholds() -> None:
    governor = Governor(policy=Policy(relax_after=3), seed=1)
    _period(governor, late=1.0, slip=2.0)
    governor.close()
    for late in (0.01, 0.01, 0.15, 0.01, 0.01):
        _period(governor, late=late)
        governor.close()
    assert governor.stretch == 2.0  # never three calm periods in a row
    _period(governor, late=0.01)
    governor.close()
    assert governor.stretch < 2.0


def test_a_period_without_scrapes_changes_nothing() -> None:
    governor = Governor(seed=1)
    _period(governor, late=1.0, slip=2.0)
    governor.close()
    for _ in range(10):
        period = governor.close()
        assert period.scrapes == 0 and not period.changed
    assert governor.stretch == 2.0 and governor.delay == pytest.approx(1.0)


def test_the_achieved_interval_is_measured_per_configured_interval_without_backoff() -> None:
    governor = Governor(seed=1)
    governor.started(at=0, late=0, interval=5.0, asked=5.0, gap=5.2)
    governor.started(at=0, late=0, interval=5.0, asked=5.0, gap=5.4)
    governor.started(at=0, late=0, interval=1.0, asked=1.0, gap=1.1)
    governor.started(at=0, late=0, interval=5.0, asked=40.0, gap=40.0)  # backing off
    governor.close()
    assert governor.achieved == {5.0: pytest.approx(5.3), 1.0: pytest.approx(1.1)}
    governor.close()  # no scrapes of either: the last measured values stay
    assert governor.achieved == {5.0: pytest.approx(5.3), 1.0: pytest.approx(1.1)}
    assert governor.forget_intervals({5.0}) == [1.0]
    assert governor.achieved == {5.0: pytest.approx(5.3)}


def test_percentiles_come_from_a_bounded_sample() -> None:
    governor = Governor(seed=3)
    for index in range(100_000):  # 90 % on time, 10 % a second late, interleaved
        late = 1.0 if index % 10 == 9 else 0.0
        governor.started(at=index * 1e-4, late=late, interval=5.0, asked=5.0, gap=None)
    assert len(governor._samples) == 1024
    period = governor.close()
    assert period.scrapes == 100_000
    assert period.median == 0.0 and governor.stretch == 1.0
    # The 10 % late land near the 90th percentile: a sample tells, within its noise.
    assert period.p90 in (0.0, 1.0)


def test_a_timeout_is_excused_only_when_specmon_was_behind_during_the_scrape() -> None:
    excused: list[bool] = []
    governor = Governor(on_excuse=lambda: excused.append(True))
    governor.lagged(at=10.0, lag=0.002)
    governor.lagged(at=12.05, lag=0.9)  # the loop held 0.9 s, inside [11, 14]
    governor.lagged(at=20.0, lag=0.3)
    # A 3 s timeout: specmon's own if it was 0.6 s late or more meanwhile.
    assert governor.behind_during(start=11.0, end=14.0) == pytest.approx(0.9)
    assert governor.excuses(timeout=3.0, start=11.0, end=14.0)
    assert not governor.excuses(timeout=3.0, start=17.0, end=20.05)  # 0.3 s: the target's
    assert not governor.excuses(timeout=3.0, start=0.0, end=10.5)  # on time
    assert governor.excused == 1 and excused == [True]


def test_lateness_slots_are_bounded_and_keep_the_worst() -> None:
    governor = Governor()
    for index in range(100_000):
        governor.lagged(at=index * 0.01, lag=0.5 if index % 7 == 0 else 0.01)
    assert len(governor._slots) <= 120 / SLOT + 1
    assert governor.behind_during(start=990.0, end=1000.0) == 0.5
    assert governor.behind_during(start=0.0, end=10.0) == 0.0  # forgotten: too old


def test_policy_refuses_thresholds_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="calm_below"):
        Policy(calm_below=0.5, behind_after=0.25)
    with pytest.raises(ValueError, match="raise_min"):
        Policy(raise_min=1.0)
    with pytest.raises(ValueError, match="period"):
        Policy(max_stretch=0.5)


# -- the scraper ------------------------------------------------------------------------------


class _TimingOut:
    """A source whose reads time out (a hung target, or a loop too late to read the answer)."""

    def __init__(self) -> None:
        self.reads = 0

    async def read(self) -> Reading:
        self.reads += 1
        raise FetchError(ScrapeResult.TIMEOUT, "no complete response within 3s")


def _scraper(governor: Governor | None) -> tuple[TargetScraper, TargetState, Counter]:
    state = TargetState(
        TargetConfig(name="v", url="http://127.0.0.1:9/metrics"), windows=(60.0,), retention=70.0
    )
    registry = CollectorRegistry()
    scrapes = Counter("s", "s", ["target", "result"], registry=registry)
    log = structlog.get_logger()
    source = _TimingOut()
    scraper = TargetScraper(
        state,
        source=lambda _cfg: source,
        ingest=Ingest(
            scrapes_total=scrapes,
            rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
            log=log,
        ),
        log=log,
        on_scraped=lambda _name: None,
        governor=governor,
    )
    return scraper, state, scrapes


def _timeouts(scrapes: Counter) -> float:
    """The target's timeouts counted (0 when its series does not exist)."""
    for metric in scrapes.collect():
        for sample in metric.samples:
            if sample.name == "s_total" and sample.labels == {"target": "v", "result": "timeout"}:
                return sample.value
    return 0.0


def test_a_timeout_while_specmon_is_behind_leaves_the_target_as_it_was() -> None:
    governor = Governor()
    scraper, state, scrapes = _scraper(governor)

    async def main() -> None:
        now = asyncio.get_running_loop().time()
        governor.lagged(at=now, lag=2.0)  # the loop is 2 s behind right now
        await scraper.scrape_once()

    asyncio.run(main())
    assert governor.excused == 1
    assert not state.view.scraped  # not marked down: untouched
    assert scraper.failures == 0  # no back-off either
    assert _timeouts(scrapes) == 0


def test_a_timeout_while_specmon_keeps_up_marks_the_target_down() -> None:
    governor = Governor()
    scraper, state, scrapes = _scraper(governor)

    async def main() -> None:
        now = asyncio.get_running_loop().time()
        governor.lagged(at=now, lag=0.01)
        await scraper.scrape_once()

    asyncio.run(main())
    assert governor.excused == 0
    assert state.view.scraped and not state.view.up
    assert state.view.error_kind is ScrapeResult.TIMEOUT
    assert scraper.failures == 1 and _timeouts(scrapes) == 1


def test_every_target_waits_its_interval_times_the_stretch() -> None:
    """The scrape loop asks for interval x stretch: with a stretch of 3 and a 0.1 s interval,
    a target is scraped every 0.3 s, and the governor sees the gap it asked for."""
    asked_gaps: list[float] = []

    class _Recording(Governor):
        def started(
            self, *, at: float, late: float, interval: float, asked: float, gap: float | None
        ) -> None:
            asked_gaps.append(asked)
            super().started(at=at, late=late, interval=interval, asked=asked, gap=gap)

    governor = _Recording()
    governor.stretch = 3.0
    state = TargetState(
        TargetConfig(
            name="v", url="http://127.0.0.1:9/metrics", scrape_interval=0.1, scrape_timeout=0.05
        ),
        windows=(60.0,),
        retention=70.0,
    )
    starts: list[float] = []

    class _Fine:
        async def read(self) -> Reading:
            starts.append(asyncio.get_running_loop().time())
            raise FetchError(ScrapeResult.CONNECTION_ERROR, "refused")

    registry = CollectorRegistry()
    log = structlog.get_logger()
    scraper = TargetScraper(
        state,
        source=lambda _cfg: _Fine(),
        ingest=Ingest(
            scrapes_total=Counter("s", "s", ["target", "result"], registry=registry),
            rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
            log=log,
        ),
        log=log,
        on_scraped=lambda _name: None,
        governor=governor,
    )

    async def main() -> None:
        task = asyncio.create_task(scraper.run(first_delay=0.0))
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    scraper.failures = 0
    asyncio.run(main())
    # Connection errors back off (doubling, at most 8x): 0.3, 0.6, 1.2 ... of the stretched
    # interval; the first gap is the stretched interval itself.
    assert len(starts) >= 2
    # What the loop asked for is exact; the wall clock only bounds it from below (a loaded
    # machine wakes the loop late, never early).
    assert asked_gaps[1] == pytest.approx(0.3)
    assert starts[1] - starts[0] >= 0.3 - 0.01
