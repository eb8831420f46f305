"""Operator input, parsed strictly: durations, sizes, listen addresses, bounded YAML, and the
problem list that reports every mistake at once with its path.

Shared by the daemon's config, the simulator's scenarios, the Prometheus source and the CLI;
no I/O beyond what a caller hands in, and nothing here imports a layer above it.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "Checker",
    "ConfigError",
    "YamlLimits",
    "check_chain_length",
    "check_unit_float",
    "format_duration",
    "join_path",
    "kind_of",
    "load_yaml",
    "parse_duration",
    "parse_listen_address",
    "parse_size",
]

_DURATION_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d{1,15})\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9,
    "GiB": 2**30,
}  # fmt: skip
#: Longest input string any parser here looks at; longer ones are rejected unread.
_MAX_TOKEN = 64


class ConfigError(Exception):
    """Rejected input; ``problems`` lists every problem, each with its path."""

    def __init__(self, problems: Sequence[str], *, source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(
            f"{where}{len(self.problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems)
        )


def kind_of(value: object) -> str:
    """What a value is, in words, for an error message (never the value itself)."""
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def join_path(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _short(text: str, limit: int = 40) -> str:
    """A value for an error message: quoted, and cut when long (it may be huge)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


class Checker:
    """Collects problems with their paths instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}" if path else message)

    def mapping(self, value: object, path: str, allowed: Sequence[str]) -> dict[str, Any] | None:
        """``value`` as a mapping with only ``allowed`` keys (unknown keys are problems)."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            if path:
                self.add(path, f"must be a mapping, not {kind_of(value)}")
            else:
                keys = ", ".join(f"{k}:" for k in allowed)
                self.add("", f"the file must be a mapping ({keys}), not {kind_of(value)}")
            return None
        for key in value:
            if not isinstance(key, str):
                self.add(path, f"keys must be strings, not {kind_of(key)}")
            elif key not in allowed:
                hint = _closest(key, allowed)
                self.add(
                    join_path(path, _short(key, 60) if len(key) > 60 else key),
                    "unknown key" + (f" (did you mean {hint!r}?)" if hint else ""),
                )
        return {k: v for k, v in value.items() if isinstance(k, str) and k in allowed}

    def get(
        self,
        data: Mapping[str, Any],
        key: str,
        path: str,
        convert: Callable[[Any], Any],
        default: Any,
    ) -> Any:
        if key not in data or data[key] is None:
            return default
        try:
            return convert(data[key])
        except (ValueError, TypeError, OverflowError) as exc:
            self.add(join_path(path, key), str(exc))
            return default


def _closest(key: str, allowed: Sequence[str]) -> str | None:
    if len(key) > 60:
        return None
    found = difflib.get_close_matches(key, allowed, n=1, cutoff=0.75)
    return found[0] if found else None


# -- fields every config has ---------------------------------------------------------------------


def check_unit_float(value: Any) -> float:
    """A number between 0 and 1 (a draft cost, a ratio)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number between 0 and 1, not {kind_of(value)}")
    if not 0.0 <= float(value) <= 1.0:  # NaN fails too
        raise ValueError("must be between 0 and 1")
    return float(value)


def check_bool(value: Any) -> bool:
    """``true`` or ``false`` (YAML booleans only: not 1, 0 or "yes")."""
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, not {kind_of(value)}")
    return value


def check_chain_length(value: Any) -> int:
    """A chain length k: an integer between 1 and 64."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer between 1 and 64, not {kind_of(value)}")
    if not 1 <= value <= 64:
        raise ValueError("must be between 1 and 64")
    return value


# -- durations, sizes, addresses ----------------------------------------------------------------


