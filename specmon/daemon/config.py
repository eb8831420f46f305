"""specmon's configuration: strict YAML, every problem reported at once with its path.

A config is either entirely valid or rejected; a running daemon keeps its old config when a
new one is rejected. Secrets (bearer tokens, header values) live in
:class:`~specmon.secrets.Secret` objects whose ``repr``/``str`` never show the value. The keys
each block accepts are derived from its dataclass's fields. Prometheus file_sd files are read
by :mod:`specmon.daemon.file_sd`.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specmon import files
from specmon.config_values import (
    ConfigError,
    YamlLimits,
    check_bool,
    check_chain_length,
    check_unit_float,
    format_duration,
    join_path,
    kind_of,
    load_yaml,
    parse_duration,
    parse_size,
)
from specmon.engines import Engine, PageLimits, check_engine
from specmon.load import Profile, ProfileError, profile_from_json
from specmon.load.curve_sums import retention_bytes
from specmon.report import DEFAULT_DRAFT_COST
from specmon.settings import SETTINGS, TargetSettings, settle
from specmon.sources.client_config import CLIENT_KEYS, ClientConfig, FileChecker, check_client
from specmon.sources.prometheus_config import PrometheusSourceConfig, check_sources
from specmon.state.groups import check_group_labels

__all__ = [
    "CURVE_MEMORY_BUDGET",
    "DEFAULT_TARGETS",
    "MAX_CONFIG_BYTES",
    "Config",
    "ConfigError",
    "FileSDConfig",
    "GlobalConfig",
    "TargetConfig",
    "check_url",
    "config_keys",
    "curve_memory_warning",
    "default_config",
    "load_config",
    "parse_config",
]

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
RESERVED_LABELS = frozenset({"target", "engine", "model", "window", "position", "source"})
#: Largest configuration file specmon reads.
MAX_CONFIG_BYTES = 1 << 20
#: Headers a target config may not set: Authorization comes from the credentials keys.
_OWN_HEADERS = frozenset({"authorization"})
#: Longest label value or model name accepted from a config file.
MAX_LABEL_VALUE = 1024
_MAX_URL = 2048


def _keys(*names: str) -> dict[str, tuple[str, ...]]:
    """Field metadata: the config keys that set this field (none for internal fields)."""
    return {"keys": names}


@dataclass(frozen=True, slots=True)
class GlobalConfig:
    scrape_interval: float = 5.0
    scrape_timeout: float = 3.0
    windows: tuple[float, ...] = (60.0, 300.0, 900.0)
    #: None: not set (targets without their own fall back to DEFAULT_DRAFT_COST, a guess).
    draft_cost: float | None = None
    chain_length: int | None = None
    max_response_bytes: int = 10 * 2**20
    #: Ask targets for gzip (Prometheus's ``enable_compression``). Off by default: a 56 KB
    #: vLLM page costs its server about 0.9 ms of CPU to compress (prometheus_client, level
    #: 9) and specmon 0.085 ms to inflate, to save 50 KB on a local or LAN link.
    enable_compression: bool = False
    #: Ask targets for only the series specmon reads (``?name[]=...``, the adapter's names):
    #: prometheus_client's own page app honours it (vLLM's ``/metrics/``, with the slash),
    #: other servers ignore it. Off by default (README, "name_filter").
    name_filter: bool = False
    #: What one page may make specmon do (docs/security.md).
    limits: PageLimits = field(default_factory=PageLimits)
    #: Where the configuration epochs are kept across restarts (``--state.dir`` wins); None:
    #: nothing is written. Read at start only (docs/deploying.md, "State").
    state_dir: Path | None = None
    #: Epochs that ended longer ago than this are dropped from the state.
    state_max_age: float = 30 * 86400.0
    #: How long a compared target's cost curve keeps its buckets (specmon.load.curve).
    curve_retention: float = 3600.0


@dataclass(frozen=True, slots=True)
class TargetConfig:
    name: str
    url: str
    engine: Engine | None = None  # None = auto-detect
    draft_cost: float = DEFAULT_DRAFT_COST
    chain_length: int | None = None
    #: Whether ``draft_cost`` was configured (global, source, file_sd or target), or is the
    #: default guess: the verdict says which (specmon.verdict).
    draft_cost_configured: bool = field(default=False, metadata=_keys())
    model: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Headers, credentials and TLS (specmon.sources.client_config).
    client: ClientConfig = field(default_factory=ClientConfig, metadata=_keys(*CLIENT_KEYS))
    scrape_interval: float = 5.0
    scrape_timeout: float = 3.0
    #: Ask this target for gzip; None: ``global.enable_compression``.
    enable_compression: bool | None = None
    #: Ask this target for only the series specmon reads; None: ``global.name_filter``.
    name_filter: bool | None = None
    #: Another target serving the same model without speculation: the load-aware figures
    #: compare with it at matched concurrency (docs/metrics.md, "Load-aware figures").
    baseline: str | None = None
    #: A load profile written by ``specmon measure --profile-out``: the baseline by
    #: concurrency when there is no twin. Its path in the config; loaded and checked at load.
    cost_profile: Profile | None = field(default=None, metadata=_keys("cost_profile"))
    #: A ``specmon tap``'s /metrics beside this engine: read with every scrape for the
    #: per-class figures (specmon.classes, docs/tap.md).
    tap: str | None = None
    #: Where the target came from: "config" or a file_sd path.
    origin: str = field(default="config", metadata=_keys())
    #: The group its past belongs to (specmon.state.groups; "": none, its name's own).
    group: str = field(default="", metadata=_keys())

    @classmethod
    def settled(
        cls, settings: TargetSettings, /, *, name: str, url: str, **rest: Any
    ) -> TargetConfig:
        """A target with ``settings`` (:func:`specmon.settings.settle`'s answer) applied: the
        one place settings become a target's fields, for static targets, file_sd entries and
        Prometheus sources' instances alike."""
        settled = {key: getattr(settings, key) for key in _SETTLED}
        return cls(name=name, url=url, **settled, **rest)

    def identity(self) -> tuple[object, ...]:
        """What the counters depend on: change any of it and the windows start again."""
        return (self.url, self.engine, self.model, self.tap)


#: The fields of a target that :class:`TargetSettings` decides.
_SETTLED = (*SETTINGS, "draft_cost_configured")


@dataclass(frozen=True, slots=True)
class FileSDConfig:
    files: tuple[str, ...]
    refresh_interval: float = 30.0
    engine: Engine | None = None
    draft_cost: float | None = None
    chain_length: int | None = None
    #: Which labels name the group a target's past belongs to (None: the default rule of
    #: specmon.state.groups; (): no groups).
    group_labels: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Config:
    global_: GlobalConfig = field(metadata=_keys("global"))
    targets: tuple[TargetConfig, ...]
    file_sd: tuple[FileSDConfig, ...] = field(default=(), metadata=_keys("file_sd_configs"))
    source: str = field(default="", metadata=_keys())
    #: Prometheus query sources (specmon.sources.prometheus_config; read by daemon/prometheus_sources.py).
    sources: tuple[PrometheusSourceConfig, ...] = field(default=(), metadata=_keys("sources"))

    @property
    def retention(self) -> float:
        return max(self.global_.windows) + 2 * self.global_.scrape_interval


def config_keys(cls: type) -> tuple[str, ...]:
    """The YAML keys a config block accepts: its dataclass's field names, or the ``keys``
    listed in a field's metadata (none for internal fields)."""
    keys: list[str] = []
    for f in fields(cls):
        keys.extend(f.metadata.get("keys", (f.name,)))
    return tuple(keys)


DEFAULT_TARGETS = (
    ("127.0.0.1:8000", "http://127.0.0.1:8000/metrics"),  # vLLM's default port
    ("127.0.0.1:8080", "http://127.0.0.1:8080/metrics"),  # llama-server's default port
)


_join = join_path
_kind = kind_of


def _nonempty_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    if len(value) > MAX_LABEL_VALUE:
        raise ValueError(f"{len(value)} characters; the limit is {MAX_LABEL_VALUE}")
    return value


def check_name(value: Any) -> str:
    """A target's name: a non-empty string without control or invisible formatting characters
    (a newline or NUL would split or end a log line, a bidi override would show another name
    on the status page than the one in the config)."""
    name = _nonempty_str(value)
    bad = next((ch for ch in name if unicodedata.category(ch) in ("Cc", "Cf")), None)
    if bad is not None:
        raise ValueError(
            f"contains the control or formatting character U+{ord(bad):04X}; names must be "
            "plain text"
        )
    return name


def check_url(value: Any) -> str:
    """An http(s) URL with a host and a valid port, no whitespace, no credentials."""
    if not isinstance(value, str):
        raise ValueError(f"must be a URL string, not {_kind(value)}")
    if len(value) > _MAX_URL:
        raise ValueError(f"a URL of {len(value)} characters; the limit is {_MAX_URL}")
    shown = value if len(value) <= 80 else value[:80] + "..."
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{shown!r} contains whitespace or control characters")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not an http(s) URL with a host")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise ValueError(f"{shown!r} has an invalid port (0-65535)") from None
    if parts.username or parts.password:
        raise ValueError("credentials in the URL are not allowed; use basic_auth or a bearer token")
    return value


