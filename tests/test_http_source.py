"""The HTTP page source against small hostile servers on loopback: secrets never come back in
a message, configured headers never follow a redirect to another origin, and gzip is asked
for only when configured."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web

from specmon.daemon.config import parse_config
from specmon.daemon.target import TargetState
from specmon.secrets import Secret
from specmon.sources import ScrapeResult
from specmon.sources.client_config import ClientConfig
from specmon.sources.http import FetchError, fetch_page, open_session
from specmon.sources.page import HttpPageSource
from specmon.surfaces.status import render_status, views_json

TOKEN = "tok-8c1f2e9a7b"
TENANT = "tenant-key-55aa99"
PAGE = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.0\n'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def echo_headers(request: web.Request) -> web.Response:
    first = ("Authorization", "X-Api-Key")  # the secrets first: inside the quoted snippet
    order = [*first, *(k for k in request.headers if k not in first)]
    dump = "\n".join(f"{k}: {request.headers.get(k)}" for k in order)
    return web.Response(status=403, text=f"forbidden; you sent:\n{dump}\n" + "x" * 10_000)


def test_an_error_body_that_echoes_the_headers_is_redacted() -> None:
    """A target that echoed request headers in an error body put the bearer token
    and configured header values into /api/v1/targets, the status page and the logs."""

    async def scenario() -> FetchError:
        async with server(echo_headers) as base, open_session() as session:
            source = HttpPageSource(
                url=base + "/metrics",
                session=lambda: session,
                timeout=5.0,
                max_bytes=1 << 20,
                client=ClientConfig(
                    headers={"X-Api-Key": Secret(TENANT)}, bearer_token=Secret(TOKEN)
                ),
            )
            with pytest.raises(FetchError) as info:
                await source.read()
            return info.value

    error = asyncio.run(scenario())
    message = str(error)
    assert error.kind is ScrapeResult.HTTP_ERROR
    assert message.startswith("HTTP 403: forbidden; you sent:")
    assert TOKEN not in message and TENANT not in message
    assert "<redacted>" in message and len(message) < 300
    # What the daemon does with it: the view, the API and the status page.
    config = parse_config(
        "targets:\n  - {name: t, url: 'http://127.0.0.1:9/metrics', bearer_token_env: T,"
        " headers: {X-Api-Key: " + TENANT + "}}\n",
        environ={"T": TOKEN},
    )
    state = TargetState(config.targets[0], windows=(60.0,), retention=70.0)
    state.fail(kind=error.kind, message=message, duration=0.01)
    for text in (
        str(views_json([state.view])),
        render_status([state.view], primary_window="1m", ready=True),
    ):
        assert TOKEN not in text and TENANT not in text


def test_configured_headers_do_not_follow_a_redirect_to_another_origin() -> None:
    """On a redirect to another origin, Authorization was dropped but configured
    headers (a tenant or API key header) were forwarded."""
    seen: dict[str, dict[str, str]] = {}

    async def record(request: web.Request) -> web.Response:
        seen[request.path] = dict(request.headers)
        return web.Response(text=PAGE, content_type="text/plain")

    async def scenario() -> None:
        async with server(record) as other:

            async def redirect(request: web.Request) -> web.Response:
                seen[request.path] = dict(request.headers)
                if request.path == "/same":
                    return web.Response(text=PAGE, content_type="text/plain")
                target = "/same" if request.path == "/local" else other + "/elsewhere"
                raise web.HTTPFound(target)

            async with server(redirect) as base, open_session() as session:
                headers = {"Authorization": f"Bearer {TOKEN}", "X-Api-Key": TENANT}
                await fetch_page(
                    session, base + "/away", timeout=5, max_bytes=1 << 20, headers=headers
                )
                await fetch_page(
                    session, base + "/local", timeout=5, max_bytes=1 << 20, headers=headers
                )

    asyncio.run(scenario())
    assert seen["/away"]["X-Api-Key"] == TENANT  # the target itself gets them
    assert "X-Api-Key" not in seen["/elsewhere"] and "Authorization" not in seen["/elsewhere"]
    assert seen["/same"]["X-Api-Key"] == TENANT  # a redirect within the origin keeps them
    assert seen["/same"]["Authorization"] == f"Bearer {TOKEN}"


def test_a_redirect_loop_ends_with_a_clear_error() -> None:
    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/again")

    async def scenario() -> FetchError:
        async with server(loop) as base, open_session() as session:
            with pytest.raises(FetchError) as info:
                await fetch_page(session, base + "/x", timeout=5, max_bytes=1 << 20)
            return info.value

    error = asyncio.run(scenario())
    assert str(error) == "more than 5 redirects"


def test_only_configured_urls_are_kept_parsed() -> None:
    """The parsed-URL cache holds the URLs specmon was configured with, never a redirect's
    Location: a hostile target sending endless fresh redirects must not fill it."""
    from specmon.sources.http import _parsed

    served = 0

    async def fresh(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        raise web.HTTPFound(f"/fresh-{served}-" + "x" * 2000)

    async def scenario() -> None:
        async with server(fresh) as base, open_session() as session:
            for _ in range(3):
                with pytest.raises(FetchError):
                    await fetch_page(session, base + "/metrics", timeout=5, max_bytes=1 << 20)

    _parsed.cache_clear()
    asyncio.run(scenario())
    assert served == 18  # 3 fetches of 6 requests each, every one followed
    info = _parsed.cache_info()
    assert (info.currsize, info.hits, info.misses) == (1, 2, 1)


def test_gzip_is_asked_for_only_when_configured_and_read_either_way() -> None:
    """``enable_compression``: the daemon's source asks for ``identity`` by default and
    ``gzip`` when configured; a server that compresses anyway is still read, and the size
    cap counts the decompressed bytes (a small gzip body of a large page is refused)."""
    seen: list[str | None] = []
    body = PAGE * 200  # 13 KB, compresses to a few hundred bytes

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept-Encoding"))
        if request.query.get("force") == "1":  # gzip, asked for or not
            return web.Response(
                body=gzip.compress(body.encode()),
                headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"},
            )
        response = web.Response(text=body, content_type="text/plain")
        response.enable_compression()  # only when the request accepts gzip
        return response

    async def scenario() -> list[tuple[int, str] | str]:
        out: list[tuple[int, str] | str] = []
        async with server(handler) as base, open_session() as session:
            for compression, query, cap in (
                (False, "", 1 << 20),
                (True, "", 1 << 20),
                (False, "?force=1", 1 << 20),
                (True, "", 4096),
            ):
                source = HttpPageSource(
                    url=base + "/metrics" + query,
                    session=lambda: session,
                    timeout=5.0,
                    max_bytes=cap,
                    compression=compression,
                )
                try:
                    reading = await source.read()
                    out.append((reading.size, str(reading.page.is_exposition)))
                except FetchError as exc:
                    out.append(exc.kind.value)
        return out

    results = asyncio.run(scenario())
    assert seen == ["identity", "gzip", "identity", "gzip"]
    assert results == [(len(body), "True")] * 3 + ["too_large"]
