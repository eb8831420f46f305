"""Prometheus answers built to cost memory or to break a whole read: each is refused within
bounded work, a failed read keeps nothing alive, the reads of every source share one budget
of response bytes, and one bad series costs its own instance only.

The sizes here are small multiples of small caps (the same code paths as the 60 MB answers of
``bench promhostile``, which measures the daemon's RSS and event-loop stalls)."""

from __future__ import annotations

import asyncio
import gc
import json
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from specmon.sources.prometheus import (
    IN_FLIGHT,
    MAX_CLOCK_AHEAD,
    InFlight,
    PrometheusSource,
    ReadResult,
    ReadStatus,
    freshness_query,
    value_queries,
)
from tests.promsource.fake_prometheus import FakePrometheus, Reply, load, replies, source_for

FLEET = load("fleet")
HEAD = b'{"status":"success","data":{"resultType":"vector","result":['


@pytest.fixture
def no_automatic_collection() -> Iterator[None]:
    """What a read lets go must go by reference counting alone: the daemon runs the cycle
    collector once a minute, not after every read."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _read(
    answers: dict[str, Reply], *, in_flight: InFlight | None = None, **changes: Any
) -> ReadResult:
    async def go() -> ReadResult:
        async with FakePrometheus(answers) as fake:
            config = source_for(FLEET, fake.url, **changes)
            shared = IN_FLIGHT if in_flight is None else in_flight
            async with PrometheusSource(config, in_flight=shared) as source:
                return await source.read(at=FLEET["at"])

    return asyncio.run(go())


def _with_values(body: bytes) -> dict[str, Reply]:
    """The fleet's captured answers, with the value query answering ``body``."""
    answers = replies(FLEET)
    (query,) = value_queries(source_for(FLEET, "http://x.invalid"))
    answers[query] = Reply(body=body)
    return answers


def test_an_answer_of_empty_objects_is_refused_before_it_is_decoded() -> None:
    """Two million empty objects (6 MB, under the byte cap): refused as too large by a scan of
    the bytes, without building two million dicts."""
    body = HEAD + b",".join([b"{}"] * 2_000_000) + b"]}}"
    tracemalloc.start()
    try:
        started = time.perf_counter()
        result = _read(_with_values(body), max_series=10_000, max_response_bytes="64MiB")
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status is ReadStatus.TOO_LARGE, result.message
    assert "max_series" in (result.message or "")
    # Decoded, the dicts alone would take over 100 MB; the body and its copy take about 12.
    assert peak < 5 * len(body), peak
    assert elapsed < 5.0


@pytest.mark.parametrize("item", [b"[]", b'{"metric":{},"value":[]}'])
def test_containers_beyond_the_series_cap_are_refused(item: bytes) -> None:
    body = HEAD + b",".join([item] * 5_000) + b"]}}"
    result = _read(_with_values(body), max_series=1_000)
    assert result.status is ReadStatus.TOO_LARGE, result.message


def test_a_real_answer_passes_the_shape_check_at_its_own_series_count() -> None:
    series = len(json.loads(FLEET["answers"][0]["body"])["data"]["result"])
    result = _read(replies(FLEET), max_series=series + 10)
    assert result.status is ReadStatus.OK, result.message


def test_a_read_over_the_cap_keeps_nothing_alive(no_automatic_collection: None) -> None:
    """A body cut off at the cap leaves no chunk behind, with the cycle collector off: the
    failure's traceback must not hold the received bytes."""
    body = HEAD + b'{"metric":{},"value":[0,"1"]},' * 200_000 + b"{}]}}"  # about 6 MB
    answers = _with_values(body)
    _read(answers, max_response_bytes="1MiB")  # warm up: imports, the session's pools
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(5):
            result = _read(answers, max_response_bytes="1MiB")
            assert result.status is ReadStatus.TOO_LARGE, result.message
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Five failed reads of a megabyte each: what stays is bookkeeping, not bodies.
    assert after - before < 512 * 1024, after - before


def test_every_source_shares_one_budget_of_bytes_in_flight() -> None:
    """With the process's budget taken by other reads, a read gives up at once (too large)
    and gives back what it took; a read that ends gives back all it took."""
    shared = InFlight(1 << 20)
    ok = _read(replies(FLEET), in_flight=shared)
    assert ok.status is ReadStatus.OK and shared.held == 0
    shared.held = (1 << 20) - 100  # other sources' reads hold the budget
    refused = _read(replies(FLEET), in_flight=shared, max_response_bytes="64KiB")
    assert refused.status is ReadStatus.TOO_LARGE
    assert "in flight" in (refused.message or "")
    assert shared.held == (1 << 20) - 100


