"""An engine that closes kept-alive connections: the tap sends a request again, once, on a new
connection when the engine closed the kept-alive one it went out on before answering (the
race between the engine's idle timeout and the tap's reuse), and only then: never after a
new connection failed, never a streamed body (read from the client as it went out).

The engine here is a raw asyncio server, so that it can do what aiohttp's server never does:
read a request on a kept-alive connection and close it unanswered."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from specmon.tap.app import Tap
from specmon.tap.config import parse_tap_config

BODY = b'{"model":"tiny","choices":[],"timings":{"predicted_n":4,"draft_n":6,"draft_n_accepted":3}}'


@dataclass
class ClosingEngine:
    """Answers the first request of each connection (kept alive); closes a connection without
    answering when a second request arrives on it (``close_reused``), or every first request
    too (``close_all``)."""

    close_all: bool = False
    answered: list[bytes] = field(default_factory=list)
    dropped: int = 0
    connections: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}  # fmt: skip
                if "content-length" in headers:
                    body = await reader.readexactly(int(headers["content-length"]))
                elif headers.get("transfer-encoding") == "chunked":
                    body = b""
                    while True:
                        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                        body += (await reader.readexactly(size + 2))[:size]
                        if size == 0:
                            break
                else:
                    body = b""
                if served >= 1 or self.close_all:
                    self.dropped += 1
                    writer.close()
                    return
                served += 1
                self.answered.append(body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


@contextlib.asynccontextmanager
async def engine_and_tap(engine: ClosingEngine) -> AsyncIterator[tuple[Tap, str]]:
    server = await asyncio.start_server(engine.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    config = parse_tap_config(None, overrides={"upstream": f"http://127.0.0.1:{port}"})
    tap = Tap(config, listen=("127.0.0.1", 0))
    tap_port = await tap.start()
    try:
        yield tap, f"http://127.0.0.1:{tap_port}/completion"
    finally:
        await tap.stop()
        server.close()
        await server.wait_closed()


async def _post(url: str, data: bytes | AsyncIterator[bytes]) -> tuple[int, bytes]:
    # A new client connection per request: the client side is not what is tested.
    async with aiohttp.ClientSession() as client, client.post(url, data=data) as resp:
        return resp.status, await resp.read()


def test_a_request_on_a_connection_the_engine_closed_goes_again_once() -> None:
    async def main() -> None:
        engine = ClosingEngine()
        async with engine_and_tap(engine) as (tap, url):
            for i in range(4):
                status, body = await _post(url, b'{"n_predict":%d}' % i)
                assert (status, body) == (200, BODY)
            # 0: a new pooled connection, answered; 1: on it, kept alive, dropped unanswered,
            # then again on a new connection of its own (closed after); 2 and 3 the same.
            # Every request answered once, in order.
            assert engine.answered == [b'{"n_predict":%d}' % i for i in range(4)]
            assert (engine.dropped, engine.connections) == (2, 4)
            assert tap.counts.upstream_retries == 2
            assert tap.counts.upstream_errors["reset"] == 0
            assert tap.counts.totals("all") == (4, 24, 12, 0)

    asyncio.run(main())


def test_a_new_connection_closed_unanswered_is_not_sent_again() -> None:
    async def main() -> None:
        engine = ClosingEngine(close_all=True)
        async with engine_and_tap(engine) as (tap, url):
            status, body = await _post(url, b'{"n_predict":1}')
            assert status == 502 and b"closed the connection" in body
            assert engine.dropped == 1 and engine.connections == 1
            assert tap.counts.upstream_retries == 0
            assert tap.counts.upstream_errors["reset"] == 1

    asyncio.run(main())


def test_a_streamed_body_is_not_sent_again() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"n_predict":'
        yield b"2}"

    async def main() -> None:
        engine = ClosingEngine()
        async with engine_and_tap(engine) as (tap, url):
            assert (await _post(url, b'{"n_predict":1}'))[0] == 200
            # A chunked body (no length) is streamed to the engine as it is read from the
            # client: once the kept-alive connection fails it cannot be sent again.
            status, _ = await _post(url, chunks())
            assert status == 502
            assert engine.answered == [b'{"n_predict":1}']
            assert tap.counts.upstream_retries == 0

    asyncio.run(main())
