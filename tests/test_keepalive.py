"""The daemon's own plain-HTTP client (specmon/sources/keepalive.py) against a loopback server
that writes exactly the bytes each test scripts: framing (length, chunked, to the close),
reuse and its races, the caps, compression, broken and hostile answers; and fetch_page giving
the same results through it as through aiohttp."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Awaitable, Callable

import pytest
from yarl import URL

from specmon.sources import ScrapeResult
from specmon.sources.http import FetchError, fetch_page, open_pool, open_session
from specmon.sources.keepalive import IDLE_SECONDS, MAX_HEAD_BYTES, KeepAlivePool, PoolError

PAGE = b'vllm:spec_decode_num_drafts_total{model_name="m"} 12\n'

Handler = Callable[[bytes, asyncio.StreamWriter, int], Awaitable[bool]]


def ok(body: bytes, *extra: str) -> bytes:
    head = [b"HTTP/1.1 200 OK", b"Content-Type: text/plain; version=0.0.4"]
    head += [h.encode() for h in extra]
    if not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in extra):
        head.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class Server:
    """Answers each request with ``handler(request, writer, n)`` (n counts requests); the
    handler returns False to close the connection afterwards."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/metrics"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(request)
                keep = await self.handler(request, writer, len(self.requests))
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def answer(data: bytes | Callable[[int], bytes], *, keep: bool = True) -> Handler:
    async def handler(request: bytes, writer: asyncio.StreamWriter, n: int) -> bool:
        writer.write(data(n) if callable(data) else data)
        return keep

    return handler


async def get(
    pool: KeepAlivePool, url: str, *, cap: int = 1 << 20, headers: dict[str, str] | None = None
) -> bytes:
    response = await pool.get(URL(url), headers or {}, cap=cap, error_cap=64)
    assert response.status == 200, response
    return response.body


def run(coro: Awaitable[None]) -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_a_connection_is_kept_and_reused() -> None:
    async def go() -> None:
        async with Server(answer(lambda n: ok(PAGE + b"# %d\n" % n))) as server:
            pool = open_pool(purpose="test")
            bodies = [await get(pool, server.url) for _ in range(5)]
            assert bodies == [PAGE + b"# %d\n" % n for n in range(1, 6)]
            assert server.connections == 1 and pool.opened == 1 and pool.idle == 1
            first = server.requests[0].decode()
            assert first.startswith("GET /metrics HTTP/1.1\r\n")
            assert f"Host: {URL(server.url).host}:{URL(server.url).port}\r\n" in first
            assert "User-Agent: specmon/" in first and "(test)" in first
            pool.close()
            assert pool.idle == 0

    run(go())


def test_chunked_and_close_delimited_bodies() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nvllm:\r\n" + b"%x\r\n" % (len(PAGE) - 5) + PAGE[5:] + b"\r\n0\r\n\r\n"
    )
    to_close = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + PAGE

    async def go() -> None:
        async with Server(answer(chunked)) as server:
            pool = open_pool()
            assert await get(pool, server.url) == PAGE
            assert await get(pool, server.url) == PAGE
            assert server.connections == 1
        async with Server(answer(to_close, keep=False)) as server:
            pool = open_pool()
            assert await get(pool, server.url) == PAGE
            assert await get(pool, server.url) == PAGE
            assert server.connections == 2 and pool.idle == 0  # HTTP/1.0: never kept

    run(go())


def test_a_kept_connection_the_server_closed_is_retried_once() -> None:
    async def go() -> None:
        # The server answers once per connection and then closes it, as an engine whose idle
        # timeout ends just before the next scrape.
        async with Server(answer(ok(PAGE), keep=False)) as server:
            pool = open_pool()
            for _ in range(3):
                assert await get(pool, server.url) == PAGE
                await asyncio.sleep(0.05)  # the close reaches the client: the next is fresh
            assert server.connections == 3

    run(go())


def test_a_stale_connection_reused_in_the_race_is_retried() -> None:
    async def go() -> None:
        async with Server(answer(ok(PAGE))) as server:
            pool = open_pool()
            assert await get(pool, server.url) == PAGE
            # The kept connection dies unseen (no close noticed yet): the request written on it
            # gets no answer, and is made again on a new connection.
            kept = pool._idle[("127.0.0.1", URL(server.url).port or 0)][0]
            assert kept.transport is not None
            kept.transport.abort()
            kept.closed = False
            assert await get(pool, server.url) == PAGE
            assert pool.opened == 2

    run(go())


