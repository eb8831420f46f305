"""The overload governor with the real scrapers, gate and loop watch, on an event loop whose
clock the test controls (tests/support/virtual_clock.py): engines that answer, engines that
accept and never answer, and specmon's own CPU modelled as time the loop spends outside its
selector (a scrape's work takes work / share on the clock when a competitor pinned beside
specmon takes the rest of the core). Issue 67: hung targets alone never raise the stretch
nor keep healthy targets waiting; a competitor's steady share gives a stable stretch."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.governor import Governor, Period, Policy
from specmon.daemon.ingest import Ingest
from specmon.daemon.scraper import TargetScraper
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.process.loopwatch import LoopWatch
from specmon.sources import Reading, ScrapeResult
from specmon.sources.deadlines import deadline
from specmon.sources.http import FetchError
from tests.daemon.test_governor import PAGE
from tests.support.virtual_clock import VirtualLoop, run_for

_PAGE = read_page(PAGE)


class _Null:
    def observe(self, amount: float) -> None:
        """Nothing recorded."""


@dataclass
class _Process:
    """specmon's CPU: ``share`` of a core while it wants one (a competitor takes the rest)."""

    loop: VirtualLoop
    share: float = 1.0

    def burn(self, work: float) -> None:
        """``work`` seconds of CPU on the loop: the clock moves while nothing else runs."""
        self.loop.advance(work / self.share)


class _Engine:
    """Answers after ``answer`` s on the clock (then specmon spends ``work`` s of CPU
    reading it), or, with ``hangs``, accepts and never answers; bounded by the target's
    ``scrape_timeout`` as ``fetch_page`` is."""

    def __init__(
        self, config: TargetConfig, *, process: _Process, answer: float, work: float, hangs: bool
    ) -> None:
        self._timeout = config.scrape_timeout
        self._process, self._answer, self._work, self._hangs = process, answer, work, hangs

    async def read(self) -> Reading:
        try:
            async with deadline(self._timeout):
                await asyncio.sleep(3600.0 if self._hangs else self._answer)
        except TimeoutError:
            raise FetchError(
                ScrapeResult.TIMEOUT, f"no complete response within {self._timeout:g}s"
            ) from None
        self._process.burn(self._work)
        return Reading(page=_PAGE, size=len(PAGE), duration=self._answer)


@dataclass
class _Run:
    """What a run saw: the periods closed; per target, the loop times of its successful
    reads and when it was first seen down; the scrapers."""

    periods: list[tuple[float, Period]] = field(default_factory=list)
    reads: dict[str, list[float]] = field(default_factory=dict)
    down_at: dict[str, float] = field(default_factory=dict)
    excused: int = 0


