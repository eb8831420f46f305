#!/usr/bin/env python3
"""Write specmon's Grafana dashboards: grafana/dashboards/*.json.

The JSON files are committed; this script is their source. After editing it, run

    python grafana/build_dashboards.py          # rewrite the JSON files
    python grafana/build_dashboards.py --check  # exit 1 if a committed file is out of date

(tests/dashboards/test_dashboards.py runs the check.) Standard library only.

Conventions every panel follows (and the tests enforce):
- the data source is the `datasource` template variable, never a `${DS_...}` import input;
- every rate() and increase() uses `$__rate_interval`;
- queries live in `targets[].expr` and use only the template variables defined here, all of
  them `label_values(...)` queries, so a test can substitute them and run every query;
- `uid`s are fixed and `schemaVersion` is pinned.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARDS", "SCHEMA_VERSION", "build", "main", "render"]

#: Grafana 10.4 / 11.x dashboard schema.
SCHEMA_VERSION = 39
OVERVIEW_UID = "specmon-overview"
TARGET_UID = "specmon-target"
OUT_DIR = Path(__file__).resolve().parent / "dashboards"

Json = dict[str, Any]

DS: Json = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24


# --------------------------------------------------------------------------- building blocks


def query(
    expr: str,
    legend: str = "__auto",
    ref: str = "A",
    *,
    instant: bool = False,
    table: bool = False,
) -> Json:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "format": "table" if table else "time_series",
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
        "refId": ref,
    }


def thresholds(*steps: tuple[float | None, str]) -> Json:
    return {
        "mode": "absolute",
        "steps": [{"color": color, "value": value} for value, color in steps],
    }


def timeseries(
    title: str,
    description: str,
    targets: list[Json],
    *,
    unit: str = "none",
    decimals: int | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    threshold_steps: tuple[tuple[float | None, str], ...] = (),
    threshold_style: str = "off",
    overrides: list[Json] | None = None,
    draw_style: str = "line",
    stacking: str = "none",
    fill: int = 0,
) -> Json:
    defaults: Json = {
        "color": {"mode": "palette-classic"},
        "custom": {
            "axisPlacement": "auto",
            "drawStyle": draw_style,
            "fillOpacity": fill,
            "lineWidth": 1,
            "pointSize": 4,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": stacking},
            "thresholdsStyle": {"mode": threshold_style},
        },
        "thresholds": thresholds(*(threshold_steps or ((None, "green"),))),
        "unit": unit,
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": targets,
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": True,
            },
            "tooltip": {"mode": "multi", "sort": "none"},
        },
    }


def stat(
    title: str,
    description: str,
    target: Json,
    *,
    unit: str = "none",
    decimals: int | None = None,
    threshold_steps: tuple[tuple[float | None, str], ...] = ((None, "blue"),),
    mappings: list[Json] | None = None,
) -> Json:
    defaults: Json = {
        "color": {"mode": "thresholds"},
        "mappings": mappings or [],
        "thresholds": thresholds(*threshold_steps),
        "unit": unit,
    }
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        },
    }


def bargauge(title: str, description: str, target: Json) -> Json:
    return {
        "type": "bargauge",
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [target],
        "fieldConfig": {
            "defaults": {
                "color": {"mode": "continuous-RdYlGr"},
                "decimals": 3,
                "max": 1,
                "min": 0,
                "thresholds": thresholds((None, "green")),
                "unit": "percentunit",
            },
            "overrides": [],
        },
        "options": {
            "displayMode": "gradient",
            "orientation": "vertical",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
            "valueMode": "color",
        },
    }


def by_concurrency(*queries: tuple[str, str]) -> list[Json]:
    """Transformations for instant tables of bucket series: one row per concurrency bucket,
    sorted by its number (the label is a string: "16" sorts before "2"), one column per
    query, named."""
    return [
        {"id": "merge", "options": {}},
        {
            "id": "convertFieldType",
            "options": {
                "conversions": [{"targetField": "concurrency", "destinationType": "number"}],
                "fields": {},
            },
        },
        {"id": "sortBy", "options": {"fields": {}, "sort": [{"field": "concurrency"}]}},
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True},
                "indexByName": {
                    "concurrency": 0,
                    **{name: i + 1 for i, (_, name) in enumerate(queries)},
                },
                "renameByName": {
                    "concurrency": "concurrency (requests per step)",
                    **{f"Value #{ref}": name for ref, name in queries},
                },
            },
        },
    ]


def row(title: str) -> Json:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


def dashed(name_regex: str) -> Json:
    return {
        "matcher": {"id": "byRegexp", "options": name_regex},
        "properties": [
            {"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
            {"id": "custom.lineWidth", "value": 2},
        ],
    }


def renamed(name_regex: str, display: str) -> Json:
    """Show the series whose legend matches ``name_regex`` as ``display``."""
    return {
        "matcher": {"id": "byRegexp", "options": name_regex},
        "properties": [{"id": "displayName", "value": display}],
    }


def right_axis(name_regex: str, unit: str) -> Json:
    return {
        "matcher": {"id": "byRegexp", "options": name_regex},
        "properties": [
            {"id": "custom.axisPlacement", "value": "right"},
            {"id": "unit", "value": unit},
        ],
    }


def query_variable(
    name: str,
    label: str,
    definition: str,
    *,
    multi: bool = False,
    include_all: bool = False,
    current: str | None = None,
) -> Json:
    var: Json = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": definition,
        "query": definition,
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "multi": multi,
        "includeAll": include_all,
        "hide": 0,
        "options": [],
        "current": {},
    }
    if current is not None:
        text = "All" if current == "$__all" else current
        var["current"] = {"selected": True, "text": text, "value": current}
    if include_all:
        var["allValue"] = ".+"
    return var


DATASOURCE_VARIABLE: Json = {
    "name": "datasource",
    "label": "Data source",
    "type": "datasource",
    "query": "prometheus",
    "regex": "",
    "hide": 0,
    "multi": False,
    "includeAll": False,
    "options": [],
    "current": {},
}

ALERT_ANNOTATION_EXPR = 'ALERTS{alertname=~"Specmon.+", alertstate="firing", target=~"$target"}'


def annotation_list() -> Json:
    return {
        "list": [
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "datasource": DS,
                "enable": True,
                "expr": ALERT_ANNOTATION_EXPR,
                "iconColor": "red",
                "name": "specmon alerts",
                "step": "1m",
                "tagKeys": "severity",
                "textFormat": "{{severity}}: {{target}} {{model}}",
                "titleFormat": "{{alertname}}",
                "useValueForTime": False,
            },
        ]
    }


def layout(panels: list[tuple[Json, int, int]]) -> list[Json]:
    """Place panels left to right in rows of 24 columns; give them ids 1, 2, ..."""
    placed: list[Json] = []
    x = y = row_height = 0
    for index, (panel, width, height) in enumerate(panels, start=1):
        if panel["type"] == "row":
            width, height = WIDTH, 1
        if x + width > WIDTH:
            x, y = 0, y + row_height
            row_height = 0
        panel = {"id": index, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **panel}
        placed.append(panel)
        x += width
        row_height = max(row_height, height)
        if panel["type"] == "row":
            x, y, row_height = 0, y + 1, 0
    return placed


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[Json],
    panels: list[Json],
    links: list[Json],
) -> Json:
    return {
        "annotations": annotation_list(),
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": links,
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["specmon", "speculative-decoding"],
        "templating": {"list": [DATASOURCE_VARIABLE, *variables]},
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


# --------------------------------------------------------------------------- overview

T = 'target=~"$target"'
#: Series with an `engine` label are filtered by the engine variable directly.
TE = 'target=~"$target", engine=~"$engine"'
TW = 'target=~"$target", engine=~"$engine", window="$window"'
#: Targets seen in the last day with an engine outside the selection. Series without an
#: `engine` label (up, scrapes, refusals) drop them with `unless on (target)`; a target never
#: read (so of no known engine) stays under every selection, where it needs attention.
OTHER_ENGINES = (
    'last_over_time(specmon_speculation_enabled{target=~"$target", engine!~"$engine"}[1d])'
)


def selected_engines(expr: str) -> str:
    """``expr`` (per target, no engine label) for the targets of the selected engines."""
    return f"(\n{expr}\n)\nunless on (target)\n{OTHER_ENGINES}"


RATIO_COLUMNS = ("alpha", "break-even", "margin", "expected speed-up")

# Margin colours: red below break-even, orange within the thin band (SpecmonMarginThin).
MARGIN_STEPS: tuple[tuple[float | None, str], ...] = (
    (None, "red"),
    (0, "orange"),
    (0.05, "green"),
)
SPEEDUP_STEPS: tuple[tuple[float | None, str], ...] = ((None, "red"), (1, "green"))
UP_MAPPINGS: list[Json] = [
    {
        "type": "value",
        "options": {
            "0": {"color": "red", "index": 0, "text": "DOWN"},
            "1": {"color": "green", "index": 1, "text": "UP"},
        },
    }
]


def _table_body(
    columns: list[tuple[str, str, str]], overrides: list[Json], *, sort_by: str
) -> Json:
    """What the fleet tables share: one instant query per column (ref, name, expr), merged
    into one row per target and model, Time hidden, columns in order and renamed,
    filterable, sorted by ``sort_by`` ascending."""
    rename = {f"Value #{ref}": name for ref, name, _ in columns}
    order = {"target": 0, "model": 1, **{name: i + 2 for i, (_, name, _) in enumerate(columns)}}
    return {
        "datasource": DS,
        "targets": [query(expr, ref=ref, instant=True, table=True) for ref, _, expr in columns],
        "transformations": [
            {"id": "merge", "options": {}},
            {
                "id": "organize",
                "options": {
                    "excludeByName": {"Time": True},
                    "indexByName": order,
                    "renameByName": rename,
                },
            },
        ],
        "fieldConfig": {
            "defaults": {
                "custom": {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True},
                "thresholds": thresholds((None, "green")),
                "unit": "none",
            },
            "overrides": overrides,
        },
        "options": {
            "cellHeight": "sm",
            "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
            "showHeader": True,
            "sortBy": [{"displayName": sort_by, "desc": False}],
        },
    }


def _overview_table() -> Json:
    # Every query yields the labels (target, model) so the "merge" transformation joins them
    # into one row per target and model. specmon_up has only `target`: it is spread over the
    # models the target had in the last day, and a target never seen with a model keeps an
    # empty model cell. The max by () on both sides keeps the join one-to-many when two
    # specmon replicas (different instance labels) watch the same target.
    up = selected_engines(
        "max by (target, model) (\n"
        f"  max by (target) (specmon_up{{{T}}})\n"
        "  + on (target) group_right ()\n"
        f"  (0 * max by (target, model) (last_over_time(specmon_chain_length{{{TE}}}[1d])))\n"
        ")\n"
        "or on (target)\n"
        f"max by (target) (specmon_up{{{T}}})"
    )
    columns: list[tuple[str, str, str]] = [
        ("A", "up", up),
        ("B", "alpha", f"max by (target, model) (specmon_alpha_ratio{{{TW}}})"),
        ("C", "break-even", f"max by (target, model) (specmon_breakeven_alpha_ratio{{{TE}}})"),
        ("D", "margin", f"max by (target, model) (specmon_alpha_margin_ratio{{{TW}}})"),
        (
            "E",
            "expected speed-up",
            f"max by (target, model) (specmon_expected_speedup_ratio{{{TW}}})",
        ),
        ("F", "best k'", f"max by (target, model) (specmon_best_chain_length{{{TW}}})"),
        ("G", "k in use", f"max by (target, model) (specmon_chain_length{{{TE}}})"),
        (
            "H",
            "drafts/s",
            f"sum by (target, model) (rate(specmon_drafts_total{{{TE}}}[$__rate_interval]))",
        ),
        ("I", "drafts in window", f"max by (target, model) (specmon_window_drafts{{{TW}}})"),
        ("J", "requests running", f"max by (target, model) (specmon_requests_running{{{TE}}})"),
    ]

    def by_name(name: str, *properties: Json) -> Json:
        return {"matcher": {"id": "byName", "options": name}, "properties": list(properties)}

    def cell_colour(mode: str = "color-text") -> Json:
        return {"id": "custom.cellOptions", "value": {"type": mode}}

    overrides = [
        by_name("up", {"id": "mappings", "value": UP_MAPPINGS}, cell_colour("color-background")),
        *(
            by_name(name, {"id": "unit", "value": "none"}, {"id": "decimals", "value": 3})
            for name in ("alpha", "break-even")
        ),
        by_name(
            "margin",
            {"id": "decimals", "value": 3},
            {"id": "thresholds", "value": thresholds(*MARGIN_STEPS)},
            {"id": "color", "value": {"mode": "thresholds"}},
            cell_colour("color-background"),
        ),
        by_name(
            "expected speed-up",
            {"id": "decimals", "value": 2},
            {"id": "unit", "value": "suffix:x"},
            {"id": "thresholds", "value": thresholds(*SPEEDUP_STEPS)},
            {"id": "color", "value": {"mode": "thresholds"}},
            cell_colour(),
        ),
        by_name("drafts/s", {"id": "decimals", "value": 1}, {"id": "unit", "value": "ops"}),
        by_name("requests running", {"id": "decimals", "value": 0}),
        by_name(
            "target",
            {
                "id": "links",
                "value": [
                    {
                        "title": "Target detail",
                        "url": f"/d/{TARGET_UID}/specmon-target?var-datasource=${{datasource}}"
                        "&var-target=${__data.fields.target}&var-model=${__data.fields.model}"
                        "&var-window=${window}&${__url_time_range}",
                    }
                ],
            },
        ),
    ]
    return {
        "type": "table",
        "title": "Targets",
        "description": (
            "One row per target and model. alpha: effective acceptance rate over the selected "
            "window; break-even: the alpha at which speculation neither gains nor loses; "
            "margin = alpha - break-even (red: below break-even, orange: within 0.05); best k': "
            "the chain length that maximises the measured speed-up (0 = speculation does not "
            "pay); requests running: the engine's concurrency now, which eats speculation's "
            "gain. Empty acceptance cells mean no drafts in the window, or an engine that "
            "counts no drafts (TensorRT-LLM without its per-position counters, SGLang without "
            "its verify counter: docs/engines.md); empty drafts/s: an engine that counts none."
        ),
        **_table_body(columns, overrides, sort_by="margin"),
    }


#: Targets compared with a baseline, as a filter: a twin (specmon_baseline_info names it, from
#: the configuration) or a profile (then known once a draft cost has been measured against it).
WITH_BASELINE = (
    f"on (target) (\n  specmon_baseline_info{{{T}}}\n"
    f'  or specmon_draft_cost_ratio{{{TE}, source="measured"}}\n)'
)
#: Realized speed-up colours: red where speculation costs time beyond the noise
#: (SpecmonSlowerThanBaseline), orange where it does not pay, green where it does.
REALIZED_STEPS: tuple[tuple[float | None, str], ...] = (
    (None, "red"),
    (0.95, "orange"),
    (1, "green"),
)
ABOVE_MAPPINGS: list[Json] = [
    {
        "type": "value",
        "options": {
            "0": {"color": "green", "index": 0, "text": "below"},
            "1": {"color": "red", "index": 1, "text": "AT OR ABOVE"},
        },
    }
]


def _load_table() -> Json:
    """Targets compared with a baseline: how their speculation does at the load they run."""
    columns: list[tuple[str, str, str]] = [
        (
            "A",
            "realized speed-up",
            f"max by (target, model) (specmon_realized_speedup_ratio{{{TW}}})",
        ),
        (
            "B",
            "expected (configured c)",
            f"max by (target, model) (specmon_expected_speedup_ratio{{{TW}}} and {WITH_BASELINE})",
        ),
        (
            "C",
            "concurrency",
            f"max by (target, model) (specmon_concurrency{{{TW}}} and {WITH_BASELINE})",
        ),
        ("D", "crossover", f"max by (target, model) (specmon_crossover_concurrency{{{TW}}})"),
        (
            "E",
            "above crossover",
            "max by (target, model) (\n"
            f"  specmon_crossover_concurrency{{{TW}}}\n"
            "  <= bool ignoring (baseline) group_left ()\n"
            f"  (1.05 * specmon_concurrency{{{TW}}})\n"
            ")",
        ),
        (
            "F",
            "measured c",
            f'max by (target, model) (specmon_draft_cost_ratio{{{TE}, source="measured"}})',
        ),
        (
            "G",
            "configured c",
            "max by (target, model) "
            f'(specmon_draft_cost_ratio{{{TE}, source="configured"}} and {WITH_BASELINE})',
        ),
        (
            "H",
            "requests running",
            f"max by (target, model) (specmon_requests_running{{{TE}}} and {WITH_BASELINE})",
        ),
    ]
    columns = [(ref, name, selected_engines(expr)) for ref, name, expr in columns]

    def by_name(name: str, *properties: Json) -> Json:
        return {"matcher": {"id": "byName", "options": name}, "properties": list(properties)}

    def coloured(steps: tuple[tuple[float | None, str], ...]) -> list[Json]:
        return [
            {"id": "thresholds", "value": thresholds(*steps)},
            {"id": "color", "value": {"mode": "thresholds"}},
            {"id": "custom.cellOptions", "value": {"type": "color-background"}},
        ]

    overrides = [
        by_name(
            "realized speed-up",
            {"id": "decimals", "value": 2},
            {"id": "unit", "value": "suffix:x"},
            *coloured(REALIZED_STEPS),
        ),
        by_name(
            "expected (configured c)",
            {"id": "decimals", "value": 2},
            {"id": "unit", "value": "suffix:x"},
        ),
        *(by_name(name, {"id": "decimals", "value": 1}) for name in ("concurrency", "crossover")),
        by_name("above crossover", {"id": "mappings", "value": ABOVE_MAPPINGS}),
        *(by_name(name, {"id": "decimals", "value": 3}) for name in ("measured c", "configured c")),
        by_name("requests running", {"id": "decimals", "value": 0}),
    ]
    return {
        "type": "table",
        "title": "Against the baseline, at this load",
        "description": (
            "Targets compared with a twin without speculation (`baseline:` in specmon's config), "
            "one row per target and model, over the selected window. realized speed-up: the "
            "twin's time per output token over the target's, in the concurrency bucket the "
            "target runs in now (red: below 0.95, where SpecmonSlowerThanBaseline fires; "
            "orange: below 1). expected: the verdict at the configured c, which ignores load. "
            "concurrency: mean requests per engine step. crossover: the concurrency at which "
            "speculation stops paying at the window's acceptance (empty: it pays at every load "
            "measured); above crossover: concurrency within 5 % of it or above "
            "(SpecmonAboveCrossover). measured c: the draft cost against the twin (middle "
            "window), next to the configured one. Empty realized speed-up: the bucket of the "
            "current load has too little data on one side yet (200 engine steps, 100 drafts)."
        ),
        **_table_body(columns, overrides, sort_by="realized speed-up"),
    }


def _load_panels() -> list[tuple[Json, int, int]]:
    return [
        (row("Load: against the baseline"), 24, 1),
        (_load_table(), 24, 7),
        (
            timeseries(
                "Realized speed-up against the baseline",
                "Each target's time per output token against its twin's without speculation, in "
                "the concurrency bucket it runs in now (solid), and the expected speed-up at the "
                "configured c (dashed), which ignores load. Below the line speculation costs "
                "time at this load; below 0.95 for 30 minutes, SpecmonSlowerThanBaseline "
                "fires.",
                [
                    query(
                        selected_engines(f"specmon_realized_speedup_ratio{{{TW}}}"),
                        "{{target}} {{model}} against {{baseline}}",
                        "A",
                    ),
                    query(
                        selected_engines(
                            f"specmon_expected_speedup_ratio{{{TW}}} and {WITH_BASELINE}"
                        ),
                        "expected {{target}} {{model}}",
                        "B",
                    ),
                ],
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
                threshold_style="line",
                overrides=[dashed("expected .*")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Concurrency against the crossover",
                "Solid: mean requests per engine step over the window, for the targets compared "
                "with a twin. Dashed: the concurrency at which speculation stops paying (from "
                "the load levels measured in the window; absent while it pays at all of them). "
                "A solid line at or above its dashed one for 15 minutes fires "
                "SpecmonAboveCrossover.",
                [
                    query(
                        selected_engines(
                            f"max by (target, model) (specmon_concurrency{{{TW}}} and "
                            f"{WITH_BASELINE})"
                        ),
                        "{{target}} {{model}}",
                        "A",
                    ),
                    query(
                        selected_engines(
                            f"max by (target, model) (specmon_crossover_concurrency{{{TW}}})"
                        ),
                        "crossover {{target}} {{model}}",
                        "B",
                    ),
                ],
                decimals=1,
                minimum=0,
                overrides=[dashed("crossover .*")],
            ),
            12,
            8,
        ),
    ]


def overview() -> Json:
    panels: list[tuple[Json, int, int]] = [
        (_overview_table(), 24, 9),
        (row("Acceptance"), 24, 1),
        (
            timeseries(
                "Margin (alpha - break-even)",
                "Effective alpha minus break-even alpha over the selected window. Below the "
                "zero line speculation costs time; between 0 and 0.05 it barely pays.",
                [query(f"specmon_alpha_margin_ratio{{{TW}}}", "{{target}} {{model}}")],
                decimals=3,
                threshold_steps=MARGIN_STEPS,
                threshold_style="line+area",
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Requests running",
                "Requests each engine is running now. Read it next to the margin: speculation's "
                "gain shrinks as batches fill (verification competes with other requests, so "
                "the real draft cost rises above the configured c), so a margin that dips "
                "whenever concurrency rises is load, not a worse draft.",
                [
                    query(
                        f"max by (target, model) (specmon_requests_running{{{TE}}})",
                        "{{target}} {{model}}",
                    )
                ],
                decimals=0,
                minimum=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Alpha against break-even",
                "Solid: effective alpha over the selected window. Dashed: break-even alpha for "
                "the chain length and draft cost in use.",
                [
                    query(f"specmon_alpha_ratio{{{TW}}}", "alpha {{target}} {{model}}", "A"),
                    query(
                        f"specmon_breakeven_alpha_ratio{{{TE}}}",
                        "break-even {{target}} {{model}}",
                        "B",
                    ),
                ],
                decimals=3,
                minimum=0,
                maximum=1,
                overrides=[dashed("break-even .*")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Expected speed-up",
                "Solid: expected speed-up with the chain in use. Dashed: at the best chain "
                "length. Below 1 speculation is slower than plain decoding.",
                [
                    query(f"specmon_expected_speedup_ratio{{{TW}}}", "{{target}} {{model}}", "A"),
                    query(
                        f"specmon_best_speedup_ratio{{{TW}}}", "best k' {{target}} {{model}}", "B"
                    ),
                ],
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
                threshold_style="line",
                overrides=[dashed("best k' .*")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Drafts per second",
                "Verification steps that carried a draft, per second: the traffic the "
                "acceptance numbers rest on. The alerts need 400 drafts per window.",
                [
                    query(
                        "sum by (target, model) "
                        f"(rate(specmon_drafts_total{{{TE}}}[$__rate_interval]))",
                        "{{target}} {{model}}",
                    )
                ],
                unit="ops",
                minimum=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Generated tokens per second",
                "Tokens each engine generated per second over the selected window, with or "
                "without drafts. Tokens without drafts per second beside them: the engine is "
                "busy but not speculating (SpecmonSpeculationMissing; llama.cpp without a draft "
                "model publishes its speculative counters at 0).",
                [
                    query(
                        f"max by (target, model) (specmon_window_generated_tokens{{{TW}}})\n"
                        f"/ max by (target, model) (specmon_window_seconds{{{TW}}} > 0)",
                        "{{target}} {{model}}",
                    )
                ],
                unit="ops",
                minimum=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Draft cost c: configured and measured",
                "c, the cost of one drafted token as a fraction of a target step, by source. "
                "Solid (configured): specmon's draft_cost for the target, which every verdict "
                "above uses. Dashed, engine: TensorRT-LLM's own draft overhead o turned into "
                "c = o / (k (1 - o)), only where a separate draft model is timed. Dashed, "
                "measured: against the target's baseline (its twin without speculation, or a "
                "profile) at the window's concurrency (docs/load-signals.md). A measured c well "
                "above the configured one means the break-even, margin and speed-up above are "
                "optimistic: set draft_cost from it.",
                [
                    query(
                        "max by (target, model, source, baseline) "
                        f"(specmon_draft_cost_ratio{{{TE}}})",
                        "{{target}} {{model}} c {{source}} {{baseline}}",
                    )
                ],
                decimals=3,
                minimum=0,
                overrides=[dashed(".* c (engine|measured) .*")],
            ),
            24,
            7,
        ),
        *_load_panels(),
        (row("Scrape health"), 24, 1),
        (
            {
                "type": "state-timeline",
                "title": "Target up",
                "description": "Whether specmon's last scrape of each target succeeded.",
                "datasource": DS,
                "targets": [query(selected_engines(f"specmon_up{{{T}}}"), "{{target}}")],
                "fieldConfig": {
                    "defaults": {
                        "color": {"mode": "thresholds"},
                        "mappings": UP_MAPPINGS,
                        "thresholds": thresholds((None, "red"), (1, "green")),
                        "custom": {"fillOpacity": 80, "lineWidth": 0},
                    },
                    "overrides": [],
                },
                "options": {
                    "alignValue": "left",
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
                    "mergeValues": True,
                    "rowHeight": 0.9,
                    "showValue": "never",
                    "tooltip": {"mode": "single", "sort": "none"},
                },
            },
            8,
            8,
        ),
        (
            timeseries(
                "Scrape results per second",
                "specmon's scrapes of each target by result (success, http_error, timeout, "
                "connection_error, too_large, parse_error, no_metrics).",
                [
                    query(
                        selected_engines(
                            "sum by (target, result) "
                            f"(rate(specmon_scrapes_total{{{T}}}[$__rate_interval]))"
                        ),
                        "{{target}} {{result}}",
                    )
                ],
                unit="ops",
                draw_style="bars",
                stacking="normal",
                fill=80,
                minimum=0,
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Scrape duration and staleness",
                "Solid: duration of specmon's last scrape. Dashed (right axis): seconds since "
                "the last successful scrape.",
                [
                    query(
                        selected_engines(f"specmon_scrape_duration_seconds{{{T}}}"),
                        "duration {{target}}",
                        "A",
                    ),
                    query(
                        selected_engines(f"time() - specmon_last_success_timestamp_seconds{{{T}}}"),
                        "since success {{target}}",
                        "B",
                    ),
                ],
                unit="s",
                minimum=0,
                overrides=[dashed("since success .*"), right_axis("since success .*", "s")],
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Readings refused by validation",
                "Readings of each target's page that specmon refused, by reason, per interval: "
                "values no real engine publishes (NaN, negative or beyond 2^53, counts rising "
                "along the chain, more accepted than drafted, duplicated series, a counter "
                "going down alone, limits exceeded). The refused model's figures are missing "
                "meanwhile; a page that stays wrong is refused at every scrape. Which reason "
                "means what: docs/runbook.md#specmonreadingsrejected (SpecmonReadingsRejected). "
                "No data: nothing refused.",
                [
                    query(
                        selected_engines(
                            "sum by (target, reason) (increase("
                            f"specmon_rejected_readings_total{{{T}}}[$__rate_interval]))"
                        ),
                        "{{target}} {{reason}}",
                    )
                ],
                draw_style="bars",
                stacking="normal",
                fill=80,
                minimum=0,
                decimals=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Requests refused by specmon's web server",
                "Requests and connections to specmon itself that its HTTP server refused, by "
                "reason, per interval and specmon instance: unauthorized (401: wrong or missing "
                "password), auth_busy (503: too many password checks waiting), header_timeout, "
                "too_many_connections, client_san (client certificate without an allowed "
                "name), lifecycle_disabled (POST /-/reload without --web.enable-lifecycle). A "
                "steady unauthorized rate with Prometheus's target up is someone else trying; "
                "with it down, Prometheus's password (docs/security.md).",
                [
                    query(
                        "sum by (instance, reason) "
                        "(increase(specmon_web_rejections_total[$__rate_interval]))",
                        "{{instance}} {{reason}}",
                    )
                ],
                draw_style="bars",
                stacking="normal",
                fill=80,
                minimum=0,
                decimals=0,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "specmon's event loop: lag and the cycle collector",
                "How late specmon's event loop wakes a 0.1 s timer (99th percentile and worst "
                "bucket over the interval), per specmon instance, and the mean pause of its "
                "full cycle collections (once a minute). Every scrape due while the loop is "
                "held waits; holds near the scrape timeout end scrapes as timeouts that are "
                "specmon's, not the targets' (SpecmonEventLoopStalled, "
                "docs/runbook.md#specmoneventloopstalled).",
                [
                    query(
                        "histogram_quantile(0.99, sum by (instance, le) "
                        "(rate(specmon_event_loop_lag_seconds_bucket[$__rate_interval])))",
                        "lag p99 {{instance}}",
                        "A",
                    ),
                    query(
                        "histogram_quantile(1, sum by (instance, le) "
                        "(rate(specmon_event_loop_lag_seconds_bucket[$__rate_interval])))",
                        "lag, worst bucket {{instance}}",
                        "B",
                    ),
                    query(
                        "sum by (instance) "
                        '(rate(specmon_gc_pause_seconds_sum{generation="2"}[$__rate_interval]))'
                        " / sum by (instance) "
                        '(rate(specmon_gc_pause_seconds_count{generation="2"}[$__rate_interval]))',
                        "full collection {{instance}}",
                        "C",
                    ),
                ],
                unit="s",
                minimum=0,
                overrides=[dashed("full collection .*")],
            ),
            12,
            8,
        ),
        (
            stat(
                "Configured targets",
                "Targets in specmon's configuration.",
                query("sum(specmon_targets)", "targets"),
            ),
            6,
            4,
        ),
        (
            stat(
                "Config reload",
                "Whether specmon's last configuration (re)load succeeded.",
                query("min(specmon_config_last_reload_successful)", "reload"),
                threshold_steps=((None, "red"), (1, "green")),
                mappings=[
                    {
                        "type": "value",
                        "options": {
                            "0": {"color": "red", "index": 0, "text": "FAILED"},
                            "1": {"color": "green", "index": 1, "text": "OK"},
                        },
                    }
                ],
            ),
            6,
            4,
        ),
        (
            stat(
                "Last config load",
                "Time since specmon last loaded its configuration successfully.",
                query(
                    "time() - max(specmon_config_last_reload_success_timestamp_seconds)",
                    "since load",
                ),
                unit="s",
            ),
            6,
            4,
        ),
        (
            stat(
                "specmon version",
                "specmon instances being scraped, by version.",
                query("count by (version) (specmon_build_info)", "{{version}}"),
            ),
            6,
            4,
        ),
    ]
    return dashboard(
        OVERVIEW_UID,
        "specmon / Overview",
        "Is speculative decoding paying for itself on every target? Data: specmon.",
        [
            query_variable(
                "engine",
                "Engine",
                "label_values(specmon_speculation_enabled, engine)",
                multi=True,
                include_all=True,
                current="$__all",
            ),
            query_variable(
                "target",
                "Target",
                "label_values(specmon_up, target)",
                multi=True,
                include_all=True,
                current="$__all",
            ),
            query_variable(
                "window",
                "Window",
                "label_values(specmon_window_drafts, window)",
                current="5m",
            ),
        ],
        layout(panels),
        [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": False,
                "keepTime": True,
                "tags": [],
                "targetBlank": False,
                "title": "Target detail",
                "type": "link",
                "url": f"/d/{TARGET_UID}/specmon-target",
            }
        ],
    )


# --------------------------------------------------------------------------- target detail

M = 'target="$target", model="$model"'
MW = 'target="$target", model="$model", window="$window"'


#: The baseline twin's series: the target the `baseline` label of this target's figures names.
TWIN = (
    "on (target) label_join(\n"
    f'  max by (baseline) (specmon_realized_speedup_ratio{{{MW}}}), "target", "", "baseline"\n'
    ")"
)


def _target_load_panels() -> list[tuple[Json, int, int]]:
    """Load and speed, and the verdict against the baseline (docs/load-signals.md)."""
    return [
        (row("Load: against the baseline"), 24, 1),
        (
            timeseries(
                "Realized against expected speed-up",
                "Realized: the baseline's time per output token over this target's, in the "
                "concurrency bucket the target runs in now (measured: a twin without "
                "speculation, or a profile). Expected: the verdict at the configured draft cost, "
                "which ignores load. Below the line speculation costs time; realized below 0.95 "
                "for 30 minutes fires SpecmonSlowerThanBaseline. Empty realized: no baseline, or "
                "too little data at this load yet (200 engine steps and 100 drafts a side).",
                [
                    query(
                        f"specmon_realized_speedup_ratio{{{MW}}}",
                        "realized against {{baseline}}",
                        "A",
                    ),
                    query(
                        f"specmon_expected_speedup_ratio{{{MW}}}", "expected (configured c)", "B"
                    ),
                ],
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
                threshold_style="line",
                overrides=[dashed("expected .*")],
            ),
            12,
            8,
        ),
        (
            {
                "type": "barchart",
                "title": "Speed-up by concurrency",
                "description": (
                    "Per concurrency bucket of the window (requests per engine step: 1 = below "
                    "1.5, 2 = [1.5, 3), 4 = [3, 6), ...): the realized speed-up against the "
                    "baseline, and the speed-up expected at the best chain length with the draft "
                    "cost measured there. Where the bars fall below 1 speculation stops paying; "
                    "a bucket with too little data on either side has no bar."
                ),
                "datasource": DS,
                "targets": [
                    query(
                        f"max by (concurrency) (specmon_bucket_realized_speedup_ratio{{{MW}}})",
                        "realized",
                        "A",
                        instant=True,
                        table=True,
                    ),
                    query(
                        f"max by (concurrency) (specmon_bucket_best_speedup_ratio{{{MW}}})",
                        "at the best k'",
                        "B",
                        instant=True,
                        table=True,
                    ),
                ],
                "transformations": [
                    *by_concurrency(("A", "realized"), ("B", "at the best k'")),
                    {
                        "id": "convertFieldType",
                        "options": {
                            "conversions": [
                                {
                                    "targetField": "concurrency (requests per step)",
                                    "destinationType": "string",
                                }
                            ],
                            "fields": {},
                        },
                    },
                ],
                "fieldConfig": {
                    "defaults": {
                        "color": {"mode": "palette-classic"},
                        "custom": {
                            "fillOpacity": 80,
                            "lineWidth": 1,
                            "thresholdsStyle": {"mode": "line"},
                        },
                        "decimals": 2,
                        "min": 0,
                        "thresholds": thresholds(*SPEEDUP_STEPS),
                        "unit": "suffix:x",
                    },
                    "overrides": [],
                },
                "options": {
                    "xField": "concurrency (requests per step)",
                    "orientation": "vertical",
                    "groupWidth": 0.7,
                    "barWidth": 0.9,
                    "showValue": "auto",
                    "stacking": "none",
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "none"},
                },
            },
            12,
            8,
        ),
        (
            timeseries(
                "Concurrency and the crossover",
                "Mean requests per engine step over the window (from the engine's counters), "
                "the requests running now, and, dashed, the concurrency at which speculation "
                "stops paying at the window's acceptance (interpolated between the load levels "
                "measured against the baseline; the lowest one measured when it paid at none; "
                "absent while it pays at all). Concurrency at or above it for 15 minutes fires "
                "SpecmonAboveCrossover.",
                [
                    query(f"specmon_concurrency{{{MW}}}", "concurrency (mean per step)", "A"),
                    query(
                        f"max by (baseline) (specmon_crossover_concurrency{{{MW}}})",
                        "crossover against {{baseline}}",
                        "B",
                    ),
                    query(f"specmon_requests_running{{{M}}}", "requests running now", "C"),
                ],
                decimals=1,
                minimum=0,
                overrides=[dashed("crossover .*")],
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Time per output token: this target and its baseline",
                "Decode time per generated token over the window, from the engines' own "
                "counters: this target, and the twin it is compared with (same model, no "
                "speculation). The realized speed-up is their ratio, taken per concurrency "
                "bucket.",
                [
                    query(f"specmon_time_per_output_token_seconds{{{MW}}}", "{{target}}", "A"),
                    query(
                        "max by (target) (\n"
                        'specmon_time_per_output_token_seconds{model="$model", window="$window"}\n'
                        f"and {TWIN}\n)",
                        "baseline {{target}}",
                        "B",
                    ),
                ],
                unit="s",
                minimum=0,
                overrides=[dashed("baseline .*")],
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Draft cost c: measured against configured",
                "c, one drafted token's cost as a fraction of a target step. Configured: "
                "specmon's draft_cost, which every verdict without a baseline uses. Measured: "
                "from the step times against the baseline, c = (T_step / T_step(baseline) - 1) "
                "/ drafted tokens per step, at the middle window's concurrency (dashed) and per "
                "concurrency bucket of the selected window (dotted). c grows with load: that is "
                "why speculation stops paying.",
                [
                    query(
                        f"max by (source, baseline) (specmon_draft_cost_ratio{{{M}}})",
                        "c {{source}} {{baseline}}",
                        "A",
                    ),
                    query(
                        f"max by (concurrency) (specmon_bucket_draft_cost_ratio{{{MW}}})",
                        "c at {{concurrency}} requests per step",
                        "B",
                    ),
                ],
                decimals=3,
                minimum=0,
                overrides=[
                    dashed("^c (engine|measured) .*"),
                    {
                        "matcher": {"id": "byRegexp", "options": "^c at .*"},
                        "properties": [
                            {"id": "custom.lineStyle", "value": {"dash": [0, 10], "fill": "dot"}},
                            {"id": "custom.lineWidth", "value": 2},
                        ],
                    },
                ],
            ),
            8,
            8,
        ),
        (
            {
                "type": "table",
                "title": "Best chain length per load level",
                "description": (
                    "Per concurrency bucket of the window: the realized speed-up against the "
                    "baseline, the draft cost c measured there, the chain length that maximises "
                    "the expected speed-up at that c with the window's per-position survival "
                    "(0 = switch speculation off at this load) and that speed-up. `specmon "
                    "recommend --from` turns it into a vLLM num_speculative_tokens_per_batch_size "
                    "schedule and a llama.cpp --spec-draft-n-max (docs/recommend.md)."
                ),
                "datasource": DS,
                "targets": [
                    query(
                        f"max by (concurrency) ({name}{{{MW}}})",
                        ref=ref,
                        instant=True,
                        table=True,
                    )
                    for ref, name in (
                        ("A", "specmon_bucket_realized_speedup_ratio"),
                        ("B", "specmon_bucket_draft_cost_ratio"),
                        ("C", "specmon_bucket_best_chain_length"),
                        ("D", "specmon_bucket_best_speedup_ratio"),
                    )
                ],
                "transformations": by_concurrency(
                    ("A", "realized speed-up"),
                    ("B", "measured c"),
                    ("C", "best k'"),
                    ("D", "expected at best k'"),
                ),
                "fieldConfig": {
                    "defaults": {
                        "custom": {"align": "auto", "cellOptions": {"type": "auto"}},
                        "thresholds": thresholds((None, "green")),
                        "unit": "none",
                    },
                    "overrides": [
                        {
                            "matcher": {"id": "byName", "options": name},
                            "properties": [
                                {"id": "decimals", "value": 2},
                                {"id": "unit", "value": "suffix:x"},
                                {"id": "thresholds", "value": thresholds(*REALIZED_STEPS)},
                                {"id": "color", "value": {"mode": "thresholds"}},
                                {"id": "custom.cellOptions", "value": {"type": "color-text"}},
                            ],
                        }
                        for name in ("realized speed-up", "expected at best k'")
                    ]
                    + [
                        {
                            "matcher": {"id": "byName", "options": "measured c"},
                            "properties": [{"id": "decimals", "value": 3}],
                        },
                        {
                            "matcher": {"id": "byName", "options": "best k'"},
                            "properties": [{"id": "decimals", "value": 0}],
                        },
                    ],
                },
                "options": {
                    "cellHeight": "sm",
                    "footer": {"show": False, "reducer": ["sum"], "countRows": False, "fields": ""},
                    "showHeader": True,
                },
            },
            8,
            8,
        ),
    ]


def target_detail() -> Json:
    panels: list[tuple[Json, int, int]] = [
        (
            stat(
                "alpha",
                "Effective acceptance rate over the window: the alpha whose alpha + ... + "
                "alpha^k equals the mean accepted tokens per draft.",
                query(f"specmon_alpha_ratio{{{MW}}}", "alpha"),
                decimals=3,
            ),
            3,
            4,
        ),
        (
            stat(
                "break-even",
                "The alpha at which S(alpha, k, c) = 1.",
                query(f"specmon_breakeven_alpha_ratio{{{M}}}", "break-even"),
                decimals=3,
            ),
            3,
            4,
        ),
        (
            stat(
                "margin",
                "alpha - break-even. Red: speculation costs time; orange: within 0.05.",
                query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin"),
                decimals=3,
                threshold_steps=MARGIN_STEPS,
            ),
            3,
            4,
        ),
        (
            stat(
                "expected speed-up",
                "(1 + accepted/drafts) / (1 + c * draft tokens/drafts) over the window.",
                query(f"specmon_expected_speedup_ratio{{{MW}}}", "speed-up"),
                unit="suffix:x",
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
            ),
            3,
            4,
        ),
        (
            stat(
                "best speed-up",
                "Expected speed-up at the best chain length k'.",
                query(f"specmon_best_speedup_ratio{{{MW}}}", "best"),
                unit="suffix:x",
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
            ),
            3,
            4,
        ),
        (
            stat(
                "k in use",
                "Chain length in use: configured, else the number of position series.",
                query(f"specmon_chain_length{{{M}}}", "k"),
            ),
            3,
            4,
        ),
        (
            stat(
                "best k'",
                "Chain length that maximises the measured speed-up; 0 = speculation does not "
                "pay at any chain length.",
                query(f"specmon_best_chain_length{{{MW}}}", "k'"),
            ),
            3,
            4,
        ),
        (
            stat(
                "drafts in window",
                "Sample size behind the numbers. Alerts need at least 400.",
                query(f"specmon_window_drafts{{{MW}}}", "drafts"),
                threshold_steps=((None, "orange"), (400, "green")),
            ),
            3,
            4,
        ),
        (row("Per position"), 24, 1),
        (
            timeseries(
                "Survival by position",
                "Share of drafts accepted at least this deep (per_pos / drafts). Where it "
                "falls below the draft cost c, drafting that position costs more than it "
                "earns.",
                [query(f"specmon_position_survival_ratio{{{MW}}}", "position {{position}}")],
                unit="percentunit",
                minimum=0,
                maximum=1,
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Conditional acceptance by position",
                "Acceptance at a position given the previous one was accepted "
                "(per_pos[i] / per_pos[i-1]).",
                [query(f"specmon_position_conditional_ratio{{{MW}}}", "position {{position}}")],
                unit="percentunit",
                minimum=0,
                maximum=1,
            ),
            12,
            8,
        ),
        (
            bargauge(
                "Survival by position, now",
                "Latest survival per position: the shape of the chain.",
                query(f"specmon_position_survival_ratio{{{MW}}}", "{{position}}", instant=True),
            ),
            12,
            7,
        ),
        (
            bargauge(
                "Conditional acceptance by position, now",
                "Latest conditional acceptance per position.",
                query(f"specmon_position_conditional_ratio{{{MW}}}", "{{position}}", instant=True),
            ),
            12,
            7,
        ),
        (row("Speed-up and chain"), 24, 1),
        (
            timeseries(
                "Mean acceptance length",
                "Tokens per verification step including the bonus token (1 + accepted / "
                "drafts). Solid: selected window; dashed: every other window.",
                [
                    query(f"specmon_mean_acceptance_length{{{MW}}}", "{{window}} (selected)", "A"),
                    query(
                        f'specmon_mean_acceptance_length{{{M}, window!="$window"}}',
                        "{{window}}",
                        "B",
                    ),
                ],
                decimals=2,
                minimum=1,
                overrides=[dashed("^[^(]*$")],
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Expected against best speed-up",
                "Expected speed-up with the chain in use against the speed-up at the best "
                "chain length. The gap is what a shorter chain would gain.",
                [
                    query(f"specmon_expected_speedup_ratio{{{MW}}}", "expected (k in use)", "A"),
                    query(f"specmon_best_speedup_ratio{{{MW}}}", "best (k')", "B"),
                ],
                decimals=2,
                threshold_steps=SPEEDUP_STEPS,
                threshold_style="line",
                overrides=[dashed("best .*")],
            ),
            8,
            8,
        ),
        (
            timeseries(
                "Chain length and draft cost",
                "k in use and the best k' (left axis); draft cost c, the cost of one drafted "
                "token as a fraction of a target step (right axis). c configured: specmon's "
                "draft_cost for the target, which decides break-even, margin and speed-up. "
                "Dashed, checks on it: c measured by the engine (TensorRT-LLM with a separate "
                "draft model only: its draft overhead o as c = o / (k (1 - o))), and c "
                "measured against the named baseline at the window's concurrency "
                "(docs/load-signals.md).",
                [
                    query(f"specmon_chain_length{{{M}}}", "k in use", "A"),
                    query(f"specmon_best_chain_length{{{MW}}}", "best k'", "B"),
                    query(
                        f"max by (source, baseline) (specmon_draft_cost_ratio{{{M}}})",
                        "c {{source}} {{baseline}}",
                        "C",
                    ),
                ],
                decimals=2,
                minimum=0,
                overrides=[
                    dashed("best k'"),
                    dashed("^c (engine|measured)"),
                    right_axis("^c .*", "none"),
                    renamed("^c configured", "c configured (used for the verdicts)"),
                    renamed("^c engine", "c measured by the engine"),
                ],
            ),
            8,
            8,
        ),
        *_target_load_panels(),
        (row("Acceptance and traffic"), 24, 1),
        (
            timeseries(
                "Alpha against break-even",
                "Effective alpha and the draft acceptance ratio (accepted / drafted tokens) "
                "over the window; dashed: break-even alpha. Zero line: the margin.",
                [
                    query(f"specmon_alpha_ratio{{{MW}}}", "alpha", "A"),
                    query(f"specmon_draft_acceptance_ratio{{{MW}}}", "accepted / drafted", "B"),
                    query(f"specmon_breakeven_alpha_ratio{{{M}}}", "break-even", "C"),
                    query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin", "D"),
                ],
                decimals=3,
                threshold_steps=((None, "red"), (0, "transparent")),
                threshold_style="line",
                overrides=[dashed("break-even")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Margin and requests running",
                "Margin over the window (left; below the zero line speculation costs time) "
                "against the requests the engine runs (right). Speculation's gain shrinks as "
                "batches fill: a margin that falls whenever concurrency rises points at load "
                "(the configured c is then too optimistic), not at the draft.",
                [
                    query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin", "A"),
                    query(f"specmon_requests_running{{{M}}}", "requests running", "B"),
                ],
                decimals=3,
                threshold_steps=((None, "red"), (0, "transparent")),
                threshold_style="line",
                overrides=[
                    right_axis("requests running", "none"),
                    {
                        "matcher": {"id": "byName", "options": "requests running"},
                        "properties": [{"id": "decimals", "value": 0}],
                    },
                ],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Drafts and tokens per second",
                "Drafts (verification steps with a draft), drafted tokens and accepted tokens "
                "per second, as counted by specmon; dashed: every token the engine generated "
                "per second over the window, drafted or not. Generated tokens without drafts: "
                "the engine is busy but not speculating.",
                [
                    query(
                        f"sum(rate(specmon_drafts_total{{{M}}}[$__rate_interval]))", "drafts", "A"
                    ),
                    query(
                        f"sum(rate(specmon_draft_tokens_total{{{M}}}[$__rate_interval]))",
                        "draft tokens",
                        "B",
                    ),
                    query(
                        f"sum(rate(specmon_accepted_tokens_total{{{M}}}[$__rate_interval]))",
                        "accepted tokens",
                        "C",
                    ),
                    query(
                        f"max by (window) (specmon_window_generated_tokens{{{MW}}})\n"
                        f"/ max by (window) (specmon_window_seconds{{{MW}}} > 0)",
                        "generated tokens ({{window}})",
                        "D",
                    ),
                ],
                unit="ops",
                minimum=0,
                overrides=[dashed("generated tokens .*")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Window sample size",
                "Drafts counted in the window (left) and the seconds of data it covers "
                "(right; less than the window while it fills after a start or a reset).",
                [
                    query(f"specmon_window_drafts{{{MW}}}", "drafts", "A"),
                    query(f"specmon_window_seconds{{{MW}}}", "seconds covered", "B"),
                ],
                minimum=0,
                overrides=[right_axis("seconds covered", "s")],
            ),
            12,
            8,
        ),
        (
            timeseries(
                "Engine restarts",
                "Counter resets specmon detected (engine restarts): the windows start again.",
                [
                    query(
                        f"sum(increase(specmon_engine_resets_total{{{M}}}[$__rate_interval]))",
                        "restarts",
                    )
                ],
                draw_style="bars",
                fill=80,
                minimum=0,
                decimals=0,
            ),
            24,
            6,
        ),
    ]
    return dashboard(
        TARGET_UID,
        "specmon / Target detail",
        "Per-position acceptance, speed-up and chain length of one target and model. "
        "Data: specmon.",
        [
            # Targets that speculate (a baseline twin has no speculative series: its figures
            # show on the target compared with it).
            query_variable("target", "Target", "label_values(specmon_chain_length, target)"),
            query_variable(
                "model", "Model", 'label_values(specmon_chain_length{target="$target"}, model)'
            ),
            query_variable(
                "window",
                "Window",
                'label_values(specmon_window_drafts{target="$target", model="$model"}, window)',
                current="5m",
            ),
        ],
        layout(panels),
        [
            {
                "asDropdown": False,
                "icon": "dashboard",
                "includeVars": False,
                "keepTime": True,
                "tags": [],
                "targetBlank": False,
                "title": "Overview",
                "type": "link",
                "url": f"/d/{OVERVIEW_UID}/specmon-overview",
            }
        ],
    )


# --------------------------------------------------------------------------- output

#: file name -> builder
DASHBOARDS = {
    "specmon-overview.json": overview,
    "specmon-target.json": target_detail,
}


def render(board: Json) -> str:
    return json.dumps(board, indent=2, ensure_ascii=False) + "\n"


def build() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    return {name: render(builder()) for name, builder in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output directory")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build().items():
        path = args.out / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    if stale:
        sys.stderr.write(
            "out of date (run python grafana/build_dashboards.py): " + ", ".join(stale) + "\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
