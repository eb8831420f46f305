"""What the tap keeps of a response, and the JSON documents it finds in it. Pure: no I/O.

The tap never holds a whole response: :class:`Keeper` keeps the first and the last
``limit`` bytes of a JSON body (every engine puts its per-request fields at the root, before or
after ``choices``, so a body of any size keeps them unless a single field is larger than the
limit) and only the last ``limit`` bytes of a stream (its final events). Memory per response
is at most about ``2 x limit`` plus one chunk, whatever the response's size.

:func:`documents` turns what was kept into the documents :func:`specmon.tap.fields.figures_from`
reads, newest first: the whole body when it was kept whole; the last events of a stream (at
most :data:`MAX_EVENTS`); for a body larger than what was kept, the known fields found by
their keys in the kept head and tail (:func:`_scan`).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from specmon.tap.fields import Unparsed

__all__ = ["MAX_EVENTS", "SCAN_KEYS", "Keeper", "documents"]

#: Events of a stream read from its end (the usage chunk, the last choice, ...).
MAX_EVENTS = 16
#: The keys looked for in a body too large to keep whole (each engine's fields, usage, model).
SCAN_KEYS = (
    "metrics",
    "timings",
    "meta_info",
    "sglext",
    "usage",
    "model",
    "choices",
)


class Keeper:
    """The head and the tail of a response: ``feed`` each chunk as it is passed on.

    ``stream`` (server-sent events): only the tail is kept. Otherwise the first ``limit``
    bytes are kept too. Chunks are kept as they came (no copy per chunk); the tail is trimmed
    by whole chunks, so it holds at most ``limit`` bytes plus one chunk.
    """

    __slots__ = ("_head", "_head_size", "_limit", "_stream", "_tail", "_tail_size", "total")

    def __init__(self, *, limit: int, stream: bool) -> None:
        self._limit = limit
        self._stream = stream
        self._head: list[bytes] = []
        self._head_size = 0
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        #: Bytes seen so far.
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if not self._stream and self._head_size < self._limit:
            room = self._limit - self._head_size
            part = chunk[:room]
            self._head.append(part)
            self._head_size += len(part)
            chunk = chunk[room:]
            if not chunk:
                return
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail and self._tail_size - len(self._tail[0]) >= self._limit:
            self._tail_size -= len(self._tail.popleft())

    @property
    def whole(self) -> bool:
        """True when nothing was dropped (head and tail together are the response)."""
        return self.total == self._head_size + self._tail_size

    def head(self) -> bytes:
        return b"".join(self._head)

    def tail(self) -> bytes:
        """The last bytes kept (at most ``limit`` plus part of one chunk)."""
        return b"".join(self._tail)

    def body(self) -> bytes | None:
        """The whole response, when it was kept whole; else None."""
        return self.head() + self.tail() if self.whole else None


def documents(keeper: Keeper, *, stream: bool) -> Iterable[Any] | Unparsed:
    """The documents newest first, or why there are none: ``too_large`` when the final
    document could not be read whole from what was kept, ``malformed`` when what should be
    JSON is not. A stream's events are decoded as they are asked for: the final one at once
    (it decides ``malformed``), the earlier ones only when the newer ones lacked a field (a
    usage chunk with every field costs one decode, not sixteen)."""
    if stream:
        return _events(keeper.tail(), cut=not keeper.whole)
    body = keeper.body()
    if body is not None:
        try:
            return [json.loads(body)]
        except (ValueError, RecursionError):
            return Unparsed.MALFORMED
    return _scan(keeper.head(), keeper.tail())


def _payloads(tail: bytes, *, cut: bool) -> Iterator[bytes]:
    """The ``data:`` payloads of a stream's tail, newest first, found from its end without
    splitting the rest. A first line that was cut by the trimming is skipped; ``[DONE]`` and
    comments are not documents."""
    end = len(tail)
    while end >= 0:
        newline = tail.rfind(b"\n", 0, end)
        if newline < 0 and cut:
            return  # the first line may start mid-line
        line = tail[newline + 1 : end].rstrip(b"\r")
        end = newline if newline >= 0 else -1
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload and payload != b"[DONE]":
            yield payload


def _events(tail: bytes, *, cut: bool) -> Iterable[Any] | Unparsed:
    """The ``data:`` documents of a stream's tail, newest first (at most
    :data:`MAX_EVENTS`); the final one decoded now, the rest as they are read."""
    payloads = _payloads(tail, cut=cut)
    final = next(payloads, None)
    if final is None:
        return Unparsed.TOO_LARGE if cut else []  # cut: the last event was larger than kept
    try:
        newest = json.loads(final)
    except (ValueError, RecursionError):
        return Unparsed.MALFORMED  # the final event, where the fields are, is broken
    return _decoded(newest, payloads)


def _decoded(newest: Any, payloads: Iterator[bytes]) -> Iterator[Any]:
    yield newest
    count = 1
    for payload in payloads:
        if count >= MAX_EVENTS:
            return
        try:
            document = json.loads(payload)
        except (ValueError, RecursionError):
            continue  # an earlier broken event: the newer ones had what they had
        count += 1
        yield document


def _scan(head: bytes, tail: bytes) -> list[Any] | Unparsed:
    """A body too large to keep: its known root fields, found by key in the head and the
    tail and decoded alone (``"timings": {...}``), as one document. The last occurrence of a
    key in the tail wins (root fields follow the content), else the first in the head."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] = {}
    for part, last in ((tail, True), (head, False)):
        try:
            text = part.decode("utf-8", errors="replace")
        except ValueError:  # pragma: no cover - errors="replace" never raises
            continue
        for key in SCAN_KEYS:
            if key in found:
                continue
            value = _find(text, key, decoder, last=last)
            if value is not _MISSING:
                found[key] = value
    if not any(key in found for key in ("metrics", "timings", "meta_info", "sglext", "choices")):
        return Unparsed.TOO_LARGE
    return [found]


_MISSING = object()


def _find(text: str, key: str, decoder: json.JSONDecoder, *, last: bool) -> Any:
    """The JSON value after ``"key":`` in ``text`` (not inside a string: a key quoted inside
    content is escaped, ``\\"key\\"``), the last or the first occurrence that decodes."""
    needle = f'"{key}"'
    end = len(text)
    start = 0
    while True:
        at = text.rfind(needle, 0, end) if last else text.find(needle, start)
        if at < 0:
            return _MISSING
        if last:
            end = at
        else:
            start = at + 1
        if at > 0 and text[at - 1] == "\\":
            continue
        pos = at + len(needle)
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos >= len(text) or text[pos] != ":":
            continue
        pos += 1
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        try:
            value, _ = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            continue
        return value