def test_eight_concurrent_bombs_never_hold_more_than_the_budget() -> None:
    """Eight sources answering compressed bombs at once: the bytes held together never pass
    the shared budget (each alone would reach its 1 MiB cap)."""
    shared = InFlight(2 << 20)
    peak = 0
    bomb = HEAD + b" " * (8 << 20)

    async def go() -> list[ReadResult]:
        nonlocal peak
        answers = {q: Reply(body=bomb, gzip=True) for q in _queries()}
        async with FakePrometheus(answers) as fake:
            sources = [
                PrometheusSource(
                    source_for(FLEET, fake.url, max_response_bytes="1MiB"), in_flight=shared
                )
                for _ in range(8)
            ]
            watching = True

            async def watch() -> None:
                nonlocal peak
                while watching:
                    peak = max(peak, shared.held)
                    await asyncio.sleep(0)

            watcher = asyncio.create_task(watch())
            try:
                return list(await asyncio.gather(*(s.read(at=FLEET["at"]) for s in sources)))
            finally:
                watching = False
                await watcher
                for s in sources:
                    await s.close()

    results = asyncio.run(go())
    assert all(r.status is ReadStatus.TOO_LARGE for r in results), [r.message for r in results]
    assert 0 < peak <= 2 << 20
    assert shared.held == 0


def _queries() -> list[str]:
    config = source_for(FLEET, "http://x.invalid")
    return [*value_queries(config), freshness_query(config)]


def _fleet_doc() -> tuple[dict[str, Any], str]:
    config = source_for(FLEET, "http://x.invalid")
    (query,) = value_queries(config)
    (answer,) = [a for a in FLEET["answers"] if a["query"] == query]
    return json.loads(answer["body"]), query


def test_a_sample_time_of_400_digits_costs_only_its_instance() -> None:
    doc, query = _fleet_doc()
    series = doc["data"]["result"]
    victim = series[0]["metric"]["instance"]
    series[0]["value"][0] = int("9" * 400)
    answers = replies(FLEET)
    answers[query] = Reply(body=json.dumps(doc).encode())
    result = _read(answers)
    assert result.status is ReadStatus.OK, result.message
    bad = {i.name: i.error for i in result.instances if i.error is not None}
    assert list(bad) == [victim]
    assert "sample time" in (bad[victim] or "")
    assert len(result.instances) > 1


def test_a_sample_time_far_ahead_is_reported_on_its_instance() -> None:
    config = source_for(FLEET, "http://x.invalid")
    fresh_query = freshness_query(config)
    (fresh,) = [a for a in FLEET["answers"] if a["query"] == fresh_query]
    doc = json.loads(fresh["body"])
    victim = doc["data"]["result"][0]["metric"]["instance"]
    ahead = FLEET["at"] + 80 * 365.25 * 86400
    for item in doc["data"]["result"]:
        if item["metric"]["instance"] == victim:
            item["value"][1] = repr(ahead)
    answers = replies(FLEET)
    answers[fresh_query] = Reply(body=json.dumps(doc).encode())
    result = _read(answers)
    assert result.status is ReadStatus.OK, result.message
    (inst,) = [i for i in result.instances if i.name == victim]
    assert inst.page is None and "ahead" in (inst.error or ""), inst.error
    others = [i for i in result.instances if i.name != victim]
    assert others and all(i.error is None for i in others)
    assert MAX_CLOCK_AHEAD < 3600


def test_no_part_of_a_token_in_any_message_whatever_the_cut(tmp_path: Any) -> None:
    """An error page and a warning that echo the bearer token at every offset around the
    places messages are cut: the read's message and warnings never hold four characters of
    it."""
    token = "tok-" + "9f8e7d6c5b4a" * 3
    (tmp_path / "token").write_text(token)
    parts = {token[i : i + 4] for i in range(len(token) - 3)}
    doc, query = _fleet_doc()

    async def go() -> list[ReadResult]:
        results = []
        async with FakePrometheus(replies(FLEET)) as fake:
            config = source_for(FLEET, fake.url, bearer_token_file=str(tmp_path / "token"))
            async with PrometheusSource(config) as source:
                for offset in range(150, 320, 3):
                    body = ("e" * offset + "Bearer " + token + " rest").encode()
                    warned = dict(doc, warnings=["w" * offset + token])
                    fake.respond = lambda q, b=body, w=warned, o=offset: (
                        Reply(status=502, body=b, content_type="text/plain")
                        if o % 2
                        else Reply(body=json.dumps(w).encode())
                        if q == query
                        else None
                    )
                    results.append(await source.read(at=FLEET["at"]))
        return results

    results = asyncio.run(go())
    assert {r.status for r in results} == {ReadStatus.HTTP_ERROR, ReadStatus.PARTIAL}
    for result in results:
        shown = " ".join([result.message or "", *result.warnings])
        assert not [p for p in parts if p in shown], shown