def check_labels(checker: FileChecker, value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.add(path, f"must be a mapping of label names to strings, not {_kind(value)}")
        return {}
    labels: dict[str, str] = {}
    for key, item in value.items():
        where = _join(path, str(key))
        if not isinstance(key, str) or not LABEL_NAME.match(key) or key.startswith("__"):
            checker.add(where, "invalid label name")
        elif key in RESERVED_LABELS:
            checker.add(where, f"label {key!r} is set by specmon and cannot be overridden")
        elif not isinstance(item, str | int | float) or isinstance(item, bool):
            checker.add(where, "label values must be strings")
        elif len(str(item)) > MAX_LABEL_VALUE:
            checker.add(where, f"label value longer than {MAX_LABEL_VALUE} characters")
        else:
            labels[key] = str(item)
    return labels


_GLOBAL_KEYS = config_keys(GlobalConfig)
_TARGET_KEYS = config_keys(TargetConfig)
_FILE_SD_KEYS = config_keys(FileSDConfig)
_TOP_KEYS = config_keys(Config)


def _check_global(checker: FileChecker, raw: Any) -> GlobalConfig:
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
        draft_cost=checker.get(data, "draft_cost", "global", check_unit_float, default.draft_cost),
        chain_length=checker.get(data, "chain_length", "global", check_chain_length, None),
        max_response_bytes=checker.get(
            data, "max_response_bytes", "global", parse_size, default.max_response_bytes
        ),
        enable_compression=checker.get(
            data, "enable_compression", "global", check_bool, default.enable_compression
        ),
        name_filter=checker.get(data, "name_filter", "global", check_bool, default.name_filter),
        limits=_check_limits(checker, data.get("limits")),
        state_dir=checker.get(data, "state_dir", "global", check_state_dir, None),
        state_max_age=checker.get(
            data, "state_max_age", "global", parse_duration, default.state_max_age
        ),
        curve_retention=checker.get(
            data, "curve_retention", "global", _curve_retention, default.curve_retention
        ),
    )


