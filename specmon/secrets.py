"""Secrets from the configuration: values that must never reach a log, an error, a metric or a
page, and the redaction applied to anything a remote server says back.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["REDACTED", "Secret", "redact"]

REDACTED = "<redacted>"
#: Secrets shorter than this are not searched for in text: too likely to match by chance,
#: and no real token is this short.
_MIN_SECRET = 4


class Secret:
    """A value that must never appear in logs, errors, metrics or pages."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('<hidden>')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def redact(text: str, secrets: Iterable[Secret | str], *, limit: int | None = None) -> str:
    """``text`` with every secret taken out, then cut to ``limit`` characters.

    Used on what a remote server sends back (an error body that echoes request headers)
    before it reaches a log line, the status page or the API. In this order, so that no cut
    can leave part of a secret behind:

    1. every whole occurrence of every secret, and any run of 4 or more characters that is
       part of a secret (a secret the server itself echoed in part, or cut), is marked, in
       the whole text;
    2. each mark grows to the whole word it falls in (letters, digits and ``_-~+``), so that
       no fragment is left beside it ("detected" becomes ``<redacted>``, never
       "det<redacted>"), and each run of marks becomes one :data:`REDACTED`;
    3. the result is cut to ``limit``.
    """
    values = sorted(
        {s.reveal() if isinstance(s, Secret) else s for s in secrets},
        key=len,
        reverse=True,
    )
    values = [v for v in values if len(v) >= _MIN_SECRET]
    if values:
        text = _scrub(text, values)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text


def _word(char: str) -> bool:
    return char.isalnum() or char in "_-~+"


def _scrub(text: str, values: Iterable[str]) -> str:
    """``text`` with every occurrence of one of ``values``, and every run of ``_MIN_SECRET``
    or more characters that also occurs inside one, replaced by :data:`REDACTED`, whole
    words at a time."""
    n = _MIN_SECRET
    marked = [False] * len(text)
    found = False
    for value in values:
        start = text.find(value)
        while start >= 0:
            marked[start : start + len(value)] = [True] * len(value)
            found = True
            start = text.find(value, start + 1)
    grams = {v[i : i + n] for v in values for i in range(len(v) - n + 1)}
    for i in range(len(text) - n + 1):
        if text[i : i + n] in grams:
            marked[i : i + n] = [True] * n
            found = True
    if not found:
        return text
    for i in range(len(text)):  # grow each mark to its whole word, both ways
        if marked[i] and _word(text[i]):
            j = i - 1
            while j >= 0 and not marked[j] and _word(text[j]):
                marked[j] = True
                j -= 1
            j = i + 1
            while j < len(text) and not marked[j] and _word(text[j]):
                marked[j] = True
                j += 1
    out: list[str] = []
    i = 0
    while i < len(text):
        if marked[i]:
            while i < len(text) and marked[i]:
                i += 1
            out.append(REDACTED)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
