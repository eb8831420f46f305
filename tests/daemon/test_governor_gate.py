"""The overload governor's in-flight limit, applied by the scrapers' gate (specmon/daemon/
scraper.py :class:`Gate`): scrapes over the limit wait before they start, in order, outside
their timeout; a probe waits first in line; a scraper cancelled while it waits takes no place.
On a loop whose clock the test controls (tests/support/virtual_clock.py)."""

from __future__ import annotations

import asyncio

import structlog
from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.governor import Governor, Policy
from specmon.daemon.ingest import Ingest
from specmon.daemon.scraper import Gate, TargetScraper
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.sources import Reading, ScrapeResult
from specmon.sources.deadlines import deadline
from specmon.sources.http import FetchError
from tests.daemon.test_governor import PAGE
from tests.support.virtual_clock import VirtualLoop, run_for


def _governor(limit: int) -> Governor:
    return Governor(policy=Policy(inflight_max=limit, inflight_min=1), seed=1)


def test_over_the_limit_scrapes_wait_in_order_and_start_as_others_end() -> None:
    governor = _governor(2)
    gate = Gate(governor)
    order: list[int] = []

    async def scrape(index: int) -> None:
        await gate.enter()
        order.append(index)

    async def main() -> None:
        tasks = [asyncio.create_task(scrape(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert order == [0, 1] and governor.inflight == 2 and len(gate) == 3
        assert governor.deferred == 3
        gate.leave(judged=True, timeout=1.0)
        await asyncio.sleep(0)
        assert order == [0, 1, 2] and governor.inflight == 2  # the place passed on
        gate.leave(judged=True, timeout=1.0)
        gate.leave(judged=True, timeout=1.0)
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4] and len(gate) == 0

    asyncio.run(main())


def test_a_newcomer_waits_behind_those_already_waiting() -> None:
    """A place freed while scrapes wait goes to the first of them, not to whoever asks
    next (no target starves at the gate)."""
    governor = _governor(1)
    gate = Gate(governor)
    order: list[str] = []

    async def scrape(name: str) -> None:
        await gate.enter()
        order.append(name)

    async def main() -> None:
        first = asyncio.create_task(scrape("a"))
        waiting = asyncio.create_task(scrape("b"))
        await asyncio.sleep(0)
        governor.finished(judged=True, timeout=1.0)  # a place free, not yet passed on
        late = asyncio.create_task(scrape("c"))
        await asyncio.sleep(0)
        assert order == ["a"]  # c did not take it past b
        gate.admit_waiting()
        await asyncio.sleep(0)
        assert order == ["a", "b"]
        gate.leave(judged=True, timeout=1.0)
        await asyncio.gather(first, waiting, late)
        assert order == ["a", "b", "c"]

    asyncio.run(main())


def test_a_probe_waits_first_in_line() -> None:
    governor = _governor(1)
    gate = Gate(governor)
    order: list[str] = []

    async def scrape(name: str, *, probe: bool = False) -> None:
        await gate.enter(first=probe)
        order.append(name)

    async def main() -> None:
        tasks = [asyncio.create_task(scrape(name)) for name in ("a", "b", "c")]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(scrape("probe", probe=True)))
        await asyncio.sleep(0)
        for _ in range(3):
            gate.leave(judged=True, timeout=1.0)
            await asyncio.sleep(0)
        await asyncio.gather(*tasks)
        assert order == ["a", "probe", "b", "c"]

    asyncio.run(main())


def test_suspects_wait_in_a_lane_of_their_own() -> None:
    """Targets whose last scrape timed out fill their own lane: a healthy target's scrape
    starts at once beside them, and a suspect's place passes to the next suspect."""
    governor = Governor(policy=Policy(inflight_max=1, inflight_min=1, suspect_max=2), seed=1)
    gate = Gate(governor)
    order: list[str] = []

    async def scrape(name: str, *, suspect: bool) -> None:
        await gate.enter(suspect=suspect)
        order.append(name)

    async def main() -> None:
        hung = [asyncio.create_task(scrape(f"x{i}", suspect=True)) for i in range(4)]
        await asyncio.sleep(0)
        assert order == ["x0", "x1"] and governor.suspect_inflight == 2 and len(gate) == 2
        healthy = asyncio.create_task(scrape("h", suspect=False))
        await asyncio.sleep(0)
        assert order == ["x0", "x1", "h"] and governor.inflight == 1
        gate.leave(judged=True, timeout=1.0, suspect=True)
        await asyncio.sleep(0)
        assert order == ["x0", "x1", "h", "x2"]
        gate.leave(judged=True, timeout=1.0, suspect=True)
        await asyncio.gather(*hung, healthy)
        assert order[-1] == "x3" and governor.deferred == 2

    asyncio.run(main())


def test_a_scraper_cancelled_while_it_waits_takes_no_place() -> None:
    governor = _governor(1)
    gate = Gate(governor)
    started: list[str] = []

    async def scrape(name: str) -> None:
        await gate.enter()
        started.append(name)

    async def main() -> None:
        first = asyncio.create_task(scrape("a"))
        gone = asyncio.create_task(scrape("gone"))
        admitted_then_gone = asyncio.create_task(scrape("admitted-then-gone"))
        last = asyncio.create_task(scrape("last"))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        gate.leave(judged=True, timeout=1.0)  # to admitted-then-gone, over the cancelled one
        admitted_then_gone.cancel()  # admitted, cancelled before it ran: passes its place on
        await asyncio.gather(gone, admitted_then_gone, return_exceptions=True)
        await asyncio.sleep(0)
        assert started == ["a", "last"] and governor.inflight == 1
        gate.leave(judged=True, timeout=1.0)
        await asyncio.gather(first, last)
        assert governor.inflight == 0 and len(gate) == 0

    asyncio.run(main())


class _OneAtATime:
    """An engine that answers one request at a time in ``answer`` seconds: a request waits
    for those before it inside its own deadline, as behind a busy event loop or a full
    connection pool."""

    def __init__(self, config: TargetConfig, *, busy: asyncio.Lock, answer: float) -> None:
        self._config, self._busy, self._answer = config, busy, answer

    async def read(self) -> Reading:
        try:
            async with deadline(self._config.scrape_timeout), self._busy:
                await asyncio.sleep(self._answer)
        except TimeoutError:
            raise FetchError(ScrapeResult.TIMEOUT, "no complete response") from None
        page = read_page(PAGE)
        return Reading(page=page, size=len(PAGE), duration=self._answer)


def _fleet(*, limit: int | None, targets: int = 8, seconds: float = 60.0) -> tuple[int, int, int]:
    """``targets`` every 1 s with a 1 s timeout on one engine of 0.2 s an answer (it serves
    5 a second: 8 every 1 s cannot all be on time), the loop never behind (nothing is
    excused). Returns (timeouts judged, successful reads, scrapes deferred)."""
    loop = VirtualLoop()
    governor = _governor(limit) if limit is not None else None
    registry = CollectorRegistry()
    scrapes = Counter("s", "s", ["target", "result"], registry=registry)
    log = structlog.get_logger()
    ingest = Ingest(
        scrapes_total=scrapes,
        rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
        log=log,
    )
    busy = asyncio.Lock()
    scrapers = [
        TargetScraper(
            TargetState(
                TargetConfig(
                    name=f"t{i}",
                    url="http://127.0.0.1:9/metrics",
                    scrape_interval=1.0,
                    scrape_timeout=1.0,
                ),
                windows=(60.0,),
                retention=70.0,
            ),
            source=lambda cfg: _OneAtATime(cfg, busy=busy, answer=0.2),
            ingest=ingest,
            log=log,
            on_scraped=lambda _name: None,
            governor=governor,
        )
        for i in range(targets)
    ]

    run_for(loop, lambda: [s.run(first_delay=0.0) for s in scrapers], seconds)
    counts = {"timeout": 0.0, "success": 0.0}
    for metric in scrapes.collect():
        for sample in metric.samples:
            if sample.name == "s_total" and sample.labels["result"] in counts:
                counts[sample.labels["result"]] += sample.value
    deferred = 0 if governor is None else governor.deferred
    return int(counts["timeout"]), int(counts["success"]), deferred


def test_scrapes_over_the_limit_wait_outside_their_timeout_and_complete() -> None:
    """Without a limit, the scrapes started beyond what the engine answers inside their
    timeout time out (work spent on requests that were doomed); with one in flight at a
    time, every scrape started completes, and targets are read later instead."""
    timeouts, success, _ = _fleet(limit=None)
    assert timeouts > 100  # started with the rest and waited out their timeout
    timeouts, success_limited, deferred = _fleet(limit=1)
    assert timeouts == 0
    assert deferred > 100  # they waited before starting: the engine's 5 a second are read
    assert success_limited >= 0.95 * 5 * 60
    assert success < success_limited  # the engine's time went to requests that timed out


def test_a_wait_at_the_limit_is_lateness_but_no_excuse() -> None:
    """A scrape that waited 3 s at the limit started 3 s late (the stretch sees it), but
    the loop was not behind: a timeout beside it is the target's."""
    governor = Governor(seed=1)
    governor.lagged(at=9.0, lag=0.01)  # the loop woke it on time
    governor.started(at=12.0, late=3.0, interval=1.0, asked=1.0, gap=None, waited=True)
    assert not governor.excuses(timeout=1.0, start=11.5, end=12.5)
    assert governor.close().median == 3.0
    governor.started(at=22.0, late=3.0, interval=1.0, asked=1.0, gap=None)  # the loop's own
    assert governor.excuses(timeout=1.0, start=21.5, end=22.5)
