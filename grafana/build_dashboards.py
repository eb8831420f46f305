#!/usr/bin/env python3
"""Write specmon's Grafana dashboards: grafana/dashboards/*.json.

The JSON files are committed; this script is their source. After editing it, run

    python grafana/build_dashboards.py          # rewrite the JSON files
    python grafana/build_dashboards.py --check  # exit 1 if a committed file is out of date

(tests/dashboards/test_dashboards.py runs the check.) The panels are written with Grafana
Labs' typed builders, `grafana-foundation-sdk` on the Grafana 10.4 line (the `dashboards`
extra: `pip install -e '.[dashboards]'`), so a misspelt option fails here, not in Grafana.
This file holds what is specmon's: the panels, their queries and their layout; the building
blocks it writes them with (grafana/panels.py) say what a panel is for.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as board
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

# The panels' building blocks live beside this file (grafana/panels.py).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from panels import (
    GT,
    LABELS,
    PLAIN,
    UP,
    UP_DOWN,
    Annotation,
    Cell,
    Fixed,
    Link,
    Prop,
    Query,
    Scale,
    Size,
    Steps,
    Variable,
    Words,
    cells_coloured,
    chain_shape,
    choice,
    column,
    dashed,
    decimals,
    figure_table,
    headline,
    query,
    right_axis,
    row,
    speedup_cells,
    trend,
    unit,
    up_timeline,
    value_texts,
)

__all__ = ["DASHBOARDS", "SCHEMA_VERSION", "build", "main", "render"]

#: What the SDK's 10.4 line writes: Grafana 10.4 is the oldest release these dashboards support.
SCHEMA_VERSION = dm.Dashboard().schema_version
OVERVIEW_UID, TARGET_UID = "specmon-overview", "specmon-target"
OUT_DIR = Path(__file__).resolve().parent / "dashboards"


# Colour zones. Margin: red below break-even, orange within the thin band (SpecmonMarginThin).
MARGIN_STEPS: Steps = ((None, "red"), (0, "orange"), (0.05, "green"))
SPEEDUP_STEPS: Steps = ((None, "red"), (1, "green"))
#: Realized speed-up colours: red where speculation costs time beyond the noise
#: (SpecmonSlowerThanBaseline), orange where it does not pay, green where it does.
REALIZED_STEPS: Steps = ((None, "red"), (0.95, "orange"), (1, "green"))

# Kinds of figure, by how they read.
#: A speed-up: `x`, red below 1 where speculation costs time.
SPEEDUP = Scale("suffix:x", 2, zones=SPEEDUP_STEPS)
#: Speed-ups over time against the break-even line at 1.
SPEEDUP_LINES = Scale(decimals=2, zones=SPEEDUP_STEPS, zones_as=GT.LINE)
#: A margin (alpha - break-even): red below 0, orange within 0.05; over time, as areas.
MARGIN = Scale(decimals=3, zones=MARGIN_STEPS)
MARGIN_AREA = Scale(decimals=3, zones=MARGIN_STEPS, zones_as=GT.LINE_AND_AREA)
#: Figures over time against the zero line of the margin.
ZERO_LINE = Scale(decimals=3, zones=((None, "red"), (0, "transparent")), zones_as=GT.LINE)
RATIO, RATIO_0_1, COST = (
    Scale(decimals=3),
    Scale(decimals=3, low=0, high=1),
    Scale(decimals=3, low=0),
)
SHARE = Scale("percentunit", low=0, high=1)
COUNT, CONCURRENCY = Scale(decimals=0, low=0), Scale(decimals=1, low=0)
PER_SECOND, SECONDS = Scale("ops", low=0), Scale("s", low=0)


#: What a figure of the answer reads while its window measures a new load (state="measuring":
#: no figure, never a guess in its place): outside every figure's range (speed-ups > 0,
#: margins >= -1, k, c >= 0), shown as the word. Only in panels that show one value now
#: (stat, table): a chart keeps the gap.
MEASURING_VALUE = -2
MEASURING: Words = {str(MEASURING_VALUE): ("measuring", "blue")}


# --------------------------------------------------------------------------- dashboards

ALERT_ANNOTATION_EXPR = 'ALERTS{alertname=~"Specmon.+", alertstate="firing", target=~"$target"}'
CHANGE_ANNOTATION_EXPR = 'specmon_config_change_timestamp_seconds{target=~"$target"} * 1000'


#: specmon's firing alerts; each configuration change specmon detected or an operator marked
#: (speculation on or off, a new chain length, ``specmon mark``), when it was first seen.
ANNOTATIONS = (
    Annotation("specmon alerts", "red", ALERT_ANNOTATION_EXPR,
               ("{{severity}}: {{target}} {{model}}", "{{alertname}}"), "severity",
               at_value=False),
    Annotation("configuration changes", "purple", CHANGE_ANNOTATION_EXPR,
               ("{{target}} {{model}}: a new configuration epoch", "configuration change"),
               "target", at_value=True),
)  # fmt: skip


def dashboard(
    uid: str, title: str, about: str, variables: list[Variable], link: Link, cells: list[Cell]
) -> board.Dashboard:
    """Panels placed left to right in rows of 24 columns, each the size last given before it;
    a link to the other dashboard."""
    built_in = board.AnnotationQuery().name("Annotations & Alerts").built_in(1).enable(True)
    built_in.datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --")).hide(True)
    built_in.icon_color("rgba(0, 211, 255, 1)").type("dashboard")
    sources = board.DatasourceVariable("datasource").label("Data source").type("prometheus")
    sources.regex("").hide(dm.VariableHide.DONT_HIDE).multi(False).include_all(False)
    out = board.Dashboard(title).uid(uid).description(about).editable().version(1)
    out.annotations([built_in, *map(Fixed, ANNOTATIONS)]).fiscal_year_start_month(0)
    out.tooltip(dm.DashboardCursorSync.CROSSHAIR).refresh("30s").time("now-6h", "now")
    out.tags(["specmon", "speculative-decoding"]).variables([sources, *variables])
    out.timezone("").week_start("")
    other = board.DashboardLink(link[0]).type(dm.DashboardLinkType.LINK).icon("dashboard")
    out.link(other.url(f"/d/{link[1]}/{link[1]}").keep_time(True).tags([]))
    size = Size(24, 8)
    for cell in cells:
        if isinstance(cell, Size):
            size = cell
        elif isinstance(cell, board.Row):
            out.with_row(cell)
        else:
            out.with_panel(cell.span(size.width).height(size.height))
    return out


# --------------------------------------------------------------------------- overview

T = 'target=~"$target"'
#: Series with an `engine` label are filtered by the engine variable directly.
TE = 'target=~"$target", engine=~"$engine"'
TW = 'target=~"$target", engine=~"$engine", window="$window"'
MX, TM = "max by (target, model)", "{{target}} {{model}}"
#: Targets seen in the last day with an engine outside the selection. Series without an
#: `engine` label (up, scrapes, refusals) drop them with `unless on (target)`; a target never
#: read (so of no known engine) stays under every selection, where it needs attention.
OTHER_ENGINES = (
    'last_over_time(specmon_speculation_enabled{target=~"$target", engine!~"$engine"}[1d])'
)
DRAFTS = f"sum by (target, model) (rate(specmon_drafts_total{{{TE}}}[$__rate_interval]))"
#: Targets compared with a baseline, as a filter: a twin (specmon_baseline_info names it, from
#: the configuration), or a verdict on a comparison basis (a profile, the server's own past),
#: measuring included.
WITH_BASELINE = (
    f"on (target) (\n  specmon_baseline_info{{{T}}}\n"
    f'  or specmon_verdict_info{{{TW}, basis=~"twin|canary|profile|history"}}\n)'
)
#: The crossover SpecmonAboveCrossover compares: the low end of its 95 % range, else the point.
CROSSOVER_LOW = (
    f"(specmon_crossover_lower_concurrency{{{TW}}} or specmon_crossover_concurrency{{{TW}}})"
)
ABOVE_CROSSOVER = {"0": ("below", "green"), "1": ("AT OR ABOVE", "red")}
TARGET_LINK = (
    f"/d/{TARGET_UID}/specmon-target?var-datasource=${{datasource}}"
    "&var-target=${__data.fields.target}&var-model=${__data.fields.model}"
    "&var-window=${window}&${__url_time_range}"
)


def selected_engines(expr: str) -> str:
    """``expr`` (per target, no engine label) for the targets of the selected engines."""
    return f"(\n{expr}\n)\nunless on (target)\n{OTHER_ENGINES}"


def engines_query(expr: str, legend: str) -> Query:
    return query(selected_engines(expr), legend)


def measuring_or(figure: str, where: str) -> str:
    """``figure`` (per target and model), or MEASURING_VALUE where the window ``where``
    selects measures a new load."""
    info = f'specmon_verdict_info{{{where}, state="measuring"}}'
    return f"(\n  {figure}\n  or {MEASURING_VALUE} * max by (target, model) ({info})\n)"


def on_basis(family: str, where: str, legend: str, *, now: bool = False) -> Query:
    """``family`` per target and model in the window ``where`` selects, labelled with the
    verdict's basis; ``now``: an instant query, labelled with the state too, that reads
    "measuring" while the window measures a new load (a chart keeps the gap)."""
    labels = LABELS if now else "basis"
    value = f"max by (target, model) ({family}{{{where}}})"
    expr = (
        f"{measuring_or(value, where) if now else value}\n"
        f"* on (target, model) group_left ({labels})\n"
        f"max by (target, model, {labels}) (specmon_verdict_info{{{where}}})"
    )
    return query(expr, legend, instant=now)


#: What the verdict rests on and how it was read, in the words of specmon_verdict_info.
BASES = (
    "basis, best first: twin (realized against the baseline twin at the current load), "
    "profile (against a cost profile), history (against this server's own epoch without "
    "speculation at the same load), engine (the engine's measured draft cost: TensorRT-LLM), "
    "configured (specmon's draft_cost), default (no draft_cost: 0.1); state: measured (this "
    "load's bucket), interpolated (off the cost curve, in a bucket its hour measured), "
    "measuring (a load nothing has measured yet: no figure, never a guess in its place), "
    "modelled (the engine's c), guess (configured or default c, for a target where nothing "
    "was measured)"
)
#: Every figure of the verdict's row is at the verdict's own draft cost c.
AT_ITS_C = (
    "Break-even, margin, c and best k' are the verdict's, at its own draft cost c (measured "
    "on twin, profile, history and engine; the guess on configured and default)."
)

# Every query yields the labels (target, model) so the "merge" transformation joins them into
# one row per target and model. specmon_up has only `target`: it is spread over the models the
# target had in the last day, and a target never seen with a model keeps an empty model cell.
# The max by () on both sides keeps the join one-to-many when two specmon replicas (different
# instance labels) watch the same target.
FLEET = [
    (
        "up",
        selected_engines(
            "max by (target, model) (\n"
            f"  max by (target) (specmon_up{{{T}}})\n"
            "  + on (target) group_right ()\n"
            f"  (0 * max by (target, model) (last_over_time(specmon_chain_length{{{TE}}}[1d])))\n"
            ")\n"
            "or on (target)\n"
            f"max by (target) (specmon_up{{{T}}})"
        ),
    ),
    ("verdict", measuring_or(f"{MX} (specmon_verdict_speedup_ratio{{{TW}}})", TW)),
    (LABELS, f"max by (target, model, {LABELS}) (specmon_verdict_info{{{TW}}})"),
    ("margin", f"{MX} (specmon_verdict_alpha_margin_ratio{{{TW}}})"),
    ("break-even", f"{MX} (specmon_verdict_breakeven_alpha_ratio{{{TW}}})"),
    ("c", f"{MX} (specmon_verdict_draft_cost_ratio{{{TW}}})"),
    ("best k'", f"{MX} (specmon_best_chain_length{{{TW}}})"),
    ("k in use", f"{MX} (specmon_chain_length{{{TE}}})"),
    ("alpha", f"{MX} (specmon_alpha_ratio{{{TW}}})"),
    ("drafts/s", DRAFTS),
    ("requests running", f"{MX} (specmon_requests_running{{{TE}}})"),
]
#: Targets compared with a baseline: how their speculation does at the load they run.
AGAINST_BASELINE = [
    (
        "verdict",
        measuring_or(f"{MX} (specmon_verdict_speedup_ratio{{{TW}}} and {WITH_BASELINE})", TW),
    ),
    (
        LABELS,
        f"max by (target, model, {LABELS}) (specmon_verdict_info{{{TW}}} and {WITH_BASELINE})",
    ),
    ("concurrency", f"{MX} (specmon_concurrency{{{TW}}} and {WITH_BASELINE})"),
    ("crossover", f"{MX} (specmon_crossover_concurrency{{{TW}}})"),
    ("95 % low", f"{MX} (specmon_crossover_lower_concurrency{{{TW}}})"),
    ("95 % high", f"{MX} (specmon_crossover_upper_concurrency{{{TW}}})"),
    (
        "above crossover",
        f"{MX} (\n  {CROSSOVER_LOW}\n  <= bool ignoring (baseline) group_left ()\n"
        f"  (1.05 * specmon_concurrency{{{TW}}})\n)",
    ),
    ("c", f"{MX} (specmon_verdict_draft_cost_ratio{{{TW}}} and {WITH_BASELINE})"),
]
VERDICT_CELLS = (Prop("mappings", value_texts(MEASURING)), *speedup_cells(REALIZED_STEPS))


def overview() -> board.Dashboard:
    lag = "(rate(specmon_event_loop_lag_seconds_bucket[$__rate_interval])))"
    full_gc = 'specmon_gc_pause_seconds_{}{{generation="2"}}[$__rate_interval]))'
    scrapes = f"sum by (target, result) (rate(specmon_scrapes_total{{{T}}}[$__rate_interval]))"
    refused = f"specmon_rejected_readings_total{{{T}}}[$__rate_interval]))"
    staleness = (dashed("since success .*"), right_axis("since success .*", "s"))
    target_link = Prop("links", [dm.DashboardLink(title="Target detail", url=TARGET_LINK)])
    named = "{{target}} {{model}} ({{basis}}, {{state}})"
    cells: list[Cell] = [
        # The headline: per target, the speed-up specmon believes now and what it rests on.
        Size(16, 5),
        headline("Verdict: speed-up on the best evidence", SPEEDUP, MEASURING).showing(
            "Per target and model, over the selected window, now: the speed-up over no "
            "speculation specmon believes (red below 1: speculation costs throughput), and in "
            f"brackets what it rests on and how it was read: {BASES}.",
            on_basis("specmon_verdict_speedup_ratio", TW, named, now=True),
        ),
        Size(8, 5),
        headline("Verdict: margin on the best evidence", MARGIN, MEASURING).showing(
            "Alpha minus the break-even alpha at the verdict's own c (in brackets its basis and "
            "state). Red: below break-even, speculation costs time; orange: within 0.05.",
            on_basis("specmon_verdict_alpha_margin_ratio", TW, named, now=True),
        ),
        Size(24, 9),
        figure_table(
            "Targets: the verdict, its figures at its own c, and the acceptance",
            FLEET,
            column(
                "up",
                Prop("mappings", UP),
                Prop("custom.cellOptions", cm.TableColoredBackgroundCellOptions()),
            ),
            column("verdict", *VERDICT_CELLS),
            column("margin", decimals(3), *cells_coloured(MARGIN_STEPS)),
            column("break-even", decimals(3)),
            column("c", decimals(3)),
            column("best k'", decimals(0)),
            column("alpha", decimals(3)),
            column("drafts/s", decimals(1), unit("ops")),
            column("requests running", decimals(0)),
            column("target", target_link),
            sort_by="verdict",
        ).showing(
            "One row per target and model, over the selected window. verdict: the speed-up "
            "specmon believes now (red below 0.95, orange below 1; 'measuring' while the window "
            f"measures a new load), with its {BASES}. {AT_ITS_C} best k': the chain length that "
            "maximises the expected speed-up there (0 = speculation does not pay). alpha: the "
            "effective acceptance rate. requests running: the engine's concurrency now. Empty "
            "acceptance cells mean no drafts in the window, or an engine that counts no drafts "
            "(TensorRT-LLM without its per-position counters, SGLang without its verify counter: "
            "docs/engines.md); empty drafts/s: an engine that counts none."
        ),
        Size(24, 7),
        trend(
            "Verdict over time, with its 95 % interval", SPEEDUP_LINES, dashed("95 % .*")
        ).showing(
            "Per target and model, the verdict's speed-up over time (named by its basis) and, "
            "dashed, the bounds of its 95 % interval: on twin, profile or history the "
            "acceptance's binomial uncertainty, the step times' spread and, read off the cost "
            "curve, its fit; on engine, configured or default c the acceptance alone (the guessed "
            "c has none). A gap: the window measures a new load (no figure until it is measured). "
            "SpecmonBelowBreakEven fires when the whole interval lies below 1 (on configured or "
            "default c, when the speed-up does).",
            on_basis("specmon_verdict_speedup_ratio", TW, "{{target}} {{model}} ({{basis}})"),
            on_basis("specmon_verdict_speedup_lower_ratio", TW, "95 % low {{target}} {{model}}"),
            on_basis("specmon_verdict_speedup_upper_ratio", TW, "95 % high {{target}} {{model}}"),
        ),
        row("Acceptance"),
        Size(8, 8),
        trend("Verdict margin (alpha - break-even at its c)", MARGIN_AREA).showing(
            "The verdict's margin over the selected window: effective alpha minus the break-even "
            "alpha at the verdict's own draft cost c. Below the zero line speculation costs time; "
            "between 0 and 0.05 it barely pays. A gap: the window measures a new load.",
            query(f"specmon_verdict_alpha_margin_ratio{{{TW}}}", TM),
        ),
        trend("Drafts per second", PER_SECOND).showing(
            "Verification steps that carried a draft, per second: the traffic the acceptance "
            "numbers rest on. The alerts need 400 drafts per window.",
            query(DRAFTS, TM),
        ),
        trend("Generated tokens per second", PER_SECOND).showing(
            "Tokens each engine generated per second over the selected window, with or without "
            "drafts. Tokens without drafts per second beside them: the engine is busy but not "
            "speculating (SpecmonSpeculationMissing; llama.cpp without a draft model publishes its "
            "speculative counters at 0).",
            query(
                f"{MX} (specmon_window_generated_tokens{{{TW}}})\n"
                f"/ {MX} (specmon_window_seconds{{{TW}}} > 0)",
                TM,
            ),
        ),
        row("Load: against the baseline"),
        Size(24, 8),
        figure_table(
            "Against the baseline, at this load",
            [(name, selected_engines(expr)) for name, expr in AGAINST_BASELINE],
            column("verdict", *VERDICT_CELLS),
            column("concurrency", decimals(1)),
            column("crossover", decimals(1)),
            column("95 % low", decimals(1)),
            column("95 % high", decimals(1)),
            column("above crossover", Prop("mappings", value_texts(ABOVE_CROSSOVER))),
            column("c", decimals(3)),
            sort_by="verdict",
        ).showing(
            "Targets compared with a baseline (a twin without speculation, a cost profile, or "
            "the server's own epoch without speculation), one row per target and model, over "
            "the selected window. verdict: the realized speed-up in the concurrency bucket the "
            "target runs in now (red below 0.95, where SpecmonSlowerThanBaseline fires; orange "
            "below 1; 'measuring' while the bucket of a new load has too little data: 200 "
            "engine steps and 100 drafts a side), with its basis and state. concurrency: mean "
            "requests per engine step. crossover: the concurrency at which speculation stops "
            "paying at the window's acceptance, with its 95 % range (empty: it pays at every "
            "load measured); above crossover: concurrency within 5 % of the range's low end or "
            "above (SpecmonAboveCrossover). c: the draft cost measured at this load."
        ),
        trend("Concurrency against the crossover", CONCURRENCY, dashed("crossover .*")).showing(
            "Solid: mean requests per engine step over the window, for the targets compared with a "
            "baseline. Dashed: the low end of the crossover's 95 % range (the point where there "
            "is no range), the concurrency at which speculation may stop paying (from the load "
            "levels measured; absent while it pays at all of them). A solid line at or above its "
            "dashed one for 15 minutes fires SpecmonAboveCrossover.",
            engines_query(f"{MX} (specmon_concurrency{{{TW}}} and {WITH_BASELINE})", TM),
            engines_query(f"{MX} {CROSSOVER_LOW}", "crossover {{target}} {{model}}"),
        ),
        # specmon's scrapes of its targets, and specmon itself.
        row("Scrape health"),
        Size(8, 8),
        up_timeline("Target up").showing(
            "Whether specmon's last scrape of each target succeeded.",
            engines_query(f"specmon_up{{{T}}}", "{{target}}"),
        ),
        trend("Scrape results per second", PER_SECOND, drawn="stacked bars").showing(
            "specmon's scrapes of each target by result (success, http_error, timeout, "
            "connection_error, too_large, parse_error, no_metrics).",
            engines_query(scrapes, "{{target}} {{result}}"),
        ),
        trend("Scrape duration and staleness", SECONDS, *staleness).showing(
            "Solid: duration of specmon's last scrape. Dashed (right axis): seconds since the last "
            "successful scrape.",
            engines_query(f"specmon_scrape_duration_seconds{{{T}}}", "duration {{target}}"),
            engines_query(
                f"time() - specmon_last_success_timestamp_seconds{{{T}}}",
                "since success {{target}}",
            ),
        ),
        Size(12, 8),
        trend("Readings refused by validation", COUNT, drawn="stacked bars").showing(
            "Readings of each target's page that specmon refused, by reason, per interval: values "
            "no real engine publishes (NaN, negative or beyond 2^53, counts rising along the "
            "chain, more accepted than drafted, duplicated series, a counter going down alone, "
            "limits exceeded). The refused model's figures are missing meanwhile; a page that "
            "stays wrong is refused at every scrape. Which reason means what: "
            "docs/runbook.md#specmonreadingsrejected (SpecmonReadingsRejected). No data: nothing "
            "refused.",
            engines_query(f"sum by (target, reason) (increase({refused}", "{{target}} {{reason}}"),
        ),
        trend("Requests refused by specmon's web server", COUNT, drawn="stacked bars").showing(
            "Requests and connections to specmon itself that its HTTP server refused, by reason, "
            "per interval and specmon instance: unauthorized (401: wrong or missing password), "
            "auth_busy (503: too many password checks waiting), header_timeout, "
            "too_many_connections, client_san (client certificate without an allowed name), "
            "lifecycle_disabled (POST /-/reload without --web.enable-lifecycle). A steady "
            "unauthorized rate with Prometheus's target up is someone else trying; with it down, "
            "Prometheus's password (docs/security.md).",
            query(
                "sum by (instance, reason) "
                "(increase(specmon_web_rejections_total[$__rate_interval]))",
                "{{instance}} {{reason}}",
            ),
        ),
        trend(
            "specmon's event loop: lag and the cycle collector",
            SECONDS,
            dashed("full collection .*"),
        ).showing(
            "How late specmon's event loop wakes a 0.1 s timer (99th percentile and worst bucket "
            "over the interval), per specmon instance, and the mean pause of its full cycle "
            "collections (once a minute). Every scrape due while the loop is held waits; holds "
            "near the scrape timeout end scrapes as timeouts that are specmon's, not the targets' "
            "(SpecmonEventLoopStalled, docs/runbook.md#specmoneventloopstalled).",
            query(f"histogram_quantile(0.99, sum by (instance, le) {lag}", "lag p99 {{instance}}"),
            query(
                f"histogram_quantile(1, sum by (instance, le) {lag}",
                "lag, worst bucket {{instance}}",
            ),
            query(
                f"sum by (instance) (rate({full_gc.format('sum')}"
                f" / sum by (instance) (rate({full_gc.format('count')}",
                "full collection {{instance}}",
            ),
        ),
        Size(6, 4),
        headline("Configured targets").showing(
            "Targets in specmon's configuration.", query("sum(specmon_targets)", "targets")
        ),
        headline(
            "Config reload", Scale(zones=UP_DOWN), {"0": ("FAILED", "red"), "1": ("OK", "green")}
        ).showing(
            "Whether specmon's last configuration (re)load succeeded.",
            query("min(specmon_config_last_reload_successful)", "reload"),
        ),
        headline("Last config load", Scale("s")).showing(
            "Time since specmon last loaded its configuration successfully.",
            query(
                "time() - max(specmon_config_last_reload_success_timestamp_seconds)", "since load"
            ),
        ),
        headline("specmon version").showing(
            "specmon instances being scraped, by version.",
            query("count by (version) (specmon_build_info)", "{{version}}"),
        ),
    ]
    return dashboard(
        OVERVIEW_UID,
        "specmon / Overview",
        "Is speculative decoding paying for itself on every target? Data: specmon.",
        [
            choice("engine", "label_values(specmon_speculation_enabled, engine)", several=True),
            choice("target", "label_values(specmon_up, target)", several=True),
            choice("window", "label_values(specmon_window_drafts, window)", default="5m"),
        ],
        ("Target detail", TARGET_UID),
        cells,
    )


# --------------------------------------------------------------------------- target detail

M = 'target="$target", model="$model"'
MW = 'target="$target", model="$model", window="$window"'
#: The baseline twin's series: the target this target's configuration names as its twin.
TWIN = (
    "on (target) label_join(\n"
    '  max by (baseline) (specmon_baseline_info{target="$target"}), "target", "", "baseline"\n'
    ")"
)
DRAFT_COST = f"max by (source, baseline) (specmon_draft_cost_ratio{{{M}}})"


def by_bucket(family: str) -> str:
    """``family`` per concurrency bucket of the selected window."""
    return f"max by (concurrency) ({family}{{{MW}}})"


def now(family: str, legend: str) -> Query:
    """The answer's ``family`` for this target, model and window now, or "measuring"."""
    figure = f"max by (target, model) ({family}{{{MW}}})"
    return query(measuring_or(figure, MW), legend, instant=True)


