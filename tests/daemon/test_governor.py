"""specmon.daemon.governor: the overload governor's decisions, in-process (no loop, no I/O),
and the scraper's use of them (the stretch applied evenly, timeouts that are specmon's own
not counted against a target)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.governor import SLOT, Governor, Policy
from specmon.daemon.ingest import Ingest
from specmon.daemon.scraper import TargetScraper
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.process.loopwatch import LoopWatch
from specmon.sources import Reading, ScrapeResult
from specmon.sources.deadlines import deadline
from specmon.sources.http import FetchError
from tests.support.virtual_clock import VirtualLoop, run_for, stopped_every_second


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


def test_a_probe_is_owed_the_time_specmon_ran_not_the_time_on_the_clock() -> None:
    governor = Governor()
    # The loop watch saw the process stopped 0.7 s in each of the seconds 11 and 12.
    governor.watched(at=11.75, lag=0.7)
    governor.watched(at=12.75, lag=0.7)
    assert governor.stalled_during(start=10.9, end=13.0) == pytest.approx(1.4)
    # Started at 10.9 with a 1.5 s timeout: at 13.0, 2.1 s on the clock, 0.7 s ran.
    owed = governor.owed(start=10.9, now=13.0, late=0.0, timeout=1.5, until=20.0)
    assert owed == pytest.approx(0.8)
    # A stall the watch has not reported yet: the deadline's own lateness counts.
    owed = governor.owed(start=10.9, now=13.75, late=0.7, timeout=1.5, until=20.0)
    assert owed == pytest.approx(1.5 - (2.85 - 2.1))
    # Never past ``until``; nothing owed once the time has run.
    assert governor.owed(start=10.9, now=19.9, late=0.0, timeout=9.0, until=20.0) == (
        pytest.approx(0.1)
    )
    assert governor.owed(start=10.9, now=20.0, late=0.0, timeout=9.0, until=20.0) == 0.0
    assert governor.owed(start=30.0, now=31.6, late=0.0, timeout=1.5, until=40.0) == 0.0


def test_a_stall_seen_just_after_a_start_counts_only_from_the_start() -> None:
    governor = Governor()
    governor.watched(at=5.05, lag=0.7)  # stopped 4.35 .. 5.05; the scrape started at 5.0
    assert governor.stalled_during(start=5.0, end=6.0) == pytest.approx(0.1)
    assert governor.stalled_during(start=7.0, end=6.0) == 0.0


def test_lateness_slots_are_bounded_and_keep_the_worst() -> None:
    governor = Governor()
    for index in range(100_000):
        governor.lagged(at=index * 0.01, lag=0.5 if index % 7 == 0 else 0.01)
    assert len(governor._slots) <= 120 / SLOT + 1
    assert governor.behind_during(start=990.0, end=1000.0) == 0.5
    assert governor.behind_during(start=0.0, end=10.0) == 0.0  # forgotten: too old


def test_policy_refuses_thresholds_that_cannot_work() -> None:
    with pytest.raises(ValueError, match="room_below"):
        Policy(room_below=0.95, short_above=0.9)
    with pytest.raises(ValueError, match="slip_calm"):
        Policy(slip_calm=1.2, slip_behind=1.1)
    with pytest.raises(ValueError, match="suspect_max"):
        Policy(suspect_max=0)
    with pytest.raises(ValueError, match="raise_min"):
        Policy(raise_min=1.0)
    with pytest.raises(ValueError, match="period"):
        Policy(max_stretch=0.5)
    with pytest.raises(ValueError, match="excuse_limit"):
        Policy(excuse_limit=0)


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
            self,
            *,
            at: float,
            late: float,
            interval: float,
            asked: float,
            gap: float | None,
            waited: bool = False,
            suspect: bool = False,
        ) -> None:
            asked_gaps.append(asked)
            super().started(
                at=at,
                late=late,
                interval=interval,
                asked=asked,
                gap=gap,
                waited=waited,
                suspect=suspect,
            )

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


# -- excuses are bounded: a hung target under starvation (issue 53 item 6) ------------------

PAGE = (
    Path(__file__).parents[1] / "fixtures" / "pages" / "vllm-load-spec-c1-after.txt"
).read_text()


class _Null:
    def observe(self, amount: float) -> None:
        """Nothing recorded."""


class _Engine:
    """One fake engine behind a target: it answers ``answer`` seconds after the request (on
    the clock: the engine is not stopped with specmon; the answer then takes a few passes of
    the loop to read), or, from loop time ``hang_at`` on, accepts and never answers. Bounded
    by the config's ``scrape_timeout`` as ``fetch_page`` is."""

    def __init__(self, config: TargetConfig, *, answer: float, hang_at: float | None) -> None:
        self._timeout = config.scrape_timeout
        self._answer = answer
        self._hang_at = hang_at

    async def read(self) -> Reading:
        loop = asyncio.get_running_loop()
        try:
            async with deadline(self._timeout):
                hung = self._hang_at is not None and loop.time() >= self._hang_at
                await asyncio.sleep(3600.0 if hung else self._answer)
                for _ in range(4):
                    await asyncio.sleep(0)
        except TimeoutError:
            raise FetchError(
                ScrapeResult.TIMEOUT, f"no complete response within {self._timeout:g}s"
            ) from None
        return Reading(page=read_page(PAGE), size=len(PAGE), duration=0.003)


