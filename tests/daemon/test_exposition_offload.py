"""specmon.daemon.exposition: the page built in a worker thread, the event loop free meanwhile.

Under overload (bench/RESULTS.md, "Past the core") the page built on the loop held it for
0.85 s a fetch and every scrape due meanwhile started late. These tests hold the async path
to the same bytes as the sync one and measure, in-process, that the loop keeps turning
while a page of fleet size is built.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import time

from specmon.daemon.exposition import Exposition, render_target
from specmon.daemon.target import TargetView
from tests.support.views import fleet_views


def _fleet(copies: int) -> Exposition:
    """``copies`` targets, each a copy of the fleet's largest view under its own name."""
    largest = max(fleet_views(), key=lambda v: sum(map(len, render_target(v).values())))
    exposition = Exposition()
    for i in range(copies):
        exposition.update(dataclasses.replace(largest, name=f"t{i:05d}"))
    return exposition


def test_the_async_pages_are_the_sync_pages() -> None:
    views: list[TargetView] = fleet_views()
    exposition = Exposition()
    for view in views:
        exposition.update(view)
    own = b"# HELP specmon_x x\n# TYPE specmon_x gauge\nspecmon_x 1.0\n"

    async def main() -> tuple[bytes, bytes, bytes]:
        plain = await exposition.page_async(own)
        first = await exposition.gzip_page_async(own, openmetrics=True)
        again = await exposition.gzip_page_async(own, openmetrics=True)  # the kept half
        return plain, first, again

    plain, first, again = asyncio.run(main())
    assert plain == exposition.page(own)
    assert gzip.decompress(first) == exposition.page(own, openmetrics=True)
    assert first == again == exposition.gzip_page(own, openmetrics=True)


def test_a_change_during_the_build_is_served_next_time_not_kept_as_current() -> None:
    exposition = _fleet(50)
    views = fleet_views()

    async def main() -> tuple[bytes, bytes]:
        task = asyncio.create_task(exposition.gzip_page_async(b""))
        await asyncio.sleep(0)  # the build has its snapshot; now a target changes
        exposition.update(dataclasses.replace(views[0], name="zz-new"))
        during = await task
        after = await exposition.gzip_page_async(b"")
        return during, after

    during, after = asyncio.run(main())
    assert b'target="zz-new"' not in gzip.decompress(during)
    assert b'target="zz-new"' in gzip.decompress(after)
    assert gzip.decompress(after) == exposition.page(b"")


def test_the_loop_keeps_turning_while_a_fleet_page_is_built() -> None:
    """On the loop, the build holds it for its whole duration; in the thread, the longest
    the loop waits between two turns is a small part of it."""
    exposition = _fleet(3000)
    started = time.perf_counter()
    exposition.gzip_page(b"")  # what the loop was held for before (sync, same work)
    held = time.perf_counter() - started
    exposition.update(dataclasses.replace(fleet_views()[0], name="zz-change"))  # rebuild

    async def main() -> tuple[float, int, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        began = time.perf_counter()
        await exposition.gzip_page_async(b"")
        took = time.perf_counter() - began
        done.set()
        await tick
        return max(gaps), len(gaps), took

    worst, turns, took = asyncio.run(main())
    assert held > 0.03, f"page too small to measure ({held:.3f} s)"
    assert turns >= 5, (turns, took)
    assert worst < held / 3, f"loop held {worst:.3f} s of a {held:.3f} s build"
