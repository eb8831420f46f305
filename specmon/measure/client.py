"""HTTP for ``specmon measure``: chat completions, probes and metrics pages (I/O).

One :class:`aiohttp.ClientSession` for the whole run (specmon's session factory), explicit
timeouts on every request, specmon's one capped reader and error description. The API key
travels in the ``Authorization`` header only; every error message is passed through
:func:`~specmon.secrets.redact`, so a server that echoes headers cannot leak it.
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
    return _open_session(max_connections=max_connections + 2, purpose="measure")


class Client:
    def __init__(self, session: aiohttp.ClientSession, *, api_key: str | None) -> None:
        self._session = session
        self._key = api_key or None

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"} if self._key else {}

    def _safe(self, text: str) -> str:
        return redact(text, [self._key] if self._key else [])

    async def _request(
        self, method: str, url: str, *, timeout: float, body: Mapping[str, Any] | None = None
    ) -> tuple[int, bytes]:
        try:
            async with asyncio.timeout(timeout):
                async with self._session.request(
                    method,
                    url,
                    json=body,
                    headers=self._headers,
                    allow_redirects=method == "GET",
                ) as resp:
                    data = await read_capped(resp, MAX_RESPONSE_BYTES)
                    return resp.status, data
        except FetchError as exc:
            raise RequestError(str(exc)) from None
        except TimeoutError:
            raise RequestError(f"no complete answer within {timeout:g} s") from None
        except aiohttp.ClientConnectorError as exc:
            raise RequestError(self._safe(describe_error(exc)), connect=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise RequestError(self._safe(describe_error(exc))) from None

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
