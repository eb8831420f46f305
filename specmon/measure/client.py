"""HTTP for ``specmon measure``: chat completions, probes and metrics pages (I/O).

One :class:`aiohttp.ClientSession` for the whole run (specmon's session factory), explicit
timeouts on every request, specmon's one capped reader and error description. The API key
travels in the ``Authorization`` header only; every error message is passed through
:func:`~specmon.secrets.redact`, so a server that echoes headers cannot leak it.

Idle connections are kept :data:`KEEPALIVE_SECONDS`, under the servers' own idle timeouts
(llama.cpp's cpp-httplib and vLLM's uvicorn close an idle connection after 5 s): each server
idles while the other one is measured. Servers also close a kept-alive connection after some
number of requests, and a request sent on a connection the server was closing fails. A
request that fails that way, before any answer came back (the server closed the connection,
the body could not be written), is sent once more on another connection, timed from then,
and counted (:attr:`Client.resent`): the server answered nothing of the first attempt. A
refused connection, a timeout or a failure after the answer began is never retried.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from specmon.engines import ModelReading, PageReading, read_page
from specmon.measure.endpoints import ChatAnswer, Endpoint, parse_chat_response
from specmon.measure.stream import Streamed, StreamError, StreamReader
from specmon.secrets import redact
from specmon.sources.http import FetchError, describe_error, fetch_page, read_capped
from specmon.sources.http import open_session as _open_session

__all__ = [
    "Client",
    "MetricsRead",
    "RequestError",
    "open_session",
]

#: Largest chat response accepted (a completion of a few thousand tokens is far below it).
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Largest metrics page accepted.
MAX_METRICS_BYTES = 16 * 1024 * 1024
#: Timeout of the small GETs (probes, metrics).
PROBE_TIMEOUT = 10.0
#: How long an idle connection is kept for the next request (below servers' 5 s).
KEEPALIVE_SECONDS = 2.0


def _stale(exc: BaseException) -> bool:
    """A pooled connection the server had already closed: nothing reached it."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False  # could not connect at all: the server is down, not a stale connection
    return isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError)


class RequestError(Exception):
    """A request that produced no usable answer; the message is safe to print."""

    def __init__(self, message: str, *, status: int | None = None, connect: bool = False):
        super().__init__(message)
        self.status = status
        #: True when the server could not be reached at all.
        self.connect = connect


@dataclass(frozen=True, slots=True)
class MetricsRead:
    """One read of a metrics page: when, what it says about ``model``, or why it failed."""

    time: float
    page: PageReading | None = None
    model: ModelReading | None = None
    error: str | None = None


def open_session(max_connections: int) -> aiohttp.ClientSession:
    """The run's session: specmon's session factory, sized for the run's concurrency."""
    return _open_session(
        max_connections=max_connections + 2, purpose="measure", keepalive_seconds=KEEPALIVE_SECONDS
    )


class _Answered(Exception):
    """An error after the server began answering: not to be retried."""

    def __init__(self, error: aiohttp.ClientError) -> None:
        super().__init__(str(error))
        self.error = error


