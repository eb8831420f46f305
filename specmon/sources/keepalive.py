"""The daemon's own HTTP/1.1 client for its scrapes of plain ``http://`` pages: kept-alive
connections per origin, an :class:`asyncio.Protocol` each, responses parsed by httptools
(llhttp, the parser aiohttp itself is built on).

Why not aiohttp's client here: at 1,000 targets every 5 s its per-request machinery (request
and response objects, the connector's pool, a stream reader, header multidicts) cost about
0.23 ms of CPU a scrape more than this client, a fifth of a whole scrape (bench/RESULTS.md,
"2026-12-03, evening"). Everything else keeps aiohttp: ``https://`` targets, compression,
credentials in the URL, the one-off commands, the Prometheus source.

The same limits as the aiohttp path (:func:`specmon.sources.http.fetch_page` decides which path
a hop takes, follows redirects and words the errors): the body is capped as it arrives, the
status line and headers together at :data:`MAX_HEAD_BYTES`, a compressed body is capped after
decompression, and the caller's deadline cancels a request at any point. A connection is reused
only after a complete response the server agreed to keep alive; anything else closes it. A
reused connection that the server had closed before answering (its idle timeout) is retried
once on a new one, as aiohttp does.
"""

from __future__ import annotations

import asyncio
import os
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httptools
from yarl import URL

from specmon.sources import ScrapeResult

__all__ = [
    "IDLE_SECONDS",
    "MAX_HEAD_BYTES",
    "MAX_IDLE",
    "HopResponse",
    "KeepAlivePool",
    "PoolError",
    "eligible",
]

#: Status line and headers together, bytes (aiohttp: 8,190 a line, 32,768 for all headers).
MAX_HEAD_BYTES = 32 * 1024
#: A kept connection unused this long is closed instead of reused (aiohttp's keep-alive: 15 s).
IDLE_SECONDS = 15.0
#: Kept connections at most, over all origins (more are closed after their response).
MAX_IDLE = 8192


class PoolError(Exception):
    """A hop that produced no response: ``kind`` is a scrape result, the message names no
    header (headers may carry secrets)."""

    def __init__(self, kind: ScrapeResult, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True)
class HopResponse:
    """One response: the status, the few headers specmon reads, the body within its cap."""

    status: int
    content_type: str
    location: str | None
    body: bytes


def eligible(url: URL, *, compression: bool) -> bool:
    """Whether a request to ``url`` takes this client: plain HTTP, no credentials in the URL,
    no compression asked for (a server that compresses anyway is still read)."""
    return (
        url.scheme == "http"
        and not compression
        and url.raw_host is not None
        and url.user is None
        and url.password is None
    )


class _Stop(Exception):
    """Raised from a parser callback to stop reading (the outcome is already set)."""


_REDIRECTS = frozenset((301, 302, 303, 307, 308))


