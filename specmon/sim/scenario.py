"""Scenario files: scripted changes to a simulated engine over time.

```yaml
phases:
  - at: 0s
    survival: [0.9, 0.7, 0.5]      # or: alpha: 0.8 (with chain_length)
    drafts_per_second: 20
  - at: 60s
    survival: [0.3, 0.1, 0.03]     # acceptance collapses
  - at: 120s
    mode: error                    # HTTP 500 (also: hang, garbage, no_metrics, normal)
  - at: 140s
    mode: normal
    restart: true                  # counters reset
  - at: 200s
    speculation: false             # speculation switched off
  - at: 260s
    chain_length: 5                # implies a restart
    alpha: 0.7
  - at: 300s
    load_model: demo               # step time from concurrency and k (specmon.sim.load_model);
    requests_running: 2            # or a mapping {weights_seconds: 0.008, token_seconds: ...}
  - at: 360s
    requests_running: 24           # the load rises: the same draft stops paying
repeat: false                      # true: start over after the last phase (needs `period`)
```

Every problem is reported at once, with its path, like specmon's own config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from specmon.config_values import ConfigError, parse_duration
from specmon.sim.engine import Mode, SimSettings
from specmon.sim.load_model import load_model_from

__all__ = ["Phase", "Scenario", "load_scenario", "parse_scenario"]

_PHASE_KEYS = (
    "at",
    "survival",
    "alpha",
    "chain_length",
    "drafts_per_second",
    "requests_running",
    "speculation",
    "mode",
    "restart",
    "draft_tokens_per_draft",
    "drafts_per_request",
    "load_model",
)


@dataclass(frozen=True, slots=True)
class Phase:
    at: float
    changes: dict[str, Any]
    restart: bool = False

    def apply(self, settings: SimSettings) -> SimSettings:
        changes = dict(self.changes)
        alpha = changes.pop("alpha", None)
        chain = changes.pop("chain_length", None)
        if alpha is not None:
            k = chain if chain is not None else settings.chain_length
            changes["survival"] = tuple(alpha**i for i in range(1, k + 1))
        elif chain is not None and "survival" not in changes:
            current = settings.survival
            if chain <= len(current):
                changes["survival"] = current[:chain]
            else:
                tail = current[-1] if current else 0.5
                ratio = tail / current[-2] if len(current) > 1 and current[-2] > 0 else tail
                extra = [tail * ratio**i for i in range(1, chain - len(current) + 1)]
                changes["survival"] = (*current, *extra)
        return replace(settings, **changes)


@dataclass(frozen=True, slots=True)
class Scenario:
    phases: tuple[Phase, ...]
    repeat: bool = False
    period: float | None = None

    def due(self, elapsed: float) -> list[Phase]:
        """Phases whose time has come at ``elapsed`` seconds (for a repeating scenario, the
        time within the current period)."""
        return [p for p in self.phases if p.at <= elapsed]


def parse_scenario(text: str, *, source: str = "<scenario>") -> Scenario:
    problems: list[str] = []
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"invalid YAML: {exc}"], source=source) from None
    if not isinstance(raw, dict):
        raise ConfigError(["must be a mapping with a 'phases' list"], source=source)
    for key in raw:
        if key not in ("phases", "repeat", "period"):
            problems.append(f"{key}: unknown key")
    phases_raw = raw.get("phases")
    if not isinstance(phases_raw, list) or not phases_raw:
        problems.append("phases: must be a non-empty list")
        phases_raw = []
    phases: list[Phase] = []
    last_at = -1.0
    for index, item in enumerate(phases_raw):
        path = f"phases[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{path}: must be a mapping")
            continue
        for key in item:
            if key not in _PHASE_KEYS:
                problems.append(f"{path}.{key}: unknown key")
        try:
            at = 0.0 if item.get("at") in (None, 0, "0", "0s") else parse_duration(item["at"])
        except ValueError as exc:
            problems.append(f"{path}.at: {exc}")
            continue
        if at < last_at:
            problems.append(f"{path}.at: phases must be in time order")
        last_at = at
        changes: dict[str, Any] = {}
        for key in _PHASE_KEYS:
            if key in ("at", "restart") or key not in item:
                continue
            value = item[key]
            try:
                changes[key] = _convert(key, value)
            except (TypeError, ValueError) as exc:
                problems.append(f"{path}.{key}: {exc}")
        if "survival" in changes and "alpha" in changes:
            problems.append(f"{path}: give survival or alpha, not both")
        try:
            phase = Phase(at=at, changes=changes, restart=bool(item.get("restart", False)))
            phase.apply(SimSettings()).validate()
        except (TypeError, ValueError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        phases.append(phase)
    repeat = bool(raw.get("repeat", False))
    period = None
    if raw.get("period") is not None:
        try:
            period = parse_duration(raw["period"])
        except ValueError as exc:
            problems.append(f"period: {exc}")
    if repeat and period is None:
        problems.append("period: required when repeat is true")
    if problems:
        raise ConfigError(problems, source=source)
    return Scenario(phases=tuple(phases), repeat=repeat, period=period)


def _convert(key: str, value: Any) -> Any:
    if key == "survival":
        if not isinstance(value, list) or not value:
            raise ValueError("must be a non-empty list of rates")
        return tuple(float(v) for v in value)
    if key == "alpha":
        alpha = float(value)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError("must be between 0 and 1")
        return alpha
    if key in ("chain_length", "requests_running", "drafts_per_request"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be an integer")
        return value
    if key in ("drafts_per_second", "draft_tokens_per_draft"):
        return float(value)
    if key == "speculation":
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value
    if key == "mode":
        return Mode(value)
    if key == "load_model":
        return load_model_from(value)
    raise ValueError("unsupported")


def load_scenario(path: Path) -> Scenario:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read: {exc.strerror or exc}"], source=str(path)) from None
    return parse_scenario(text, source=str(path))
