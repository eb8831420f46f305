#!/usr/bin/env python3
"""Write specmon's Grafana dashboards: grafana/dashboards/*.json.

The JSON files are committed; this script is their source. After editing it, run

    python grafana/build_dashboards.py          # rewrite the JSON files
    python grafana/build_dashboards.py --check  # exit 1 if a committed file is out of date

(tests/dashboards/test_dashboards.py runs the check.) The panels are written with Grafana
Labs' typed builders, `grafana-foundation-sdk` on the Grafana 10.4 line (the `dashboards`
extra: `pip install -e '.[dashboards]'`), so a misspelt option fails here, not in Grafana.
This file holds what is specmon's: the panels, their queries and their layout; the helpers
below say what a panel is for.

Conventions every panel follows (and the tests enforce):
- the data source is the `datasource` template variable, never a `${DS_...}` import input;
- every rate() and increase() uses `$__rate_interval`;
- queries live in `targets[].expr` and use only the template variables defined here, all of
  them `label_values(...)` queries, so a test can substitute them and run every query;
- `uid`s are fixed and `schemaVersion` is the SDK line's (36 for 10.4).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from grafana_foundation_sdk.builders import (
    barchart,
    bargauge,
    common,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import dashboard as board
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

__all__ = ["DASHBOARDS", "SCHEMA_VERSION", "build", "main", "render"]

#: What the SDK's 10.4 line writes: Grafana 10.4 is the oldest release these dashboards support.
SCHEMA_VERSION = dm.Dashboard().schema_version
OVERVIEW_UID, TARGET_UID = "specmon-overview", "specmon-target"
OUT_DIR = Path(__file__).resolve().parent / "dashboards"

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
Steps = tuple[tuple[float | None, str], ...]
Prop = dm.DynamicConfigValue
#: How some fields or series differ from the panel's defaults: which ones, and what changes.
Override = tuple[dm.MatcherConfig, list[Prop]]
Panel = timeseries.Panel | stat.Panel | bargauge.Panel | table.Panel | barchart.Panel
#: A panel and its width and height in grid units (24 columns), or a row starting a section.
Cell = tuple[Panel | statetimeline.Panel, int, int] | board.Row
Size = tuple[int, int]
M_ = TypeVar("M_")
PALETTE, BY_ZONE = dm.FieldColorModeId.PALETTE_CLASSIC, dm.FieldColorModeId.THRESHOLDS
GT = cm.GraphThresholdsStyleMode


class Fixed(Builder[M_], Generic[M_]):
    """A model the SDK has no builder call for, handed to a call that takes a builder."""

    def __init__(self, model: M_) -> None:
        self.model = model

    def build(self) -> M_:
        return self.model


# --------------------------------------------------------------------------- building blocks


def query(
    expr: str, legend: str = "__auto", *, instant: bool = False, table: bool = False
) -> prometheus.Dataquery:
    q = prometheus.Dataquery().datasource(DS).editor_mode(QueryEditorMode.CODE).expr(expr)
    q.format(PromQueryFormat.TABLE if table else PromQueryFormat.TIME_SERIES)
    return (q.instant() if instant else q.range()).legend_format(legend)


def thresholds(steps: Steps) -> dm.ThresholdsConfig:
    levels = [dm.Threshold(value=value, color=color) for value, color in steps]
    return dm.ThresholdsConfig(mode=dm.ThresholdsMode.ABSOLUTE, steps=levels)


def value_texts(texts: dict[str, tuple[str, str]]) -> list[dm.ValueMapping]:
    """Values shown as words: value -> (text, colour)."""
    items = enumerate(texts.items())
    return [dm.ValueMap({v: dm.ValueMappingResult(t, c, index=i) for i, (v, (t, c)) in items})]


def _panel(
    panel: Panel | statetimeline.Panel,
    title: str,
    description: str,
    queries: Sequence[prometheus.Dataquery],
    *,
    colours: dm.FieldColorModeId = BY_ZONE,
    zones: Steps = ((None, "green"),),
    unit: str = "none",
    decimals: int | None = None,
    low: float | None = None,
    high: float | None = None,
    overrides: Sequence[Override] = (),
    size: Size,
) -> Cell:
    """What every panel has: title, description, queries (refs A, B, ... in order) on the
    `datasource` variable, colours, value ranges (``zones``), unit, scale and overrides."""
    refs = [q.ref_id(chr(ord("A") + i)) for i, q in enumerate(queries)]
    panel.title(title).description(description).datasource(DS).targets(list(refs)).unit(unit)
    panel.color_scheme(board.FieldColor().mode(colours)).thresholds(Fixed(thresholds(zones)))
    panel.overrides([])
    if decimals is not None:
        panel.decimals(decimals)
    if low is not None:
        panel.min(low)
    if high is not None:
        panel.max(high)
    for matcher, props in overrides:
        panel.with_override(matcher, props)
    return panel, *size


def legend(*, show: bool = True) -> common.VizLegendOptions:
    mode, bottom = cm.LegendDisplayMode.LIST, cm.LegendPlacement.BOTTOM
    return common.VizLegendOptions().display_mode(mode).placement(bottom).show_legend(show)


def tooltip(mode: cm.TooltipDisplayMode) -> common.VizTooltipOptions:
    return common.VizTooltipOptions().mode(mode).sort(cm.SortOrder.NONE)


def last_value() -> common.ReduceDataOptions:
    return common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


# Overrides: series by their name (a regular expression), table columns by their name.


def _series(name: str, *props: Prop) -> Override:
    return dm.MatcherConfig(id_val="byRegexp", options=name), list(props)


def dashed(name: str, style: str = "dash", dash: tuple[int, int] = (10, 10)) -> Override:
    line = cm.LineStyle(fill=style, dash=list(dash))  # type: ignore[arg-type]
    return _series(name, Prop("custom.lineStyle", line), Prop("custom.lineWidth", 2))


def dotted(name: str) -> Override:
    return dashed(name, "dot", (0, 10))


def right_axis(name: str, unit: str) -> Override:
    return _series(name, Prop("custom.axisPlacement", cm.AxisPlacement.RIGHT), Prop("unit", unit))


def shown_as(name: str, display: str) -> Override:
    return _series(name, Prop("displayName", display))


def column(name: str, *props: Prop) -> Override:
    return dm.MatcherConfig(id_val="byName", options=name), list(props)


def decimals(n: int) -> Prop:
    return Prop("decimals", n)


def unit(name: str) -> Prop:
    return Prop("unit", name)


def words(texts: dict[str, tuple[str, str]]) -> Prop:
    return Prop("mappings", value_texts(texts))


def cells_coloured(steps: Steps, *, background: bool = True) -> list[Prop]:
    """The cell coloured by ``steps`` (its background, or its text)."""
    cell = cm.TableColoredBackgroundCellOptions() if background else cm.TableColorTextCellOptions()
    colour = Prop("color", dm.FieldColor(mode=BY_ZONE))
    return [Prop("thresholds", thresholds(steps)), colour, Prop("custom.cellOptions", cell)]


# Panels, by what they show.


def trend(
    title: str,
    description: str,
    *queries: prometheus.Dataquery,
    zone_style: cm.GraphThresholdsStyleMode = GT.OFF,
    series: Sequence[Override] = (),
    per_interval: bool = False,
    stacked: bool = False,
    **scale: Any,
) -> Cell:
    """Figures over time, one line per series (``per_interval``: bars, one per interval;
    ``stacked``: series on top of each other); ``zones`` drawn as ``zone_style``;
    ``series``: how named series differ (dashed, right axis...)."""
    panel = timeseries.Panel().axis_placement(cm.AxisPlacement.AUTO)
    panel.draw_style(cm.GraphDrawStyle.BARS if per_interval else cm.GraphDrawStyle.LINE)
    panel.fill_opacity(80 if per_interval else 0).line_width(1).point_size(4)
    panel.show_points(cm.VisibilityMode.NEVER).span_nulls(False)
    stacking = cm.StackingMode.NORMAL if stacked else cm.StackingMode.NONE
    panel.stacking(common.StackingConfig().group("A").mode(stacking))
    panel.thresholds_style(common.GraphThresholdsStyleConfig().mode(zone_style))
    panel.legend(legend().calcs([])).tooltip(tooltip(cm.TooltipDisplayMode.MULTI))
    return _panel(panel, title, description, queries, colours=PALETTE, overrides=series, **scale)


def headline(
    title: str,
    description: str,
    target: prometheus.Dataquery,
    *,
    words: dict[str, tuple[str, str]] | None = None,
    zones: Steps = ((None, "blue"),),
    **scale: Any,
) -> Cell:
    """One number now, coloured by ``zones``, its recent course behind it; ``words``: values
    shown as text (value -> (text, colour))."""
    panel = stat.Panel().mappings(value_texts(words) if words else [])
    panel.color_mode(cm.BigValueColorMode.VALUE).graph_mode(cm.BigValueGraphMode.AREA)
    panel.justify_mode(cm.BigValueJustifyMode.AUTO).orientation(cm.VizOrientation.AUTO)
    panel.reduce_options(last_value()).text_mode(cm.BigValueTextMode.AUTO)
    return _panel(panel, title, description, [target], zones=zones, **scale)


def chain_shape(title: str, description: str, target: prometheus.Dataquery, *, size: Size) -> Cell:
    """One bar per position of the chain, 0..1: where the chain stops paying."""
    panel = bargauge.Panel().display_mode(cm.BarGaugeDisplayMode.GRADIENT).show_unfilled(True)
    panel.orientation(cm.VizOrientation.VERTICAL).reduce_options(last_value())
    panel.value_mode(cm.BarGaugeValueMode.COLOR)
    scale: dict[str, Any] = {"decimals": 3, "low": 0, "high": 1, "unit": "percentunit"}
    colours = dm.FieldColorModeId.CONTINUOUS_RD_YL_GR
    return _panel(panel, title, description, [target], colours=colours, size=size, **scale)


def up_timeline(title: str, description: str, target: prometheus.Dataquery, *, size: Size) -> Cell:
    """UP or DOWN over time, one band per target."""
    panel = statetimeline.Panel().mappings(UP).fill_opacity(80).line_width(0)
    panel.align_value(cm.TimelineValueAlignment.LEFT).legend(legend(show=False))
    panel.merge_values(True).row_height(0.9).show_value(cm.VisibilityMode.NEVER)
    panel.tooltip(tooltip(cm.TooltipDisplayMode.SINGLE))
    zones: Steps = ((None, "red"), (1, "green"))
    return _panel(panel, title, description, [target], zones=zones, size=size)


def transform(kind: str, options: dict[str, Any]) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val=kind, options=options)


def _table(
    panel: table.Panel | barchart.Panel,
    figures: Sequence[tuple[str, str]],
    first: dict[str, int],
) -> list[prometheus.Dataquery]:
    """Instant queries, one per figure (name, expr), merged into rows keyed by the ``first``
    columns (name -> position), one column per figure, named, Time hidden."""
    names = [name for name, _ in figures]
    organize: dict[str, dict[str, Any]] = {
        "excludeByName": {"Time": True},
        "indexByName": {**first, **{name: len(first) + i for i, name in enumerate(names)}},
        "renameByName": {f"Value #{chr(ord('A') + i)}": name for i, name in enumerate(names)},
    }
    merge = [transform("merge", {})]
    if "concurrency" in first:  # bucket series: the label is a string ("16" before "2")
        organize["renameByName"]["concurrency"] = "concurrency (requests per step)"
        as_number = {"targetField": "concurrency", "destinationType": "number"}
        merge.append(transform("convertFieldType", {"conversions": [as_number], "fields": {}}))
        merge.append(transform("sortBy", {"fields": {}, "sort": [{"field": "concurrency"}]}))
    panel.transformations([*merge, transform("organize", organize)])
    return [query(expr, instant=True, table=True) for _, expr in figures]


def table_panel() -> table.Panel:
    panel = table.Panel().align(cm.FieldTextAlignment.AUTO).cell_options(cm.TableAutoCellOptions())
    no_footer = common.TableFooterOptions().show(False).reducer(["sum"]).count_rows(False)
    return panel.cell_height(cm.TableCellHeight.SM).footer(no_footer).show_header(True)


def per_target_table(
    title: str,
    description: str,
    figures: Sequence[tuple[str, str]],
    columns: Sequence[Override],
    *,
    sort_by: str,
    size: Size,
) -> Cell:
    """One row per target and model, one column per figure (name, instant query),
    filterable, sorted by ``sort_by`` ascending."""
    panel = table_panel().filterable(True)
    panel.sort_by([common.TableSortByFieldState().display_name(sort_by).desc(False)])
    queries = _table(panel, figures, {"target": 0, "model": 1})
    return _panel(panel, title, description, queries, overrides=columns, size=size)


def per_bucket_table(
    title: str,
    description: str,
    figures: Sequence[tuple[str, str]],
    columns: Sequence[Override],
    *,
    size: Size,
) -> Cell:
    """One row per concurrency bucket, sorted by its number; one column per figure."""
    panel = table_panel()
    queries = _table(panel, figures, {"concurrency": 0})
    return _panel(panel, title, description, queries, overrides=columns, size=size)


def bars_by_load_level(
    title: str, description: str, figures: Sequence[tuple[str, str]], *, size: Size
) -> Cell:
    """Bars per concurrency bucket, one per figure (name, instant query), against the
    break-even line at 1."""
    x = "concurrency (requests per step)"
    panel = barchart.Panel().fill_opacity(80).line_width(1).x_field(x).group_width(0.7)
    panel.thresholds_style(common.GraphThresholdsStyleConfig().mode(GT.LINE))
    panel.orientation(cm.VizOrientation.VERTICAL).bar_width(0.9)
    panel.show_value(cm.VisibilityMode.AUTO).stacking(cm.StackingMode.NONE)
    panel.legend(legend()).tooltip(tooltip(cm.TooltipDisplayMode.MULTI))
    queries = _table(panel, figures, {"concurrency": 0})
    for q, (name, _) in zip(queries, figures, strict=True):
        q.legend_format(name)
    as_text = {"targetField": x, "destinationType": "string"}
    panel.with_transformation(
        transform("convertFieldType", {"conversions": [as_text], "fields": {}})
    )
    scale: dict[str, Any] = {"decimals": 2, "low": 0, "unit": "suffix:x", "zones": SPEEDUP_STEPS}
    return _panel(panel, title, description, queries, colours=PALETTE, size=size, **scale)


# --------------------------------------------------------------------------- dashboards

ALERT_ANNOTATION_EXPR = 'ALERTS{alertname=~"Specmon.+", alertstate="firing", target=~"$target"}'


class AlertAnnotation(dm.AnnotationQuery):
    """specmon's firing alerts as annotations. The options Grafana's Prometheus data source
    reads beside `expr` (step, title, text, tags) are not in the 10.4 schema: added here."""

    def __init__(self) -> None:
        super().__init__("specmon alerts", DS, icon_color="red", hide=None, built_in=None)
        self.expr = ALERT_ANNOTATION_EXPR

    def to_json(self) -> dict[str, object]:
        text, title = "{{severity}}: {{target}} {{model}}", "{{alertname}}"
        options = {"step": "1m", "tagKeys": "severity", "textFormat": text, "titleFormat": title}
        return super().to_json() | options | {"useValueForTime": False}


def choice(
    name: str, label: str, values_of: str, *, several: bool = False, default: str | None = None
) -> board.QueryVariable:
    """A template variable listing ``label_values(...)``; ``several``: any number, all by
    default."""
    var = board.QueryVariable(name).label(label).datasource(DS).query(values_of).regex("")
    var.refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
    var.multi(several).include_all(several).hide(dm.VariableHide.DONT_HIDE).options([])
    if several:
        var.all_value(".+").current(dm.VariableOption(True, "All", "$__all"))
    if default is not None:
        var.current(dm.VariableOption(True, default, default))
    return var


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: list[board.QueryVariable],
    panels: list[Cell],
    link: tuple[str, str],
) -> board.Dashboard:
    """Panels placed left to right in rows of 24 columns; a link to the other dashboard."""
    built_in = board.AnnotationQuery().name("Annotations & Alerts").built_in(1).enable(True)
    built_in.datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --")).hide(True)
    built_in.icon_color("rgba(0, 211, 255, 1)").type("dashboard")
    sources = board.DatasourceVariable("datasource").label("Data source").type("prometheus")
    sources.regex("").hide(dm.VariableHide.DONT_HIDE).multi(False).include_all(False)
    out = board.Dashboard(title).uid(uid).description(description).editable().version(1)
    out.annotations([built_in, Fixed(AlertAnnotation())]).fiscal_year_start_month(0)
    out.tooltip(dm.DashboardCursorSync.CROSSHAIR).refresh("30s").time("now-6h", "now")
    out.tags(["specmon", "speculative-decoding"]).variables([sources, *variables])
    out.timezone("").week_start("")
    other = board.DashboardLink(link[0]).type(dm.DashboardLinkType.LINK).icon("dashboard")
    out.link(other.url(f"/d/{link[1]}/{link[1]}").keep_time(True).tags([]))
    for cell in panels:
        if isinstance(cell, board.Row):
            out.with_row(cell)
        else:
            panel, width, height = cell
            out.with_panel(panel.span(width).height(height))
    return out


def row(title: str) -> board.Row:
    return board.Row(title).collapsed(False)


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


# Margin colours: red below break-even, orange within the thin band (SpecmonMarginThin).
MARGIN_STEPS: Steps = ((None, "red"), (0, "orange"), (0.05, "green"))
SPEEDUP_STEPS: Steps = ((None, "red"), (1, "green"))
#: Realized speed-up colours: red where speculation costs time beyond the noise
#: (SpecmonSlowerThanBaseline), orange where it does not pay, green where it does.
REALIZED_STEPS: Steps = ((None, "red"), (0.95, "orange"), (1, "green"))
UP = value_texts({"0": ("DOWN", "red"), "1": ("UP", "green")})
ZERO_LINE: Steps = ((None, "red"), (0, "transparent"))
LINE = cm.GraphThresholdsStyleMode.LINE
TARGET_LINK = (
    f"/d/{TARGET_UID}/specmon-target?var-datasource=${{datasource}}"
    "&var-target=${__data.fields.target}&var-model=${__data.fields.model}"
    "&var-window=${window}&${__url_time_range}"
)


def _fleet_table() -> Cell:
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
    mx = "max by (target, model)"
    figures = [
        ("up", up),
        ("alpha", f"{mx} (specmon_alpha_ratio{{{TW}}})"),
        ("break-even", f"{mx} (specmon_breakeven_alpha_ratio{{{TE}}})"),
        ("margin", f"{mx} (specmon_alpha_margin_ratio{{{TW}}})"),
        ("expected speed-up", f"{mx} (specmon_expected_speedup_ratio{{{TW}}})"),
        ("best k'", f"{mx} (specmon_best_chain_length{{{TW}}})"),
        ("k in use", f"{mx} (specmon_chain_length{{{TE}}})"),
        (
            "drafts/s",
            f"sum by (target, model) (rate(specmon_drafts_total{{{TE}}}[$__rate_interval]))",
        ),
        ("drafts in window", f"{mx} (specmon_window_drafts{{{TW}}})"),
        ("requests running", f"{mx} (specmon_requests_running{{{TE}}})"),
    ]
    cell_bg = Prop(id_val="custom.cellOptions", value=cm.TableColoredBackgroundCellOptions())
    detail = dm.DashboardLink(title="Target detail", url=TARGET_LINK)
    columns = [
        column("up", Prop(id_val="mappings", value=UP), cell_bg),
        column("alpha", unit("none"), decimals(3)),
        column("break-even", unit("none"), decimals(3)),
        column("margin", decimals(3), *cells_coloured(MARGIN_STEPS)),
        column(
            "expected speed-up",
            decimals(2),
            unit("suffix:x"),
            *cells_coloured(SPEEDUP_STEPS, background=False),
        ),
        column("drafts/s", decimals(1), unit("ops")),
        column("requests running", decimals(0)),
        column("target", Prop(id_val="links", value=[detail])),
    ]
    return per_target_table(
        "Targets",
        "One row per target and model. alpha: effective acceptance rate over the selected "
        "window; break-even: the alpha at which speculation neither gains nor loses; "
        "margin = alpha - break-even (red: below break-even, orange: within 0.05); best k': "
        "the chain length that maximises the measured speed-up (0 = speculation does not "
        "pay); requests running: the engine's concurrency now, which eats speculation's "
        "gain. Empty acceptance cells mean no drafts in the window, or an engine that "
        "counts no drafts (TensorRT-LLM without its per-position counters, SGLang without "
        "its verify counter: docs/engines.md); empty drafts/s: an engine that counts none.",
        figures,
        columns,
        sort_by="margin",
        size=(24, 9),
    )


def _verdict_panels() -> list[Cell]:
    """The headline: per target, the speed-up specmon believes now and what it rests on."""
    basis = f"max by (target, model, basis) (specmon_verdict_info{{{TW}}})"

    def with_basis(family: str) -> str:
        return (
            f"max by (target, model, basis) (\n  max by (target, model) ({family}{{{TW}}})\n"
            f"  * on (target, model) group_left (basis)\n  {basis}\n)"
        )

    legend = "{{target}} {{model}} ({{basis}})"
    return [
        headline(
            "Verdict: speed-up on the best evidence",
            "Per target and model, over the selected window: the speed-up over no speculation "
            "specmon believes now (red below 1: speculation costs throughput), and in brackets "
            "the basis it rests on, best first: twin (realized against the baseline twin at the "
            "current load), profile, engine (the engine's measured draft cost: TensorRT-LLM), "
            "configured (specmon's draft_cost), default (no draft_cost: 0.1, a guess). The "
            "table below shows the figures at the configured c.",
            query(with_basis("specmon_verdict_speedup_ratio"), legend),
            unit="suffix:x",
            decimals=2,
            zones=SPEEDUP_STEPS,
            size=(16, 5),
        ),
        headline(
            "Verdict: margin on the best evidence",
            "Alpha minus the break-even alpha on the same basis as the verdict's speed-up "
            "(in brackets). Red: below break-even, speculation costs time; orange: within 0.05.",
            query(with_basis("specmon_verdict_alpha_margin_ratio"), legend),
            decimals=3,
            zones=MARGIN_STEPS,
            size=(8, 5),
        ),
    ]


#: Targets compared with a baseline, as a filter: a twin (specmon_baseline_info names it, from
#: the configuration) or a profile (then known once a draft cost has been measured against it).
WITH_BASELINE = (
    f"on (target) (\n  specmon_baseline_info{{{T}}}\n"
    f'  or specmon_draft_cost_ratio{{{TE}, source="measured"}}\n)'
)


def _baseline_table() -> Cell:
    """Targets compared with a baseline: how their speculation does at the load they run."""
    mx = "max by (target, model)"
    figures = [
        ("realized speed-up", f"{mx} (specmon_realized_speedup_ratio{{{TW}}})"),
        (
            "expected (configured c)",
            f"{mx} (specmon_expected_speedup_ratio{{{TW}}} and {WITH_BASELINE})",
        ),
        ("concurrency", f"{mx} (specmon_concurrency{{{TW}}} and {WITH_BASELINE})"),
        ("crossover", f"{mx} (specmon_crossover_concurrency{{{TW}}})"),
        (
            "above crossover",
            f"{mx} (\n"
            f"  specmon_crossover_concurrency{{{TW}}}\n"
            "  <= bool ignoring (baseline) group_left ()\n"
            f"  (1.05 * specmon_concurrency{{{TW}}})\n"
            ")",
        ),
        ("measured c", f'{mx} (specmon_draft_cost_ratio{{{TE}, source="measured"}})'),
        (
            "configured c",
            f'{mx} (specmon_draft_cost_ratio{{{TE}, source="configured"}} and {WITH_BASELINE})',
        ),
        ("requests running", f"{mx} (specmon_requests_running{{{TE}}} and {WITH_BASELINE})"),
    ]
    columns = [
        column("realized speed-up", decimals(2), unit("suffix:x"), *cells_coloured(REALIZED_STEPS)),
        column("expected (configured c)", decimals(2), unit("suffix:x")),
        column("concurrency", decimals(1)),
        column("crossover", decimals(1)),
        column("above crossover", words({"0": ("below", "green"), "1": ("AT OR ABOVE", "red")})),
        column("measured c", decimals(3)),
        column("configured c", decimals(3)),
        column("requests running", decimals(0)),
    ]
    return per_target_table(
        "Against the baseline, at this load",
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
        "current load has too little data on one side yet (200 engine steps, 100 drafts).",
        [(name, selected_engines(expr)) for name, expr in figures],
        columns,
        sort_by="realized speed-up",
        size=(24, 7),
    )


def _overview_load_panels() -> list[Cell]:
    return [
        row("Load: against the baseline"),
        _baseline_table(),
        trend(
            "Realized speed-up against the baseline",
            "Each target's time per output token against its twin's without speculation, in "
            "the concurrency bucket it runs in now (solid), and the expected speed-up at the "
            "configured c (dashed), which ignores load. Below the line speculation costs "
            "time at this load; below 0.95 for 30 minutes, SpecmonSlowerThanBaseline "
            "fires.",
            query(
                selected_engines(f"specmon_realized_speedup_ratio{{{TW}}}"),
                "{{target}} {{model}} against {{baseline}}",
            ),
            query(
                selected_engines(f"specmon_expected_speedup_ratio{{{TW}}} and {WITH_BASELINE}"),
                "expected {{target}} {{model}}",
            ),
            decimals=2,
            zones=SPEEDUP_STEPS,
            zone_style=LINE,
            series=[dashed("expected .*")],
            size=(12, 8),
        ),
        trend(
            "Concurrency against the crossover",
            "Solid: mean requests per engine step over the window, for the targets compared "
            "with a twin. Dashed: the concurrency at which speculation stops paying (from "
            "the load levels measured in the window; absent while it pays at all of them). "
            "A solid line at or above its dashed one for 15 minutes fires "
            "SpecmonAboveCrossover.",
            query(
                selected_engines(
                    f"max by (target, model) (specmon_concurrency{{{TW}}} and {WITH_BASELINE})"
                ),
                "{{target}} {{model}}",
            ),
            query(
                selected_engines(f"max by (target, model) (specmon_crossover_concurrency{{{TW}}})"),
                "crossover {{target}} {{model}}",
            ),
            decimals=1,
            low=0,
            series=[dashed("crossover .*")],
            size=(12, 8),
        ),
    ]


def _overview_health_panels() -> list[Cell]:
    """specmon's scrapes of its targets, and specmon itself."""
    lag = "(rate(specmon_event_loop_lag_seconds_bucket[$__rate_interval])))"
    full_gc = 'specmon_gc_pause_seconds_{}{{generation="2"}}[$__rate_interval]))'
    return [
        row("Scrape health"),
        up_timeline(
            "Target up",
            "Whether specmon's last scrape of each target succeeded.",
            query(selected_engines(f"specmon_up{{{T}}}"), "{{target}}"),
            size=(8, 8),
        ),
        trend(
            "Scrape results per second",
            "specmon's scrapes of each target by result (success, http_error, timeout, "
            "connection_error, too_large, parse_error, no_metrics).",
            query(
                selected_engines(
                    "sum by (target, result) "
                    f"(rate(specmon_scrapes_total{{{T}}}[$__rate_interval]))"
                ),
                "{{target}} {{result}}",
            ),
            unit="ops",
            per_interval=True,
            stacked=True,
            low=0,
            size=(8, 8),
        ),
        trend(
            "Scrape duration and staleness",
            "Solid: duration of specmon's last scrape. Dashed (right axis): seconds since "
            "the last successful scrape.",
            query(
                selected_engines(f"specmon_scrape_duration_seconds{{{T}}}"),
                "duration {{target}}",
            ),
            query(
                selected_engines(f"time() - specmon_last_success_timestamp_seconds{{{T}}}"),
                "since success {{target}}",
            ),
            unit="s",
            low=0,
            series=[dashed("since success .*"), right_axis("since success .*", "s")],
            size=(8, 8),
        ),
        trend(
            "Readings refused by validation",
            "Readings of each target's page that specmon refused, by reason, per interval: "
            "values no real engine publishes (NaN, negative or beyond 2^53, counts rising "
            "along the chain, more accepted than drafted, duplicated series, a counter "
            "going down alone, limits exceeded). The refused model's figures are missing "
            "meanwhile; a page that stays wrong is refused at every scrape. Which reason "
            "means what: docs/runbook.md#specmonreadingsrejected (SpecmonReadingsRejected). "
            "No data: nothing refused.",
            query(
                selected_engines(
                    "sum by (target, reason) (increase("
                    f"specmon_rejected_readings_total{{{T}}}[$__rate_interval]))"
                ),
                "{{target}} {{reason}}",
            ),
            per_interval=True,
            stacked=True,
            low=0,
            decimals=0,
            size=(12, 8),
        ),
        trend(
            "Requests refused by specmon's web server",
            "Requests and connections to specmon itself that its HTTP server refused, by "
            "reason, per interval and specmon instance: unauthorized (401: wrong or missing "
            "password), auth_busy (503: too many password checks waiting), header_timeout, "
            "too_many_connections, client_san (client certificate without an allowed "
            "name), lifecycle_disabled (POST /-/reload without --web.enable-lifecycle). A "
            "steady unauthorized rate with Prometheus's target up is someone else trying; "
            "with it down, Prometheus's password (docs/security.md).",
            query(
                "sum by (instance, reason) "
                "(increase(specmon_web_rejections_total[$__rate_interval]))",
                "{{instance}} {{reason}}",
            ),
            per_interval=True,
            stacked=True,
            low=0,
            decimals=0,
            size=(12, 8),
        ),
        trend(
            "specmon's event loop: lag and the cycle collector",
            "How late specmon's event loop wakes a 0.1 s timer (99th percentile and worst "
            "bucket over the interval), per specmon instance, and the mean pause of its "
            "full cycle collections (once a minute). Every scrape due while the loop is "
            "held waits; holds near the scrape timeout end scrapes as timeouts that are "
            "specmon's, not the targets' (SpecmonEventLoopStalled, "
            "docs/runbook.md#specmoneventloopstalled).",
            query(
                f"histogram_quantile(0.99, sum by (instance, le) {lag}",
                "lag p99 {{instance}}",
            ),
            query(
                f"histogram_quantile(1, sum by (instance, le) {lag}",
                "lag, worst bucket {{instance}}",
            ),
            query(
                f"sum by (instance) (rate({full_gc.format('sum')}"
                f" / sum by (instance) (rate({full_gc.format('count')}",
                "full collection {{instance}}",
            ),
            unit="s",
            low=0,
            series=[dashed("full collection .*")],
            size=(12, 8),
        ),
        headline(
            "Configured targets",
            "Targets in specmon's configuration.",
            query("sum(specmon_targets)", "targets"),
            size=(6, 4),
        ),
        headline(
            "Config reload",
            "Whether specmon's last configuration (re)load succeeded.",
            query("min(specmon_config_last_reload_successful)", "reload"),
            zones=((None, "red"), (1, "green")),
            words={"0": ("FAILED", "red"), "1": ("OK", "green")},
            size=(6, 4),
        ),
        headline(
            "Last config load",
            "Time since specmon last loaded its configuration successfully.",
            query(
                "time() - max(specmon_config_last_reload_success_timestamp_seconds)",
                "since load",
            ),
            unit="s",
            size=(6, 4),
        ),
        headline(
            "specmon version",
            "specmon instances being scraped, by version.",
            query("count by (version) (specmon_build_info)", "{{version}}"),
            size=(6, 4),
        ),
    ]


