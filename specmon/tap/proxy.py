"""The reverse proxy: every request passed to the engine and every response passed back,
unchanged and unbuffered; the per-request fields read from what was kept, afterwards.

- Requests: method, path, query, headers and body as the client sent them (a body of known
  length up to 64 KiB passed on with the request's head, which it arrived with; a longer or
  chunked one streamed, never read whole), less the hop-by-hop headers; the tap adds none of its own (no
  ``Accept-Encoding``, no ``User-Agent``) so the engine answers as it would answer the client.
- Responses: status, headers (less hop-by-hop) and every chunk written to the client as it
  arrives (``iter_any``: no waiting for a buffer to fill), then kept in a bounded
  :class:`~specmon.tap.body.Keeper`. Only after the last chunk has gone out are the fields read
  (:mod:`specmon.tap.fields`); a response is never altered, delayed or failed because its
  fields could not be read: it is counted in ``specmon_tap_unparsed_responses_total``.
- Failures: an engine that cannot be reached answers 502, one silent past the idle timeout
  before its headers 504; an engine that drops or stalls mid-response gets its client's
  connection cut too (the client sees a cut response, as it would from the engine); a client
  that goes away closes the engine's request (the engine stops generating).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, MultiMapping

from specmon.logs import Logger
from specmon.tap import classify
from specmon.tap.body import Keeper, documents
from specmon.tap.config import TapConfig
from specmon.tap.fields import Unparsed, figures_from
from specmon.tap.metrics import TapCounts

__all__ = ["GENERATION_PATHS", "HOP_BY_HOP", "Proxy", "is_generation", "reuse_trace"]

#: Headers that describe one connection, not the message (RFC 9110 7.6.1), and Host (the
#: client library sets the upstream's).
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
#: Headers the client library would otherwise add to the upstream request by itself.
_NO_AUTO_HEADERS: Final = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
#: A request body of known length up to this many bytes is passed on in one write with the
#: request's head (it arrived with it); longer or chunked bodies are streamed as they come.
SMALL_BODY = 64 * 1024
#: Paths (their ends) whose POST responses carry a generation's fields.
GENERATION_PATHS: Final = (
    "/chat/completions",
    "/completions",
    "/completion",
    "/generate",
    "/infill",
    "/responses",
    "/messages",
)


def is_generation(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith(GENERATION_PATHS)


def _forwarded(headers: MultiMapping[str]) -> CIMultiDict[str]:
    """The end-to-end headers of a message: hop-by-hop ones and those its Connection header
    names left out, repeated headers kept in order."""
    items = list(headers.items())
    named = {
        token.strip().lower()
        for key, value in items
        if key.lower() == "connection"
        for token in value.split(",")
    }
    out: CIMultiDict[str] = CIMultiDict()
    for key, value in items:
        lower = key.lower()
        if lower not in HOP_BY_HOP and lower not in named:
            out.add(key, value)
    return out


class Proxy:
    """One handler for every proxied request."""

    def __init__(
        self,
        *,
        config: Callable[[], TapConfig],
        counts: TapCounts,
        session: Callable[[], aiohttp.ClientSession],
        fresh: Callable[[], aiohttp.ClientSession],
        log: Logger,
    ) -> None:
        self._config = config
        self._counts = counts
        self._session = session
        self._fresh = fresh
        self._log = log

    async def handle(self, request: web.Request) -> web.StreamResponse:
        config = self._config()
        counts = self._counts
        counts.in_flight += 1
        try:
            return await self._pass(request, config)
        finally:
            counts.in_flight -= 1

    async def _pass(self, request: web.Request, config: TapConfig) -> web.StreamResponse:
        counts = self._counts
        url = config.upstream + request.raw_path
        generation = is_generation(request.method, request.path)
        decided = classify.from_headers(config.classes, request.headers) if generation else None
        data: bytes | aiohttp.StreamReader | None = None
        try:
            if request.body_exists:
                length = request.content_length
                small = length is not None and length <= SMALL_BODY
                data = await request.read() if small else request.content
            headers = _forwarded(request.headers)
            attempt = _Attempt()
            try:
                upstream = await self._send(request.method, url, headers, data, config, attempt)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                if not _stale(exc, attempt, data):
                    raise
                # The engine closed a kept-alive connection as the request went out (its
                # idle timer and our reuse crossed): nothing was answered and the whole body
                # is in hand, so it goes again, once, on a fresh connection.
                counts.upstream_retries += 1
                upstream = await self._send(
                    request.method, url, headers, data, config, _Attempt(fresh=True)
                )
        except asyncio.CancelledError:
            counts.client_disconnects += 1
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError):
            counts.upstream_errors["timeout"] += 1
            return _error(504, "the engine did not answer within the tap's idle timeout")
        except aiohttp.ClientConnectorError:
            counts.upstream_errors["connect"] += 1
            return _error(502, "the tap cannot reach the engine")
        except aiohttp.ServerDisconnectedError:
            counts.upstream_errors["reset"] += 1
            return _error(502, "the engine closed the connection before answering")
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            counts.upstream_errors["http"] += 1
            self._log.warning("tap_upstream_request_failed", error=type(exc).__name__)
            return _error(502, "the tap could not pass the request on")
        async with upstream:
            return await self._relay(request, upstream, config, generation, decided)

    async def _send(
        self,
        method: str,
        url: str,
        headers: CIMultiDict[str],
        data: bytes | aiohttp.StreamReader | None,
        config: TapConfig,
        attempt: _Attempt,
    ) -> aiohttp.ClientResponse:
        # A retry goes out on a connection of its own (the fresh session pools nothing), never
        # on another pooled one that may be as stale as the first.
        session = self._fresh() if attempt.fresh else self._session()
        return await session.request(
            method,
            url,
            headers=headers,
            data=data,
            allow_redirects=False,
            skip_auto_headers=_NO_AUTO_HEADERS,
            timeout=_timeout(config),
            trace_request_ctx=attempt,
        )

    async def _relay(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        config: TapConfig,
        generation: bool,
        decided: str | None,
    ) -> web.StreamResponse:
        counts = self._counts
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.extend(_forwarded(upstream.headers))
        content_type = upstream.headers.get("Content-Type", "").lower()
        stream = content_type.startswith("text/event-stream")
        read = generation and upstream.status == 200 and (stream or "json" in content_type)
        encoded = upstream.headers.get("Content-Encoding", "identity").lower() != "identity"
        keeper = Keeper(limit=config.max_parse_bytes, stream=stream) if read else None
        if keeper is not None and encoded:
            counts.unparsed[Unparsed.ENCODED] += 1
            keeper = None
        try:
            await response.prepare(request)
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            counts.client_disconnects += 1
            return response
        # The hot loop: one upstream read, one write (aiohttp drains only past 64 KiB
        # buffered), the chunk kept by reference; nothing parsed until the end.
        next_chunk = upstream.content.readany
        write = response.write
        feed = keeper.feed if keeper is not None else None
        try:
            while chunk := await next_chunk():
                try:
                    await write(chunk)
                except (ConnectionError, aiohttp.ClientConnectionResetError):
                    counts.client_disconnects += 1
                    upstream.close()  # the engine stops generating for nobody
                    return self._incomplete(keeper, response)
                if feed is not None:
                    feed(chunk)
        except asyncio.CancelledError:
            counts.client_disconnects += 1
            upstream.close()
            self._incomplete(keeper, response)
            raise
        except (TimeoutError, aiohttp.ServerTimeoutError):
            counts.upstream_errors["timeout"] += 1
            return self._cut(request, keeper, response)
        except (aiohttp.ClientError, OSError):
            counts.upstream_errors["reset"] += 1
            return self._cut(request, keeper, response)
        try:
            await response.write_eof()
        except (ConnectionError, aiohttp.ClientConnectionResetError):
            counts.client_disconnects += 1
        if keeper is not None:
            self._read(keeper, stream=stream, decided=decided, config=config)
        return response

    def _incomplete(
        self, keeper: Keeper | None, response: web.StreamResponse
    ) -> web.StreamResponse:
        if keeper is not None:
            self._counts.unparsed[Unparsed.INCOMPLETE] += 1
        return response

    def _cut(
        self, request: web.Request, keeper: Keeper | None, response: web.StreamResponse
    ) -> web.StreamResponse:
        """The engine's response broke off: the client's is cut the same way (its connection
        closed without the response's end), never completed by the tap."""
        transport = request.transport
        if transport is not None:
            transport.abort()
        with contextlib.suppress(Exception):
            response.force_close()
        return self._incomplete(keeper, response)

    def _read(
        self, keeper: Keeper, *, stream: bool, decided: str | None, config: TapConfig
    ) -> None:
        """The fields of a response that went out whole, counted under its class."""
        counts = self._counts
        try:
            found = documents(keeper, stream=stream)
            result = found if isinstance(found, Unparsed) else figures_from(found)
        except Exception:  # a bug must cost the figures of one response, never the response
            self._log.exception("tap_read_failed")
            result = Unparsed.MALFORMED
        if isinstance(result, Unparsed):
            counts.unparsed[result] += 1
            return
        name = decided if decided is not None else classify.from_figures(config.classes, result)
        if name not in counts.classes():
            name = _fallback(counts)
        counts.record(name, result)


class _Attempt:
    """One try at sending a request upstream; ``reused`` is set (by :func:`reuse_trace`'s
    callback) when it went out on a kept-alive connection."""

    __slots__ = ("fresh", "reused")

    def __init__(self, *, fresh: bool = False) -> None:
        self.fresh = fresh
        self.reused = False


async def _mark_reused(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceConnectionReuseconnParams,
) -> None:
    attempt = context.trace_request_ctx
    if isinstance(attempt, _Attempt):
        attempt.reused = True


def reuse_trace() -> aiohttp.TraceConfig:
    """The trace the upstream sessions carry: it tells a request sent on a kept-alive
    connection from one on a new connection (the only kind the tap sends again)."""
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_mark_reused)
    return trace


def _stale(
    exc: BaseException, attempt: _Attempt, data: bytes | aiohttp.StreamReader | None
) -> bool:
    """True when a failed request may go again: it went out on a kept-alive connection that
    the engine closed before answering anything (a connection error, not a refused connect:
    ``ClientConnectorError`` is a new connection that failed), on its first try, and its body
    is in hand whole (none, or a small one read before sending; a streamed body was consumed
    from the client and cannot be sent again)."""
    if isinstance(exc, aiohttp.ClientConnectorError) or attempt.fresh or not attempt.reused:
        return False
    return data is None or isinstance(data, bytes)


@functools.lru_cache(maxsize=8)
def _timeout(config: TapConfig) -> aiohttp.ClientTimeout:
    """The upstream request's timeouts: connecting, and the longest silence (headers included)."""
    return aiohttp.ClientTimeout(
        total=None,
        connect=config.connect_timeout,
        sock_connect=config.connect_timeout,
        sock_read=config.idle_timeout,
    )


def _fallback(counts: TapCounts) -> str:
    """A class the counts know (a reload changed the rule while the request ran)."""
    known = counts.classes()
    return "other" if "other" in known else known[0]


def _error(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=f"specmon tap: {text}\n")
