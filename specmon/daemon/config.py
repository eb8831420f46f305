"""specmon's configuration: strict YAML, every problem reported at once with its path.

A config is either entirely valid or rejected; a running daemon keeps its old config when a
new one is rejected. Secrets (bearer tokens, header values) live in :class:`Secret` objects
whose ``repr``/``str`` never show the value.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from specmon.engines import Engine

__all__ = [
    "DEFAULT_TARGETS",
    "Config",
    "ConfigError",
    "FileSDConfig",
    "GlobalConfig",
    "Secret",
    "TargetConfig",
    "format_duration",
    "load_config",
    "load_file_sd",
    "parse_config",
    "parse_duration",
]

ENGINE_CHOICES = ("auto", *(e.value for e in Engine))
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RESERVED_LABELS = frozenset({"target", "engine", "model", "window", "position", "source"})
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?\s*$")
_SIZE_UNITS = {
    None: 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9,
    "GiB": 2**30,
}  # fmt: skip


class ConfigError(Exception):
    """A rejected configuration; ``problems`` lists every problem, each with its path."""

    def __init__(self, problems: Sequence[str], *, source: str = "") -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(
            f"{where}{len(self.problems)} problem(s):\n" + "\n".join(f"  {p}" for p in problems)
        )


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


def parse_duration(value: object) -> float:
    """``5s``, ``1m30s``, ``500ms``, ``1h``; bare numbers are seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration like 5s or 1m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        pos = 0
        seconds = 0.0
        for match in _DURATION_PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise ValueError(f"{value!r} is not a duration like 5s, 1m30s or 500ms")
    else:
        raise ValueError("expected a duration like 5s or 1m")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError("must be a positive duration")
    return seconds


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


@dataclass(frozen=True, slots=True)
class GlobalConfig:
    scrape_interval: float = 5.0
    scrape_timeout: float = 3.0
    windows: tuple[float, ...] = (60.0, 300.0, 900.0)
    draft_cost: float = 0.1
    chain_length: int | None = None
    max_response_bytes: int = 10 * 2**20


@dataclass(frozen=True, slots=True)
class TargetConfig:
    name: str
    url: str
    engine: Engine | None = None  # None = auto-detect
    draft_cost: float = 0.1
    chain_length: int | None = None
    model: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, Secret] = field(default_factory=dict)
    bearer_token: Secret | None = None
    scrape_interval: float = 5.0
    scrape_timeout: float = 3.0
    #: Where the target came from: "config" or a file_sd path.
    origin: str = "config"

    def identity(self) -> tuple[object, ...]:
        """What the counters depend on: change any of it and the windows start again."""
        return (self.url, self.engine, self.model)

    def request_headers(self) -> dict[str, str]:
        headers = {name: value.reveal() for name, value in self.headers.items()}
        if self.bearer_token is not None:
            headers["Authorization"] = f"Bearer {self.bearer_token.reveal()}"
        return headers


@dataclass(frozen=True, slots=True)
class FileSDConfig:
    files: tuple[str, ...]
    refresh_interval: float = 30.0
    engine: Engine | None = None
    draft_cost: float | None = None
    chain_length: int | None = None


@dataclass(frozen=True, slots=True)
class Config:
    global_: GlobalConfig
    targets: tuple[TargetConfig, ...]
    file_sd: tuple[FileSDConfig, ...] = ()
    source: str = ""

    @property
    def retention(self) -> float:
        return max(self.global_.windows) + 2 * self.global_.scrape_interval


