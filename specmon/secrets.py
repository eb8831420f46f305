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
    """``text`` with every occurrence of every secret replaced, then cut to ``limit`` chars.

    Used on what a remote server sends back (an error body that echoes request headers) before
    it reaches a log line, the status page or the API. Longer secrets are replaced first, so a
    secret that contains another is removed whole.
    """
    values = sorted(
        {s.reveal() if isinstance(s, Secret) else s for s in secrets},
        key=len,
        reverse=True,
    )
    for value in values:
        if len(value) >= _MIN_SECRET and value in text:
            text = text.replace(value, REDACTED)
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text
