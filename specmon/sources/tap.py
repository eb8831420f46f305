"""A target's engine page and its tap's page, read together (``tap:`` in a target's config).

The two are fetched at the same moment, so a window of the tap's per-class counts and the
same window of the engine's own counters cover the same time (the coverage ratio compares
them). The engine's page decides the target's health as before: a tap that does not answer
costs only the per-class figures (:attr:`ClassReading.error` says why), never the target.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import Callable

import aiohttp

from specmon.engines.classes import ClassReading
from specmon.engines.tap import NotATap, read_tap_page
from specmon.sources import Reading, Source
from specmon.sources.client_config import ClientConfig
from specmon.sources.http import ACCEPT_CLASSIC, FetchError, fetch_page

__all__ = ["MAX_TAP_BYTES", "TappedSource", "with_tap"]

#: A tap's page is a few KiB (at most 32 classes); more is not a tap's.
MAX_TAP_BYTES = 1 << 20


class TappedSource:
    """``engine`` (any page source) read beside the tap's page at ``tap_url``."""

    def __init__(
        self,
        engine: Source,
        *,
        tap_url: str,
        session: Callable[[], aiohttp.ClientSession],
        timeout: float,
        client: ClientConfig | None = None,
    ) -> None:
        self._engine = engine
        self._tap_url = tap_url
        self._session = session
        self._timeout = timeout
        self._client = client

    async def read(self) -> Reading:
        tap = asyncio.ensure_future(self._read_tap())
        try:
            reading = await self._engine.read()
        except BaseException:
            tap.cancel()
            raise
        classes = await tap
        if reading.page.classes is not None and classes.error is not None:
            return reading  # the engine's own classes (SGLang) stand when the tap fails
        return dataclasses.replace(reading, page=dataclasses.replace(reading.page, classes=classes))

    async def _read_tap(self) -> ClassReading:
        """The tap's page, with the target's headers, credentials and TLS settings (the tap
        runs beside the engine, behind the same protection)."""
        client = self._client
        headers: dict[str, str] = {}
        secrets: list[str] = []
        context: ssl.SSLContext | None = None
        try:
            if client is not None:
                context = client.ssl_context()
                if client.sends_credentials:
                    credentials = client.credentials()
                    headers, secrets = credentials.headers, credentials.secrets
            result = await fetch_page(
                self._session(),
                self._tap_url,
                timeout=self._timeout,
                max_bytes=MAX_TAP_BYTES,
                compression=False,
                headers=headers,
                secrets=secrets,
                accept=ACCEPT_CLASSIC,
                ssl_context=context,
                ca_file=client is not None
                and client.tls is not None
                and client.tls.ca_file is not None,
            )
            return read_tap_page(result.text)
        except (OSError, ssl.SSLError):
            return _failed("the target's credentials or tls files cannot be used for the tap")
        except FetchError as exc:
            return _failed(f"the tap did not answer ({exc.kind}): {str(exc)[:200]}")
        except NotATap as exc:
            return _failed(str(exc))


def _failed(why: str) -> ClassReading:
    return ClassReading(source="tap", classes=(), error=why)


def with_tap(
    source: Source,
    tap_url: str | None,
    *,
    session: Callable[[], aiohttp.ClientSession],
    timeout: float,
    client: ClientConfig | None,
) -> Source:
    """``source``, read beside the tap at ``tap_url`` (None: ``source`` alone)."""
    if tap_url is None:
        return source
    return TappedSource(source, tap_url=tap_url, session=session, timeout=timeout, client=client)