DEFAULT_TARGETS = (
    ("127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),  # vLLM's default port
    ("127.0.0.1:8080", "http://127.0.0.1:8080/metrics"),  # llama-server's default port
)


class _Checker:
    """Collects problems with their paths instead of stopping at the first."""

    def __init__(self, base_dir: Path) -> None:
        self.problems: list[str] = []
        self.base_dir = base_dir

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}" if path else message)

    def mapping(self, value: object, path: str, allowed: Sequence[str]) -> dict[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, dict):
            if path:
                self.add(path, f"must be a mapping, not {_kind(value)}")
            else:
                self.add("", f"the file must be a mapping (global:, targets:), not {_kind(value)}")
            return None
        for key in value:
            if not isinstance(key, str):
                self.add(path, f"key {key!r} must be a string")
            elif key not in allowed:
                hint = _closest(key, allowed)
                self.add(
                    _join(path, key), "unknown key" + (f" (did you mean {hint!r}?)" if hint else "")
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
        except (ValueError, TypeError) as exc:
            self.add(_join(path, key), str(exc))
            return default


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _kind(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _closest(key: str, allowed: Sequence[str]) -> str | None:
    import difflib

    found = difflib.get_close_matches(key, allowed, n=1, cutoff=0.75)
    return found[0] if found else None


def _unit_float(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number between 0 and 1, not {_kind(value)}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError("must be between 0 and 1")
    return float(value)


def _chain_length(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"must be an integer between 1 and 64, not {_kind(value)}")
    if not 1 <= value <= 64:
        raise ValueError("must be between 1 and 64")
    return value


def _size(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("must be a size like 10MiB")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(m.group(1)) * _SIZE_UNITS[m.group(2)]
    else:
        raise ValueError(f"{value!r} is not a size like 10MiB or 1000000")
    if size < 1024:
        raise ValueError("must be at least 1KiB")
    return size


def _engine(value: Any) -> Engine | None:
    if not isinstance(value, str) or value not in ENGINE_CHOICES:
        raise ValueError(f"must be one of {', '.join(ENGINE_CHOICES)}")
    return None if value == "auto" else Engine(value)


def _nonempty_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _url(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a URL string, not {_kind(value)}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host")
    if parts.username or parts.password:
        raise ValueError("credentials in the URL are not allowed; use bearer_token_env/_file")
    return value


def _check_labels(checker: _Checker, value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.add(path, f"must be a mapping of label names to strings, not {_kind(value)}")
        return {}
    labels: dict[str, str] = {}
    for key, item in value.items():
        where = _join(path, str(key))
        if not isinstance(key, str) or not _LABEL_NAME.match(key) or key.startswith("__"):
            checker.add(where, "invalid label name")
        elif key in _RESERVED_LABELS:
            checker.add(where, f"label {key!r} is set by specmon and cannot be overridden")
        elif not isinstance(item, str | int | float) or isinstance(item, bool):
            checker.add(where, "label values must be strings")
        else:
            labels[key] = str(item)
    return labels


def _check_headers(checker: _Checker, value: Any, path: str) -> dict[str, Secret]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.add(path, f"must be a mapping of header names to strings, not {_kind(value)}")
        return {}
    headers: dict[str, Secret] = {}
    for key, item in value.items():
        where = _join(path, str(key))
        if not isinstance(key, str) or not _HEADER_NAME.match(key):
            checker.add(where, "invalid header name")
        elif key.lower() in ("authorization",):
            checker.add(where, "use bearer_token_env or bearer_token_file for Authorization")
        elif not isinstance(item, str) or "\n" in item or "\r" in item:
            # Never echo the value: it may be a secret.
            checker.add(where, "header values must be single-line strings")
        else:
            headers[key] = Secret(item)
    return headers


def _bearer(
    checker: _Checker, data: Mapping[str, Any], path: str, environ: Mapping[str, str]
) -> Secret | None:
    env_name = data.get("bearer_token_env")
    file_name = data.get("bearer_token_file")
    if env_name is not None and file_name is not None:
        checker.add(path, "set bearer_token_env or bearer_token_file, not both")
        return None
    if env_name is not None:
        where = _join(path, "bearer_token_env")
        if not isinstance(env_name, str) or not env_name:
            checker.add(where, "must be the name of an environment variable")
            return None
        token = environ.get(env_name)
        if not token:
            checker.add(where, f"environment variable {env_name} is not set or empty")
            return None
        return Secret(token.strip())
    if file_name is not None:
        where = _join(path, "bearer_token_file")
        if not isinstance(file_name, str) or not file_name:
            checker.add(where, "must be a file path")
            return None
        token_path = checker.base_dir / file_name
        try:
            token = token_path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            checker.add(where, f"cannot read {token_path}: {exc.strerror or exc}")
            return None
        if not token:
            checker.add(where, f"{token_path} is empty")
            return None
        return Secret(token)
    return None


_GLOBAL_KEYS = (
    "scrape_interval",
    "scrape_timeout",
    "windows",
    "draft_cost",
    "chain_length",
    "max_response_bytes",
)
_TARGET_KEYS = (
    "name",
    "url",
    "engine",
    "draft_cost",
    "chain_length",
    "model",
    "labels",
    "headers",
    "bearer_token_env",
    "bearer_token_file",
    "scrape_interval",
    "scrape_timeout",
)
_FILE_SD_KEYS = ("files", "refresh_interval", "engine", "draft_cost", "chain_length")
_TOP_KEYS = ("global", "targets", "file_sd_configs")


def _check_global(checker: _Checker, raw: Any) -> GlobalConfig:
    data = checker.mapping(raw, "global", _GLOBAL_KEYS)
    if data is None:
        return GlobalConfig()
    default = GlobalConfig()
    interval = checker.get(
        data, "scrape_interval", "global", parse_duration, default.scrape_interval
    )
    timeout = checker.get(data, "scrape_timeout", "global", parse_duration, default.scrape_timeout)
    if "scrape_timeout" not in data and timeout > interval:
        timeout = interval
    if timeout > interval:
        checker.add("global.scrape_timeout", "must not exceed scrape_interval")
    windows = default.windows
    if "windows" in data:
        raw_windows = data["windows"]
        if not isinstance(raw_windows, list) or not raw_windows:
            checker.add("global.windows", "must be a non-empty list of durations")
        else:
            parsed: list[float] = []
            for index, item in enumerate(raw_windows):
                try:
                    seconds = parse_duration(item)
                except ValueError as exc:
                    checker.add(f"global.windows[{index}]", str(exc))
                    continue
                if seconds < 2 * interval:
                    checker.add(
                        f"global.windows[{index}]",
                        f"must be at least twice the scrape interval ({format_duration(2 * interval)})",
                    )
                elif format_duration(seconds) in {format_duration(s) for s in parsed}:
                    checker.add(f"global.windows[{index}]", "duplicate window")
                else:
                    parsed.append(seconds)
            windows = tuple(sorted(parsed)) or default.windows
    return GlobalConfig(
        scrape_interval=interval,
        scrape_timeout=timeout,
        windows=windows,
        draft_cost=checker.get(data, "draft_cost", "global", _unit_float, default.draft_cost),
        chain_length=checker.get(data, "chain_length", "global", _chain_length, None),
        max_response_bytes=checker.get(
            data, "max_response_bytes", "global", _size, default.max_response_bytes
        ),
    )


def _check_target(
    checker: _Checker,
    raw: Any,
    path: str,
    glob: GlobalConfig,
    environ: Mapping[str, str],
) -> TargetConfig | None:
    data = checker.mapping(raw, path, _TARGET_KEYS)
    if data is None:
        return None
    before = len(checker.problems)
    for required in ("name", "url"):
        if required not in data:
            checker.add(_join(path, required), "is required")
    name = checker.get(data, "name", path, _nonempty_str, "")
    url = checker.get(data, "url", path, _url, "")
    interval = checker.get(data, "scrape_interval", path, parse_duration, glob.scrape_interval)
    timeout = checker.get(
        data, "scrape_timeout", path, parse_duration, min(glob.scrape_timeout, interval)
    )
    if timeout > interval:
        checker.add(_join(path, "scrape_timeout"), "must not exceed scrape_interval")
    target = TargetConfig(
        name=name,
        url=url,
        engine=checker.get(data, "engine", path, _engine, None),
        draft_cost=checker.get(data, "draft_cost", path, _unit_float, glob.draft_cost),
        chain_length=checker.get(data, "chain_length", path, _chain_length, glob.chain_length),
        model=checker.get(data, "model", path, _nonempty_str, None),
        labels=_check_labels(checker, data.get("labels"), _join(path, "labels")),
        headers=_check_headers(checker, data.get("headers"), _join(path, "headers")),
        bearer_token=_bearer(checker, data, path, environ),
        scrape_interval=interval,
        scrape_timeout=timeout,
    )
    return target if len(checker.problems) == before else None


def _check_file_sd(checker: _Checker, raw: Any) -> list[FileSDConfig]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        checker.add("file_sd_configs", f"must be a list, not {_kind(raw)}")
        return []
    out = []
    for index, item in enumerate(raw):
        path = f"file_sd_configs[{index}]"
        data = checker.mapping(item, path, _FILE_SD_KEYS)
        if data is None:
            continue
        files = data.get("files")
        if not isinstance(files, list) or not files or not all(isinstance(f, str) for f in files):
            checker.add(_join(path, "files"), "must be a non-empty list of file paths or globs")
            continue
        resolved = tuple(str(checker.base_dir / f) for f in files)
        out.append(
            FileSDConfig(
                files=resolved,
                refresh_interval=checker.get(data, "refresh_interval", path, parse_duration, 30.0),
                engine=checker.get(data, "engine", path, _engine, None),
                draft_cost=checker.get(data, "draft_cost", path, _unit_float, None),
                chain_length=checker.get(data, "chain_length", path, _chain_length, None),
            )
        )
    return out


def parse_config(
    text: str,
    *,
    source: str = "<config>",
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Validate a YAML document; raise :class:`ConfigError` listing every problem."""
    env = os.environ if environ is None else environ
    checker = _Checker(base_dir or Path.cwd())
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}invalid YAML: {problem}"], source=source) from None
    top = checker.mapping(raw, "", _TOP_KEYS)
    if top is None:
        raise ConfigError(checker.problems, source=source)
    glob = _check_global(checker, top.get("global"))
    targets: list[TargetConfig] = []
    raw_targets = top.get("targets")
    targets_invalid = raw_targets is not None and not isinstance(raw_targets, list)
    if targets_invalid:
        checker.add("targets", f"must be a list, not {_kind(raw_targets)}")
        raw_targets = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw_targets or []):
        path = f"targets[{index}]"
        target = _check_target(checker, item, path, glob, env)
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, str) and name:
            if name in seen:
                checker.add(
                    _join(path, "name"),
                    f"duplicate target name {name!r} (also targets[{seen[name]}])",
                )
            else:
                seen[name] = index
        if target is not None:
            targets.append(target)
    file_sd = _check_file_sd(checker, top.get("file_sd_configs"))
    if not raw_targets and not file_sd and not targets_invalid and not top.get("file_sd_configs"):
        checker.add("targets", "no targets and no file_sd_configs: nothing to watch")
    if checker.problems:
        raise ConfigError(checker.problems, source=source)
    return Config(global_=glob, targets=tuple(targets), file_sd=tuple(file_sd), source=source)


def load_config(path: Path, *, environ: Mapping[str, str] | None = None) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            [f"cannot read the file: {exc.strerror or exc}"], source=str(path)
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(["the file is not UTF-8 text"], source=str(path)) from None
    return parse_config(text, source=str(path), base_dir=path.parent, environ=environ)


def default_config() -> Config:
    """No config file: watch the engines' default local endpoints, auto-detecting each."""
    glob = GlobalConfig()
    targets = tuple(
        TargetConfig(
            name=name,
            url=url,
            draft_cost=glob.draft_cost,
            scrape_interval=glob.scrape_interval,
            scrape_timeout=glob.scrape_timeout,
        )
        for name, url in DEFAULT_TARGETS
    )
    return Config(global_=glob, targets=targets, source="<built-in defaults>")


# --- Prometheus file_sd ---------------------------------------------------------------------

_SPECIAL = {
    "__scheme__",
    "__metrics_path__",
    "__specmon_name__",
    "__specmon_engine__",
    "__specmon_draft_cost__",
    "__specmon_chain_length__",
    "__specmon_model__",
}


def load_file_sd(
    path: Path, sd: FileSDConfig, glob: GlobalConfig
) -> tuple[list[TargetConfig], list[str]]:
    """Targets from one file in Prometheus file_sd format (JSON or YAML).

    Each entry: ``{"targets": ["host:port", ...], "labels": {...}}``. Labels become constant
    labels; special labels ``__scheme__``, ``__metrics_path__`` and ``__specmon_name__``,
    ``__specmon_engine__``, ``__specmon_draft_cost__``, ``__specmon_chain_length__``,
    ``__specmon_model__`` set the target's URL and settings. The name defaults to host:port.
    Returns the targets and the problems (a file with problems contributes no target).
    """
    checker = _Checker(path.parent)
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        return [], [f"{path}: cannot read: {exc}"]
    if raw is None:
        return [], []
    if not isinstance(raw, list):
        return [], [f"{path}: must be a list of target groups"]
    targets: list[TargetConfig] = []
    for gi, group in enumerate(raw):
        gpath = f"[{gi}]"
        data = checker.mapping(group, gpath, ("targets", "labels"))
        if data is None:
            continue
        hosts = data.get("targets")
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
            checker.add(_join(gpath, "targets"), "must be a list of host:port strings")
            continue
        raw_labels = data.get("labels") or {}
        if not isinstance(raw_labels, dict):
            checker.add(_join(gpath, "labels"), "must be a mapping")
            continue
        special = {k: str(v) for k, v in raw_labels.items() if k in _SPECIAL}
        plain = {k: v for k, v in raw_labels.items() if not str(k).startswith("__")}
        labels = _check_labels(checker, plain, _join(gpath, "labels"))
        scheme = special.get("__scheme__", "http")
        metrics_path = special.get("__metrics_path__", "/metrics")
        for ti, host in enumerate(hosts):
            tpath = f"{gpath}.targets[{ti}]"
            url = f"{scheme}://{host}{metrics_path}"
            try:
                _url(url)
            except ValueError as exc:
                checker.add(tpath, str(exc))
                continue
            name = special.get("__specmon_name__", host)
            if len(hosts) > 1 and "__specmon_name__" in special:
                name = f"{name}-{host}"
            get = checker.get
            targets.append(
                TargetConfig(
                    name=name,
                    url=url,
                    engine=get(special, "__specmon_engine__", gpath, _engine, sd.engine),
                    draft_cost=get(
                        special,
                        "__specmon_draft_cost__",
                        gpath,
                        lambda v: _unit_float(float(v)),
                        sd.draft_cost if sd.draft_cost is not None else glob.draft_cost,
                    ),
                    chain_length=get(
                        special,
                        "__specmon_chain_length__",
                        gpath,
                        lambda v: _chain_length(int(v)),
                        sd.chain_length if sd.chain_length is not None else glob.chain_length,
                    ),
                    model=special.get("__specmon_model__"),
                    labels=labels,
                    scrape_interval=glob.scrape_interval,
                    scrape_timeout=glob.scrape_timeout,
                    origin=str(path),
                )
            )
    if checker.problems:
        return [], [f"{path}: {p}" for p in checker.problems]
    return targets, []