@pytest.mark.parametrize(
    ("reply", "kind", "words"),
    [
        (ok(b"x" * 2000), ScrapeResult.TOO_LARGE, "exceeds the 1000-byte cap"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b"x" * 1024,
            ScrapeResult.TOO_LARGE,
            "exceeds the 1000-byte cap",
        ),
        (
            b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"y" * MAX_HEAD_BYTES + b"\r\n\r\n",
            ScrapeResult.CONNECTION_ERROR,
            "headers larger",
        ),
        (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", ScrapeResult.CONNECTION_ERROR, "invalid HTTP response"),
        (ok(PAGE)[:-10], ScrapeResult.CONNECTION_ERROR, "server closed the connection"),
        (
            ok(b"\x1f\x8b\x08\x00garbage", "Content-Encoding: gzip"),
            ScrapeResult.CONNECTION_ERROR,
            "broken response body",
        ),
        (
            ok(gzip.compress(b"\n" * 100_000), "Content-Encoding: gzip"),
            ScrapeResult.TOO_LARGE,
            "exceeds the 1000-byte cap",
        ),
        (ok(PAGE, "Content-Encoding: br"), ScrapeResult.CONNECTION_ERROR, "Content-Encoding"),
    ],
    ids=["length", "chunked", "headers", "not-http", "cut", "bad-gzip", "gzip-bomb", "br"],
)
def test_bad_answers_fail_clearly_and_close_the_connection(
    reply: bytes, kind: ScrapeResult, words: str
) -> None:
    async def go() -> None:
        async with Server(answer(reply, keep=False)) as server:
            pool = open_pool()
            with pytest.raises(PoolError) as caught:
                await get(pool, server.url, cap=1000)
            assert caught.value.kind is kind
            assert words in str(caught.value)
            assert pool.idle == 0

    run(go())


def test_a_declared_length_over_the_cap_is_refused_before_the_body() -> None:
    async def go() -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n"
        async with Server(answer(head)) as server:  # and then never sends the body
            pool = open_pool()
            with pytest.raises(PoolError, match="10000000 bytes exceeds"):
                await get(pool, server.url, cap=1000)

    run(go())


def test_gzip_is_read_and_an_error_body_is_cut_to_its_cap() -> None:
    async def go() -> None:
        zipped = ok(gzip.compress(PAGE), "Content-Encoding: gzip")
        async with Server(answer(zipped)) as server:
            pool = open_pool()
            assert await get(pool, server.url) == PAGE
        error = b"HTTP/1.1 503 Busy\r\nContent-Length: 5000\r\n\r\n" + b"e" * 5000
        async with Server(answer(error)) as server:
            pool = open_pool()
            response = await pool.get(URL(server.url), {}, cap=1 << 20, error_cap=64)
            assert (response.status, response.body) == (503, b"e" * 64)
            assert pool.idle == 0  # the rest of the body was not read: not reusable

    run(go())


def test_bytes_after_the_answer_and_cancellation_close_the_connection() -> None:
    async def go() -> None:
        async with Server(answer(ok(PAGE) + b"HTTP/1.1 200 OK\r\n\r\n")) as server:
            pool = open_pool()
            assert await get(pool, server.url) == PAGE
            assert pool.idle == 0

        async def slow(request: bytes, writer: asyncio.StreamWriter, n: int) -> bool:
            writer.write(ok(PAGE)[:20])
            await asyncio.sleep(10)
            return False

        async with Server(slow) as server:
            pool = open_pool()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(get(pool, server.url), 0.2)
            assert pool.idle == 0

    run(go())


def test_a_header_that_would_inject_is_refused_and_never_sent() -> None:
    async def go() -> None:
        async with Server(answer(ok(PAGE))) as server:
            pool = open_pool()
            with pytest.raises(PoolError, match="newline"):
                await get(pool, server.url, headers={"X-Tenant": "a\r\nX-Evil: 1"})
            assert server.requests == []
            assert await get(pool, server.url, headers={"Authorization": "Bearer t"}) == PAGE
            assert b"Authorization: Bearer t\r\n" in server.requests[0]

    run(go())


def test_fetch_page_reads_the_same_through_either_client() -> None:
    """Redirects (within the origin), errors and pages: the same outcome as aiohttp's."""

    async def handler(request: bytes, writer: asyncio.StreamWriter, n: int) -> bool:
        path = request.split(b" ")[1]
        if path == b"/moved":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: /metrics\r\nContent-Length: 0\r\n\r\n")
        elif path == b"/missing":
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno\n")
        elif path == b"/loop":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n")
        elif path == b"/other-scheme":
            writer.write(b"HTTP/1.1 302 Found\r\nLocation: ftp://x/\r\nContent-Length: 0\r\n\r\n")
        else:
            writer.write(ok(PAGE))
        return True

    async def outcome(url: str, pool: KeepAlivePool | None) -> tuple[object, ...]:
        async with open_session() as session:
            try:
                got = await fetch_page(
                    session, url, timeout=5, max_bytes=1 << 20, compression=False, pool=pool
                )
            except FetchError as exc:
                return ("error", exc.kind, str(exc))
            return ("page", got.text, got.content_type, got.size)

    async def go() -> None:
        async with Server(handler) as server:
            base = server.url.rsplit("/", 1)[0]
            pool = open_pool()
            for path in ("/metrics", "/moved", "/missing", "/loop", "/other-scheme"):
                ours = await outcome(base + path, pool)
                theirs = await outcome(base + path, None)
                assert ours == theirs, path
            assert pool.opened == 1  # every hop above on one kept connection

    run(go())


def test_kept_connections_past_their_idle_time_are_closed() -> None:
    now = [0.0]

    async def go() -> None:
        async with Server(answer(ok(PAGE))) as a, Server(answer(ok(PAGE))) as b:
            pool = KeepAlivePool(user_agent="t", clock=lambda: now[0])
            assert await get(pool, a.url) == PAGE
            assert await get(pool, b.url) == PAGE
            assert pool.idle == 2
            # Later than the idle time: a's connection (never asked for again, as a target
            # taken out of the config) is closed by the sweep when b's answer comes back.
            now[0] = IDLE_SECONDS + 1
            assert await get(pool, b.url) == PAGE
            assert pool.idle == 1
            assert b.connections == 2  # b's kept one was too old to reuse as well

    run(go())
