"""The HTTP page source: one engine's ``/metrics`` fetched and read through the adapters.

A page larger than :data:`INLINE_BYTES` is read in a worker thread: the work stays bounded by
the byte cap and the page limits, and the event loop keeps serving other targets and
``/metrics`` meanwhile (the interpreter switches threads every few milliseconds).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from collections.abc import Callable

import aiohttp

from specmon.engines import Engine, PageLimits, read_page, wanted_names
from specmon.sources import Reading, ScrapeResult
from specmon.sources.client_config import ClientConfig, ssl_reason
from specmon.sources.http import (
    ACCEPT,
    ACCEPT_CLASSIC,
    FetchError,
    fetch_page,
    with_name_filter,
)

__all__ = ["INLINE_BYTES", "HttpPageSource"]

#: Pages up to this size (a real vLLM page is about 56 KB) are read inline: cheaper than a
#: thread hand-off.
INLINE_BYTES = 256 * 1024


@functools.lru_cache(maxsize=8192)
def _filtered_url(url: str, engine: Engine | None) -> str:
    """The daemon builds a source per scrape; the filtered URL (about 0.1 ms to build for
    vLLM's 26 names) once per target."""
    return with_name_filter(url, wanted_names(engine))


class HttpPageSource:
    """Reads ``url`` with the settings given; a page that is not an exposition page is a
    ``parse_error``. ``name_filter``: ask for only the samples the adapter for ``engine``
    reads (every adapter's when None), see :func:`~specmon.sources.http.with_name_filter`, in
    the classic format (:data:`~specmon.sources.http.ACCEPT_CLASSIC`)."""

    def __init__(
        self,
        *,
        url: str,
        session: Callable[[], aiohttp.ClientSession],
        timeout: float,
        max_bytes: int,
        compression: bool = False,
        client: ClientConfig | None = None,
        engine: Engine | None = None,
        model: str | None = None,
        limits: PageLimits | None = None,
        name_filter: bool = False,
    ) -> None:
        self.url = url
        self._fetch_url = _filtered_url(url, engine) if name_filter else url
        self._accept = ACCEPT_CLASSIC if name_filter else ACCEPT
        self._session = session
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._compression = compression
        self._client = client
        self._engine = engine
        self._model = model
        self._limits = limits

    async def read(self) -> Reading:
        started = time.perf_counter()
        headers: dict[str, str] = {}
        secrets: list[str] = []
        context: ssl.SSLContext | None = None
        if self._client is not None:
            try:
                context = self._client.ssl_context()
                if self._client.sends_credentials:
                    credentials = self._client.credentials()
                    headers, secrets = credentials.headers, credentials.secrets
            except (OSError, ssl.SSLError) as exc:
                raise FetchError(ScrapeResult.CREDENTIALS_ERROR, _unusable(exc)) from None
        result = await fetch_page(
            self._session(),
            self._fetch_url,
            timeout=self._timeout,
            max_bytes=self._max_bytes,
            compression=self._compression,
            headers=headers,
            secrets=secrets,
            accept=self._accept,
            ssl_context=context,
            ca_file=self._client is not None
            and self._client.tls is not None
            and self._client.tls.ca_file is not None,
        )
        read = functools.partial(
            read_page,
            result.text,
            engine=self._engine,
            openmetrics=result.openmetrics,
            model=self._model,
            limits=self._limits,
        )
        page = read() if result.size <= INLINE_BYTES else await asyncio.to_thread(read)
        if not page.is_exposition:
            raise FetchError(ScrapeResult.PARSE_ERROR, page.message or "unparseable page")
        return Reading(page=page, size=result.size, duration=time.perf_counter() - started)


def _unusable(exc: OSError | ssl.SSLError) -> str:
    """A credentials or TLS file that was usable at load and is not now: which, and why
    (never its content)."""
    if isinstance(exc, ssl.SSLError):
        return f"cannot use the tls files: {ssl_reason(exc)}"
    where = f" ({exc.filename})" if exc.filename else ""
    return f"cannot read a credentials file: {exc.strerror or type(exc).__name__}{where}"