class Client:
    def __init__(self, session: aiohttp.ClientSession, *, api_key: str | None) -> None:
        self._session = session
        self._key = api_key or None
        #: Requests sent again after a stale connection (see the module's docstring).
        self.resent = 0

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def _safe(self, text: str) -> str:
        return redact(text, [self._key] if self._key else [])

    def _failed(self, exc: Exception, timeout: float) -> RequestError:
        """A request's failure in words (the key redacted): a fetch refused, no complete answer
        in time, no connection, or another client or socket error."""
        if isinstance(exc, FetchError):
            return RequestError(str(exc))
        if isinstance(exc, TimeoutError):
            return RequestError(f"no complete answer within {timeout:g} s")
        connect = isinstance(exc, aiohttp.ClientConnectorError)
        return RequestError(self._safe(describe_error(exc)), connect=connect)

    async def _request(
        self, method: str, url: str, *, timeout: float, body: Mapping[str, Any] | None = None
    ) -> tuple[int, bytes]:
        try:
            async with asyncio.timeout(timeout):
                for attempt in (1, 2):
                    answered = False
                    try:
                        async with self._session.request(
                            method,
                            url,
                            json=body,
                            headers=self._headers,
                            allow_redirects=method == "GET",
                        ) as resp:
                            answered = True
                            data = await read_capped(resp, MAX_RESPONSE_BYTES)
                            return resp.status, data
                    except aiohttp.ClientError as exc:
                        if answered or attempt == 2 or not _stale(exc):
                            raise
                        self.resent += 1
            raise AssertionError("unreachable")  # pragma: no cover
        except (FetchError, aiohttp.ClientError, OSError) as exc:
            raise self._failed(exc, timeout) from None

    async def chat(
        self, endpoint: Endpoint, payload: Mapping[str, Any], *, timeout: float
    ) -> ChatAnswer:
        """POST one chat completion; :class:`RequestError` unless it has a usable answer."""
        status, data = await self._request("POST", endpoint.chat_url, timeout=timeout, body=payload)
        if status != 200:
            snippet = data[:300].decode("utf-8", errors="replace").strip().replace("\n", " ")
            raise RequestError(
                self._safe(f"HTTP {status}" + (f": {snippet}" if snippet else "")), status=status
            )
        try:
            return parse_chat_response(json.loads(data))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError("the response is not JSON") from None
        except ValueError as exc:
            raise RequestError(self._safe(str(exc))) from None

    async def chat_stream(
        self, endpoint: Endpoint, payload: Mapping[str, Any], *, timeout: float
    ) -> Streamed:
        """POST one streamed chat completion (``stream: true``) and read its events as they
        arrive, timed from just before the request is sent (:mod:`specmon.measure.stream`);
        :class:`RequestError` unless it ends with a usable answer."""
        try:
            async with asyncio.timeout(timeout):
                for attempt in (1, 2):
                    started = time.perf_counter()
                    try:
                        return await self._stream_once(endpoint, payload, started)
                    except _Answered as answer:
                        raise answer.error from None
                    except aiohttp.ClientError as exc:
                        if attempt == 2 or not _stale(exc):
                            raise
                        self.resent += 1
            raise AssertionError("unreachable")  # pragma: no cover
        except StreamError as exc:
            raise RequestError(self._safe(str(exc))) from None
        except ValueError as exc:  # parse_chat_response: no usable answer
            raise RequestError(self._safe(str(exc))) from None
        except (FetchError, aiohttp.ClientError, OSError) as exc:
            raise self._failed(exc, timeout) from None

    async def _stream_once(
        self, endpoint: Endpoint, payload: Mapping[str, Any], started: float
    ) -> Streamed:
        """One attempt; an error once the answer began comes out wrapped in _Answered (it is
        never retried)."""
        reader = StreamReader()
        received = 0
        async with self._session.post(
            endpoint.chat_url, json=payload, headers=self._headers, allow_redirects=False
        ) as resp:
            try:
                if resp.status != 200:
                    data = await read_capped(resp, MAX_RESPONSE_BYTES)
                    snippet = data[:300].decode("utf-8", errors="replace").strip()
                    snippet = snippet.replace("\n", " ")
                    raise RequestError(
                        self._safe(f"HTTP {resp.status}" + (f": {snippet}" if snippet else "")),
                        status=resp.status,
                    )
                async for data in resp.content.iter_any():
                    received += len(data)
                    if received > MAX_RESPONSE_BYTES:
                        raise RequestError(
                            f"the streamed answer exceeds {MAX_RESPONSE_BYTES} bytes"
                        )
                    reader.feed(data, at=time.perf_counter() - started)
                    if reader.done:
                        break
                return reader.result()
            except aiohttp.ClientError as exc:
                raise _Answered(exc) from None

    async def get_json(self, url: str, *, timeout: float = PROBE_TIMEOUT) -> tuple[int, Any]:
        """GET ``url``: (status, parsed JSON or None). Raises :class:`RequestError` when the
        server gives no answer at all."""
        status, data = await self._request("GET", url, timeout=timeout)
        try:
            return status, json.loads(data) if status == 200 else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            return status, None

    async def metrics(self, url: str, *, model: str, timeout: float = PROBE_TIMEOUT) -> MetricsRead:
        """Read a metrics page through specmon's adapters; never raises."""
        try:
            result = await fetch_page(
                self._session, url, timeout=timeout, max_bytes=MAX_METRICS_BYTES,
                headers=self._headers, secrets=[self._key] if self._key else [],
            )  # fmt: skip
        except FetchError as exc:
            return MetricsRead(time.monotonic(), error=self._safe(f"{url}: {exc}"))
        taken = time.monotonic()
        page = read_page(result.text, openmetrics=result.openmetrics, model=model)
        if not page.is_exposition:
            return MetricsRead(taken, page=page, error=f"{url}: {page.message}")
        chosen = [m for m in page.models if m.model == model]
        if not chosen and len(page.models) == 1:
            chosen = list(page.models)
        if not chosen and page.models:
            names = ", ".join(m.model for m in page.models)
            return MetricsRead(
                taken, page=page, error=f"{url}: the page has models {names}, none named {model}"
            )
        return MetricsRead(taken, page=page, model=chosen[0] if chosen else None)
