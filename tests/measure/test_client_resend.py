"""measure's client against a server that drops connections: a request that got nothing back
is sent once more on another connection (a server closes idle keep-alive connections; the
request caught on one never reached it), counted; one whose answer had begun is not."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from specmon.measure.client import KEEPALIVE_SECONDS, Client, RequestError, open_session
from specmon.measure.endpoints import endpoint
from specmon.measure.stream import Streamed

CHUNK = (
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[],"usage":{"completion_tokens":1,"prompt_tokens":2}}\n\n'
    b"data: [DONE]\n\n"
)


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await reader.readexactly(length)


def _serve(
    behaviour: Callable[[int], bytes | None],
) -> Callable[[], Awaitable[tuple[str, list[int]]]]:
    """A raw HTTP server: connection n (from 0) gets ``behaviour(n)`` as its whole answer, or
    is closed unanswered (None)."""
    connections: list[int] = []

    async def start() -> tuple[str, list[int]]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            n = len(connections)
            connections.append(n)
            await _read_request(reader)
            answer = behaviour(n)
            if answer is not None:
                writer.write(answer)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1", connections

    return start


def _stream_response(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


async def _chat(url: str) -> tuple[Client, Streamed | RequestError]:
    async with open_session(2) as session:
        client = Client(session, api_key=None)
        payload = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
        try:
            result: Streamed | RequestError = await client.chat_stream(
                endpoint(url), payload, timeout=10
            )
        except RequestError as exc:
            result = exc
        return client, result


def test_a_request_that_got_nothing_back_is_sent_once_more() -> None:
    async def run() -> tuple[Client, Streamed | RequestError, list[int]]:
        url, connections = await _serve(lambda n: None if n == 0 else _stream_response(CHUNK))()
        client, result = await _chat(url)
        return client, result, connections

    client, result, connections = asyncio.run(run())
    assert isinstance(result, Streamed), result
    assert result.answer.text == "hi"
    assert client.resent == 1 and connections == [0, 1]


def test_twice_nothing_is_an_error_and_a_begun_answer_is_never_resent() -> None:
    async def run(
        behaviour: Callable[[int], bytes | None],
    ) -> tuple[Client, Streamed | RequestError, list[int]]:
        url, connections = await _serve(behaviour)()
        client, result = await _chat(url)
        return client, result, connections

    client, result, connections = asyncio.run(run(lambda n: None))
    assert isinstance(result, RequestError) and client.resent == 1 and connections == [0, 1]
    # Headers and half an event, then the connection drops: the answer had begun.
    cut = _stream_response(CHUNK)[: len(_stream_response(CHUNK)) - 40]
    client, result, connections = asyncio.run(run(lambda n: cut))
    assert isinstance(result, RequestError) and client.resent == 0 and connections == [0]


def test_idle_connections_are_let_go_before_servers_let_go_of_them() -> None:
    """llama.cpp (cpp-httplib) and vLLM (uvicorn) close a connection idle for 5 s: the client
    drops its idle ones first, so it does not send on one they are closing."""
    assert KEEPALIVE_SECONDS < 5.0
