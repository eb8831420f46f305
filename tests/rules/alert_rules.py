"""Load specmon's Prometheus rule files and rewrite their durations.

The end-to-end test shortens the alerts' ``for:`` so it can watch them fire in minutes::

    doc = with_durations(load_rules(), for_="20s", keep_firing_for="0s")
    (tmp_path / "specmon-alerts.rules.yml").write_text(dump_rules(doc))

``for_`` / ``keep_firing_for`` take one duration for every alert or a mapping from alert name
to duration (alerts not in the mapping keep theirs). Nothing else in the rules changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ALERTS_FILE",
    "RECORDING_FILE",
    "alert_rules",
    "dump_rules",
    "iter_rules",
    "load_rules",
    "recording_rules",
    "with_durations",
]

_PROM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS_FILE = _PROM_DIR / "specmon-alerts.rules.yml"
RECORDING_FILE = _PROM_DIR / "engine-recording.rules.yml"

Rule = dict[str, Any]
Durations = str | Mapping[str, str] | None


def load_rules(path: Path | str = ALERTS_FILE) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise ValueError(f"{path}: not a Prometheus rules file")
    return doc


def iter_rules(doc: Mapping[str, Any]) -> Iterator[Rule]:
    for group in doc["groups"]:
        yield from group["rules"]


def alert_rules(doc: Mapping[str, Any]) -> list[Rule]:
    return [rule for rule in iter_rules(doc) if "alert" in rule]


def recording_rules(doc: Mapping[str, Any]) -> list[Rule]:
    return [rule for rule in iter_rules(doc) if "record" in rule]


def _pick(durations: Durations, alert: str) -> str | None:
    if durations is None or isinstance(durations, str):
        return durations
    return durations.get(alert)


def with_durations(
    doc: Mapping[str, Any],
    *,
    for_: Durations = None,
    keep_firing_for: Durations = None,
) -> dict[str, Any]:
    """A copy of ``doc`` with the alerts' ``for`` / ``keep_firing_for`` replaced.

    A rule that had no ``keep_firing_for`` does not get one.
    """
    out = copy.deepcopy(dict(doc))
    for rule in alert_rules(out):
        new_for = _pick(for_, rule["alert"])
        if new_for is not None:
            rule["for"] = new_for
        new_keep = _pick(keep_firing_for, rule["alert"])
        if new_keep is not None and "keep_firing_for" in rule:
            rule["keep_firing_for"] = new_keep
    return out


def dump_rules(doc: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True, width=100)