@dataclass
class _Starved:
    """What a starved run saw: when each target was first seen down (loop time), the
    timeouts excused, and the hung target's scraper."""

    down_at: dict[str, float]
    excused: int
    hung_excused_max: int


#: How long each healthy engine takes to answer, seconds: at once, slowly, nearly the timeout
#: (an answer due inside a stop is read at the resume, when the deadline may be due too).
ANSWERS = (0.003, 0.6, 1.3)


def _starved(
    *, hang_at: float, seconds: float, stop: float, governor: Governor | None = None
) -> _Starved:
    """Healthy targets (:data:`ANSWERS`) and one that hangs at ``hang_at``, every 2 s with
    a 1.5 s timeout, the process stopped ``stop`` s in every second; the governor closes a
    period every 5 s and the loop watch feeds it, as in the daemon."""
    loop = VirtualLoop(stopped=stopped_every_second(stop) if stop > 0 else None)
    governor = governor or Governor(seed=1)
    registry = CollectorRegistry()
    log = structlog.get_logger()
    ingest = Ingest(
        scrapes_total=Counter("s", "s", ["target", "result"], registry=registry),
        rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
        log=log,
    )
    engines: dict[str, tuple[float, float | None]] = {
        f"h{i}": (answer, None) for i, answer in enumerate(ANSWERS)
    }
    engines["hung"] = (ANSWERS[0], hang_at)
    scrapers: dict[str, TargetScraper] = {}
    for name, (answer, hangs) in engines.items():
        config = TargetConfig(
            name=name, url="http://127.0.0.1:9/metrics", scrape_interval=2.0, scrape_timeout=1.5
        )
        scrapers[name] = TargetScraper(
            TargetState(config, windows=(60.0,), retention=70.0),
            source=lambda cfg, a=answer, h=hangs: _Engine(cfg, answer=a, hang_at=h),  # type: ignore[misc]
            ingest=ingest,
            log=log,
            on_scraped=lambda _name: None,
            governor=governor,
        )
    seen = _Starved(down_at={}, excused=0, hung_excused_max=0)

    async def govern() -> None:
        while True:
            await asyncio.sleep(governor.policy.period)
            governor.close()

    async def monitor() -> None:  # as Prometheus would read /metrics: whenever specmon runs
        while True:
            await asyncio.sleep(0.1)
            for name, scraper in scrapers.items():
                view = scraper.state.view
                if view.scraped and not view.up:
                    seen.down_at.setdefault(name, loop.time())
            seen.hung_excused_max = max(seen.hung_excused_max, scrapers["hung"].excused)

    def started() -> list[Coroutine[Any, Any, object]]:
        watch = LoopWatch(
            lag=_Null(),
            gc_pause=lambda _generation: _Null(),
            clock=loop.time,
            on_lag=lambda lag: governor.watched(at=loop.time(), lag=lag),
        )
        runs = [scraper.run(first_delay=0.37 * index)
                for index, scraper in enumerate(scrapers.values())]  # fmt: skip
        return [watch.run(), govern(), monitor(), *runs]

    run_for(loop, started, seconds)
    seen.excused = governor.excused
    return seen


def test_a_hung_target_goes_down_within_30_s_while_specmon_is_starved() -> None:
    """Issue 53's case, on a clock the test controls: the process stopped 0.7 s in every
    second throughout; a target that accepts and never answers is down within 30 s of
    hanging, the healthy ones never are, though timeouts are excused all along."""
    run = _starved(hang_at=60.0, seconds=180.0, stop=0.7)
    assert run.excused > 0  # the starvation made timeouts that were specmon's
    assert run.hung_excused_max == 1  # excused once in a row, never more
    assert set(run.down_at) == {"hung"}
    assert 60.0 < run.down_at["hung"] <= 60.0 + 30.0


def test_without_starvation_a_hung_target_goes_down_at_its_first_timeout() -> None:
    run = _starved(hang_at=30.0, seconds=60.0, stop=0.0)
    assert run.excused == 0
    assert set(run.down_at) == {"hung"}
    assert run.down_at["hung"] <= 30.0 + 2.0 + 1.5 + 0.2  # the next scrape's timeout


class _Starving(Governor):
    """A governor told the loop could run only 3 % of every span (a process starved some
    way the loop watch sees, without being stopped)."""

    def stalled_during(self, *, start: float, end: float) -> float:
        return 0.97 * max(0.0, end - start)


def test_a_probe_specmon_could_not_give_half_its_timeout_judges_nothing() -> None:
    """A probe that reaches 8 timeouts on the clock with less than half a timeout of
    specmon's own time is excused instead of judged: the hung target is not put down on a
    scrape specmon never ran, and the next scrape probes again."""
    run = _starved(hang_at=30.0, seconds=120.0, stop=0.0, governor=_Starving(seed=1))
    assert run.excused > 0
    assert run.down_at == {}
