"""The tap's configuration: command-line flags, and ``--config.file`` for the rest, checked
strictly (every problem listed with its path, unknown keys refused).

::

    upstream: http://127.0.0.1:8000      # the engine (--upstream wins)
    classes:                             # how a request's class is decided (one of three)
      header: x-request-class            #   a request header, against the allowlist
      allow: [code, chat]                #   (--class-header and --classes win)
      # from: model                      #   the model or LoRA adapter the response names
      # allow: [base, sql-lora]
      # from: prompt_tokens              #   a prompt-length bucket from the response's usage
      # buckets: [512, 4096]             #   -> le512, le4096, gt4096
    long_request_tokens: 256             # "long" for the repetition-loop histogram
    max_parse_bytes: 64KiB               # kept of each response (head and tail)
    timeouts:
      connect: 10s                       # to the upstream
      idle: 5m                           # longest silence from the upstream, headers included
    max_upstream_connections: 1024
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specmon.config_values import (
    Checker,
    ConfigError,
    kind_of,
    load_yaml,
    parse_duration,
    parse_size,
)
from specmon.engines.classes import CLASS_NAME, MAX_CLASSES, OTHER
from specmon.files import read_text_capped

__all__ = ["ClassRule", "ClassSource", "TapConfig", "parse_tap_config", "read_tap_config"]

_MAX_FILE = 1 << 20


class ClassSource(StrEnum):
    """Where a request's class comes from."""

    NONE = "none"
    HEADER = "header"
    MODEL = "model"
    PROMPT_TOKENS = "prompt_tokens"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassRule:
    source: ClassSource = ClassSource.NONE
    #: The request header (source ``header``), lower case.
    header: str | None = None
    #: The allowed classes (``header``, ``model``); anything else is ``other``.
    allow: tuple[str, ...] = ()
    #: Prompt-token bucket bounds, ascending (``prompt_tokens``).
    buckets: tuple[int, ...] = ()

    def classes(self) -> tuple[str, ...]:
        """Every class this rule can give: the ``class`` label's values (its cardinality)."""
        if self.source is ClassSource.NONE:
            return ("all",)
        if self.source is ClassSource.PROMPT_TOKENS:
            return (*(f"le{b}" for b in self.buckets), f"gt{self.buckets[-1]}", OTHER)
        return (*self.allow, OTHER)


@dataclass(frozen=True, slots=True, kw_only=True)
class TapConfig:
    upstream: str
    classes: ClassRule = field(default_factory=ClassRule)
    long_request_tokens: int = 256
    max_parse_bytes: int = 64 * 1024
    connect_timeout: float = 10.0
    idle_timeout: float = 300.0
    max_upstream_connections: int = 1024
    #: The file the config came from ("" for flags only).
    source: str = ""


_KEYS = ("upstream", "classes", "long_request_tokens", "max_parse_bytes", "timeouts",
         "max_upstream_connections")  # fmt: skip
_CLASS_KEYS = ("header", "allow", "from", "buckets")
_TIMEOUT_KEYS = ("connect", "idle")
_MAX_ALLOW = MAX_CLASSES - 1


