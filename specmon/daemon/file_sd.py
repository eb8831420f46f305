"""Prometheus file_sd: target files (JSON or YAML) read, validated and watched.

:func:`load_file_sd` turns one file into targets, or into problems (a file with problems
contributes no target, and the targets from its last good read are kept). :class:`FileSD`
keeps what every file said, re-reads a file only when its modification time or size changed,
and tells its owner when the target list changed.
"""

from __future__ import annotations

import asyncio
import glob
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specmon.config_values import (
    YamlLimits,
    check_chain_length,
    check_unit_float,
    join_path,
    load_yaml,
)
from specmon.daemon.config import (
    MAX_CONFIG_BYTES,
    Config,
    ConfigError,
    FileSDConfig,
    GlobalConfig,
    TargetConfig,
    check_labels,
    check_name,
    check_url,
    read_text_capped,
)
from specmon.engines import check_engine
from specmon.settings import settle
from specmon.sources.client_config import FileChecker
from specmon.state.groups import group_of

__all__ = ["FileSD", "load_file_sd"]

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
    path: Path, sd: FileSDConfig, glob_cfg: GlobalConfig
) -> tuple[list[TargetConfig], list[str]]:
    """Targets from one file in Prometheus file_sd format (JSON or YAML).

    Each entry: ``{"targets": ["host:port", ...], "labels": {...}}``. Labels become constant
    labels; special labels ``__scheme__``, ``__metrics_path__`` and ``__specmon_name__``,
    ``__specmon_engine__``, ``__specmon_draft_cost__``, ``__specmon_chain_length__``,
    ``__specmon_model__`` set the target's URL and settings. The name defaults to host:port.
    Returns the targets and the problems (a file with problems contributes no target).
    """
    checker = FileChecker(path.parent)
    try:
        text = read_text_capped(path, max_bytes=MAX_CONFIG_BYTES)
        if path.suffix == ".json":
            raw: Any = json.loads(text)
        else:
            raw = load_yaml(text, source=str(path), limits=YamlLimits(max_bytes=MAX_CONFIG_BYTES))
    except ConfigError as exc:
        return [], [f"{path}: {p}" for p in exc.problems]
    except (json.JSONDecodeError, RecursionError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        return [], [f"{path}: cannot read: {reason}"]
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
            checker.add(join_path(gpath, "targets"), "must be a list of host:port strings")
            continue
        raw_labels = data.get("labels") or {}
        if not isinstance(raw_labels, dict):
            checker.add(join_path(gpath, "labels"), "must be a mapping")
            continue
        special = {k: str(v) for k, v in raw_labels.items() if k in _SPECIAL}
        plain = {k: v for k, v in raw_labels.items() if not str(k).startswith("__")}
        labels = check_labels(checker, plain, join_path(gpath, "labels"))
        group = group_of(labels, sd.group_labels)  # the past's owner (specmon.state.groups)
        scheme = special.get("__scheme__", "http")
        metrics_path = special.get("__metrics_path__", "/metrics")
        for ti, host in enumerate(hosts):
            tpath = f"{gpath}.targets[{ti}]"
            url = f"{scheme}://{host}{metrics_path}"
            try:
                check_url(url)
            except ValueError as exc:
                checker.add(tpath, str(exc))
                continue
            name = special.get("__specmon_name__", host)
            if len(hosts) > 1 and "__specmon_name__" in special:
                name = f"{name}-{host}"
            try:
                check_name(name)
            except ValueError as exc:
                checker.add(join_path(gpath, "labels.__specmon_name__"), f"name {exc}")
                continue
            get = checker.get
            settings = settle(
                {"draft_cost": glob_cfg.draft_cost, "chain_length": glob_cfg.chain_length},
                {"engine": sd.engine, "draft_cost": sd.draft_cost, "chain_length": sd.chain_length},
                {
                    "engine": get(special, "__specmon_engine__", gpath, check_engine, None),
                    "draft_cost": get(
                        special,
                        "__specmon_draft_cost__",
                        gpath,
                        lambda v: check_unit_float(float(v)),
                        None,
                    ),
                    "chain_length": get(
                        special,
                        "__specmon_chain_length__",
                        gpath,
                        lambda v: check_chain_length(int(v)),
                        None,
                    ),
                    "model": special.get("__specmon_model__"),
                },
            )
            targets.append(
                TargetConfig.settled(
                    settings,
                    name=name,
                    url=url,
                    labels=labels,
                    scrape_interval=glob_cfg.scrape_interval,
                    scrape_timeout=glob_cfg.scrape_timeout,
                    origin=str(path),
                    group=group,
                )
            )
    if checker.problems:
        return [], [f"{path}: {p}" for p in checker.problems]
    return targets, []


class FileSD:
    """What every file_sd file said at its last good read, re-read only when it changed.

    ``on_error(file, problems)`` and ``on_loaded(file, count)`` report each read; the owner
    (the daemon) logs and counts them.
    """

    def __init__(
        self,
        *,
        on_error: Callable[[str, list[str]], None],
        on_loaded: Callable[[str, int], None],
    ) -> None:
        self._targets: dict[str, list[TargetConfig]] = {}
        self._stamps: dict[str, tuple[float, int]] = {}
        self._on_error = on_error
        self._on_loaded = on_loaded

    def targets(self) -> list[tuple[str, TargetConfig]]:
        """(file, target) for every target of every file, files in name order."""
        return [(path, t) for path in sorted(self._targets) for t in self._targets[path]]

    def clear(self) -> None:
        self._targets.clear()
        self._stamps.clear()

    def refresh(self, config: Config) -> bool:
        """Re-read changed files. Returns True when the target list changed."""
        changed = False
        seen: set[str] = set()
        for sd in config.file_sd:
            for pattern in sd.files:
                for path in sorted(glob.glob(pattern)):
                    seen.add(path)
                    changed |= self._read(Path(path), sd, config.global_)
        for gone in set(self._targets) - seen:
            del self._targets[gone]
            changed = True
        for gone in set(self._stamps) - seen:
            del self._stamps[gone]
        return changed

    def _read(self, path: Path, sd: FileSDConfig, glob_cfg: GlobalConfig) -> bool:
        try:
            stat = path.stat()
        except OSError:
            return False
        key = str(path)
        stamp = (stat.st_mtime, stat.st_size)
        if self._stamps.get(key) == stamp:
            return False
        self._stamps[key] = stamp
        targets, problems = load_file_sd(path, sd, glob_cfg)
        if problems:
            self._on_error(key, problems)
            return False
        self._targets[key] = targets
        self._on_loaded(key, len(targets))
        return True

    async def watch(
        self,
        *,
        config: Callable[[], Config | None],
        on_change: Callable[[Config], None],
        on_failure: Callable[[], None],
    ) -> None:
        """Re-read every ``refresh_interval`` (the shortest configured) until cancelled."""
        while True:
            current = config()
            interval = (
                min((sd.refresh_interval for sd in current.file_sd), default=30.0)
                if current
                else 30.0
            )
            await asyncio.sleep(interval)
            current = config()
            if current is None or not current.file_sd:
                continue
            try:
                if self.refresh(current):
                    on_change(current)
            except Exception:  # keep watching whatever happens
                on_failure()
