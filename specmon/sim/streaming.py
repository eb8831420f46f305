"""Streamed chat completions of the simulator: OpenAI's server-sent events (I/O).

The shape vLLM and llama.cpp send (llama.cpp b11434's captured in
tests/fixtures/pages/llamacpp-chat-stream.sse; vLLM 0.32.0's chat_completion/serving.py): a first
chunk with the assistant's role, one ``chat.completion.chunk`` per batch of tokens with
``delta.content``, a chunk with ``finish_reason``, then, when the request asked for
``stream_options.include_usage`` (llama.cpp sends it always), a chunk with no choices and the
``usage`` (llama.cpp: its ``timings`` beside it), and ``data: [DONE]``. The text, joined, is
the non-streamed answer's, byte for byte: one word a token, words separated by spaces.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from specmon import jsontext

__all__ = ["SimAnswer", "finish_stream", "open_stream", "send_chunk", "send_words"]


@dataclass(frozen=True, slots=True)
class SimAnswer:
    ident: str
    model: str
    #: One word a token.
    words: list[str]
    prompt_tokens: int
    created: int = field(default_factory=lambda: int(time.time()))


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    return response


def _chunk(answer: SimAnswer, **fields: Any) -> bytes:
    body = {
        "id": answer.ident,
        "object": "chat.completion.chunk",
        "created": answer.created,
        "model": answer.model,
        **fields,
    }
    return b"data: " + jsontext.dumps(body).encode() + b"\n\n"


async def send_chunk(
    response: web.StreamResponse, answer: SimAnswer, *, delta: dict[str, Any],
    finish: str | None = None,
) -> None:  # fmt: skip
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    await response.write(_chunk(answer, choices=[choice]))


async def send_words(response: web.StreamResponse, answer: SimAnswer, sent: int, upto: int) -> int:
    """Send the words ``sent`` to ``upto`` (one chunk); return how many are out."""
    upto = min(upto, len(answer.words))
    if upto <= sent:
        return sent
    text = " ".join(answer.words[sent:upto])
    await send_chunk(response, answer, delta={"content": text if sent == 0 else " " + text})
    return upto


async def finish_stream(
    response: web.StreamResponse, answer: SimAnswer, extras: dict[str, Any], *,
    include_usage: bool, llamacpp: bool,
) -> None:  # fmt: skip
    """The finish chunk, the usage chunk (asked for, or llama.cpp), and [DONE]."""
    await send_chunk(response, answer, delta={}, finish="length")
    tail = {k: v for k, v in extras.items() if k in ("usage", "timings", "metrics")}
    if tail and (include_usage or llamacpp):
        await response.write(_chunk(answer, choices=[], **tail))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