def check_upstream(value: Any) -> str:
    """An http(s) URL with a host and no query, fragment or credentials; a trailing slash is
    dropped (request paths are appended to it)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a URL, not {kind_of(value)}")
    if len(value) > 2048:
        raise ValueError("too long for a URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.query or parts.fragment:
        raise ValueError("must have no query string or fragment")
    if parts.username or parts.password:
        raise ValueError("must carry no credentials (clients send their own Authorization)")
    return value.rstrip("/")


def check_allow(value: Any) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ValueError("must be a non-empty list of class names")
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not CLASS_NAME.fullmatch(item):
            shown = repr(item[:40]) if isinstance(item, str) else kind_of(item)
            raise ValueError(f"{shown}: a class is 1-64 of A-Z a-z 0-9 _ . : / @ + -")
        if item == OTHER:
            raise ValueError(f"{OTHER!r} is the class of everything else, not an allowed one")
        if item not in out:
            out.append(item)
    if len(out) > _MAX_ALLOW:
        raise ValueError(f"at most {_MAX_ALLOW} classes (the class label's cardinality bound)")
    return tuple(out)


def check_header(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a header name, not {kind_of(value)}")
    if len(value) > 64 or not all(c.isalnum() or c in "-_" for c in value):
        raise ValueError(f"{value[:40]!r} is not a header name")
    return value.lower()


def _buckets(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of prompt-token bounds")
    if len(value) > _MAX_ALLOW - 1:
        raise ValueError(f"at most {_MAX_ALLOW - 1} bounds")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in value):
        raise ValueError("bounds are positive integers")
    if sorted(set(value)) != value:
        raise ValueError("bounds must be strictly ascending")
    return tuple(value)


def _positive_int(limit: int) -> Any:
    def convert(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
            raise ValueError(f"must be an integer between 1 and {limit}")
        return value

    return convert


def _class_rule(checker: Checker, raw: Any) -> ClassRule:
    data = checker.mapping(raw, "classes", _CLASS_KEYS)
    if not data:
        return ClassRule()
    source_text = data.get("from", "header" if "header" in data else None)
    try:
        source = ClassSource(source_text) if source_text is not None else ClassSource.NONE
    except ValueError:
        checker.add("classes.from", "must be header, model or prompt_tokens")
        return ClassRule()
    header = checker.get(data, "header", "classes", check_header, None)
    allow = checker.get(data, "allow", "classes", check_allow, ())
    buckets = checker.get(data, "buckets", "classes", _buckets, ())
    if source is ClassSource.HEADER and header is None:
        checker.add("classes.header", "required for classes from a header")
    if source is not ClassSource.HEADER and "header" in data:
        checker.add("classes.header", f"not used with from: {source.value}")
    if source in (ClassSource.HEADER, ClassSource.MODEL) and not allow:
        checker.add("classes.allow", "required: the allowlist bounds the class label")
    if source is ClassSource.PROMPT_TOKENS:
        if not buckets:
            checker.add("classes.buckets", "required for classes from prompt_tokens")
        if "allow" in data:
            checker.add("classes.allow", "not used with from: prompt_tokens")
    elif "buckets" in data:
        checker.add("classes.buckets", "only used with from: prompt_tokens")
    return ClassRule(source=source, header=header, allow=allow, buckets=buckets)


def parse_tap_config(
    data: Any, *, source: str = "", overrides: Mapping[str, Any] | None = None
) -> TapConfig:
    """A config from YAML data (None: flags only) and the command line's ``overrides``
    (``upstream``, ``class_header``, ``classes``). Raises ConfigError with every problem."""
    checker = Checker()
    top = checker.mapping(data, "", _KEYS) or {}
    flags = dict(overrides or {})
    upstream_raw = flags.get("upstream") or top.get("upstream")
    upstream = ""
    if upstream_raw is None:
        checker.add("upstream", "required (--upstream or upstream: in the config file)")
    else:
        try:
            upstream = check_upstream(upstream_raw)
        except ValueError as exc:
            checker.add("upstream", str(exc))
    rule = _class_rule(checker, top.get("classes"))
    if flags.get("class_header") is not None or flags.get("classes") is not None:
        try:
            allow = check_allow(flags["classes"]) if flags.get("classes") else rule.allow
            header = (
                check_header(flags["class_header"]) if flags.get("class_header") else rule.header
            )
            if header is None:
                raise ValueError("--classes needs --class-header (or classes.header)")
            if not allow:
                raise ValueError("--class-header needs --classes (the allowlist)")
            rule = ClassRule(source=ClassSource.HEADER, header=header, allow=allow)
        except ValueError as exc:
            checker.add("--class-header/--classes", str(exc))
    timeouts = checker.mapping(top.get("timeouts"), "timeouts", _TIMEOUT_KEYS) or {}
    config = TapConfig(
        upstream=upstream,
        classes=rule,
        long_request_tokens=checker.get(
            top, "long_request_tokens", "", _positive_int(10_000_000), 256
        ),
        max_parse_bytes=checker.get(
            top, "max_parse_bytes", "", lambda v: _bounded_size(v), 64 * 1024
        ),
        connect_timeout=checker.get(timeouts, "connect", "timeouts", parse_duration, 10.0),
        idle_timeout=checker.get(timeouts, "idle", "timeouts", parse_duration, 300.0),
        max_upstream_connections=checker.get(
            top, "max_upstream_connections", "", _positive_int(65536), 1024
        ),
        source=source,
    )
    if checker.problems:
        raise ConfigError(checker.problems, source=source)
    return config


def _bounded_size(value: Any) -> int:
    size = parse_size(value, minimum=4096)
    if size > 64 * 1024 * 1024:
        raise ValueError("must be at most 64MiB (it is kept per response in flight)")
    return size


def read_tap_config(path: Path | None, *, overrides: Mapping[str, Any]) -> TapConfig:
    """The config from ``path`` (None: the flags alone) and the flags."""
    if path is None:
        return parse_tap_config(None, overrides=overrides)
    source = str(path)
    try:
        text = read_text_capped(path, max_bytes=_MAX_FILE)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ConfigError([f"cannot read: {why}"], source=source) from None
    except UnicodeDecodeError:
        raise ConfigError(["not UTF-8 text"], source=source) from None
    data = load_yaml(text, source=source)
    return parse_tap_config(data, source=source, overrides=overrides)