#: A target's class series (a tap beside it, or SGLang's custom labels) in the window.
CW = 'target="$target", window="$window"'
#: The tap's per-request outlier shares over the dashboard's rate interval (the alert,
#: SpecmonRequestAcceptanceOutliers, reads the same shares over 30 minutes).
NEAR_ZERO = (
    "sum without (le) (\n"
    'rate(specmon_tap_request_acceptance_ratio_bucket{le="0.05"}[$__rate_interval])\n)\n'
    "/ (rate(specmon_tap_request_acceptance_ratio_count[$__rate_interval]) > 0)"
)
NEAR_ONE = (
    "1 - (\n"
    "sum without (le) (\n"
    'rate(specmon_tap_long_request_acceptance_ratio_bucket{le="0.95"}[$__rate_interval])\n)\n'
    "/ (rate(specmon_tap_long_request_acceptance_ratio_count[$__rate_interval]) > 0)\n)"
)


def class_cells() -> list[Cell]:
    """The Target detail dashboard's row per request class (docs/tap.md)."""
    return [
        row("Acceptance per request class"),
        Size(8, 8),
        figure_table(
            "Per request class",
            [
                ("accepted / drafted", f"specmon_class_draft_acceptance_ratio{{{CW}}}"),
                ("alpha", f"specmon_class_alpha_ratio{{{CW}}}"),
                ("margin (configured c)", f"specmon_class_alpha_margin_ratio{{{CW}}}"),
                ("mean acceptance length", f"specmon_class_mean_acceptance_length{{{CW}}}"),
                ("requests", f"specmon_class_requests{{{CW}}}"),
            ],
            column("margin (configured c)", *cells_coloured(MARGIN_STEPS)),
            column("requests", decimals(0)),
            keys={"class": 0},
            sort_by="margin (configured c)",
        ).showing(
            "Per request class over the window, from the target's tap (the per-request fields "
            "of the responses it passed) or SGLang's custom-label counters: accepted / drafted "
            "tokens of the class's sums, alpha and its margin over the break-even alpha at the "
            "target's k and configured c, tokens per verification step, requests. A class in "
            "red drafts below break-even while the target's total may look healthy."
        ),
        trend(
            "Margin per class, and the coverage",
            ZERO_LINE,
            right_axis("coverage", "percentunit"),
            dashed("coverage"),
        ).showing(
            "Each class's margin over the break-even alpha (configured c) over time; dashed, "
            "right axis: the share of the engine's drafted tokens the classes saw in the window "
            "(below 1: traffic around the tap, streams without usage).",
            query(f"specmon_class_alpha_margin_ratio{{{CW}}}", "{{class}}"),
            query(f"specmon_class_coverage_ratio{{{CW}}}", "coverage"),
        ),
        trend("Per-request acceptance outliers (every tap)", SHARE).showing(
            "Per tap and class, over the rate interval: the share of requests that accepted at "
            "most 5 % of their draft (garbled or off-distribution output), and of long requests "
            "that accepted more than 95 % (repetition loops). Above 0.2 over 30 minutes, with "
            "enough requests, for 15 minutes: SpecmonRequestAcceptanceOutliers.",
            query(NEAR_ZERO, "{{instance}} {{class}}: near 0"),
            query(NEAR_ONE, "{{instance}} {{class}}: long, near 1"),
        ),
    ]