def _fleet(
    *,
    healthy: int,
    hung: int,
    interval: float,
    seconds: float,
    policy: Policy,
    share: float = 1.0,
    work: float = 0.001,
    hold: float = 0.0,
) -> _Run:
    """``healthy`` engines answering in 5 ms and ``hung`` that never answer, every
    ``interval`` s with a 1 s timeout; each read costs ``work`` s of CPU on a process that
    gets ``share`` of a core; every 10 s a page build holds the loop ``hold`` s of CPU. The
    governor closes a period every 5 s and the loop watch feeds it, as in the daemon."""
    loop = VirtualLoop()
    process = _Process(loop, share)
    governor = Governor(policy=policy, seed=1)
    registry = CollectorRegistry()
    log = structlog.get_logger()
    ingest = Ingest(
        scrapes_total=Counter("s", "s", ["target", "result"], registry=registry),
        rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
        log=log,
    )
    run = _Run()
    scrapers: dict[str, TargetScraper] = {}
    names = [(f"h{i}", False) for i in range(healthy)] + [(f"x{i}", True) for i in range(hung)]
    for name, hangs in names:
        config = TargetConfig(
            name=name,
            url="http://127.0.0.1:9/metrics",
            scrape_interval=interval,
            scrape_timeout=1.0,
        )
        run.reads[name] = []

        def scraped(target: str) -> None:
            if scrapers[target].state.view.up:
                run.reads[target].append(loop.time())

        scrapers[name] = TargetScraper(
            TargetState(config, windows=(60.0,), retention=70.0),
            source=lambda cfg, h=hangs: _Engine(  # type: ignore[misc]
                cfg, process=process, answer=0.005, work=work, hangs=h
            ),
            ingest=ingest,
            log=log,
            on_scraped=scraped,
            governor=governor,
        )

    async def govern() -> None:
        while True:
            await asyncio.sleep(governor.policy.period)
            run.periods.append((loop.time(), governor.close()))

    async def build_pages() -> None:
        while hold:
            await asyncio.sleep(10.0)
            process.burn(hold)

    async def monitor() -> None:
        while True:
            await asyncio.sleep(0.1)
            for name, scraper in scrapers.items():
                view = scraper.state.view
                if view.scraped and not view.up:
                    run.down_at.setdefault(name, loop.time())

    def started() -> list[Coroutine[Any, Any, object]]:
        watch = LoopWatch(
            lag=_Null(),
            gc_pause=lambda _generation: _Null(),
            clock=loop.time,
            on_lag=lambda lag: governor.watched(at=loop.time(), lag=lag),
            on_ran=lambda span, idle: governor.ran(span=span, idle=idle),
        )
        assert watch.time_idle(loop)
        runs = [
            scraper.run(first_delay=interval * index / len(scrapers))
            for index, scraper in enumerate(scrapers.values())
        ]
        return [watch.run(), govern(), monitor(), build_pages(), *runs]

    run_for(loop, started, seconds)
    run.excused = governor.excused
    return run


def _largest_gap(reads: list[float], *, after: float) -> float:
    times = [t for t in reads if t >= after]
    return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


def test_hung_targets_alone_never_raise_the_stretch_nor_hold_healthy_ones_back() -> None:
    """400 targets that accept and never answer beside 20 healthy ones, every 1 s with a 1 s
    timeout, in-flight limit 32 (a hung target backs off to one scrape in 8 s: 50 a second
    hold a place for 1 s each, more than 32). The loop idles: the stretch stays 1; after the
    first minute every healthy target is read at least every 1.5 s; every hung target is
    down within the runbook's bound: a stretched interval, its first scrape's wait at the
    limit (400 / 32 timeouts while all hang at once) and its timeout."""
    policy = Policy(inflight_max=32, suspect_max=64)
    run = _fleet(healthy=20, hung=400, interval=1.0, seconds=150.0, policy=policy)
    assert {period.stretch for _, period in run.periods} == {1.0}
    assert max(period.busy or 0.0 for _, period in run.periods) < policy.short_above
    for i in range(20):
        assert _largest_gap(run.reads[f"h{i}"], after=60.0) <= 1.5, f"h{i}"
    assert set(run.down_at) == {f"x{i}" for i in range(400)}
    bound = 1.0 + (1 + 400 / 32) * 1.0 + 1.0
    assert max(run.down_at.values()) <= bound


def test_a_competitors_steady_share_gives_a_stable_stretch() -> None:
    """200 targets every 2 s, 12 ms of CPU a read, on half a core (a competitor pinned beside
    specmon), a page build holding the loop 0.4 s of CPU every 10 s: at stretch 1 the loop
    needs 2.4 + 0.08 of what it gets, and keeps up from about 2.6. The stretch grows, then
    holds still for the last 4 minutes within 1.5x of that, no healthy target down."""
    policy = Policy()
    run = _fleet(
        healthy=200,
        hung=0,
        interval=2.0,
        seconds=360.0,
        policy=policy,
        share=0.5,
        work=0.012,
        hold=0.4,
    )
    smallest = 200 * 0.012 / 2.0 / (0.5 - 0.04)
    stretches = [period.stretch for at, period in run.periods if at >= 120.0]
    assert max(stretches) <= 1.5 * smallest and min(stretches) >= smallest / 1.5
    assert max(stretches) / min(stretches) <= 1 / policy.relax_step + 1e-9  # one step at most
    assert not run.down_at
