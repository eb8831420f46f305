"""Fetch one metrics page over HTTP with a hard timeout, a size cap and gzip.

Errors are classified (``FetchError.kind``) so the daemon can count them by result and say
what to do; messages never include request headers (they may carry secrets).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp

__all__ = ["ACCEPT", "FetchError", "FetchResult", "fetch_page"]

#: Classic text format first: vLLM's OpenMetrics path renames ``vllm:`` to ``vllm_``.
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"

LLAMACPP_501_HINT = (
    "HTTP 501 from /metrics: llama-server was started without --metrics; "
    "restart it with --metrics to publish its counters"
)


@dataclass(frozen=True, slots=True)
class FetchResult:
    text: str
    content_type: str
    duration: float
    size: int

    @property
    def openmetrics(self) -> bool | None:
        if "openmetrics" in self.content_type:
            return True
        if self.content_type.startswith("text/plain"):
            return False
        return None


class FetchError(Exception):
    """A scrape that produced no page. ``kind`` is a ``specmon_scrapes_total`` result label."""

    def __init__(self, kind: str, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


async def fetch_page(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    headers: Mapping[str, str] | None = None,
) -> FetchResult:
    """GET ``url``; raise :class:`FetchError` for anything but a page within the limits."""
    started = time.perf_counter()
    request_headers = {"Accept": ACCEPT, "Accept-Encoding": "gzip"}
    if headers:
        request_headers.update(headers)
    try:
        async with asyncio.timeout(timeout):
            async with session.get(url, headers=request_headers, allow_redirects=True) as resp:
                if resp.status != 200:
                    body = await _read_capped(resp, 4096, allow_truncate=True)
                    raise _http_error(resp.status, body)
                declared = resp.content_length
                if (
                    declared is not None
                    and declared > max_bytes
                    and not resp.headers.get("Content-Encoding")
                ):
                    raise FetchError(
                        "too_large",
                        f"response of {declared} bytes exceeds the {max_bytes}-byte cap",
                    )
                data = await _read_capped(resp, max_bytes, allow_truncate=False)
                content_type = resp.headers.get("Content-Type", "")
    except TimeoutError:
        raise FetchError("timeout", f"no complete response within {timeout:g}s") from None
    except aiohttp.ClientResponseError as exc:
        raise FetchError("http_error", f"HTTP error: {exc.status} {exc.message}") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise FetchError("connection_error", _describe(exc)) from None
    text = data.decode("utf-8", errors="replace")
    return FetchResult(
        text=text,
        content_type=content_type.lower(),
        duration=time.perf_counter() - started,
        size=len(data),
    )


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, *, allow_truncate: bool) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > cap:
            if allow_truncate:
                chunks.append(chunk[: cap - (size - len(chunk))])
                break
            raise FetchError("too_large", f"response exceeds the {cap}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


def _http_error(status: int, body: bytes) -> FetchError:
    if status == 501:
        return FetchError("http_error", LLAMACPP_501_HINT, status=status)
    if status == 404:
        return FetchError(
            "http_error", "HTTP 404: no metrics at this path (check the URL)", status=status
        )
    snippet = body[:200].decode("utf-8", errors="replace").strip().replace("\n", " ")
    detail = f": {snippet}" if snippet else ""
    return FetchError("http_error", f"HTTP {status}{detail}", status=status)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
        return f"cannot connect to {exc.host}:{exc.port}: {reason}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"broken response body: {exc}"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"invalid URL: {exc}"
    return f"{type(exc).__name__}: {exc}"