def target_detail() -> board.Dashboard:
    rate = "[$__rate_interval]))"
    speedup = speedup_cells(REALIZED_STEPS, background=False)
    cells: list[Cell] = [
        # First what specmon believes now, on the best evidence, what it rests on, how it was
        # read, and its 95 % interval (bounds around the speed-up over time).
        row("Verdict: the speed-up on the best evidence"),
        Size(6, 5),
        headline("Verdict: speed-up", SPEEDUP, MEASURING, named=True).showing(
            "The speed-up over no speculation specmon believes now for this target and model "
            "over the selected window (red below 1: speculation costs throughput), named by what "
            f"it rests on and how it was read: {BASES}. Start here: every figure below is this "
            "answer's, at its own draft cost c.",
            on_basis("specmon_verdict_speedup_ratio", MW, "{{basis}}, {{state}}", now=True),
        ),
        headline("Verdict: margin", MARGIN, MEASURING, named=True).showing(
            "Alpha minus the break-even alpha at the verdict's own c (named by its basis and "
            "state). Red: below break-even, speculation costs time; orange: within 0.05.",
            on_basis("specmon_verdict_alpha_margin_ratio", MW, "{{basis}}, {{state}}", now=True),
        ),
        Size(12, 5),
        trend("Verdict over time", SPEEDUP_LINES, dashed("95 % .*")).showing(
            "The verdict's speed-up over time, one line per basis it rested on (a change of "
            "line is a change of evidence: a twin's bucket filling, a profile loaded), and, "
            "dashed, its 95 % interval (the acceptance's binomial uncertainty, the step times' "
            "spread and, read off the cost curve, its fit; on configured or default c the "
            "acceptance alone). A gap: a new load being measured. SpecmonBelowBreakEven reads "
            "the upper bound: it warns when the whole interval lies below 1.",
            on_basis("specmon_verdict_speedup_ratio", MW, "speed-up ({{basis}})"),
            on_basis("specmon_verdict_speedup_lower_ratio", MW, "95 % low ({{basis}})"),
            on_basis("specmon_verdict_speedup_upper_ratio", MW, "95 % high ({{basis}})"),
        ),
        row("The verdict's figures, at its own draft cost c"),
        Size(3, 4),
        headline("alpha", RATIO).showing(
            "Effective acceptance rate over the window: the alpha whose alpha + ... + alpha^k "
            "equals the mean accepted tokens per draft.",
            query(f"specmon_alpha_ratio{{{MW}}}", "alpha"),
        ),
        headline("break-even", RATIO, MEASURING).showing(
            "The alpha at which S(alpha, k, c) = 1, at the verdict's c.",
            now("specmon_verdict_breakeven_alpha_ratio", "break-even"),
        ),
        headline("c", RATIO, MEASURING).showing(
            "The draft cost c the verdict and every figure of this row are at: measured against "
            "the baseline at this load (twin, profile, history), the engine's (TensorRT-LLM), "
            "else the configured or default one, a guess (the verdict's state says which).",
            now("specmon_verdict_draft_cost_ratio", "c"),
        ),
        headline("best k'", PLAIN, MEASURING).showing(
            "The chain length that maximises the expected speed-up at the verdict's c with the "
            "window's per-position survival; 0 = speculation does not pay at any chain length. "
            "Per load level: the table Best chain length per load level.",
            now("specmon_best_chain_length", "k'"),
        ),
        headline("at best k'", SPEEDUP, MEASURING).showing(
            "The expected speed-up at the best chain length k', at the verdict's c.",
            now("specmon_best_speedup_ratio", "best"),
        ),
        headline("k in use").showing(
            "Chain length in use: configured, else the number of position series.",
            query(f"specmon_chain_length{{{M}}}", "k"),
        ),
        headline("concurrency", CONCURRENCY).showing(
            "Mean requests per engine step over the window (docs/load-signals.md); the verdict "
            "reads the bucket of the latest interval's load.",
            query(f"specmon_concurrency{{{MW}}}", "n"),
        ),
        headline("drafts in window", Scale(zones=((None, "orange"), (400, "green")))).showing(
            "Sample size behind the numbers. Alerts need at least 400.",
            query(f"specmon_window_drafts{{{MW}}}", "drafts"),
        ),
        row("Per position"),
        Size(12, 8),
        trend("Survival by position", SHARE).showing(
            "Share of drafts accepted at least this deep (per_pos / drafts). Where it falls below "
            "the draft cost c, drafting that position costs more than it earns.",
            query(f"specmon_position_survival_ratio{{{MW}}}", "position {{position}}"),
        ),
        trend("Conditional acceptance by position", SHARE).showing(
            "Acceptance at a position given the previous one was accepted (per_pos[i] / "
            "per_pos[i-1]).",
            query(f"specmon_position_conditional_ratio{{{MW}}}", "position {{position}}"),
        ),
        Size(12, 7),
        chain_shape("Survival by position, now").showing(
            "Latest survival per position: the shape of the chain.",
            query(f"specmon_position_survival_ratio{{{MW}}}", "{{position}}", instant=True),
        ),
        chain_shape("Conditional acceptance by position, now").showing(
            "Latest conditional acceptance per position.",
            query(f"specmon_position_conditional_ratio{{{MW}}}", "{{position}}", instant=True),
        ),
        row("Speed-up and chain"),
        Size(8, 8),
        trend("Mean acceptance length", Scale(decimals=2, low=1), dashed("^[^(]*$")).showing(
            "Tokens per verification step including the bonus token (1 + accepted / drafts). "
            "Solid: selected window; dashed: every other window.",
            query(f"specmon_mean_acceptance_length{{{MW}}}", "{{window}} (selected)"),
            query(f'specmon_mean_acceptance_length{{{M}, window!="$window"}}', "{{window}}"),
        ),
        trend("The verdict against the best k'", SPEEDUP_LINES, dashed("best .*")).showing(
            "The verdict's speed-up with the chain in use against the expected speed-up at the "
            "best chain length k', both at the verdict's c. The gap is what a shorter (or "
            "longer) chain would gain at this load.",
            on_basis("specmon_verdict_speedup_ratio", MW, "verdict ({{basis}})"),
            query(f"specmon_best_speedup_ratio{{{MW}}}", "best (k')"),
        ),
        trend(
            "Chain length and draft cost",
            Scale(decimals=2, low=0),
            dashed("best k'"),
            right_axis("^c$", "none"),
        ).showing(
            "k in use and the best k' at the verdict's c (left axis); the verdict's draft cost c, "
            "one drafted token's cost as a fraction of a target step (right axis). Where c is "
            "measured it grows with the load, and the best k' falls with it.",
            query(f"specmon_chain_length{{{M}}}", "k in use"),
            query(f"specmon_best_chain_length{{{MW}}}", "best k'"),
            query(f"specmon_verdict_draft_cost_ratio{{{MW}}}", "c"),
        ),
        # Load and speed, and the verdict against the baseline (docs/load-signals.md).
        row("Load: against the baseline"),
        Size(12, 8),
        trend(
            "Realized speed-up and the verdict's 95 % interval",
            SPEEDUP_LINES,
            dashed("verdict 95 % .*"),
        ).showing(
            "Realized: the baseline's time per output token over this target's, in the concurrency "
            "bucket the target runs in now (a twin without speculation, a profile, or the "
            "server's own epoch without speculation; read off the cost curve when the window's "
            "bucket is thin). Dashed: the bounds of the verdict's 95 % interval (acceptance, "
            "step-time spread, the curve's fit). Below the line speculation costs time; realized "
            "below 0.95 with the interval below 1 for 30 minutes fires SpecmonSlowerThanBaseline. "
            "A gap: no baseline, or a new load being measured (200 engine steps and 100 drafts a "
            "side).",
            query(f"specmon_realized_speedup_ratio{{{MW}}}", "realized against {{baseline}}"),
            query(f"specmon_verdict_speedup_lower_ratio{{{MW}}}", "verdict 95 % low"),
            query(f"specmon_verdict_speedup_upper_ratio{{{MW}}}", "verdict 95 % high"),
        ),
        trend("Concurrency and the crossover", CONCURRENCY, dashed("crossover .*")).showing(
            "Mean requests per engine step over the window (from the engine's counters), the "
            "requests running now, and, dashed, the concurrency at which speculation stops paying "
            "at the window's acceptance (read off the cost curve between the measured load levels "
            "that bracket it, with its 95 % range; the lowest one measured when it paid at none; "
            "absent while it pays at all). Concurrency at or above the range's low end (the point "
            "without a range) for 15 minutes fires SpecmonAboveCrossover.",
            query(f"specmon_concurrency{{{MW}}}", "concurrency (mean per step)"),
            query(
                f"max by (baseline) (specmon_crossover_concurrency{{{MW}}})",
                "crossover against {{baseline}}",
            ),
            query(
                f"max by (baseline) (specmon_crossover_lower_concurrency{{{MW}}})",
                "crossover 95 % low",
            ),
            query(
                f"max by (baseline) (specmon_crossover_upper_concurrency{{{MW}}})",
                "crossover 95 % high",
            ),
            query(f"specmon_requests_running{{{M}}}", "requests running now"),
        ),
        trend(
            "Time per output token: this target and its baseline", SECONDS, dashed("baseline .*")
        ).showing(
            "Decode time per generated token over the window, from the engines' own counters: this "
            "target, and the twin it is compared with (same model, no speculation; a profile or "
            "the server's own past has no live series). The realized speed-up is their ratio, "
            "taken per concurrency bucket.",
            query(f"specmon_time_per_output_token_seconds{{{MW}}}", "{{target}}"),
            query(
                "max by (target) (\n"
                'specmon_time_per_output_token_seconds{model="$model", window="$window"}\n'
                f"and {TWIN}\n)",
                "baseline {{target}}",
            ),
        ),
        trend(
            "Did the change help? Speed-up since the last change", SPEEDUP, dashed(".* 95 % .*")
        ).showing(
            "Per concurrency bucket both the current and the previous configuration epoch ran at "
            "(speculation on or off, a new k, a draft swap marked with specmon mark): the "
            "previous epoch's time per output token over the current one's, and its 95 % "
            "interval, dashed. Above 1 the change made this server faster at that load; an "
            "upper bound below 1 for 30 minutes fires SpecmonChangeRegressed (the "
            "configuration changes annotation marks when it began; docs/history.md).",
            query(f"specmon_change_speedup_ratio{{{M}}}", "{{concurrency}}"),
            query(f"specmon_change_speedup_lower_ratio{{{M}}}", "{{concurrency}} 95 % low"),
            query(f"specmon_change_speedup_upper_ratio{{{M}}}", "{{concurrency}} 95 % high"),
        ),
        trend(
            "Draft cost c: measured, and the configured guess",
            COST,
            dashed("^c (engine|configured) .*"),
            dashed("^c at .*", "dot", (0, 10)),
        ).showing(
            "c, one drafted token's cost as a fraction of a target step. Measured: from the step "
            "times against the baseline, c = (T_step / T_step(baseline) - 1) / drafted tokens per "
            "step, at the middle window's load (solid) and per concurrency bucket of the selected "
            "window (dotted). Engine: TensorRT-LLM's own. Configured: specmon's draft_cost, the "
            "guess a verdict uses only where nothing was measured. c grows with load: that is "
            "why speculation stops paying.",
            query(DRAFT_COST, "c {{source}} {{baseline}}"),
            query(
                by_bucket("specmon_bucket_draft_cost_ratio"),
                "c at {{concurrency}} requests per step",
            ),
        ),
        figure_table(
            "Best chain length per load level",
            [
                ("realized speed-up", by_bucket("specmon_bucket_realized_speedup_ratio")),
                ("measured c", by_bucket("specmon_bucket_draft_cost_ratio")),
                ("best k'", by_bucket("specmon_bucket_best_chain_length")),
                ("expected at best k'", by_bucket("specmon_bucket_best_speedup_ratio")),
            ],
            column("realized speed-up", *speedup),
            column("expected at best k'", *speedup),
            column("measured c", decimals(3)),
            column("best k'", decimals(0)),
        ).showing(
            "Per concurrency bucket of the window: the realized speed-up against the baseline (a "
            "twin, a profile or the server's own past; TGI too, whose c assumes k drafted tokens "
            "per draft), the draft cost c measured there, the chain length that maximises the "
            "expected speed-up at that c with the window's per-position survival (0 = switch "
            "speculation off at this load) and that speed-up. `specmon recommend --from` turns it "
            "into a vLLM "
            "num_speculative_tokens_per_batch_size schedule and a llama.cpp --spec-draft-n-max "
            "(docs/recommend.md)."
        ),
        row("Acceptance and traffic"),
        Size(8, 8),
        trend("Alpha against the verdict's break-even", ZERO_LINE, dashed("break-even")).showing(
            "Effective alpha and the draft acceptance ratio (accepted / drafted tokens) over the "
            "window; dashed: the break-even alpha at the verdict's c. Zero line: the verdict's "
            "margin. A margin that falls whenever the load rises is the measured c growing with "
            "it, not a worse draft.",
            query(f"specmon_alpha_ratio{{{MW}}}", "alpha"),
            query(f"specmon_draft_acceptance_ratio{{{MW}}}", "accepted / drafted"),
            query(f"specmon_verdict_breakeven_alpha_ratio{{{MW}}}", "break-even"),
            query(f"specmon_verdict_alpha_margin_ratio{{{MW}}}", "margin"),
        ),
        trend("Drafts and tokens per second", PER_SECOND, dashed("generated tokens .*")).showing(
            "Drafts (verification steps with a draft), drafted tokens and accepted tokens per "
            "second, as counted by specmon; dashed: every token the engine generated per second "
            "over the window, drafted or not. Generated tokens without drafts: the engine is busy "
            "but not speculating.",
            query(f"sum(rate(specmon_drafts_total{{{M}}}{rate}", "drafts"),
            query(f"sum(rate(specmon_draft_tokens_total{{{M}}}{rate}", "draft tokens"),
            query(f"sum(rate(specmon_accepted_tokens_total{{{M}}}{rate}", "accepted tokens"),
            query(
                f"max by (window) (specmon_window_generated_tokens{{{MW}}})\n"
                f"/ max by (window) (specmon_window_seconds{{{MW}}} > 0)",
                "generated tokens ({{window}})",
            ),
        ),
        trend("Window sample size", Scale(low=0), right_axis("seconds covered", "s")).showing(
            "Drafts counted in the window (left) and the seconds of data it covers (right; less "
            "than the window while it fills after a start or a reset).",
            query(f"specmon_window_drafts{{{MW}}}", "drafts"),
            query(f"specmon_window_seconds{{{MW}}}", "seconds covered"),
        ),
        *class_cells(),
        Size(24, 6),
        trend("Engine restarts", COUNT, drawn="bars").showing(
            "Counter resets specmon detected (engine restarts): the windows start again.",
            query(f"sum(increase(specmon_engine_resets_total{{{M}}}{rate}", "restarts"),
        ),
    ]
    return dashboard(
        TARGET_UID,
        "specmon / Target detail",
        "Per-position acceptance, speed-up and chain length of one target and model. Data: "
        "specmon.",
        [
            # Targets that speculate (a baseline twin has no speculative series: its figures
            # show on the target compared with it).
            choice("target", "label_values(specmon_chain_length, target)"),
            choice("model", 'label_values(specmon_chain_length{target="$target"}, model)'),
            choice(
                "window",
                'label_values(specmon_window_drafts{target="$target", model="$model"}, window)',
                default="5m",
            ),
        ],
        ("Overview", OVERVIEW_UID),
        cells,
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
