"""Extract every query from a Grafana dashboard, with template variables substituted.

Used by the dashboard tests here and by the end-to-end test that runs each panel's query
against a real Prometheus::

    board = load_dashboard(GRAFANA_DIR / "dashboards" / "specmon-overview.json")
    for q in panel_queries(board, {"target": ["gpu1", "cpu1"], "window": "5m"}):
        prometheus.query(q.expr)

Substitution follows Grafana's rules for the Prometheus data source:

- ``$var``, ``${var}``, ``${var:format}`` and the deprecated ``[[var]]`` are replaced;
- a list value (a multi-value or "All" selection) becomes ``(a|b)`` with regex
  metacharacters escaped, one value alone is just that value, escaped; a string value is
  inserted as it is;
- the built-ins ``$__interval``, ``$__interval_ms``, ``$__rate_interval``,
  ``$__rate_interval_ms``, ``$__range``, ``$__range_s`` and ``$__range_ms`` come from the
  ``interval``/``rate_interval``/``range_`` arguments, which default to what Grafana computes
  for a 6-hour dashboard over a data source with ``timeInterval: 15s`` at about 1000 pixels
  (Grafana rounds 6 h / 1000 points to 20s; ``$__rate_interval`` = max(4 x 15s, 20s + 15s)).

An unknown variable raises ``KeyError`` (Grafana would leave it in place and Prometheus would
reject the query, which is harder to read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BUILTIN_NAMES",
    "PanelQuery",
    "VariableQuery",
    "duration_seconds",
    "iter_panels",
    "load_dashboard",
    "panel_queries",
    "substitute",
    "variable_queries",
]

Value = str | Sequence[str]

#: Grafana's own variable pattern (public/app/features/variables/utils.ts).
_VARIABLE_RE = re.compile(
    r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?:\.([^:^}]+))?(?::([^}]+))?\}"
)
_DURATION_RE = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}
#: Characters Grafana escapes in multi-value Prometheus regex values.
_REGEX_SPECIAL = re.compile(r"([\\^$*+?.()|{}\[\]])")
BUILTIN_NAMES = frozenset(
    {
        "__interval",
        "__interval_ms",
        "__rate_interval",
        "__rate_interval_ms",
        "__range",
        "__range_s",
        "__range_ms",
    }
)


@dataclass(frozen=True, slots=True)
class PanelQuery:
    """One query of one panel (or of an annotation)."""

    dashboard_uid: str
    panel_id: int | None
    panel_title: str
    panel_type: str
    ref_id: str
    #: The query with every variable substituted: ready for Prometheus.
    expr: str
    #: The query as written in the dashboard.
    raw_expr: str
    instant: bool
    legend: str


@dataclass(frozen=True, slots=True)
class VariableQuery:
    """A ``label_values(selector, label)`` template variable."""

    name: str
    definition: str
    #: The series selector (``None`` for ``label_values(label)``), variables not substituted.
    selector: str | None
    label: str


def duration_seconds(text: str) -> float:
    """Parse a Prometheus/Grafana duration such as ``1m30s`` into seconds."""
    pos = 0
    total = 0.0
    for match in _DURATION_RE.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r}")
    return total


def load_dashboard(path: Path | str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        board = json.load(handle)
    if not isinstance(board, dict):
        raise ValueError(f"{path}: a dashboard is a JSON object")
    return board


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel, including those nested in (collapsed) rows; rows themselves too."""

    def walk(panels: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels") or [])

    yield from walk(dashboard.get("panels") or [])


def _format_value(value: Value, fmt: str | None) -> str:
    if isinstance(value, str):
        return value
    values = list(value)
    if fmt in ("raw", "text"):
        return ",".join(values)
    if fmt == "csv":
        return ",".join(values)
    if fmt == "pipe":
        return "|".join(values)
    escaped = [_REGEX_SPECIAL.sub(r"\\\1", v) for v in values]
    if len(escaped) == 1:
        return escaped[0]
    return "(" + "|".join(escaped) + ")"


def substitute(
    expr: str,
    variables: Mapping[str, Value],
    *,
    interval: str = "20s",
    rate_interval: str = "1m",
    range_: str = "6h",
) -> str:
    """Replace every template variable in ``expr`` (see the module docstring)."""
    range_seconds = duration_seconds(range_)
    builtins: dict[str, str] = {
        "__interval": interval,
        "__interval_ms": str(round(duration_seconds(interval) * 1000)),
        "__rate_interval": rate_interval,
        "__rate_interval_ms": str(round(duration_seconds(rate_interval) * 1000)),
        "__range": range_,
        "__range_s": str(round(range_seconds)),
        "__range_ms": str(round(range_seconds * 1000)),
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(6)
        if name in variables:
            return _format_value(variables[name], fmt)
        if name in builtins:
            return builtins[name]
        raise KeyError(f"no value for template variable {name!r} in {expr!r}")

    return _VARIABLE_RE.sub(replace, expr)


def panel_queries(
    dashboard: Mapping[str, Any],
    variables: Mapping[str, Value],
    *,
    interval: str = "20s",
    rate_interval: str = "1m",
    range_: str = "6h",
    include_annotations: bool = False,
    include_hidden: bool = False,
) -> list[PanelQuery]:
    """Every panel query (``targets[].expr``) with ``variables`` substituted, in panel order.

    ``variables`` maps variable names to values; the ``datasource`` variable is not needed.
    Queries marked ``hide`` are skipped unless ``include_hidden``. Annotation queries come
    last, with ``panel_id`` None, when ``include_annotations``.
    """
    uid = str(dashboard.get("uid", ""))

    def make(panel_id: int | None, title: str, kind: str, target: Mapping[str, Any]) -> PanelQuery:
        raw = str(target["expr"])
        return PanelQuery(
            dashboard_uid=uid,
            panel_id=panel_id,
            panel_title=title,
            panel_type=kind,
            ref_id=str(target.get("refId", "")),
            expr=substitute(
                raw, variables, interval=interval, rate_interval=rate_interval, range_=range_
            ),
            raw_expr=raw,
            instant=bool(target.get("instant", False)) and not target.get("range", False),
            legend=str(target.get("legendFormat", "")),
        )

    out: list[PanelQuery] = []
    for panel in iter_panels(dashboard):
        for target in panel.get("targets") or []:
            if "expr" not in target or (target.get("hide") and not include_hidden):
                continue
            out.append(
                make(panel.get("id"), str(panel.get("title", "")), str(panel["type"]), target)
            )
    if include_annotations:
        for annotation in (dashboard.get("annotations") or {}).get("list") or []:
            if "expr" in annotation and annotation.get("enable", True):
                out.append(make(None, str(annotation.get("name", "")), "annotation", annotation))
    return out


_LABEL_VALUES_RE = re.compile(
    r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$"
)


def variable_queries(dashboard: Mapping[str, Any]) -> list[VariableQuery]:
    """The ``query`` template variables, parsed; raises ValueError for any other query form."""
    out: list[VariableQuery] = []
    for var in (dashboard.get("templating") or {}).get("list") or []:
        if var.get("type") != "query":
            continue
        definition = var.get("query")
        if isinstance(definition, Mapping):
            definition = definition.get("query")
        if not isinstance(definition, str):
            raise ValueError(f"variable {var.get('name')!r}: no query string")
        match = _LABEL_VALUES_RE.match(definition)
        if match is None:
            raise ValueError(f"variable {var.get('name')!r}: not label_values(...): {definition}")
        out.append(
            VariableQuery(
                name=str(var["name"]),
                definition=definition,
                selector=match.group("selector"),
                label=match.group("label"),
            )
        )
    return out