class _Connection(asyncio.Protocol):
    """One TCP connection and the response being read on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.received = 0
        self._waiter: asyncio.Future[HopResponse] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._cap = 0
        self._error_cap = 0
        self._head = 0
        self._status = 0
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._size = 0
        self._headers_done = False
        self._truncated = False
        self._complete = False
        self.reusable = False

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._headers_done and self._close_delimited():
            # No length and not chunked: the body ends where the connection does.
            self._finish()
            return
        waiter.set_exception(
            PoolError(ScrapeResult.CONNECTION_ERROR, "server closed the connection")
        )

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._parser is None:
            # Bytes nobody asked for (an idle connection, or after a complete response):
            # this connection's framing cannot be trusted any more.
            self.close()
            return
        self.received += len(data)
        try:
            self._parser.feed_data(data)
        except _Stop:
            pass
        except httptools.HttpParserCallbackError as exc:
            if not isinstance(exc.__context__, _Stop):
                self._fail(ScrapeResult.CONNECTION_ERROR, "invalid HTTP response")
        except httptools.HttpParserUpgrade:
            self._fail(ScrapeResult.CONNECTION_ERROR, "invalid HTTP response: protocol upgrade")
        except httptools.HttpParserError as exc:
            self._fail(ScrapeResult.CONNECTION_ERROR, f"invalid HTTP response: {_reason(exc)}")

    # -- httptools callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head += len(name) + len(value) + 4
        if self._head > MAX_HEAD_BYTES:
            self._fail(
                ScrapeResult.CONNECTION_ERROR,
                f"response headers larger than {MAX_HEAD_BYTES} bytes",
            )
            raise _Stop
        key = name.lower()
        if key not in self._headers:
            self._headers[key] = value

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        self._headers_done = True
        self._status = self._parser.get_status_code()
        encoded = self._encoding() not in ("", "identity")
        if self._status != 200:
            self._cap = self._error_cap
            return
        length = self._headers.get(b"content-length")
        declared = int(length) if length is not None and length.strip().isdigit() else None
        if declared is not None and not encoded and declared > self._cap:
            self._fail(
                ScrapeResult.TOO_LARGE,
                f"response of {declared} bytes exceeds the {self._cap}-byte cap",
            )
            raise _Stop

    def on_body(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._cap:
            if self._status != 200:
                self._body.append(chunk[: len(chunk) - (self._size - self._cap)])
                self._truncated = True
                self._finish()
                raise _Stop
            self._fail(ScrapeResult.TOO_LARGE, f"response exceeds the {self._cap}-byte cap")
            raise _Stop
        self._body.append(chunk)

    def on_message_begin(self) -> None:
        if self._complete:  # a second response in the same bytes: never read, never reused
            self.reusable = False
            raise _Stop

    def on_message_complete(self) -> None:
        assert self._parser is not None
        self._complete = True
        self.reusable = self._parser.should_keep_alive()
        self._finish()

    # -- the request

    def start(self, request: bytes, *, cap: int, error_cap: int) -> asyncio.Future[HopResponse]:
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._cap, self._error_cap = cap, error_cap
        self._head = self._status = self._size = 0
        self._headers = {}
        self._body = []
        self._headers_done = self._truncated = self._complete = self.reusable = False
        self.received = 0
        self.transport.write(request)
        return self._waiter

    def close(self) -> None:
        self.closed = True
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    def _encoding(self) -> str:
        return self._headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()

    def _close_delimited(self) -> bool:
        chunked = b"chunked" in self._headers.get(b"transfer-encoding", b"").lower()
        return b"content-length" not in self._headers and not chunked

    def _fail(self, kind: ScrapeResult, message: str) -> None:
        self.reusable = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(PoolError(kind, message))

    def _finish(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._truncated:
            self.reusable = False
        try:
            body = _decoded(b"".join(self._body), self._encoding(), self._cap, self._truncated)
        except PoolError as exc:
            self.reusable = False
            waiter.set_exception(exc)
            return
        location = self._headers.get(b"location") if self._status in _REDIRECTS else None
        waiter.set_result(
            HopResponse(
                status=self._status,
                content_type=self._headers.get(b"content-type", b"").decode("latin-1"),
                location=None if location is None else location.decode("latin-1"),
                body=body,
            )
        )


def _decoded(body: bytes, encoding: str, cap: int, truncated: bool) -> bytes:
    """The body without its content coding, within ``cap`` decoded bytes."""
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "x-gzip", "deflate"):
        raise PoolError(
            ScrapeResult.CONNECTION_ERROR, f"unsupported Content-Encoding {encoding[:40]!r}"
        )
    # gzip or zlib by their headers (wbits 47), raw deflate for a bare "deflate" stream.
    for wbits in (47, -15) if encoding == "deflate" else (47,):
        inflater = zlib.decompressobj(wbits=wbits)
        try:
            out = inflater.decompress(body, cap + 1)
        except zlib.error:
            continue
        if len(out) > cap:
            if truncated:
                return out[:cap]
            raise PoolError(ScrapeResult.TOO_LARGE, f"response exceeds the {cap}-byte cap")
        if not truncated and not inflater.eof:
            raise PoolError(ScrapeResult.CONNECTION_ERROR, "broken response body: truncated")
        return out
    raise PoolError(ScrapeResult.CONNECTION_ERROR, f"broken response body: bad {encoding} data")


def _reason(exc: BaseException) -> str:
    return str(exc)[:120].replace("\r", " ").replace("\n", " ")


def _host_header(url: URL) -> tuple[str, int, str]:
    host = url.raw_host or ""
    port = url.port or 80
    shown = f"[{host}]" if ":" in host else host
    return host, port, shown if url.is_default_port() else f"{shown}:{port}"


class KeepAlivePool:
    """Kept-alive connections by origin, for many targets' sequential scrapes.

    ``max_connections`` requests at once (more wait, inside their deadline, as with aiohttp's
    connector); up to :data:`MAX_IDLE` idle connections kept, each for :data:`IDLE_SECONDS`.
    """

    def __init__(
        self,
        *,
        user_agent: str,
        max_connections: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._agent = user_agent
        self._clock = clock
        self._slots = asyncio.Semaphore(max(1, max_connections))
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._idle_count = 0
        self._requests: dict[tuple[URL, tuple[tuple[str, str], ...]], bytes] = {}
        self._swept = clock()
        self.opened = 0

    def _request(self, url: URL, headers: Mapping[str, str]) -> bytes:
        """The request's bytes (kept for configured URLs and headers; bounded)."""
        key = (url, tuple(headers.items()))
        found = self._requests.get(key)
        if found is not None:
            return found
        _, _, host = _host_header(url)
        given = {name.lower() for name in headers}
        lines = [f"GET {url.raw_path_qs or '/'} HTTP/1.1"]
        if "host" not in given:
            lines.append(f"Host: {host}")
        if "user-agent" not in given:
            lines.append(f"User-Agent: {self._agent}")
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n\0") or not name or ":" in name:
                raise PoolError(
                    ScrapeResult.CONNECTION_ERROR,
                    "a configured header has a newline, NUL or colon in it",
                )
            lines.append(f"{name}: {value}")
        try:
            request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError:
            raise PoolError(
                ScrapeResult.CONNECTION_ERROR, "a configured header is not Latin-1 text"
            ) from None
        if len(self._requests) >= 4096:
            self._requests.clear()
        self._requests[key] = request
        return request

    async def get(
        self, url: URL, headers: Mapping[str, str], *, cap: int, error_cap: int
    ) -> HopResponse:
        """GET ``url`` (see :func:`eligible`); the body of a 200 within ``cap`` bytes (else
        ``too_large``), of any other status its first ``error_cap`` bytes."""
        request = self._request(url, headers)
        host, port, _ = _host_header(url)
        origin = (host, port)
        async with self._slots:
            conn = self._take(origin)
            reused = conn is not None
            for attempt in (0, 1):
                if conn is None:
                    conn = await self._open(host, port)
                try:
                    response = await conn.start(request, cap=cap, error_cap=error_cap)
                except PoolError:
                    retry = reused and attempt == 0 and conn.closed and conn.received == 0
                    conn.close()
                    if not retry:
                        raise
                    conn, reused = None, False
                    continue
                except BaseException:
                    conn.close()  # cancelled (the deadline) or worse: state unknown
                    raise
                self._give(origin, conn)
                return response
        raise AssertionError("unreachable")  # pragma: no cover

    async def _open(self, host: str, port: int) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(_Connection, host, port)
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
            raise PoolError(
                ScrapeResult.CONNECTION_ERROR, f"cannot connect to {host}:{port}: {reason}"
            ) from None
        self.opened += 1
        return conn

    def _take(self, origin: tuple[str, int]) -> _Connection | None:
        kept = self._idle.get(origin)
        now = self._clock()
        while kept:
            conn = kept.pop()
            self._idle_count -= 1
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def _give(self, origin: tuple[str, int], conn: _Connection) -> None:
        now = self._clock()
        if now - self._swept > IDLE_SECONDS:
            self._sweep(now)
        if not conn.reusable or conn.closed or self._idle_count >= MAX_IDLE:
            conn.close()
            return
        conn.idle_since = now
        self._idle.setdefault(origin, []).append(conn)
        self._idle_count += 1

    def _sweep(self, now: float) -> None:
        """Close kept connections past their idle time or closed by the server (a target
        removed from the config is never asked for again), every :data:`IDLE_SECONDS`."""
        self._swept = now
        for origin in list(self._idle):
            kept = self._idle[origin]
            alive = []
            for conn in kept:
                if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                    alive.append(conn)
                else:
                    conn.close()
            self._idle_count -= len(kept) - len(alive)
            if alive:
                self._idle[origin] = alive
            else:
                del self._idle[origin]

    @property
    def idle(self) -> int:
        """Connections kept for reuse now."""
        return self._idle_count

    def close(self) -> None:
        """Close every kept connection (requests in flight close theirs when they end)."""
        for kept in self._idle.values():
            for conn in kept:
                conn.close()
        self._idle.clear()
        self._idle_count = 0
