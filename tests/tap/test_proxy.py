"""The tap in-process, between a client and a fake engine on loopback: responses byte for byte
as the engine sent them, counts per class equal to the sums of the responses' own fields, and
the hostile cases (a response that never ends, a malformed final chunk, a 100 MB body, an
upstream that resets mid-stream, a client that disconnects): the tap stays up, other streams
are unaffected, every response is passed on as the engine sent it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specmon.tap.app import Tap
from specmon.tap.body import Keeper
from specmon.tap.config import parse_tap_config
from specmon.tap.fields import Unparsed
from tests.support.tap_engine import FakeEngine

CHAT = "/v1/chat/completions"


@dataclass
class Rig:
    engine: FakeEngine
    engine_url: str
    tap: Tap
    tap_url: str
    client: aiohttp.ClientSession


@contextlib.asynccontextmanager
async def rig(**config: Any) -> AsyncIterator[Rig]:
    engine = FakeEngine()
    runner = web.AppRunner(engine.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    overrides = {"upstream": f"http://127.0.0.1:{port}", "class_header": "x-class",
                 "classes": ["code", "chat"]}  # fmt: skip
    tap = Tap(parse_tap_config(config or None, overrides=overrides), listen=("127.0.0.1", 0))
    tap_port = await tap.start()
    client = aiohttp.ClientSession(auto_decompress=False)
    try:
        yield Rig(engine, f"http://127.0.0.1:{port}", tap, f"http://127.0.0.1:{tap_port}", client)
    finally:
        await client.close()
        await tap.stop()
        await runner.cleanup()


async def fetch(
    rig: Rig,
    base: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    bare: bool = False,
) -> tuple[int, str, bytes]:
    """One request; ``bare``: without the headers the client library adds by itself (no
    Accept-Encoding, User-Agent, Accept): the tap must not add them either."""
    data = None if body is None else json.dumps(body).encode()
    method = "GET" if body is None else "POST"
    hdrs = {"Content-Type": "application/json", **(headers or {})} if data else headers
    skip = ("Accept-Encoding", "User-Agent", "Accept") if bare else ()
    async with rig.client.request(
        method, base + path, data=data, headers=hdrs, skip_auto_headers=skip
    ) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def _chat(words: int, *, stream: bool = False, usage: bool = False) -> dict[str, Any]:
    doc: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": words, "stream": stream}  # fmt: skip
    if usage:
        doc["stream_options"] = {"include_usage": True}
    return doc


def _fields(body: bytes) -> tuple[int, int, int]:
    """(drafted, accepted, steps) of one response, read by the test itself."""
    if body.startswith(b"data:"):
        events = [json.loads(line[5:]) for line in body.split(b"\n")
                  if line.startswith(b"data:") and line != b"data: [DONE]"]  # fmt: skip
        spec = next(e["metrics"]["speculative_decoding"] for e in events if "metrics" in e)
    else:
        spec = json.loads(body)["metrics"]["speculative_decoding"]
    return spec["num_draft_tokens"], spec["num_accepted_draft_tokens"], spec["num_spec_steps"]


def test_every_response_is_byte_identical_and_the_request_unchanged() -> None:
    async def main() -> None:
        async with rig() as r:
            cases: list[tuple[str, Any, dict[str, str], bool]] = [
                (CHAT, _chat(9), {"x-class": "code", "Authorization": "Bearer k"}, False),
                (CHAT, _chat(21, stream=True, usage=True), {"x-class": "chat"}, True),
                (CHAT, _chat(5, stream=True), {}, False),
                ("/completion", {"n_predict": 33}, {"X-Extra": "1"}, True),
                ("/v1/models?x=1&y=%20", None, {"Accept": "application/json"}, False),
            ]
            for path, body, headers, bare in cases:
                direct = await fetch(r, r.engine_url, path, body, headers, bare=bare)
                tapped = await fetch(r, r.tap_url, path, body, headers, bare=bare)
                assert tapped == direct, path
                before, after = r.engine.seen[-2], r.engine.seen[-1]
                assert (after.method, after.path, after.body) == (
                    before.method, before.path, before.body,
                )  # fmt: skip
                drop = {"host"}
                assert [h for h in after.headers if h[0].lower() not in drop] == [
                    h for h in before.headers if h[0].lower() not in drop
                ], path

    _run(main())


def test_counts_per_class_are_the_sums_of_the_responses_fields() -> None:
    async def main() -> None:
        async with rig() as r:
            expected: dict[str, list[int]] = {"code": [0, 0, 0, 0], "chat": [0, 0, 0, 0],
                                              "other": [0, 0, 0, 0]}  # fmt: skip
            plan = [("code", 10, False), ("chat", 31, True), ("code", 7, True),
                    ("zzz", 12, False), (None, 4, True), ("chat", 40, False)]  # fmt: skip
            for name, words, stream in plan:
                headers = {} if name is None else {"x-class": name}
                _, _, body = await fetch(r, r.tap_url, CHAT, _chat(words, stream=stream,
                                                                    usage=stream), headers)  # fmt: skip
                drafted, accepted, steps = _fields(body)
                key = name if name in ("code", "chat") else "other"
                for i, v in enumerate((1, drafted, accepted, steps)):
                    expected[key][i] += v
            for key, want in expected.items():
                assert list(r.tap.counts.totals(key)) == want, key
            _, content_type, page = await fetch(r, r.tap_url, "/metrics")
            assert content_type.startswith("text/plain")
            got: dict[tuple[str, str], float] = {}
            for family in text_string_to_metric_families(page.decode()):
                for sample in family.samples:
                    if "class" in sample.labels and sample.name.endswith("_total"):
                        got[(sample.name, sample.labels["class"])] = sample.value
            for key, (requests, drafted, accepted, steps) in expected.items():
                assert got[("specmon_tap_requests_total", key)] == requests
                assert got[("specmon_tap_draft_tokens_total", key)] == drafted
                assert got[("specmon_tap_accepted_tokens_total", key)] == accepted
                assert got[("specmon_tap_spec_steps_total", key)] == steps
            assert r.tap.counts.unparsed[Unparsed.NO_FIELDS] == 0

    _run(main())


def test_a_stream_without_include_usage_passes_and_counts_as_no_fields() -> None:
    """The tap does not add include_usage (it passes requests through unchanged)."""

    async def main() -> None:
        async with rig() as r:
            _, _, body = await fetch(r, r.tap_url, CHAT, _chat(6, stream=True), {"x-class": "code"})
            assert b'"usage"' not in body and body.endswith(b"data: [DONE]\n\n")
            assert json.loads(r.engine.seen[-1].body).get("stream_options") is None
            assert r.tap.counts.unparsed[Unparsed.NO_FIELDS] == 1
            assert r.tap.counts.totals("code") == (0, 0, 0, 0)

    _run(main())


def test_llamacpp_accepted_is_clamped_through_the_tap() -> None:
    async def main() -> None:
        async with rig() as r:
            await fetch(r, r.tap_url, "/completion", {"n_predict": 10})
            # draft_n 20, draft_n_accepted 15 > predicted_n 10: clamped to 10; no steps.
            assert r.tap.counts.totals("other") == (1, 20, 10, 0)

    _run(main())


def test_a_malformed_final_chunk_is_passed_on_and_counted() -> None:
    async def main() -> None:
        async with rig() as r:
            path = "/malformed" + CHAT
            direct = await fetch(r, r.engine_url, path, _chat(3, stream=True, usage=True))
            tapped = await fetch(r, r.tap_url, path, _chat(3, stream=True, usage=True))
            assert tapped == direct
            assert r.tap.counts.unparsed[Unparsed.MALFORMED] == 1
            assert (await fetch(r, r.tap_url, CHAT, _chat(4)))[0] == 200  # still up

    _run(main())


def test_a_100_mb_body_passes_whole_with_bounded_memory() -> None:
    """100 MB through the tap: every byte arrives (same digest as the engine's), the fields at
    its end are read, and the tap's allocations stay far below the body's size."""
    size = 100 * 2**20

    async def main() -> None:
        async with rig() as r:
            tracemalloc.start()
            digest = hashlib.sha256()
            received = 0
            async with r.client.post(r.tap_url + "/big/completion",
                                     json={"bytes": size}) as resp:  # fmt: skip
                assert resp.status == 200
                async for chunk in resp.content.iter_any():
                    digest.update(chunk)
                    received += len(chunk)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            want = hashlib.sha256(b'{"model":"tiny","content":"')
            for _ in range(size // 2**20):
                want.update(b"z" * 2**20)
            want.update(
                b'","timings":{"prompt_n":3,"predicted_n":500,"draft_n":800,"draft_n_accepted":300}}'
            )
            assert digest.hexdigest() == want.hexdigest()
            assert received > size
            assert r.tap.counts.totals("other") == (1, 800, 300, 0)
            # Engine, tap and client share the process: the engine's 1 MiB chunks and the
            # transports' buffers, a few MiB, never the body.
            assert peak < 24 * 2**20, peak

    _run(main())


async def _read_into(r: Rig, url: str, got: list[bytes]) -> None:
    async with r.client.post(url, json=_chat(3, stream=True)) as resp:
        async for chunk in resp.content.iter_any():
            got.append(chunk)


def test_an_upstream_reset_mid_stream_cuts_the_client_too() -> None:
    async def main() -> None:
        async with rig() as r:
            path = "/reset" + CHAT
            for base in (r.engine_url, r.tap_url):
                got: list[bytes] = []
                with pytest.raises(aiohttp.ClientPayloadError):
                    await _read_into(r, base + path, got)
                assert b"".join(got).count(b"data:") == 3  # what the engine sent before it broke
            counts = r.tap.counts
            assert counts.upstream_errors["reset"] == 1
            assert counts.unparsed[Unparsed.INCOMPLETE] == 1
            assert (await fetch(r, r.tap_url, CHAT, _chat(4)))[0] == 200

    _run(main())


def test_a_response_that_never_ends_and_a_client_that_leaves() -> None:
    """A never-ending stream flows while other requests complete; when its client leaves, the
    tap closes the engine's request (the engine's handler ends) and stays up."""

    async def main() -> None:
        async with rig() as r:
            resp = await r.client.post(r.tap_url + "/endless" + CHAT, json=_chat(1, stream=True))
            got = 0
            async for _chunk in resp.content.iter_any():
                got += 1
                if got >= 5:
                    break
            assert r.engine.endless == 1
            # Other streams are unaffected meanwhile.
            for words in (3, 8):
                status, _, body = await fetch(r, r.tap_url, CHAT, _chat(words, stream=True,
                                                                        usage=True))  # fmt: skip
                assert status == 200 and body.endswith(b"data: [DONE]\n\n")
            resp.close()  # the client leaves
            for _ in range(500):
                if r.engine.endless == 0 and r.tap.counts.in_flight == 0:
                    break
                await asyncio.sleep(0.01)
            assert r.engine.endless == 0 and r.engine.abandoned == 1
            assert r.tap.counts.in_flight == 0
            assert r.tap.counts.client_disconnects == 1
            assert r.tap.counts.unparsed[Unparsed.INCOMPLETE] == 1
            assert (await fetch(r, r.tap_url, CHAT, _chat(4)))[0] == 200

    _run(main())


def test_an_engine_that_cannot_be_reached_or_does_not_answer() -> None:
    async def main() -> None:
        async with rig() as r:
            config = parse_tap_config(
                {"timeouts": {"connect": "1s", "idle": "300ms"}},
                overrides={"upstream": r.engine_url.rsplit(":", 1)[0] + ":9"},
            )
            dead = Tap(config, listen=("127.0.0.1", 0))
            port = await dead.start()
            try:
                status, _, body = await fetch(r, f"http://127.0.0.1:{port}", CHAT, _chat(3))
                assert status == 502 and b"cannot reach" in body
                assert dead.counts.upstream_errors["connect"] == 1
            finally:
                await dead.stop()
            # An idle timeout mid-stream (the endless stream writes every 10 ms: a 1 ms idle
            # timeout is exceeded at once).
            r.tap.config = parse_tap_config(
                {"timeouts": {"idle": "1ms"}}, overrides={"upstream": r.engine_url}
            )
            with contextlib.suppress(aiohttp.ClientError):
                await fetch(r, r.tap_url, "/endless" + CHAT, _chat(1, stream=True))
            counts = r.tap.counts
            assert counts.upstream_errors["timeout"] == 1

    _run(main())


def test_keeper_memory_is_bounded_per_response() -> None:
    keeper = Keeper(limit=65536, stream=True)
    for _ in range(10_000):
        keeper.feed(b"x" * 1000)
    assert len(keeper.tail()) <= 65536 + 1000
