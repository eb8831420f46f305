"""HTTP for every part of specmon: one session factory, one capped reader, one error
description, and the metrics-page fetch with a hard timeout, a size cap and gzip.

Used by the daemon's page source, ``specmon inspect`` and ``specmon measure``. Errors are
classified (``FetchError.kind``) so the daemon can count them by result and say what to do.
Nothing a server sends back reaches a message before every configured secret is redacted from
it, and configured headers never follow a redirect to another origin.
"""

from __future__ import annotations

import functools
import os
import ssl
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

import aiohttp
from yarl import URL

from specmon import __version__
from specmon.records import record
from specmon.secrets import Secret, redact
from specmon.sources import ScrapeResult
from specmon.sources.deadlines import deadline

__all__ = [
    "ACCEPT",
    "ACCEPT_CLASSIC",
    "MAX_REDIRECTS",
    "FetchError",
    "FetchResult",
    "describe_error",
    "fetch_page",
    "open_session",
    "read_capped",
    "with_name_filter",
]

#: Classic text format first: vLLM's OpenMetrics path renames ``vllm:`` to ``vllm_``.
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
#: The classic format alone: asked for with ``name_filter``, because prometheus_client ignores
#: q-values and answers the header above with OpenMetrics (and ``vllm_`` names).
ACCEPT_CLASSIC = "text/plain;version=0.0.4"
MAX_REDIRECTS = 5
#: How much of an error body is read, and how much of it a message quotes.
_ERROR_BODY_BYTES = 4096
_ERROR_SNIPPET = 200

LLAMACPP_501_HINT = (
    "HTTP 501 from /metrics: llama-server was started without --metrics; "
    "restart it with --metrics to publish its counters"
)


def open_session(
    *,
    max_connections: int = 256,
    purpose: str = "",
    dns_ttl: float = 60.0,
    keepalive_seconds: float = 15.0,
) -> aiohttp.ClientSession:
    """specmon's client session: no proxies or netrc from the environment, no cookies, bounded
    connections, transparent gzip, per-request timeouts (none on the session); an idle
    connection is kept ``keepalive_seconds`` (aiohttp's default 15)."""
    agent = f"specmon/{__version__}" + (f" ({purpose})" if purpose else "")
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=max(1, max_connections),
            ttl_dns_cache=int(dns_ttl),
            keepalive_timeout=keepalive_seconds,
        ),
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=True,
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None),
        headers={"User-Agent": agent},
    )


def with_name_filter(url: str, names: Iterable[str]) -> str:
    """``url`` asking for only the samples named ``names``: a ``name[]`` query parameter
    each, after any query ``url`` has. prometheus_client's page app (vLLM's ``/metrics/``)
    then serves just those samples and their families' HELP and TYPE; a server that ignores
    the parameters serves its whole page, read as before."""
    query = urlencode([("name[]", name) for name in names])
    if not query:
        return url
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query=f"{parts.query}&{query}" if parts.query else query))