def check_state_dir(value: object) -> Path:
    """``state_dir``: a directory path (created at start when missing)."""
    if not isinstance(value, str) or not value or len(value) > 4096 or "\0" in value:
        raise ValueError("must be a directory path")
    return Path(value)


#: The memory the compared targets' cost curves may take at ``curve_retention`` before
#: check-config and the daemon warn (``curve_retention_memory``).
CURVE_MEMORY_BUDGET = 256 * 2**20


def curve_memory_warning(config: Config) -> str | None:
    """Why ``curve_retention`` may cost more memory than :data:`CURVE_MEMORY_BUDGET` over the
    targets that keep a cost curve (those with a baseline or a cost profile, and their
    twins), or None. Estimated at one concurrency bucket a slot (a load that crosses buckets
    within a slot costs up to 14 times as much)."""
    compared = {t.name for t in config.targets if t.baseline or t.cost_profile} | {
        t.baseline for t in config.targets if t.baseline
    }
    retention = config.global_.curve_retention
    each = retention_bytes(retention)
    total = each * len(compared)
    if total <= CURVE_MEMORY_BUDGET:
        return None
    return (
        f"curve_retention {format_duration(retention)} keeps about {each / 1e6:.2f} MB of "
        f"cost-curve sums for each of {len(compared)} compared targets and twins (one "
        f"concurrency bucket a slot), {total / 1e6:.0f} MB in all, more than the "
        f"{CURVE_MEMORY_BUDGET // 2**20} MiB budget, and up to 14 times that when the load "
        "crosses buckets: shorten curve_retention, or count it in specmon's memory limit"
    )