def parse_duration(value: object) -> float:
    """``5s``, ``1m30s``, ``500ms``, ``1h``; bare numbers are seconds. Positive and finite."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 5s or 1m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if len(text) > _MAX_TOKEN:
            raise ValueError(f"{_short(text)} is not a duration like 5s, 1m30s or 500ms")
        pos = 0
        seconds = 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise ValueError(f"{_short(text)} is not a duration like 5s, 1m30s or 500ms")
    else:
        raise ValueError("expected a duration like 5s or 1m")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a positive duration")
    if seconds > 366 * 86400:
        raise ValueError("must be at most a year")
    return seconds


@functools.lru_cache(maxsize=256)  # the daemon labels every window of every view with it
def format_duration(seconds: float) -> str:
    """Canonical short form used in the ``window`` label: 60 -> ``1m``, 90 -> ``1m30s``."""
    if seconds < 1 or seconds != int(seconds):
        return f"{round(seconds * 1000)}ms"
    rest = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            amount, rest = divmod(rest, size)
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def parse_size(value: object, *, minimum: int = 1024) -> int:
    """``10MiB``, ``1MB``, ``1000000`` (bytes)."""
    if isinstance(value, bool):
        raise ValueError("must be a size like 10MiB")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and len(value) <= _MAX_TOKEN and (m := _SIZE.match(value)):
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    else:
        shown = _short(value) if isinstance(value, str) else kind_of(value)
        raise ValueError(f"{shown} is not a size like 10MiB or 1000000")
    if size < minimum:
        shown_min = f"{minimum // 1024}KiB" if minimum % 1024 == 0 else f"{minimum} bytes"
        raise ValueError(f"must be at least {shown_min}")
    if size > 2**40:
        raise ValueError("must be at most 1TiB")
    return size


def parse_listen_address(address: str) -> tuple[str | None, int]:
    """``:10920`` (all interfaces), ``127.0.0.1:10920``, ``[::1]:10920``."""
    if len(address) > 300:
        raise ValueError(f"{_short(address)}: too long for HOST:PORT")
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError(f"{_short(address)}: expected HOST:PORT or :PORT")
    if not port_text.isdigit() or len(port_text) > 5:
        raise ValueError(f"{_short(address)}: port {_short(port_text)} is not a number")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ValueError(f"{_short(address)}: port out of range")
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"{_short(address)}: unbalanced brackets around the host")
    host = host.removeprefix("[").removesuffix("]")
    if any(ch.isspace() for ch in host):
        raise ValueError(f"{_short(address)}: the host contains whitespace")
    return (host or None), port


# -- bounded YAML -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """Bounds on one YAML document, checked before and while it is built."""

    #: Largest document, in bytes of UTF-8.
    max_bytes: int = 1 << 20
    #: Deepest nesting of mappings and sequences.
    max_depth: int = 32
    #: Most nodes once every alias is expanded (what a reader of the data would walk).
    max_nodes: int = 200_000


def load_yaml(text: str, *, source: str = "", limits: YamlLimits | None = None) -> Any:
    """``yaml.safe_load`` with bounded size, depth and alias expansion.

    Raises :class:`ConfigError` (never RecursionError or MemoryError) for a document that is too
    large, too deep, an alias bomb, or not YAML. The depth is checked on the event stream
    (iterative) before any recursive composition, and the expanded size on the composed node
    graph with memoisation, so neither check costs more than the document's own size.
    """
    lim = limits or YamlLimits()
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > lim.max_bytes:
        raise ConfigError(
            [f"the document is {size} bytes; the limit is {lim.max_bytes}"], source=source
        )
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > lim.max_depth:
                    mark = event.start_mark
                    where = f"line {mark.line + 1}: " if mark else ""
                    raise ConfigError(
                        [f"{where}nested deeper than {lim.max_depth} levels"], source=source
                    )
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(exc)], source=source) from None
    if node is None:
        return None
    expanded = _expanded_nodes(node, {}, lim.max_nodes)
    if expanded > lim.max_nodes:
        raise ConfigError(
            [
                f"the document expands to more than {lim.max_nodes} values once its aliases "
                "are resolved (an alias bomb?)"
            ],
            source=source,
        )
    duplicates = _duplicate_keys(node)
    if duplicates:
        raise ConfigError(duplicates, source=source)
    try:
        loader = yaml.SafeLoader("")
        try:
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(exc)], source=source) from None


def _duplicate_keys(root: yaml.Node) -> list[str]:
    """Every key given twice in one mapping, with both lines: YAML would silently keep the
    last (``global:`` twice drops the first block without a word)."""
    problems: list[str] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                stack.append(value)
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    stack.append(key)
                    continue
                line = key.start_mark.line + 1
                if key.value in first:
                    problems.append(
                        f"line {line}: key {key.value[:80]!r} is given twice in one mapping "
                        f"(first on line {first[key.value]}); YAML would keep only the last"
                    )
                else:
                    first[key.value] = line
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(problems, key=lambda p: int(p.split(":")[0].removeprefix("line ")))


def _expanded_nodes(node: yaml.Node, memo: dict[int, int], cap: int) -> int:
    """Nodes under ``node`` counting every alias use (memoised per node: linear time)."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = cap + 1  # a cycle (recursive alias) counts as too large
    total = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            total += _expanded_nodes(child, memo, cap)
            if total > cap:
                break
    elif isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            total += _expanded_nodes(key_node, memo, cap) + _expanded_nodes(value_node, memo, cap)
            if total > cap:
                break
    memo[key] = total
    return total


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or type(exc).__name__
    return f"{where}invalid YAML: {str(problem)[:200]}"