@record
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
    """A request that produced no page. ``kind`` is a ``specmon_scrapes_total`` result label;
    the message is safe to log (secrets redacted, bounded length)."""

    def __init__(self, kind: ScrapeResult, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


async def read_capped(resp: aiohttp.ClientResponse, cap: int, *, truncate: bool = False) -> bytes:
    """At most ``cap`` bytes of the (decompressed) body. Beyond it: the first ``cap`` bytes
    when ``truncate``, else :class:`FetchError` ``too_large`` without reading further."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > cap:
            if truncate:
                chunks.append(chunk[: cap - (size - len(chunk))])
                break
            raise FetchError(ScrapeResult.TOO_LARGE, f"response exceeds the {cap}-byte cap")
        chunks.append(chunk)
    return b"".join(chunks)


#: OpenSSL's verify codes whose remedy is not a CA file.
_EXPIRED = {9: "not yet valid", 10: "expired"}
_WRONG_HOST = {62, 64}  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


def certificate_hint(error: BaseException, *, ca_file: bool = False) -> str:
    """What to do about a certificate the client refused: the remedy its verify code names
    (an expired certificate, one for another host), "set tls.ca_file" only for an unknown
    issuer when no ``tls.ca_file`` is set."""
    code = getattr(error, "verify_code", None)
    if code in _EXPIRED:
        return f"the server's certificate is {_EXPIRED[code]}: renew it"
    if code in _WRONG_HOST:
        return "the server's certificate is for another host name: use a name it carries"
    if ca_file:
        return "not signed by the CA in tls.ca_file"
    return "set tls.ca_file"


def describe_error(exc: BaseException, *, ca_file: bool = False) -> str:
    """One line for a client-side failure (never request headers: they may carry secrets).
    ``ca_file``: whether the request trusted a configured ``tls.ca_file``."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = exc.certificate_error
        return (
            f"cannot connect to {exc.host}:{exc.port}: the server's certificate is not trusted "
            f"({str(error)[:_ERROR_SNIPPET]}; {certificate_hint(error, ca_file=ca_file)})"
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError):
        return f"cannot connect to {exc.host}:{exc.port}: TLS handshake failed ({exc.os_error})"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        reason = os.strerror(err.errno) if err.errno else (err.strerror or str(err))
        return f"cannot connect to {exc.host}:{exc.port}: {reason}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"broken response body: {str(exc)[:_ERROR_SNIPPET]}"
    if isinstance(exc, aiohttp.InvalidURL):
        return f"invalid URL: {str(exc)[:_ERROR_SNIPPET]}"
    return f"{type(exc).__name__}: {str(exc)[:_ERROR_SNIPPET]}"


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``."""
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


#: :func:`_origin` of configured URLs (asked every scrape); redirect targets, which a
#: hostile server chooses, are parsed each time and never kept.
_configured_origin = functools.lru_cache(maxsize=4096)(_origin)


@functools.lru_cache(maxsize=8192)
def _parsed(url: str) -> URL:
    """A configured URL parsed and encoded once: yarl's own cache keeps 128 URLs, so a
    fleet's were encoded afresh on every request (3.5 us for a plain URL, 12 us with vLLM's
    ``name_filter`` query, 28 us with every adapter's), and aiohttp's per-URL derived parts
    with them. Bounded by the configuration (8,192 URLs; a filtered vLLM URL is 1.3 KB)."""
    return URL(url)


async def fetch_page(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    compression: bool = True,
    headers: Mapping[str, str] | None = None,
    secrets: Iterable[Secret | str] = (),
    accept: str = ACCEPT,
    ssl_context: ssl.SSLContext | None = None,
    ca_file: bool = False,
) -> FetchResult:
    """GET ``url``; raise :class:`FetchError` for anything but a page within the limits.

    ``headers`` (tokens, tenant or API-key headers) go to ``url``'s origin only: a redirect
    to another origin is followed without them. ``ssl_context``: the configured ``tls``
    (None: the system's trust store). ``secrets`` are redacted from every message.
    ``compression``: ask for gzip (else ``identity``; a server that compresses anyway is
    still read, and the cap counts the decompressed bytes either way). On by default here,
    for the one-off fetches (``specmon inspect``, ``recommend --from``, ``measure``), which
    may cross a thin link; the daemon passes its ``enable_compression`` setting, off by
    default, because on every scrape gzip costs the engine far more CPU than the bytes it
    saves on a local link (README, "Configuration").
    """
    encoding = "gzip" if compression else "identity"
    started = time.perf_counter()
    configured = dict(headers or {})
    hidden = [*secrets, *configured.values()]
    origin = _configured_origin(url)
    try:
        async with deadline(timeout):
            current = url
            for _ in range(MAX_REDIRECTS + 1):
                request_headers = {"Accept": accept, "Accept-Encoding": encoding}
                if current == url or _origin(current) == origin:
                    request_headers.update(configured)
                # Only the configured URL is kept parsed: a redirect's Location is the
                # server's choice, and must not fill a cache.
                target = _parsed(url) if current == url else current
                async with session.get(
                    target,
                    headers=request_headers,
                    allow_redirects=False,
                    ssl=True if ssl_context is None else ssl_context,
                ) as resp:
                    if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                        current = urljoin(current, resp.headers["Location"])
                        if urlsplit(current).scheme not in ("http", "https"):
                            raise FetchError(ScrapeResult.HTTP_ERROR, "redirect to a non-HTTP URL")
                        continue
                    if resp.status != 200:
                        body = await read_capped(resp, _ERROR_BODY_BYTES, truncate=True)
                        raise _http_error(resp.status, body, hidden)
                    declared = resp.content_length
                    if (
                        declared is not None
                        and declared > max_bytes
                        and not resp.headers.get("Content-Encoding")
                    ):
                        raise FetchError(
                            ScrapeResult.TOO_LARGE,
                            f"response of {declared} bytes exceeds the {max_bytes}-byte cap",
                        )
                    data = await read_capped(resp, max_bytes)
                    content_type = resp.headers.get("Content-Type", "")
                    break
            else:
                raise FetchError(ScrapeResult.HTTP_ERROR, f"more than {MAX_REDIRECTS} redirects")
    except TimeoutError:
        raise FetchError(
            ScrapeResult.TIMEOUT, f"no complete response within {timeout:g}s"
        ) from None
    except aiohttp.ClientResponseError as exc:
        message = redact(f"HTTP error: {exc.status} {exc.message}", hidden, limit=_ERROR_SNIPPET)
        raise FetchError(ScrapeResult.HTTP_ERROR, message) from None
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        raise FetchError(
            ScrapeResult.CONNECTION_ERROR, redact(describe_error(exc, ca_file=ca_file), hidden)
        ) from None
    text = data.decode("utf-8", errors="replace")
    return FetchResult(
        text=text,
        content_type=content_type[:200].lower(),
        duration=time.perf_counter() - started,
        size=len(data),
    )


def _http_error(status: int, body: bytes, secrets: Iterable[Secret | str]) -> FetchError:
    if status == 501:
        return FetchError(ScrapeResult.HTTP_ERROR, LLAMACPP_501_HINT, status=status)
    if status == 404:
        return FetchError(
            ScrapeResult.HTTP_ERROR,
            "HTTP 404: no metrics at this path (check the URL)",
            status=status,
        )
    text = body.decode("utf-8", errors="replace").strip().replace("\n", " ").replace("\r", " ")
    snippet = redact(text, secrets, limit=_ERROR_SNIPPET)
    detail = f": {snippet}" if snippet else ""
    return FetchError(ScrapeResult.HTTP_ERROR, f"HTTP {status}{detail}", status=status)