def _curve_retention(value: Any) -> float:
    """``global.curve_retention``: a duration from 1 minute to 7 days (its memory: about
    SLOT_BYTES, 400 bytes, per slot (a minute, or a 1,440th of a retention past a day) and
    concurrency bucket a compared target runs in: :func:`curve_memory_warning`)."""
    seconds = parse_duration(value)
    if not 60.0 <= seconds <= 7 * 86400.0:
        raise ValueError("must be from 1m to 7d")
    return seconds


#: The accepted range of each ``global.limits`` key (one per PageLimits field).
LIMIT_BOUNDS = {
    "max_position": (1, 4096),
    "max_models": (1, 100_000),
    "max_label_length": (16, 65536),
    "max_line_length": (1024, 16 * 2**20),
    "max_samples": (100, 10_000_000),
}


def _check_limits(checker: FileChecker, raw: Any) -> PageLimits:
    """``global.limits``: every PageLimits field, each a positive integer within its bounds."""
    data = checker.mapping(raw, "global.limits", config_keys(PageLimits))
    values: dict[str, int] = {}
    for key, (low, high) in LIMIT_BOUNDS.items():
        if data is None or key not in data:
            continue
        value = data[key]
        where = join_path("global.limits", key)
        if key == "max_line_length" and isinstance(value, str):
            try:
                value = parse_size(value, minimum=1)
            except ValueError as exc:
                checker.add(where, str(exc))
                continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            checker.add(where, f"must be an integer between {low} and {high}")
            continue
        values[key] = value
    return PageLimits(**values)


def _check_target(
    checker: FileChecker, raw: Any, path: str, glob: GlobalConfig
) -> TargetConfig | None:
    data = checker.mapping(raw, path, _TARGET_KEYS)
    if data is None:
        return None
    before = len(checker.problems)
    for required in ("name", "url"):
        if required not in data:
            checker.add(_join(path, required), "is required")
    name = checker.get(data, "name", path, check_name, "")
    url = checker.get(data, "url", path, check_url, "")
    interval = checker.get(data, "scrape_interval", path, parse_duration, glob.scrape_interval)
    timeout = checker.get(
        data, "scrape_timeout", path, parse_duration, min(glob.scrape_timeout, interval)
    )
    if timeout > interval:
        checker.add(_join(path, "scrape_timeout"), "must not exceed scrape_interval")
    settings = settle(
        {"draft_cost": glob.draft_cost, "chain_length": glob.chain_length},
        {
            "engine": checker.get(data, "engine", path, check_engine, None),
            "draft_cost": checker.get(data, "draft_cost", path, check_unit_float, None),
            "chain_length": checker.get(data, "chain_length", path, check_chain_length, None),
            "model": checker.get(data, "model", path, _nonempty_str, None),
            "baseline": checker.get(data, "baseline", path, _nonempty_str, None),
        },
    )
    target = TargetConfig.settled(
        settings,
        name=name,
        url=url,
        labels=check_labels(checker, data.get("labels"), _join(path, "labels")),
        client=check_client(checker, data, path, url=url, reserved=_OWN_HEADERS),
        scrape_interval=interval,
        scrape_timeout=timeout,
        enable_compression=checker.get(data, "enable_compression", path, check_bool, None),
        name_filter=checker.get(data, "name_filter", path, check_bool, None),
        cost_profile=_cost_profile(checker, data.get("cost_profile"), _join(path, "cost_profile")),
        tap=checker.get(data, "tap", path, check_url, None),
    )
    if target.baseline is not None and target.cost_profile is not None:
        checker.add(path, "set baseline or cost_profile, not both")
    if target.baseline is not None and target.baseline == name:
        checker.add(_join(path, "baseline"), "a target cannot be its own baseline")
    return target if len(checker.problems) == before else None


#: Largest load profile read (a profile of a few dozen levels is a few kilobytes).
MAX_PROFILE_BYTES = 1 << 20


