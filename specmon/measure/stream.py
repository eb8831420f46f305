"""A streamed chat completion (``stream: true``, server-sent events) read into an answer and
its token times. Pure: :class:`StreamReader` takes bytes as they arrive, with their time.

The events are OpenAI's ``chat.completion.chunk`` objects, one per ``data:`` line, ended by
``data: [DONE]``. The text is the concatenation of every ``choices[0].delta.content``; usage
comes from the chunk that carries it (``stream_options.include_usage``: vLLM, SGLang, and
llama.cpp always, with its ``timings`` beside it). Time to first token is when the first
chunk with content arrived; the last token, when the last did. Inter-token latency, as AIPerf
and GuideLLM define it, is (last - first) / (completion tokens - 1): with speculation several
tokens arrive together, so gaps between chunks would not be per token.

Bounded: at most :data:`MAX_LINE` bytes per line and the caller's cap on the whole body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specmon.measure.endpoints import ChatAnswer, parse_chat_response

__all__ = ["MAX_LINE", "StreamError", "StreamReader", "Streamed"]

#: Longest event line accepted (a chunk carries a few tokens; the usage chunk a few hundred
#: bytes).
MAX_LINE = 1024 * 1024


class StreamError(ValueError):
    """The stream is not a usable chat completion; the message says why."""


@dataclass(frozen=True, slots=True)
class Streamed:
    answer: ChatAnswer
    #: Seconds from sending the request to the first and the last chunk with content.
    first_token: float | None
    last_token: float | None
    #: Chunks that carried content.
    content_chunks: int


class StreamReader:
    """Feed it the response body as it arrives: ``feed(data, at=seconds since sending)``."""

    def __init__(self) -> None:
        self._buffer = b""
        self._parts: list[str] = []
        self._first: float | None = None
        self._last: float | None = None
        self._chunks = 0
        self._done = False
        self._usage: Any = None
        self._timings: Any = None
        self._metrics: Any = None
        self._finish: str | None = None
        self._fingerprint: str | None = None
        self._events = 0

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, data: bytes, *, at: float) -> None:
        self._buffer += data
        while not self._done:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > MAX_LINE:
                    raise StreamError(f"an event line longer than {MAX_LINE} bytes")
                return
            line, self._buffer = self._buffer[:end], self._buffer[end + 1 :]
            if len(line) > MAX_LINE:
                raise StreamError(f"an event line longer than {MAX_LINE} bytes")
            self._line(line.strip(), at)

    def _line(self, line: bytes, at: float) -> None:
        if not line or line.startswith(b":") or not line.startswith(b"data:"):
            return  # blank lines end events; comments and other fields carry nothing here
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self._done = True
            return
        try:
            chunk = json.loads(payload)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise StreamError("an event that is not JSON") from None
        if not isinstance(chunk, dict):
            raise StreamError("an event that is not a JSON object")
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise StreamError(f"the server sent an error: {str(message)[:300]}")
        self._events += 1
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if content is not None and not isinstance(content, str):
                raise StreamError("a delta's content is not a string")
            if content:
                self._parts.append(content)
                self._chunks += 1
                if self._first is None:
                    self._first = at
                self._last = at
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self._finish = finish
        for key in ("usage", "timings", "metrics"):
            if isinstance(chunk.get(key), dict):
                setattr(self, f"_{key}", chunk[key])
        fingerprint = chunk.get("system_fingerprint")
        if isinstance(fingerprint, str) and fingerprint:
            self._fingerprint = fingerprint

    def result(self) -> Streamed:
        """The answer, once the stream has ended ([DONE], or the connection closed)."""
        if self._events == 0:
            raise StreamError("the stream carried no chat completion chunk")
        if self._buffer.strip():
            self._line(self._buffer.strip(), self._last or 0.0)
            self._buffer = b""
        body: dict[str, Any] = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(self._parts)},
                    "finish_reason": self._finish,
                }
            ],
            "system_fingerprint": self._fingerprint,
        }
        for key in ("usage", "timings", "metrics"):
            value = getattr(self, f"_{key}")
            if value is not None:
                body[key] = value
        return Streamed(parse_chat_response(body), self._first, self._last, self._chunks)
