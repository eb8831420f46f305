"""PromQL label selectors (``{job=~"vllm.*", namespace="prod"}``): parsed strictly, matched in
Python the way Prometheus matches them (regular expressions anchored at both ends), and
quoted back into queries."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["MatchOp", "Matcher", "Selector", "SelectorError", "parse_selector", "quote"]

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
MAX_SELECTOR_CHARS = 4096


class SelectorError(ValueError):
    """A selector that is not a PromQL label-matcher list."""


class MatchOp(StrEnum):
    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


@dataclass(frozen=True, slots=True)
class Matcher:
    name: str
    op: MatchOp
    value: str
    #: The compiled, anchored regular expression for ``=~`` and ``!~`` (Python ``re``).
    pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, labels: Mapping[str, str]) -> bool:
        """PromQL semantics: a missing label has the empty value."""
        value = labels.get(self.name, "")
        if self.op is MatchOp.EQ:
            return value == self.value
        if self.op is MatchOp.NE:
            return value != self.value
        assert self.pattern is not None
        found = self.pattern.fullmatch(value) is not None
        return found if self.op is MatchOp.RE else not found

    def promql(self) -> str:
        return f"{self.name}{self.op.value}{quote(self.value)}"


@dataclass(frozen=True, slots=True)
class Selector:
    matchers: tuple[Matcher, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(m.matches(labels) for m in self.matchers)

    def promql(self) -> str:
        """The matchers, comma-separated, without braces (empty for the empty selector)."""
        return ",".join(m.promql() for m in self.matchers)

    def __str__(self) -> str:
        return "{" + self.promql() + "}"


def quote(value: str) -> str:
    """A PromQL double-quoted string literal for ``value``."""
    out = ['"']
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", '"': '"', "'": "'",
}  # fmt: skip


def _read_string(text: str, pos: int) -> tuple[str, int]:
    """A PromQL string literal starting at ``pos``: "...", '...' or `...` (raw)."""
    quote_char = text[pos]
    end = len(text)
    pos += 1
    if quote_char == "`":
        close = text.find("`", pos)
        if close < 0:
            raise SelectorError("unterminated `string`")
        return text[pos:close], close + 1
    chars: list[str] = []
    while True:
        if pos >= end:
            raise SelectorError(f"unterminated {quote_char}string{quote_char}")
        ch = text[pos]
        if ch == quote_char:
            return "".join(chars), pos + 1
        if ch == "\n":
            raise SelectorError("newline inside a string")
        if ch != "\\":
            chars.append(ch)
            pos += 1
            continue
        if pos + 1 >= end:
            raise SelectorError("unterminated escape")
        esc = text[pos + 1]
        if esc in _SIMPLE_ESCAPES:
            chars.append(_SIMPLE_ESCAPES[esc])
            pos += 2
            continue
        digits = {"x": 2, "u": 4, "U": 8}.get(esc)
        if digits is not None:
            hex_part = text[pos + 2 : pos + 2 + digits]
            if len(hex_part) != digits or not all(c in "0123456789abcdefABCDEF" for c in hex_part):
                raise SelectorError(f"invalid \\{esc} escape")
            code = int(hex_part, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise SelectorError(f"invalid \\{esc} escape")
            chars.append(chr(code))
            pos += 2 + digits
            continue
        if esc in "01234567":
            octal = text[pos + 1 : pos + 4]
            if len(octal) != 3 or not all(c in "01234567" for c in octal) or int(octal, 8) > 255:
                raise SelectorError("invalid octal escape")
            chars.append(chr(int(octal, 8)))
            pos += 4
            continue
        raise SelectorError(f"unknown escape \\{esc}")


def parse_selector(text: str, *, compile_regex: bool = False) -> Selector:
    """Parse ``{name="v", name=~"re", ...}`` (PromQL label matchers; braces required).

    ``compile_regex``: compile ``=~``/``!~`` values with Python's ``re`` (needed to evaluate
    the selector here; selectors only sent to Prometheus are left to its RE2).
    """
    if not isinstance(text, str):
        raise SelectorError("must be a string like '{job=~\"vllm.*\"}'")
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(f"longer than {MAX_SELECTOR_CHARS} characters")
    body = text.strip()
    if not body.startswith("{"):
        raise SelectorError(
            "must be label matchers in braces, like '{job=~\"vllm.*\"}' "
            "(metric names are chosen by specmon)"
        )
    if not body.endswith("}"):
        raise SelectorError("missing the closing '}'")
    pos, end = 1, len(body) - 1
    matchers: list[Matcher] = []

    def skip_space(p: int) -> int:
        while p < end and body[p] in " \t\r\n":
            p += 1
        return p

    while True:
        pos = skip_space(pos)
        if pos >= end:
            break
        m = _LABEL_NAME.match(body, pos, end)
        if m is None:
            raise SelectorError(f"expected a label name at position {pos + 1}")
        name = m.group()
        pos = skip_space(m.end())
        op_text = body[pos : pos + 2]
        if op_text in ("=~", "!~", "!="):
            op = MatchOp(op_text)
            pos += 2
        elif body[pos : pos + 1] == "=":
            op = MatchOp.EQ
            pos += 1
        else:
            raise SelectorError(f"expected =, !=, =~ or !~ after {name!r}")
        pos = skip_space(pos)
        if pos >= end or body[pos] not in "\"'`":
            raise SelectorError(f"expected a quoted value for {name!r}")
        value, pos = _read_string(body, pos)
        if pos > end:
            raise SelectorError(f"unterminated value for {name!r}")
        pattern = None
        if op in (MatchOp.RE, MatchOp.NRE) and compile_regex:
            try:
                pattern = re.compile(value)
            except re.error as exc:
                raise SelectorError(f"invalid regular expression for {name!r}: {exc}") from None
        matchers.append(Matcher(name, op, value, pattern))
        pos = skip_space(pos)
        if pos >= end:
            break
        if body[pos] != ",":
            raise SelectorError(f"expected ',' or '}}' after the matcher on {name!r}")
        pos += 1
    return Selector(tuple(matchers))