def _cost_profile(checker: FileChecker, value: Any, path: str) -> Profile | None:
    """The profile file named by ``cost_profile`` (relative to the config), parsed and checked;
    every problem of the file is reported under ``path``."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        checker.add(path, "must be the path of a profile written by specmon measure --profile-out")
        return None
    file = checker.base_dir / value
    try:
        document = json.loads(read_text_capped(file, max_bytes=MAX_PROFILE_BYTES))
        return profile_from_json(document)
    except ConfigError as exc:
        checker.add(path, f"{file}: {'; '.join(exc.problems)}")
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        checker.add(path, f"{file}: not JSON: {reason}")
    except ProfileError as exc:
        for problem in exc.problems[:20]:
            checker.add(path, f"{file}: {problem}")
    return None


def _check_file_sd(checker: FileChecker, raw: Any) -> list[FileSDConfig]:
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
                engine=checker.get(data, "engine", path, check_engine, None),
                draft_cost=checker.get(data, "draft_cost", path, check_unit_float, None),
                chain_length=checker.get(data, "chain_length", path, check_chain_length, None),
                group_labels=checker.get(data, "group_labels", path, check_group_labels, None),
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
    checker = FileChecker(base_dir or Path.cwd(), env)
    raw = load_yaml(text, source=source, limits=YamlLimits(max_bytes=MAX_CONFIG_BYTES))
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
    #: Each valid target's own index in the list (an invalid one before it is not counted
    #: out: the problems name the right targets[N]).
    indices: list[int] = []
    for index, item in enumerate(raw_targets or []):
        path = f"targets[{index}]"
        target = _check_target(checker, item, path, glob)
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
            indices.append(index)
    file_sd = _check_file_sd(checker, top.get("file_sd_configs"))
    sources, problems = check_sources(
        top.get("sources"),
        base_dir=checker.base_dir,
        environ=env,
        draft_cost=glob.draft_cost,
        chain_length=glob.chain_length,
    )
    checker.problems.extend(problems)
    _check_source_intervals(checker, sources, glob)
    if not file_sd and not sources:
        # Without file_sd or sources every baseline must be a configured target (else it may
        # be one of theirs: checked when the targets are known, and said on the status page).
        names = {t.name for t in targets}
        for index, target in zip(indices, targets, strict=True):
            if target.baseline is not None and target.baseline not in names:
                checker.add(
                    f"targets[{index}].baseline",
                    f"no target named {target.baseline[:60]!r}",
                )
    by_name = {t.name: t for t in targets}
    for index, target in zip(indices, targets, strict=True):
        twin = by_name.get(target.baseline) if target.baseline is not None else None
        if twin is not None and target.model and twin.model and target.model != twin.model:
            checker.add(
                f"targets[{index}].baseline",
                f"the twin {twin.name[:60]!r} serves model {twin.model[:60]!r}, this target "
                f"{target.model[:60]!r} (model:): a twin must serve the same model",
            )
    if (
        not raw_targets
        and not file_sd
        and not targets_invalid
        and not top.get("file_sd_configs")
        and not top.get("sources")
    ):
        checker.add("targets", "no targets, file_sd_configs or sources: nothing to watch")
    if checker.problems:
        raise ConfigError(checker.problems, source=source)
    return Config(
        global_=glob,
        targets=tuple(targets),
        file_sd=tuple(file_sd),
        source=source,
        sources=sources,
    )


def _check_source_intervals(
    checker: FileChecker, sources: tuple[PrometheusSourceConfig, ...], glob: GlobalConfig
) -> None:
    """A window needs two readings: a source read less often than every half of the shortest
    window would never fill it."""
    shortest = min(glob.windows)
    for source in sources:
        if source.interval * 2 > shortest:
            checker.add(
                join_path(source.origin, "interval"),
                f"{format_duration(source.interval)} is more than half the shortest window "
                f"({format_duration(shortest)}): its windows would never hold two readings",
            )


def read_text_capped(path: Path, *, max_bytes: int) -> str:
    """A UTF-8 file of at most ``max_bytes``; :class:`ConfigError` otherwise."""
    try:
        data = files.read_capped(path, max_bytes=max_bytes)
    except OSError as exc:
        problem = (
            f"the file is {exc.strerror}"
            if files.refused(exc)
            else f"cannot read the file: {exc.strerror or exc}"
        )
        raise ConfigError([problem], source=str(path)) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(["the file is not UTF-8 text"], source=str(path)) from None


def load_config(path: Path, *, environ: Mapping[str, str] | None = None) -> Config:
    text = read_text_capped(path, max_bytes=MAX_CONFIG_BYTES)
    return parse_config(text, source=str(path), base_dir=path.parent, environ=environ)


def default_config() -> Config:
    """No config file: watch the engines' default local endpoints, auto-detecting each."""
    glob = GlobalConfig()
    targets = tuple(
        TargetConfig(
            name=name,
            url=url,
            scrape_interval=glob.scrape_interval,
            scrape_timeout=glob.scrape_timeout,
        )
        for name, url in DEFAULT_TARGETS
    )
    return Config(global_=glob, targets=targets, source="<built-in defaults>")
