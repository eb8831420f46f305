"""How a panel of each kind is built for specmon's dashboards (grafana/build_dashboards.py),
with Grafana Labs' typed builders (`grafana-foundation-sdk`, the Grafana 10.4 line): a figure's
scale, a query on the `datasource` variable, the kinds of panel by what they show (a trend, a
headline, the chain's shape, up and down, a table of figures), their overrides, annotations
from a query, template variables. What the dashboards show, and their layout, are
build_dashboards.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from grafana_foundation_sdk.builders import (
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
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat, QueryEditorMode

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
Steps = tuple[tuple[float | None, str], ...]
Prop = dm.DynamicConfigValue
#: How some fields or series differ from the panel's defaults: which ones, and what changes.
Override = tuple[dm.MatcherConfig, list[Prop]]
Graph = timeseries.Panel | statetimeline.Panel
Panel = Graph | stat.Panel | bargauge.Panel | table.Panel
Query = prometheus.Dataquery
Words = dict[str, tuple[str, str]]
Figures = Sequence[tuple[str, str]]
Drawn = Literal["lines", "bars", "stacked bars"]
Variable = board.QueryVariable
Link = tuple[str, str]
Keys = dict[str, int]


class Size(NamedTuple):
    """Width and height in grid units (24 columns) of the panels after it, left to right."""

    width: int
    height: int


#: A panel, a row starting a section, or the size of the panels that follow.
Cell = Panel | board.Row | Size
M_ = TypeVar("M_")
PALETTE, BY_ZONE = dm.FieldColorModeId.PALETTE_CLASSIC, dm.FieldColorModeId.THRESHOLDS
GT = cm.GraphThresholdsStyleMode


@dataclass(frozen=True)
class Scale:
    """How a panel's figures read: unit, decimals, value range and colour zones (on a graph,
    drawn as ``zones_as``); zones left out: the panel kind's single colour."""

    unit: str = "none"
    decimals: int | None = None
    low: float | None = None
    high: float | None = None
    zones: Steps | None = None
    zones_as: cm.GraphThresholdsStyleMode = GT.OFF


PLAIN = Scale()


class Fixed(Builder[M_], Generic[M_]):
    """A model the SDK has no builder call for, handed to a call that takes a builder."""

    def __init__(self, model: M_) -> None:
        self.model = model

    def build(self) -> M_:
        return self.model


# --------------------------------------------------------------------------- building blocks


def query(expr: str, legend: str = "__auto", *, instant: bool = False, rows: bool = False) -> Query:
    """A PromQL query on `datasource`; ``rows``: an instant table query."""
    q = prometheus.Dataquery().datasource(DS).editor_mode(QueryEditorMode.CODE).expr(expr)
    q.format(PromQueryFormat.TABLE if rows else PromQueryFormat.TIME_SERIES)
    return (q.instant() if instant or rows else q.range()).legend_format(legend)


def thresholds(steps: Steps) -> dm.ThresholdsConfig:
    levels = [dm.Threshold(value=value, color=color) for value, color in steps]
    return dm.ThresholdsConfig(mode=dm.ThresholdsMode.ABSOLUTE, steps=levels)


def value_texts(texts: Words) -> list[dm.ValueMapping]:
    """Values shown as words: value -> (text, colour)."""
    items = enumerate(texts.items())
    return [dm.ValueMap({v: dm.ValueMappingResult(t, c, index=i) for i, (v, (t, c)) in items})]


UP = value_texts({"0": ("DOWN", "red"), "1": ("UP", "green")})
UP_DOWN: Steps = ((None, "red"), (1, "green"))
#: The labels of specmon_verdict_info a panel shows beside the verdict.
LABELS = "basis, state"


@dataclass
class Titled:
    """A panel of some kind with its title, scale and overrides, waiting for what it shows:
    ``kind(title, ...).showing(description, *queries)``. ``zones``: the kind's colour zones
    where the scale gives none; ``queries``: the kind's own, before those ``showing`` adds."""

    panel: Panel
    title: str
    scale: Scale = PLAIN
    colours: dm.FieldColorModeId = BY_ZONE
    zones: Steps = ((None, "green"),)
    overrides: Sequence[Override] = ()
    queries: Sequence[Query] = ()

    def showing(self, description: str, *queries: Query) -> Panel:
        """The panel, described, its queries (refs A, B, ... in order) on `datasource`."""
        panel, scale = self.panel, self.scale
        refs = [q.ref_id(chr(ord("A") + i)) for i, q in enumerate([*self.queries, *queries])]
        panel.title(self.title).description(description).datasource(DS).targets(list(refs))
        panel.unit(scale.unit).color_scheme(board.FieldColor().mode(self.colours))
        panel.thresholds(Fixed(thresholds(scale.zones or self.zones))).overrides([])
        if scale.decimals is not None:
            panel.decimals(scale.decimals)
        if scale.low is not None:
            panel.min(scale.low)
        if scale.high is not None:
            panel.max(scale.high)
        for matcher, props in self.overrides:
            panel.with_override(matcher, props)
        return panel


