"""An engine for the tap's in-process tests: answers in vLLM 0.32's shapes (the captured
non-streaming body, and streams whose trailing usage chunk carries the per-request object),
llama.cpp's (timings last), and a set of hostile behaviours, one path each.

Every response's bytes are a function of the request (deterministic), so a test can ask the
engine directly and through the tap and compare bytes; ``seen`` records what the engine
received, to check the tap passed the request through unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeEngine", "Seen", "vllm_stream", "vllm_usage_chunk"]

SPEC = {"num_spec_steps": 4, "num_draft_tokens": 12, "num_accepted_draft_tokens": 7}


def vllm_usage_chunk(spec: dict[str, int], *, model: str, completion: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [],
        "usage": {"prompt_tokens": 7, "total_tokens": 7 + completion,
                  "completion_tokens": completion},
        "metrics": {"speculative_decoding": {**spec, "num_spec_tokens": 3}},
    }  # fmt: skip


def vllm_stream(words: int, spec: dict[str, int], *, model: str, usage: bool) -> Iterator[bytes]:
    """The events of a vLLM chat stream: a role chunk, one chunk per word, the finish chunk,
    the usage chunk (when asked for), [DONE]."""

    def event(doc: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": model}
    yield event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for i in range(words):
        yield event({**base, "choices": [{"index": 0, "delta": {"content": f" w{i}"}}]})
    yield event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    if usage:
        yield event(vllm_usage_chunk(spec, model=model, completion=words))
    yield b"data: [DONE]\n\n"


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class FakeEngine:
    seen: list[Seen] = field(default_factory=list)
    #: Handlers of the never-ending stream still running (a test checks they end).
    endless: int = 0
    #: Streams whose client went away (their handler saw the write fail or was cancelled).
    abandoned: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=2**30)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/completion", self.llamacpp)
        app.router.add_post("/endless/v1/chat/completions", self.endless_stream)
        app.router.add_post("/malformed/v1/chat/completions", self.malformed)
        app.router.add_post("/big/completion", self.big)
        app.router.add_post("/reset/v1/chat/completions", self.reset)
        app.router.add_post("/slow/v1/chat/completions", self.slow)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path_qs, list(request.headers.items()), body))
        try:
            doc = json.loads(body)
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}

    async def chat(self, request: web.Request) -> web.StreamResponse:
        doc = await self._record(request)
        words = int(doc.get("max_tokens", 8))
        spec = {
            "num_spec_steps": words // 3 + 1,
            "num_draft_tokens": 3 * (words // 3 + 1),
            "num_accepted_draft_tokens": words // 2,
        }
        model = str(doc.get("model", "tiny"))
        if not doc.get("stream"):
            body = {
                "id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant",
                             "content": " ".join(f"w{i}" for i in range(words))},
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": 7, "total_tokens": 7 + words,
                          "completion_tokens": words},
                "metrics": {"time_to_first_token_ms": None, "speculative_decoding": spec},
            }  # fmt: skip
            return web.Response(body=json.dumps(body).encode(), content_type="application/json")
        usage = bool((doc.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in vllm_stream(words, spec, model=model, usage=usage):
            await response.write(event)
        await response.write_eof()
        return response

    async def llamacpp(self, request: web.Request) -> web.Response:
        doc = await self._record(request)
        n = int(doc.get("n_predict", 16))
        body = {"content": "x" * n, "model": "tiny",
                "timings": {"prompt_n": 3, "predicted_n": n, "draft_n": 2 * n,
                            "draft_n_accepted": n + 5}}  # fmt: skip
        return web.Response(body=json.dumps(body).encode(), content_type="application/json")

    async def endless_stream(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.endless += 1
        self.started.set()
        try:
            i = 0
            while True:
                await response.write(
                    f'data: {{"choices":[{{"delta":{{"content":"{i}"}}}}]}}\n\n'.encode()
                )
                i += 1
                await asyncio.sleep(0.01)
        except (ConnectionError, asyncio.CancelledError):
            self.abandoned += 1
            raise
        finally:
            self.endless -= 1

    async def malformed(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n')
        await response.write(b'data: {"choices":[],"metrics":{"speculative_decoding":{"num_dr\n\n')
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def big(self, request: web.Request) -> web.StreamResponse:
        """A 100 MB llama.cpp body, its timings at the end, sent in 1 MiB chunks."""
        doc = await self._record(request)
        size = int(doc.get("bytes", 100 * 2**20))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"model":"tiny","content":"')
        chunk = b"z" * 2**20
        for _ in range(size // len(chunk)):
            await response.write(chunk)
        await response.write(
            b'","timings":{"prompt_n":3,"predicted_n":500,"draft_n":800,"draft_n_accepted":300}}'
        )
        await response.write_eof()
        return response

    async def reset(self, request: web.Request) -> web.StreamResponse:
        """Three events, then the connection dropped without the stream's end."""
        await self._record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i in range(3):
            await response.write(
                f'data: {{"choices":[{{"delta":{{"content":"{i}"}}}}]}}\n\n'.encode()
            )
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return response

    async def slow(self, request: web.Request) -> web.StreamResponse:
        await self._record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        self.started.set()
        try:
            for i in range(1000):
                await response.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.CancelledError):
            self.abandoned += 1
            raise
        return response

    async def models(self, request: web.Request) -> web.Response:
        await self._record(request)
        return web.json_response({"object": "list", "data": [{"id": "tiny"}]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")
