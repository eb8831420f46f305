"""A server of hostile and buggy engine pages on loopback, one path per hostile case, each
scrape of a path advancing its own sequence. Runs on its own event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

__all__ = ["CASES", "EPOCH_CASES", "SECRET_HEADER", "SECRET_TOKEN", "HostileServer"]

SECRET_TOKEN = "hostile-token-3e7d1c"
SECRET_HEADER = "tenant-secret-8b2f4a"

_VLLM = (
    'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{m}"}} {d}\n'
    'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{m}"}} {t}\n'
    'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{m}"}} {a}\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{m}",position="0"}} {p0}\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{m}",position="1"}} {p1}\n'
)


def vllm(
    m: str, d: float, p0: float, p1: float, *, t: float | None = None, a: float | None = None
) -> str:
    return _VLLM.format(
        m=m, d=d, t=2 * d if t is None else t, a=p0 + p1 if a is None else a, p0=p0, p1=p1
    )


def _steady(n: int) -> float:
    return 1000.0 * (n + 1)


def _overflow(n: int) -> str:
    seq = [1e308, 0, 1e308, 0, 1e308]
    v = seq[n] if n < len(seq) else _steady(n)
    return vllm("m", v, 0.5 * v, 0.2 * v, t=v)


def _huge_position(n: int) -> str:
    d = _steady(n)
    return vllm("m", d, 0.5 * d, 0.2 * d) + (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",'
        f'position="999999"}} {n}\n'
    )


def _above_drafts(n: int) -> str:
    d = _steady(n)
    return vllm("m", d, 5 * d, 3 * d, a=100 * d)


def _partial_decrease(n: int) -> str:
    d = _steady(n)
    p1 = 0.2 * d if n % 3 else 1.0  # one position series dips every third scrape
    return vllm("m", d, 0.5 * d, p1)


def _duplicates(n: int) -> str:
    d = _steady(n)
    page = vllm("m", d, 0.7 * d, 0.5 * d)
    return page + page


def _sglang_huge(n: int) -> str:
    return 'sglang:spec_accept_length{model_name="s"} 1e308\n'


def _running_nan(n: int) -> str:
    d = _steady(n)
    bad = ("NaN", "-Inf", "-5")[n % 3]
    return (
        vllm("m", d, 0.5 * d, 0.2 * d)
        + f'vllm:num_requests_running{{engine="0",model_name="m"}} {bad}\n'
    )


def _nan_counters(n: int) -> str:
    d = _steady(n)
    return vllm("good", d, 0.6 * d, 0.3 * d) + vllm("bad", float("nan"), 1, 1)


def _long_line(n: int) -> str:
    d = _steady(n)
    return 'unrelated{x="' + "a" * 10_000_000 + '"} 1\n' + vllm("m", d, 0.5 * d, 0.2 * d)


def _long_model(n: int) -> str:
    d = _steady(n)
    return vllm("m" * 1_500_000, d, 0.5 * d, 0.2 * d)  # 5 lines: 7.5 MB, under the byte cap


def _many_models(n: int) -> str:
    d = _steady(n)
    return "".join(vllm(f"m{i:05d}", d, 0.5 * d, 0.2 * d) for i in range(2_000))


#: Path -> page for the n-th scrape of that path.
CASES: dict[str, Callable[[int], str]] = {
    "/overflow": _overflow,
    "/huge-position": _huge_position,
    "/above-drafts": _above_drafts,
    "/partial-decrease": _partial_decrease,
    "/duplicates": _duplicates,
    "/sglang-huge": _sglang_huge,
    "/running-nan": _running_nan,
    "/nan-counters": _nan_counters,
    "/long-line": _long_line,
    "/long-model": _long_model,
    "/many-models": _many_models,
}


_MOST = 2**53 - 1


def _alternating(n: int) -> str:
    """Counters alternating between 0 (two positions) and the largest a page may show (four
    positions), each page valid alone (issue 61: counted into the epoch anyway, written,
    and the next start refused the whole state file)."""
    if n % 2 == 0:
        return _vllm_positions("m", 0, 0, 0, [0, 0])
    d = _MOST // 8
    return _vllm_positions("m", d, _MOST, 7 * d, [d, d, d, d // 2])


def _vllm_positions(m: str, d: int, t: int, a: int, positions: list[int]) -> str:
    labels = f'engine="0",model_name="{m}"'
    return "".join(
        [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {d}\n",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {t}\n",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {a}\n",
            *(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} '
                f"{v}\n"
                for i, v in enumerate(positions)
            ),
        ]
    )


#: Path -> page: hostile to the configuration epochs and the state file (not in CASES).
EPOCH_CASES: dict[str, Callable[[int], str]] = {"/alternating": _alternating}


class HostileServer:
    """Serves :data:`CASES` and :data:`EPOCH_CASES`, plus ``/echo`` (an error echoing the request headers),
    ``/redirect`` (a redirect to ``redirect_to``) and ``/hang`` (never answers)."""

    def __init__(self, *, redirect_to: str = "") -> None:
        self.redirect_to = redirect_to
        self.scrapes: dict[str, int] = {}
        self.headers_seen: dict[str, dict[str, str]] = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        n = self.scrapes.get(path, 0)
        self.scrapes[path] = n + 1
        self.headers_seen[path] = dict(request.headers)
        if path == "/echo":
            dump = "\n".join(f"{k}: {v}" for k, v in request.headers.items() if k != "Host")
            return web.Response(status=401, text="denied; you sent:\n" + dump)
        if path == "/redirect":
            raise web.HTTPFound(self.redirect_to)
        if path == "/hang":
            await self._stopping.wait()
            return web.Response(status=503)
        page = CASES.get(path) or EPOCH_CASES.get(path)
        if page is None:
            raise web.HTTPNotFound()
        return web.Response(text=page(n), content_type="text/plain")

    async def _start(self) -> None:
        self._stopping = asyncio.Event()
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def start(self) -> HostileServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stopping.set)
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
