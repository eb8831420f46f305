"""A small fake of Prometheus's ``/api/v1/query`` on loopback (aiohttp), replaying answers
captured verbatim from the real Debian Prometheus (tests/fixtures/prometheus/), or answers a
test derives from them (hostile variants), keyed by the exact query text."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from specmon.sources.prometheus_config import PrometheusSourceConfig, check_sources

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait before answering.
    delay: float = 0.0
    #: Compress the body with gzip (the client decodes it).
    gzip: bool = False


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    params: dict[str, str]


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text("utf-8")))


def replies(fixture: dict[str, Any]) -> dict[str, Reply]:
    return {
        a["query"]: Reply(
            status=a["status"], body=a["body"].encode("utf-8"), content_type=a["content_type"]
        )
        for a in fixture["answers"]
    }


def source_for(fixture: dict[str, Any] | None, url: str, **changes: Any) -> PrometheusSourceConfig:
    block = dict(fixture["source"]) if fixture is not None else {}
    block["url"] = url
    block.update(changes)
    (config,), problems = check_sources([{"prometheus": block}], environ={})
    assert not problems, problems
    return config


class FakePrometheus:
    """``answers`` by query; ``respond`` (if set) is asked first and may return None."""

    def __init__(
        self,
        answers: dict[str, Reply] | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        prefix: str = "",
    ) -> None:
        self.answers = dict(answers or {})
        self.respond: Callable[[str], Reply | None] | None = None
        self.requests: list[Request] = []
        self._ssl = ssl_context
        self._prefix = prefix
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> FakePrometheus:
        app = web.Application()
        app.router.add_route("*", self._prefix + "/api/v1/query", self._query)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._ssl)
        await site.start()
        server = getattr(site, "_server", None)
        port = server.sockets[0].getsockname()[1] if server is not None else 0
        scheme = "https" if self._ssl is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{port}{self._prefix}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _query(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            form = await request.post()
            params = {k: str(v) for k, v in form.items()}
        else:
            params = dict(request.query)
        self.requests.append(Request(request.method, request.path, dict(request.headers), params))
        query = params.get("query", "")
        reply = self.respond(query) if self.respond is not None else None
        if reply is None:
            reply = self.answers.get(query)
        if reply is None:
            body = json.dumps(
                {"status": "error", "errorType": "bad_data", "error": "fake: no captured answer"}
            )
            return web.Response(status=400, text=body, content_type="application/json")
        if reply.delay:
            await asyncio.sleep(reply.delay)
        response = web.Response(status=reply.status, body=reply.body, headers=reply.headers)
        response.headers["Content-Type"] = reply.content_type
        if reply.gzip:
            response.enable_compression(web.ContentCoding.gzip)
        return response