def overview() -> board.Dashboard:
    panels: list[Cell] = [
        *_verdict_panels(),
        _fleet_table(),
        row("Acceptance"),
        trend(
            "Margin (alpha - break-even)",
            "Effective alpha minus break-even alpha over the selected window. Below the "
            "zero line speculation costs time; between 0 and 0.05 it barely pays.",
            query(f"specmon_alpha_margin_ratio{{{TW}}}", "{{target}} {{model}}"),
            decimals=3,
            zones=MARGIN_STEPS,
            zone_style=cm.GraphThresholdsStyleMode.LINE_AND_AREA,
            size=(12, 8),
        ),
        trend(
            "Requests running",
            "Requests each engine is running now. Read it next to the margin: speculation's "
            "gain shrinks as batches fill (verification competes with other requests, so "
            "the real draft cost rises above the configured c), so a margin that dips "
            "whenever concurrency rises is load, not a worse draft.",
            query(
                f"max by (target, model) (specmon_requests_running{{{TE}}})",
                "{{target}} {{model}}",
            ),
            decimals=0,
            low=0,
            size=(12, 8),
        ),
        trend(
            "Alpha against break-even",
            "Solid: effective alpha over the selected window. Dashed: break-even alpha for "
            "the chain length and draft cost in use.",
            query(f"specmon_alpha_ratio{{{TW}}}", "alpha {{target}} {{model}}"),
            query(f"specmon_breakeven_alpha_ratio{{{TE}}}", "break-even {{target}} {{model}}"),
            decimals=3,
            low=0,
            high=1,
            series=[dashed("break-even .*")],
            size=(12, 8),
        ),
        trend(
            "Expected speed-up",
            "Solid: expected speed-up with the chain in use. Dashed: at the best chain "
            "length. Below 1 speculation is slower than plain decoding.",
            query(f"specmon_expected_speedup_ratio{{{TW}}}", "{{target}} {{model}}"),
            query(f"specmon_best_speedup_ratio{{{TW}}}", "best k' {{target}} {{model}}"),
            decimals=2,
            zones=SPEEDUP_STEPS,
            zone_style=LINE,
            series=[dashed("best k' .*")],
            size=(12, 8),
        ),
        trend(
            "Drafts per second",
            "Verification steps that carried a draft, per second: the traffic the "
            "acceptance numbers rest on. The alerts need 400 drafts per window.",
            query(
                f"sum by (target, model) (rate(specmon_drafts_total{{{TE}}}[$__rate_interval]))",
                "{{target}} {{model}}",
            ),
            unit="ops",
            low=0,
            size=(12, 8),
        ),
        trend(
            "Generated tokens per second",
            "Tokens each engine generated per second over the selected window, with or "
            "without drafts. Tokens without drafts per second beside them: the engine is "
            "busy but not speculating (SpecmonSpeculationMissing; llama.cpp without a draft "
            "model publishes its speculative counters at 0).",
            query(
                f"max by (target, model) (specmon_window_generated_tokens{{{TW}}})\n"
                f"/ max by (target, model) (specmon_window_seconds{{{TW}}} > 0)",
                "{{target}} {{model}}",
            ),
            unit="ops",
            low=0,
            size=(12, 8),
        ),
        trend(
            "Draft cost c: configured and measured",
            "c, the cost of one drafted token as a fraction of a target step, by source. "
            "Solid (configured): specmon's draft_cost for the target, which every verdict "
            "above uses. Dashed, engine: TensorRT-LLM's own draft overhead o turned into "
            "c = o / (k (1 - o)), only where a separate draft model is timed. Dashed, "
            "measured: against the target's baseline (its twin without speculation, or a "
            "profile) at the window's concurrency (docs/load-signals.md). A measured c well "
            "above the configured one means the break-even, margin and speed-up above are "
            "optimistic: set draft_cost from it.",
            query(
                f"max by (target, model, source, baseline) (specmon_draft_cost_ratio{{{TE}}})",
                "{{target}} {{model}} c {{source}} {{baseline}}",
            ),
            decimals=3,
            low=0,
            series=[dashed(".* c (engine|measured) .*")],
            size=(24, 7),
        ),
        *_overview_load_panels(),
        *_overview_health_panels(),
    ]
    return dashboard(
        OVERVIEW_UID,
        "specmon / Overview",
        "Is speculative decoding paying for itself on every target? Data: specmon.",
        [
            choice(
                "engine",
                "Engine",
                "label_values(specmon_speculation_enabled, engine)",
                several=True,
            ),
            choice("target", "Target", "label_values(specmon_up, target)", several=True),
            choice("window", "Window", "label_values(specmon_window_drafts, window)", default="5m"),
        ],
        panels,
        ("Target detail", TARGET_UID),
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


def _target_load_panels() -> list[Cell]:
    """Load and speed, and the verdict against the baseline (docs/load-signals.md)."""
    by_bucket = "max by (concurrency)"
    speedup = [decimals(2), unit("suffix:x"), *cells_coloured(REALIZED_STEPS, background=False)]
    return [
        row("Load: against the baseline"),
        trend(
            "Realized against expected speed-up",
            "Realized: the baseline's time per output token over this target's, in the "
            "concurrency bucket the target runs in now (measured: a twin without "
            "speculation, or a profile). Expected: the verdict at the configured draft cost, "
            "which ignores load. Below the line speculation costs time; realized below 0.95 "
            "for 30 minutes fires SpecmonSlowerThanBaseline. Empty realized: no baseline, or "
            "too little data at this load yet (200 engine steps and 100 drafts a side).",
            query(f"specmon_realized_speedup_ratio{{{MW}}}", "realized against {{baseline}}"),
            query(f"specmon_expected_speedup_ratio{{{MW}}}", "expected (configured c)"),
            decimals=2,
            zones=SPEEDUP_STEPS,
            zone_style=LINE,
            series=[dashed("expected .*")],
            size=(12, 8),
        ),
        bars_by_load_level(
            "Speed-up by concurrency",
            "Per concurrency bucket of the window (requests per engine step: 1 = below "
            "1.5, 2 = [1.5, 3), 4 = [3, 6), ...): the realized speed-up against the "
            "baseline, and the speed-up expected at the best chain length with the draft "
            "cost measured there. Where the bars fall below 1 speculation stops paying; "
            "a bucket with too little data on either side has no bar.",
            [
                (
                    "realized",
                    f"{by_bucket} (specmon_bucket_realized_speedup_ratio{{{MW}}})",
                ),
                (
                    "at the best k'",
                    f"{by_bucket} (specmon_bucket_best_speedup_ratio{{{MW}}})",
                ),
            ],
            size=(12, 8),
        ),
        trend(
            "Concurrency and the crossover",
            "Mean requests per engine step over the window (from the engine's counters), "
            "the requests running now, and, dashed, the concurrency at which speculation "
            "stops paying at the window's acceptance (interpolated between the load levels "
            "measured against the baseline; the lowest one measured when it paid at none; "
            "absent while it pays at all). Concurrency at or above it for 15 minutes fires "
            "SpecmonAboveCrossover.",
            query(f"specmon_concurrency{{{MW}}}", "concurrency (mean per step)"),
            query(
                f"max by (baseline) (specmon_crossover_concurrency{{{MW}}})",
                "crossover against {{baseline}}",
            ),
            query(f"specmon_requests_running{{{M}}}", "requests running now"),
            decimals=1,
            low=0,
            series=[dashed("crossover .*")],
            size=(8, 8),
        ),
        trend(
            "Time per output token: this target and its baseline",
            "Decode time per generated token over the window, from the engines' own "
            "counters: this target, and the twin it is compared with (same model, no "
            "speculation). The realized speed-up is their ratio, taken per concurrency "
            "bucket.",
            query(f"specmon_time_per_output_token_seconds{{{MW}}}", "{{target}}"),
            query(
                "max by (target) (\n"
                'specmon_time_per_output_token_seconds{model="$model", window="$window"}\n'
                f"and {TWIN}\n)",
                "baseline {{target}}",
            ),
            unit="s",
            low=0,
            series=[dashed("baseline .*")],
            size=(8, 8),
        ),
        trend(
            "Draft cost c: measured against configured",
            "c, one drafted token's cost as a fraction of a target step. Configured: "
            "specmon's draft_cost, which every verdict without a baseline uses. Measured: "
            "from the step times against the baseline, c = (T_step / T_step(baseline) - 1) "
            "/ drafted tokens per step, at the middle window's concurrency (dashed) and per "
            "concurrency bucket of the selected window (dotted). c grows with load: that is "
            "why speculation stops paying.",
            query(
                f"max by (source, baseline) (specmon_draft_cost_ratio{{{M}}})",
                "c {{source}} {{baseline}}",
            ),
            query(
                f"{by_bucket} (specmon_bucket_draft_cost_ratio{{{MW}}})",
                "c at {{concurrency}} requests per step",
            ),
            decimals=3,
            low=0,
            series=[dashed("^c (engine|measured) .*"), dotted("^c at .*")],
            size=(8, 8),
        ),
        per_bucket_table(
            "Best chain length per load level",
            "Per concurrency bucket of the window: the realized speed-up against the "
            "baseline, the draft cost c measured there, the chain length that maximises "
            "the expected speed-up at that c with the window's per-position survival "
            "(0 = switch speculation off at this load) and that speed-up. `specmon "
            "recommend --from` turns it into a vLLM num_speculative_tokens_per_batch_size "
            "schedule and a llama.cpp --spec-draft-n-max (docs/recommend.md).",
            [
                (name, f"{by_bucket} ({family}{{{MW}}})")
                for name, family in (
                    ("realized speed-up", "specmon_bucket_realized_speedup_ratio"),
                    ("measured c", "specmon_bucket_draft_cost_ratio"),
                    ("best k'", "specmon_bucket_best_chain_length"),
                    ("expected at best k'", "specmon_bucket_best_speedup_ratio"),
                )
            ],
            [
                column("realized speed-up", *speedup),
                column("expected at best k'", *speedup),
                column("measured c", decimals(3)),
                column("best k'", decimals(0)),
            ],
            size=(8, 8),
        ),
    ]


def target_detail() -> board.Dashboard:
    rate = "[$__rate_interval]))"
    panels: list[Cell] = [
        headline(
            "alpha",
            "Effective acceptance rate over the window: the alpha whose alpha + ... + "
            "alpha^k equals the mean accepted tokens per draft.",
            query(f"specmon_alpha_ratio{{{MW}}}", "alpha"),
            decimals=3,
            size=(3, 4),
        ),
        headline(
            "break-even",
            "The alpha at which S(alpha, k, c) = 1.",
            query(f"specmon_breakeven_alpha_ratio{{{M}}}", "break-even"),
            decimals=3,
            size=(3, 4),
        ),
        headline(
            "margin",
            "alpha - break-even. Red: speculation costs time; orange: within 0.05.",
            query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin"),
            decimals=3,
            zones=MARGIN_STEPS,
            size=(3, 4),
        ),
        headline(
            "expected speed-up",
            "(1 + accepted/drafts) / (1 + c * draft tokens/drafts) over the window.",
            query(f"specmon_expected_speedup_ratio{{{MW}}}", "speed-up"),
            unit="suffix:x",
            decimals=2,
            zones=SPEEDUP_STEPS,
            size=(3, 4),
        ),
        headline(
            "best speed-up",
            "Expected speed-up at the best chain length k'.",
            query(f"specmon_best_speedup_ratio{{{MW}}}", "best"),
            unit="suffix:x",
            decimals=2,
            zones=SPEEDUP_STEPS,
            size=(3, 4),
        ),
        headline(
            "k in use",
            "Chain length in use: configured, else the number of position series.",
            query(f"specmon_chain_length{{{M}}}", "k"),
            size=(3, 4),
        ),
        headline(
            "best k'",
            "Chain length that maximises the measured speed-up; 0 = speculation does not "
            "pay at any chain length.",
            query(f"specmon_best_chain_length{{{MW}}}", "k'"),
            size=(3, 4),
        ),
        headline(
            "drafts in window",
            "Sample size behind the numbers. Alerts need at least 400.",
            query(f"specmon_window_drafts{{{MW}}}", "drafts"),
            zones=((None, "orange"), (400, "green")),
            size=(3, 4),
        ),
        row("Per position"),
        trend(
            "Survival by position",
            "Share of drafts accepted at least this deep (per_pos / drafts). Where it "
            "falls below the draft cost c, drafting that position costs more than it "
            "earns.",
            query(f"specmon_position_survival_ratio{{{MW}}}", "position {{position}}"),
            unit="percentunit",
            low=0,
            high=1,
            size=(12, 8),
        ),
        trend(
            "Conditional acceptance by position",
            "Acceptance at a position given the previous one was accepted "
            "(per_pos[i] / per_pos[i-1]).",
            query(f"specmon_position_conditional_ratio{{{MW}}}", "position {{position}}"),
            unit="percentunit",
            low=0,
            high=1,
            size=(12, 8),
        ),
        chain_shape(
            "Survival by position, now",
            "Latest survival per position: the shape of the chain.",
            query(f"specmon_position_survival_ratio{{{MW}}}", "{{position}}", instant=True),
            size=(12, 7),
        ),
        chain_shape(
            "Conditional acceptance by position, now",
            "Latest conditional acceptance per position.",
            query(f"specmon_position_conditional_ratio{{{MW}}}", "{{position}}", instant=True),
            size=(12, 7),
        ),
        row("Speed-up and chain"),
        trend(
            "Mean acceptance length",
            "Tokens per verification step including the bonus token (1 + accepted / "
            "drafts). Solid: selected window; dashed: every other window.",
            query(f"specmon_mean_acceptance_length{{{MW}}}", "{{window}} (selected)"),
            query(f'specmon_mean_acceptance_length{{{M}, window!="$window"}}', "{{window}}"),
            decimals=2,
            low=1,
            series=[dashed("^[^(]*$")],
            size=(8, 8),
        ),
        trend(
            "Expected against best speed-up",
            "Expected speed-up with the chain in use against the speed-up at the best "
            "chain length. The gap is what a shorter chain would gain.",
            query(f"specmon_expected_speedup_ratio{{{MW}}}", "expected (k in use)"),
            query(f"specmon_best_speedup_ratio{{{MW}}}", "best (k')"),
            decimals=2,
            zones=SPEEDUP_STEPS,
            zone_style=LINE,
            series=[dashed("best .*")],
            size=(8, 8),
        ),
        trend(
            "Chain length and draft cost",
            "k in use and the best k' (left axis); draft cost c, the cost of one drafted "
            "token as a fraction of a target step (right axis). c configured: specmon's "
            "draft_cost for the target, which decides break-even, margin and speed-up. "
            "Dashed, checks on it: c measured by the engine (TensorRT-LLM with a separate "
            "draft model only: its draft overhead o as c = o / (k (1 - o))), and c "
            "measured against the named baseline at the window's concurrency "
            "(docs/load-signals.md).",
            query(f"specmon_chain_length{{{M}}}", "k in use"),
            query(f"specmon_best_chain_length{{{MW}}}", "best k'"),
            query(
                f"max by (source, baseline) (specmon_draft_cost_ratio{{{M}}})",
                "c {{source}} {{baseline}}",
            ),
            decimals=2,
            low=0,
            series=[
                dashed("best k'"),
                dashed("^c (engine|measured)"),
                right_axis("^c .*", "none"),
                shown_as("^c configured", "c configured (used for the verdicts)"),
                shown_as("^c engine", "c measured by the engine"),
            ],
            size=(8, 8),
        ),
        *_target_load_panels(),
        row("Acceptance and traffic"),
        trend(
            "Alpha against break-even",
            "Effective alpha and the draft acceptance ratio (accepted / drafted tokens) "
            "over the window; dashed: break-even alpha. Zero line: the margin.",
            query(f"specmon_alpha_ratio{{{MW}}}", "alpha"),
            query(f"specmon_draft_acceptance_ratio{{{MW}}}", "accepted / drafted"),
            query(f"specmon_breakeven_alpha_ratio{{{M}}}", "break-even"),
            query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin"),
            decimals=3,
            zones=ZERO_LINE,
            zone_style=LINE,
            series=[dashed("break-even")],
            size=(12, 8),
        ),
        trend(
            "Margin and requests running",
            "Margin over the window (left; below the zero line speculation costs time) "
            "against the requests the engine runs (right). Speculation's gain shrinks as "
            "batches fill: a margin that falls whenever concurrency rises points at load "
            "(the configured c is then too optimistic), not at the draft.",
            query(f"specmon_alpha_margin_ratio{{{MW}}}", "margin"),
            query(f"specmon_requests_running{{{M}}}", "requests running"),
            decimals=3,
            zones=ZERO_LINE,
            zone_style=LINE,
            series=[
                right_axis("requests running", "none"),
                column("requests running", decimals(0)),
            ],
            size=(12, 8),
        ),
        trend(
            "Drafts and tokens per second",
            "Drafts (verification steps with a draft), drafted tokens and accepted tokens "
            "per second, as counted by specmon; dashed: every token the engine generated "
            "per second over the window, drafted or not. Generated tokens without drafts: "
            "the engine is busy but not speculating.",
            query(f"sum(rate(specmon_drafts_total{{{M}}}{rate}", "drafts"),
            query(f"sum(rate(specmon_draft_tokens_total{{{M}}}{rate}", "draft tokens"),
            query(f"sum(rate(specmon_accepted_tokens_total{{{M}}}{rate}", "accepted tokens"),
            query(
                f"max by (window) (specmon_window_generated_tokens{{{MW}}})\n"
                f"/ max by (window) (specmon_window_seconds{{{MW}}} > 0)",
                "generated tokens ({{window}})",
            ),
            unit="ops",
            low=0,
            series=[dashed("generated tokens .*")],
            size=(12, 8),
        ),
        trend(
            "Window sample size",
            "Drafts counted in the window (left) and the seconds of data it covers "
            "(right; less than the window while it fills after a start or a reset).",
            query(f"specmon_window_drafts{{{MW}}}", "drafts"),
            query(f"specmon_window_seconds{{{MW}}}", "seconds covered"),
            low=0,
            series=[right_axis("seconds covered", "s")],
            size=(12, 8),
        ),
        trend(
            "Engine restarts",
            "Counter resets specmon detected (engine restarts): the windows start again.",
            query(f"sum(increase(specmon_engine_resets_total{{{M}}}{rate}", "restarts"),
            per_interval=True,
            low=0,
            decimals=0,
            size=(24, 6),
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
            choice("target", "Target", "label_values(specmon_chain_length, target)"),
            choice("model", "Model", 'label_values(specmon_chain_length{target="$target"}, model)'),
            choice(
                "window",
                "Window",
                'label_values(specmon_window_drafts{target="$target", model="$model"}, window)',
                default="5m",
            ),
        ],
        panels,
        ("Overview", OVERVIEW_UID),
    )


# --------------------------------------------------------------------------- output

#: file name -> builder
DASHBOARDS: dict[str, Callable[[], board.Dashboard]] = {
    "specmon-overview.json": overview,
    "specmon-target.json": target_detail,
}


def render(dashboard: board.Dashboard) -> str:
    """The dashboard's JSON: panels numbered 1, 2, ... in order, and no database id (`null`,
    which the SDK cannot write), so that it can be provisioned or imported as it is."""
    built = dashboard.build()
    for number, panel in enumerate(built.panels or [], start=1):
        panel.id_val = number
    data: dict[str, Any] = json.loads(json.dumps(built, cls=JSONEncoder))
    return json.dumps({"id": None, **data}, indent=2, ensure_ascii=False) + "\n"


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