def legend(*, show: bool = True) -> common.VizLegendOptions:
    mode, bottom = cm.LegendDisplayMode.LIST, cm.LegendPlacement.BOTTOM
    return common.VizLegendOptions().display_mode(mode).placement(bottom).show_legend(show)


# Tooltips listing every series or the one under the pointer; a series' last value.
ALL_SERIES = common.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.NONE)
ONE_SERIES = common.VizTooltipOptions().mode(cm.TooltipDisplayMode.SINGLE).sort(cm.SortOrder.NONE)
LAST_VALUE = common.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


# Overrides: series by their name (a regular expression), table columns by their name.


def matching(name: str, *props: Prop) -> Override:
    return dm.MatcherConfig(id_val="byRegexp", options=name), list(props)


def dashed(name: str, style: str = "dash", dash: tuple[int, int] = (10, 10)) -> Override:
    line = cm.LineStyle(fill=style, dash=list(dash))  # type: ignore[arg-type]
    return matching(name, Prop("custom.lineStyle", line), Prop("custom.lineWidth", 2))


def right_axis(name: str, unit: str) -> Override:
    return matching(name, Prop("custom.axisPlacement", cm.AxisPlacement.RIGHT), Prop("unit", unit))


def column(name: str, *props: Prop) -> Override:
    return dm.MatcherConfig(id_val="byName", options=name), list(props)


#: Column settings: decimals(n), unit(name).
decimals, unit = partial(Prop, "decimals"), partial(Prop, "unit")


def cells_coloured(steps: Steps, *, background: bool = True) -> list[Prop]:
    """The cell coloured by ``steps`` (its background, or its text)."""
    cell = cm.TableColoredBackgroundCellOptions() if background else cm.TableColorTextCellOptions()
    colour = Prop("color", dm.FieldColor(mode=BY_ZONE))
    return [Prop("thresholds", thresholds(steps)), colour, Prop("custom.cellOptions", cell)]


def speedup_cells(steps: Steps, *, background: bool = True) -> list[Prop]:
    """A speed-up column: `x`, 2 decimals, coloured by ``steps``."""
    return [decimals(2), unit("suffix:x"), *cells_coloured(steps, background=background)]


# Panels, by what they show.


def trend(title: str, scale: Scale = PLAIN, *series: Override, drawn: Drawn = "lines") -> Titled:
    """Figures over time, one line per series (``drawn`` as bars: one per interval; stacked:
    series on top of each other); ``series``: how named series differ (dashed, right axis...)."""
    bars = drawn != "lines"
    panel = timeseries.Panel().axis_placement(cm.AxisPlacement.AUTO)
    panel.draw_style(cm.GraphDrawStyle.BARS if bars else cm.GraphDrawStyle.LINE)
    panel.fill_opacity(80 if bars else 0).line_width(1).point_size(4)
    panel.show_points(cm.VisibilityMode.NEVER).span_nulls(False)
    stacking = cm.StackingMode.NORMAL if drawn == "stacked bars" else cm.StackingMode.NONE
    panel.stacking(common.StackingConfig().group("A").mode(stacking))
    panel.thresholds_style(common.GraphThresholdsStyleConfig().mode(scale.zones_as))
    panel.legend(legend().calcs([])).tooltip(ALL_SERIES)
    return Titled(panel, title, scale, PALETTE, overrides=series)


def headline(
    title: str, scale: Scale = PLAIN, words: Words | None = None, *, named: bool = False
) -> Titled:
    """One number now, coloured by the scale's zones (else blue), its recent course behind it;
    ``words``: values shown as text (value -> (text, colour)); ``named``: the series' name
    beside the number even when there is one series (a basis, say)."""
    panel = stat.Panel().mappings(value_texts(words) if words else [])
    panel.color_mode(cm.BigValueColorMode.VALUE).graph_mode(cm.BigValueGraphMode.AREA)
    panel.justify_mode(cm.BigValueJustifyMode.AUTO).orientation(cm.VizOrientation.AUTO)
    mode = cm.BigValueTextMode.VALUE_AND_NAME if named else cm.BigValueTextMode.AUTO
    panel.reduce_options(LAST_VALUE).text_mode(mode)
    return Titled(panel, title, scale, zones=((None, "blue"),))


