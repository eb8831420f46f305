"""The scrape task's own output: one canonical log line per scrape at debug level, and none
(not even its fields gathered) above it."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry, Counter

from specmon.daemon.config import TargetConfig
from specmon.daemon.ingest import Ingest
from specmon.daemon.scraper import TargetScraper
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.sources import Reading
from tests.support.strict_json import strict_loads

PAGES = Path(__file__).parents[1] / "fixtures" / "pages"


class _PageSource:
    """A hand-written source: the captured vLLM pages, one per read."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts
        self.reads = 0

    async def read(self) -> Reading:
        text = self._texts[min(self.reads, len(self._texts) - 1)]
        self.reads += 1
        return Reading(page=read_page(text), size=len(text), duration=0.001)


def _scrape_lines(level: int, scrapes: int) -> list[dict[str, object]]:
    out = io.StringIO()
    log = structlog.wrap_logger(
        structlog.PrintLogger(file=out),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
    )
    state = TargetState(
        TargetConfig(name="v", url="http://127.0.0.1:9/metrics"), windows=(60.0,), retention=70.0
    )
    source = _PageSource(
        [
            (PAGES / name).read_text()
            for name in ("vllm-load-spec-c1-before.txt", "vllm-load-spec-c1-after.txt")
        ]
    )
    registry = CollectorRegistry()
    scraped: list[str] = []
    scraper = TargetScraper(
        state,
        source=lambda _cfg: source,
        ingest=Ingest(
            scrapes_total=Counter("s", "s", ["target", "result"], registry=registry),
            rejected_total=Counter("r", "r", ["target", "reason"], registry=registry),
            log=log,
        ),
        log=log,
        on_scraped=scraped.append,
    )

    async def run() -> None:
        for _ in range(scrapes):
            await scraper.scrape_once()

    asyncio.run(run())
    assert scraped == ["v"] * scrapes
    lines = [strict_loads(line) for line in out.getvalue().splitlines()]
    return [line for line in lines if line["event"] == "scrape"]


def test_one_canonical_line_per_scrape_at_debug() -> None:
    lines = _scrape_lines(logging.DEBUG, 2)
    assert len(lines) == 2
    assert all(line["level"] == "debug" and line["result"] == "success" for line in lines)
    assert all(line["engine"] == "vllm" and line["target"] == "v" for line in lines)
    assert all(isinstance(line["duration_s"], float) for line in lines)
    assert "alpha_1m" in lines[1]  # the window has two readings by the second scrape


def test_no_scrape_line_above_debug() -> None:
    assert _scrape_lines(logging.INFO, 2) == []


def test_scrapes_due_at_one_grid_point_share_one_timer_and_each_wakes_on_time() -> None:
    from specmon.daemon.scraper import _waker

    async def main() -> tuple[list[float], int, int, bool]:
        loop = asyncio.get_running_loop()
        waker = _waker(loop)
        point = loop.time() + 0.2
        timers_before = len(loop._scheduled)  # type: ignore[attr-defined]
        woke: list[float] = []

        async def sleeper(when: float) -> None:
            await waker.until(when)
            woke.append(loop.time() - when)

        tasks = [asyncio.create_task(sleeper(point)) for _ in range(50)]
        tasks.append(asyncio.create_task(sleeper(point + 0.1)))
        cancelled = asyncio.create_task(sleeper(point))
        await asyncio.sleep(0.01)
        timers = len(loop._scheduled) - timers_before  # type: ignore[attr-defined]
        cancelled.cancel()
        await asyncio.gather(*tasks)
        late = asyncio.create_task(sleeper(loop.time() - 1.0))  # already past: at once
        await late
        return woke, timers, len(tasks), cancelled.cancelled()

    woke, timers, sleepers, cancelled = asyncio.run(main())
    assert timers == 2  # two grid points, 52 sleepers
    assert len(woke) == sleepers + 1  # the cancelled one never woke; the others all did
    assert all(0.0 <= w < 0.1 for w in woke[:-1])  # at their point, never early
    assert cancelled
