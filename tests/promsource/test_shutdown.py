"""Stopping with failing Prometheus sources: cancellation always wins over a query's failure,
and a stop has a deadline after which what hangs is abandoned and named.

In-process: the daemon's own ``stop()`` against a fake /api/v1/query on loopback that fails
every query (HTTP 500, answers over the size cap, slow answers), cancelled at many points of a
read; and the exact race that kept a source reading after SIGTERM (a query that fails in the
same step as the read is cancelled), made deterministic with a hand-written query."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon.daemon.app import Daemon
from specmon.sources.prometheus import PrometheusSource, ReadStatus
from specmon.sources.prometheus.answers import Failure as _Failure
from tests.promsource.fake_prometheus import FakePrometheus, Reply, load, source_for

SELECTOR = load("fleet")["source"]["selector"]


def test_a_failure_at_the_moment_of_cancellation_does_not_swallow_it() -> None:
    """The task group reports a child's failure instead of the parent's cancellation when
    both happen in one step; read() must still raise CancelledError, not return a failure."""

    async def go() -> None:
        config = source_for(None, "http://127.0.0.1:9", selector=SELECTOR)
        async with PrometheusSource(config) as source:
            reader: asyncio.Task[Any] | None = None
            first = source.queries[0]

            async def query(q: str, **_: Any) -> bytes:
                if q == first:
                    assert reader is not None
                    reader.cancel()  # the stop arrives ...
                    raise _Failure(ReadStatus.HTTP_ERROR, "HTTP 500")  # ... as a query fails
                await asyncio.sleep(30)
                return b""

            source._query = query  # type: ignore[method-assign,assignment]
            reader = asyncio.create_task(source.read())
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(reader, timeout=5)

    asyncio.run(go())


def _config(path: Path, url: str, sources: int) -> Path:
    doc = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "500ms", "windows": ["10s"]},
        "targets": [],
        "sources": [
            {
                "prometheus": {
                    "url": url,
                    "name": f"p{i}",
                    "selector": SELECTOR,
                    "interval": "200ms",
                    "timeout": "150ms",
                    "max_response_bytes": "4KiB",
                }
            }
            for i in range(sources)
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _failing(query: str) -> Reply:
    """Every kind of failing answer, by the query's text: a server error, an answer over the
    size cap, and a slow one (past the read's timeout)."""
    kind = sum(map(ord, query)) % 3
    if kind == 0:
        return Reply(status=500, body=b"internal server error", content_type="text/plain")
    if kind == 1:
        return Reply(body=b'{"status":"success","data":{"result":[' + b"{}," * 4000 + b"{}]}}")
    return Reply(body=b"{}", delay=0.3)


@pytest.mark.parametrize("sources", [16])
def test_stop_ends_every_failing_source_well_before_the_deadline(
    tmp_path: Path, sources: int
) -> None:
    """Sixteen sources failing in every way, stopped at 25 points of their reads: each stop
    is clean (nothing abandoned) and quick."""

    async def go() -> list[tuple[float, list[str]]]:
        fake = FakePrometheus({})
        fake.respond = _failing
        outcomes = []
        async with fake:
            config = _config(tmp_path / "specmon.yml", fake.url, sources)
            for attempt in range(25):
                daemon = Daemon(config_path=config, listen="127.0.0.1:0", stop_deadline=5.0)
                await daemon.start()
                await asyncio.sleep(0.05 + 0.013 * attempt)  # a different moment each time
                loop = asyncio.get_running_loop()
                started = loop.time()
                hung = await daemon.stop()
                outcomes.append((loop.time() - started, hung))
        return outcomes

    outcomes = asyncio.run(go())
    assert all(not hung for _, hung in outcomes), outcomes
    assert max(seconds for seconds, _ in outcomes) < 2.0, outcomes


def test_a_task_that_ignores_cancellation_is_abandoned_at_the_deadline(tmp_path: Path) -> None:
    """A stop waits at most its deadline, names what hung, and serve() then exits 1."""

    async def go() -> tuple[float, list[str], list[str]]:
        daemon = Daemon(config_path=None, listen="127.0.0.1:0", stop_deadline=0.5)
        await daemon.start()

        released = asyncio.Event()

        async def stubborn() -> None:
            while not released.is_set():
                try:
                    await released.wait()
                except asyncio.CancelledError:
                    continue  # the bug being guarded against: a loop that swallows the stop

        task = asyncio.create_task(stubborn(), name="source:stubborn")
        await asyncio.sleep(0)  # started: a task cancelled before its first step just ends
        daemon._file_sd_task = task
        loop = asyncio.get_running_loop()
        started = loop.time()
        hung = await daemon.stop()
        elapsed = loop.time() - started
        abandoned = list(daemon.abandoned)
        released.set()  # let the test's loop end (the real process exits instead)
        await task
        return elapsed, hung, abandoned

    elapsed, hung, abandoned = asyncio.run(_with_timeout(go()))
    assert hung == ["source:stubborn"] == abandoned
    assert 0.5 <= elapsed < 2.0


async def _with_timeout(coro: Any) -> Any:
    async with asyncio.timeout(20):
        return await coro