def chain_shape(title: str) -> Titled:
    """One bar per position of the chain, 0..1: where the chain stops paying."""
    panel = bargauge.Panel().display_mode(cm.BarGaugeDisplayMode.GRADIENT).show_unfilled(True)
    panel.orientation(cm.VizOrientation.VERTICAL).reduce_options(LAST_VALUE)
    panel.value_mode(cm.BarGaugeValueMode.COLOR)
    colours = dm.FieldColorModeId.CONTINUOUS_RD_YL_GR
    return Titled(panel, title, Scale("percentunit", 3, 0, 1), colours)


def up_timeline(title: str) -> Titled:
    """UP or DOWN over time, one band per target."""
    panel = statetimeline.Panel().mappings(UP).fill_opacity(80).line_width(0)
    panel.align_value(cm.TimelineValueAlignment.LEFT).legend(legend(show=False))
    panel.merge_values(True).row_height(0.9).show_value(cm.VisibilityMode.NEVER)
    panel.tooltip(ONE_SERIES)
    return Titled(panel, title, Scale(zones=UP_DOWN))


def transform(kind: str, options: dict[str, Any]) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val=kind, options=options)


def _merged(panel: table.Panel, figures: Figures, first: Keys) -> list[Query]:
    """Instant queries, one per figure (name, expr), merged into rows keyed by the ``first``
    columns (name -> position), one column per figure, named, Time hidden. A figure named
    ``LABELS`` adds its series' labels as columns (basis, state), not its value."""
    columns = [c for name, _ in figures for c in (LABELS.split(", ") if name == LABELS else [name])]
    values = {f"Value #{chr(ord('A') + i)}": name for i, (name, _) in enumerate(figures)}
    organize: dict[str, dict[str, Any]] = {
        "excludeByName": {"Time": True, **{v: True for v, n in values.items() if n == LABELS}},
        "indexByName": {**first, **{name: len(first) + i for i, name in enumerate(columns)}},
        "renameByName": {v: n for v, n in values.items() if n != LABELS},
    }
    merge = [transform("merge", {})]
    if "concurrency" in first:  # bucket series: the label is a string ("16" before "2")
        organize["renameByName"]["concurrency"] = "concurrency (requests per step)"
        as_number = {"targetField": "concurrency", "destinationType": "number"}
        merge.append(transform("convertFieldType", {"conversions": [as_number], "fields": {}}))
        merge.append(transform("sortBy", {"fields": {}, "sort": [{"field": "concurrency"}]}))
    panel.transformations([*merge, transform("organize", organize)])
    return [query(expr, rows=True) for _, expr in figures]


def figure_table(
    title: str, figures: Figures, *columns: Override, sort_by: str = "", keys: Keys | None = None
) -> Titled:
    """One row per target and model (``sort_by`` given: filterable, sorted by it ascending),
    else per concurrency bucket sorted by its number (``keys``: the label columns that key
    the rows instead); one column per figure (name, query)."""
    panel = table.Panel().align(cm.FieldTextAlignment.AUTO).cell_options(cm.TableAutoCellOptions())
    no_footer = common.TableFooterOptions().show(False).reducer(["sum"]).count_rows(False)
    panel.cell_height(cm.TableCellHeight.SM).footer(no_footer).show_header(True)
    if sort_by:
        panel.filterable(True)
        panel.sort_by([common.TableSortByFieldState().display_name(sort_by).desc(False)])
    if keys is None:
        keys = {"target": 0, "model": 1} if sort_by else {"concurrency": 0}
    return Titled(panel, title, overrides=columns, queries=_merged(panel, figures, keys))


class Annotation(dm.AnnotationQuery):
    """Annotations from a query. The options Grafana's Prometheus data source reads beside
    `expr` (step, title, text, tags) are not in the 10.4 schema: added here. ``at_value``: the
    series' value is the time to place it at (useValueForTime)."""

    def __init__(self, name: str, colour: str, expr: str, words: Link, tag: str, *,
                 at_value: bool) -> None:  # fmt: skip
        super().__init__(name, DS, icon_color=colour, hide=None, built_in=None)
        self.expr, self.words, self.tag, self.at_value = expr, words, tag, at_value

    def to_json(self) -> dict[str, object]:
        text, title = self.words
        options = {"step": "1m", "tagKeys": self.tag, "textFormat": text, "titleFormat": title}
        return super().to_json() | options | {"useValueForTime": self.at_value}


def choice(name: str, values_of: str, *, several: bool = False, default: str = "") -> Variable:
    """A template variable (labelled with its name) listing ``label_values(...)``; ``several``:
    any number, all by default."""
    var = board.QueryVariable(name).label(name.capitalize()).datasource(DS).query(values_of)
    var.refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
    var.multi(several).include_all(several).hide(dm.VariableHide.DONT_HIDE).options([]).regex("")
    if several:
        var.all_value(".+").current(dm.VariableOption(True, "All", "$__all"))
    if default:
        var.current(dm.VariableOption(True, default, default))
    return var


def row(title: str) -> board.Row:
    return board.Row(title).collapsed(False)
