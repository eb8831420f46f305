"""Static checks of the Grafana dashboards and provisioning files (no Grafana needed)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from specmon.daemon import metrics
from tests.dashboards.coverage import ABSENT, ON_FIRST_EVENT
from tests.dashboards.queries import (
    BUILTIN_NAMES,
    iter_panels,
    load_dashboard,
    panel_queries,
    variable_queries,
)
from tests.rules.common import (
    DASHBOARD_DIR,
    GRAFANA_DIR,
    contract_metric_names,
    promql_label_names,
    promql_metric_names,
)
from tests.rules.fleet import FLEET_METRICS

EXPECTED_UIDS = {
    "specmon-overview.json": "specmon-overview",
    "specmon-target.json": "specmon-target",
}
SCHEMA_VERSION = 36  # grafana-foundation-sdk 10.4 line (pyproject.toml, extra "dashboards")
DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}
#: Prometheus's own series a dashboard may use besides specmon's contract.
PROMETHEUS_BUILTINS = {"ALERTS"}
LABELS = {
    "target",
    "engine",
    "model",
    "window",
    "position",
    "source",
    "result",
    "reason",
    "version",
    "instance",
    "baseline",
    "concurrency",
    "le",  # specmon's own histograms
    "generation",
    "basis",  # specmon_verdict_info: what the verdict rests on
    "state",  # specmon_verdict_info: how it was read (measuring: no figure yet)
}
LABELS_OF_ALERTS = {"alertname", "alertstate", "severity", "target"}
#: Sample values for every variable of every dashboard, for substitution.
SAMPLE_VALUES: dict[str, str | list[str]] = {
    "engine": ["vllm", "trtllm"],
    "target": ["gpu1", "cpu1"],
    "model": "llama",
    "window": "5m",
}
_VAR_REF = re.compile(r"\$(\w+)|\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]")
_RATE_CALL = re.compile(r"\b(rate|irate|increase|delta|idelta|deriv)\s*\(")


def _builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "specmon_grafana_build", GRAFANA_DIR / "build_dashboards.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _dashboard_files() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))


@pytest.fixture(scope="module", params=sorted(EXPECTED_UIDS))
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load_dashboard(DASHBOARD_DIR / request.param)


def _queries(board: dict[str, Any]) -> list[str]:
    """Raw expressions of every panel query and annotation query."""
    out = [str(t["expr"]) for p in iter_panels(board) for t in p.get("targets") or []]
    out += [str(a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    return out


def test_committed_dashboards_match_the_generator() -> None:
    built = _builder().build()
    assert set(built) == {p.name for p in _dashboard_files()} == set(EXPECTED_UIDS)
    for name, text in built.items():
        committed = (DASHBOARD_DIR / name).read_text("utf-8")
        assert committed == text, f"{name} is stale: run python grafana/build_dashboards.py"


def test_generator_check_mode_detects_a_stale_file(tmp_path: Path) -> None:
    builder = _builder()
    assert builder.main(["--out", str(tmp_path)]) == 0
    assert builder.main(["--check", "--out", str(tmp_path)]) == 0
    victim = tmp_path / "specmon-target.json"
    victim.write_text(victim.read_text("utf-8").replace("specmon_alpha_ratio", "x"), "utf-8")
    assert builder.main(["--check", "--out", str(tmp_path)]) == 1


def test_files_are_valid_json_with_stable_unique_uids() -> None:
    uids = {}
    for path in _dashboard_files():
        board = json.loads(path.read_text("utf-8"))
        uids[path.name] = board["uid"]
        assert board["id"] is None, "provisioned dashboards must not carry a database id"
        assert board["schemaVersion"] == SCHEMA_VERSION
        assert board["title"].startswith("specmon / ")
    assert uids == EXPECTED_UIDS
    assert len(set(uids.values())) == len(uids)


def test_no_import_inputs(board: dict[str, Any]) -> None:
    text = json.dumps(board)
    assert "${DS_" not in text
    assert "__inputs" not in board and "__requires" not in board


def test_datasource_variable_is_used_by_every_panel_and_query(board: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in board["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    panels = list(iter_panels(board))
    assert len([p for p in panels if p["type"] != "row"]) >= 8
    for panel in panels:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE_REF, panel["title"]
    for var in variables.values():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE_REF, var["name"]
    for annotation in board["annotations"]["list"]:
        if "expr" in annotation:
            assert annotation["datasource"] == DATASOURCE_REF


def test_panel_ids_unique_and_grid_fits(board: dict[str, Any]) -> None:
    panels = list(iter_panels(board))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_every_rate_uses_rate_interval(board: dict[str, Any]) -> None:
    checked = 0
    for expr in _queries(board):
        for match in _RATE_CALL.finditer(expr):
            depth, end = 1, match.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(expr[end], 0)
                end += 1
            ranges = re.findall(r"\[([^\]]*)\]", expr[match.end() : end])
            assert ranges == ["$__rate_interval"], expr
            checked += 1
    assert checked >= 1


def test_queries_use_only_contract_metrics_and_labels(board: dict[str, Any]) -> None:
    allowed = contract_metric_names() | PROMETHEUS_BUILTINS
    for expr in _queries(board):
        names = promql_metric_names(expr)
        assert names, expr
        assert names <= allowed, f"not in docs/metrics.md: {names - allowed}"
        assert promql_label_names(expr) <= LABELS | LABELS_OF_ALERTS, expr


def test_variables_are_label_values_queries_and_all_defined(board: dict[str, Any]) -> None:
    defined = {v["name"] for v in board["templating"]["list"]}
    parsed = variable_queries(board)
    assert {v.name for v in parsed} == defined - {"datasource"}
    for var in parsed:
        assert var.selector is not None and promql_metric_names(var.selector) <= (
            contract_metric_names()
        )
        assert var.label in LABELS
    used: set[str] = set()
    texts = _queries(board) + [v.definition for v in parsed]
    for text in texts:
        for match in _VAR_REF.finditer(text):
            used.add(next(g for g in match.groups() if g))
    assert used - BUILTIN_NAMES <= defined, used - BUILTIN_NAMES - defined
    # Every defined variable is used somewhere (datasource by every panel).
    assert defined - {"datasource"} <= used


def test_required_panels_exist() -> None:
    overview = load_dashboard(DASHBOARD_DIR / "specmon-overview.json")
    detail = load_dashboard(DASHBOARD_DIR / "specmon-target.json")

    def exprs_of(board: dict[str, Any]) -> str:
        return "\n".join(_queries(board))

    table = next(p for p in iter_panels(overview) if p["type"] == "table")
    table_text = json.dumps(table)
    for metric in (
        "specmon_alpha_ratio",
        "specmon_verdict_speedup_ratio",
        "specmon_verdict_info",
        "specmon_verdict_breakeven_alpha_ratio",
        "specmon_verdict_alpha_margin_ratio",
        "specmon_verdict_draft_cost_ratio",
        "specmon_best_chain_length",
        "specmon_up",
    ):
        assert metric in table_text, metric
    margin = next(p for p in iter_panels(overview) if p["title"].startswith("Verdict margin"))
    steps = margin["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert any(s["value"] == 0 for s in steps), "margin panel lacks its zero line"
    assert margin["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    for metric in ("specmon_drafts_total", "specmon_scrapes_total"):
        assert metric in exprs_of(overview), metric
    detail_text = exprs_of(detail)
    for metric in (
        "specmon_position_survival_ratio",
        "specmon_position_conditional_ratio",
        "specmon_mean_acceptance_length",
        "specmon_verdict_draft_cost_ratio",
        "specmon_best_speedup_ratio",
        "specmon_chain_length",
        "specmon_draft_cost_ratio",
    ):
        assert metric in detail_text, metric
    bars = [p for p in iter_panels(detail) if p["type"] == "bargauge"]
    assert {m for p in bars for m in promql_metric_names(p["targets"][0]["expr"])} == {
        "specmon_position_survival_ratio",
        "specmon_position_conditional_ratio",
    }
    assert {v.name for v in variable_queries(detail)} == {"target", "model", "window"}
    overview_text = exprs_of(overview)
    for metric in ("specmon_rejected_readings_total", "specmon_web_rejections_total"):
        assert metric in overview_text, metric
    assert {v.name for v in variable_queries(overview)} == {"engine", "target", "window"}


def test_the_overview_filters_every_target_query_by_engine() -> None:
    """Series with an engine label select engine=~"$engine"; per-target series without one
    drop the targets of other engines (and keep targets never read, of no known engine)."""
    overview = load_dashboard(DASHBOARD_DIR / "specmon-overview.json")
    with_engine = {
        d.sample_name for d in metrics.FAMILIES if "engine" in d.labels and "target" in d.labels
    }
    other = 'unless on (target)\nlast_over_time(specmon_speculation_enabled{target=~"$target", engine!~"$engine"}[1d])'
    for panel in iter_panels(overview):
        for target in panel.get("targets") or []:
            expr = target["expr"]
            if "$target" not in expr:
                continue  # specmon's own families (targets, reloads, version, web)
            for match in re.finditer(r"(specmon_\w+)\{([^}]*)\}", expr):
                name, matchers = match.groups()
                if name == "specmon_speculation_enabled" and 'engine!~"$engine"' in matchers:
                    continue
                if name in with_engine:
                    assert 'engine=~"$engine"' in matchers, (panel["title"], name)
                else:
                    assert expr.rstrip().endswith(other), (panel["title"], name)


def test_the_draft_cost_is_shown_per_source() -> None:
    """specmon_draft_cost_ratio has several sources (configured, engine, measured): every
    panel keeps them apart, by a source matcher or by grouping and naming the series by
    source."""
    found = 0
    for name in EXPECTED_UIDS:
        board = load_dashboard(DASHBOARD_DIR / name)
        for panel in iter_panels(board):
            for target in panel.get("targets") or []:
                if "specmon_draft_cost_ratio" not in target["expr"]:
                    continue
                found += 1
                expr, legend = target["expr"], target["legendFormat"]
                assert 'source="' in expr or (
                    "source" in promql_label_names(expr) and "{{source}}" in legend
                ), (panel["title"], expr, legend)
    assert found >= 1


def test_absent_families_are_the_contracts() -> None:
    """tests/dashboards/coverage.py lets a query be empty only where the metric contract says
    the family is absent for the engine, or appears with its first event."""
    meanings = {d.sample_name: d.meaning for d in metrics.FAMILIES}
    display = {"sglang": "SGLang", "tgi": "TGI", "trtllm": "TensorRT-LLM"}
    for engine, families in ABSENT.items():
        for family in families:
            assert "absent" in meanings[family] and display[engine] in meanings[family], family
    for family in ON_FIRST_EVENT:
        assert family in contract_metric_names()


def test_every_query_substitutes_completely(board: dict[str, Any]) -> None:
    queries = panel_queries(board, SAMPLE_VALUES, include_annotations=True)
    assert len(queries) >= 10
    for q in queries:
        assert "$" not in q.expr and "[[" not in q.expr, q.expr


def test_provisioning_files() -> None:
    ds = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/specmon.yml").read_text("utf-8"))
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus"
    assert source["uid"] == "specmon-prometheus"
    # $__rate_interval is computed from it; it must equal Prometheus's scrape_interval.
    assert source["jsonData"]["timeInterval"] == "15s"
    boards = yaml.safe_load(
        (GRAFANA_DIR / "provisioning/dashboards/specmon.yml").read_text("utf-8")
    )
    (provider,) = boards["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_synthetic_fleet_covers_the_whole_contract() -> None:
    """tests/rules/fleet.py feeds the dashboard queries in test_promtool.py: keep it complete."""
    assert contract_metric_names() == FLEET_METRICS


#: Families at the configured draft cost c whatever the verdict rests on (specmon's draft_cost:
#: a guess wherever anything was measured). The verdict's own figures at its own c are
#: specmon_verdict_* and specmon_best_* (issue 62: one c per answer).
CONFIGURED_COST = (
    "specmon_expected_speedup_ratio",
    "specmon_alpha_margin_ratio",
    "specmon_breakeven_alpha_ratio",
)
#: The answer's figures, absent while its window measures a new load (state="measuring").
ANSWER = frozenset(
    {
        "specmon_verdict_speedup_ratio",
        "specmon_verdict_speedup_lower_ratio",
        "specmon_verdict_speedup_upper_ratio",
        "specmon_verdict_alpha_margin_ratio",
        "specmon_verdict_breakeven_alpha_ratio",
        "specmon_verdict_draft_cost_ratio",
        "specmon_best_chain_length",
        "specmon_best_speedup_ratio",
    }
)
_SELECTOR = re.compile(r"\b(specmon_\w+)(\{[^}]*\})?")
MEASURING_SENTINEL = 'state="measuring"'


def configured_cost_families(expr: str) -> set[str]:
    """The configured-cost families ``expr`` reads: those of CONFIGURED_COST, and
    specmon_draft_cost_ratio unless its selector pins a source other than configured."""
    found = set()
    for match in _SELECTOR.finditer(expr):
        name, selector = match.group(1), match.group(2) or ""
        if name in CONFIGURED_COST:
            found.add(name)
        elif name == "specmon_draft_cost_ratio":
            pinned = re.search(r'source\s*=~?\s*"([^"]*)"', selector)
            if pinned is None or re.fullmatch(pinned.group(1), "configured"):
                found.add(f"{name}{{source=configured}}")
    return found


def test_configured_cost_families_are_recognised() -> None:
    assert configured_cost_families("max by (t) (specmon_alpha_margin_ratio{w})") == {
        "specmon_alpha_margin_ratio"
    }
    assert configured_cost_families("specmon_verdict_alpha_margin_ratio{w}") == set()
    assert configured_cost_families("specmon_best_chain_length{w}") == set()
    assert configured_cost_families('specmon_draft_cost_ratio{source="measured"}') == set()
    assert configured_cost_families('specmon_draft_cost_ratio{t, source="configured"}') == {
        "specmon_draft_cost_ratio{source=configured}"
    }
    assert configured_cost_families("max by (source) (specmon_draft_cost_ratio{t})") == {
        "specmon_draft_cost_ratio{source=configured}"
    }


def test_no_panel_shows_a_figure_the_answer_did_not_give(board: dict[str, Any]) -> None:
    """Every figure beside the verdict is the answer's, at the answer's own c: no panel reads
    a figure at the configured c (break-even, margin, expected speed-up), which beside a
    measured verdict contradicts it. The configured c itself shows only among the draft costs
    by source, and the panel says it is the guess (used where nothing was measured)."""
    for panel in iter_panels(board):
        families = set().union(
            *(configured_cost_families(t["expr"]) for t in panel.get("targets") or [])
        )
        assert families <= {"specmon_draft_cost_ratio{source=configured}"}, (
            panel["title"],
            sorted(families),
        )
        if families:
            assert "guess" in f"{panel['title']} {panel.get('description', '')}", panel["title"]


def _mappings(panel: Mapping[str, Any]) -> list[Any]:
    """The value mappings of the panel and of its column overrides."""
    config = panel.get("fieldConfig") or {}
    found = list((config.get("defaults") or {}).get("mappings") or [])
    for override in config.get("overrides") or []:
        for prop in override.get("properties") or []:
            if prop["id"] == "mappings":
                found += prop["value"]
    return found


def test_a_window_measuring_a_new_load_says_so(board: dict[str, Any]) -> None:
    """While the answer measures a new load its figures are absent (never a guess in their
    place). A panel that shows the answer now (stat, table) reads "measuring" there, from
    specmon_verdict_info{state="measuring"}, not an empty cell that looks like no data, and
    shows the state beside the basis; a chart keeps the gap (no sentinel value in it, which
    would draw a spike, and no line drawn across a gap)."""
    shown = 0
    for panel in iter_panels(board):
        targets = panel.get("targets") or []
        exprs = [t["expr"] for t in targets]
        answer = any(promql_metric_names(e) & ANSWER for e in exprs)
        sentinels = [t for t in targets if MEASURING_SENTINEL in t["expr"]]
        if panel["type"] == "timeseries":
            assert not sentinels, panel["title"]
            if answer:
                assert panel["fieldConfig"]["defaults"]["custom"]["spanNulls"] is False
            continue
        if not answer:
            continue
        shown += 1
        assert sentinels, f"{panel['title']}: no 'measuring' while a new load is measured"
        assert all(t["instant"] and not t["range"] for t in sentinels), panel["title"]
        texts = [
            result["text"]
            for mapping in _mappings(panel)
            for value, result in mapping["options"].items()
            if value == "-2"
        ]
        assert texts == ["measuring"], (panel["title"], texts)
        if any("specmon_verdict_speedup_ratio" in e for e in exprs):
            states = [t for t in targets if "state" in promql_label_names(t["expr"])]
            assert any(
                "{{state}}" in t["legendFormat"] or panel["type"] == "table" for t in states
            ), panel["title"]
    assert shown >= 2


def test_the_target_detail_opens_with_the_verdict() -> None:
    """The runbook sends the on-call person to Target detail first: its first row is the
    verdict (specmon_verdict_speedup_ratio) with its basis (specmon_verdict_info)."""
    detail = load_dashboard(DASHBOARD_DIR / "specmon-target.json")
    panels = list(iter_panels(detail))
    assert panels[0]["type"] == "row" and "verdict" in panels[0]["title"].lower()
    first_row = []
    for panel in panels[1:]:
        if panel["type"] == "row":
            break
        first_row.append(panel)
    exprs = "\n".join(t["expr"] for p in first_row for t in p.get("targets") or [])
    assert "specmon_verdict_speedup_ratio" in exprs and "specmon_verdict_info" in exprs
    assert "specmon_verdict_alpha_margin_ratio" in exprs
    legends = [t["legendFormat"] for p in first_row for t in p.get("targets") or []]
    assert any("{{basis}}" in legend for legend in legends), legends
    # Nothing on the configured cost in the verdict's row.
    assert not [p["title"] for p in first_row if any(
        configured_cost_families(t["expr"]) for t in p.get("targets") or []
    )]  # fmt: skip
    # The runbook names the dashboard and its first row.
    runbook = (DASHBOARD_DIR.parent.parent / "docs" / "runbook.md").read_text(encoding="utf-8")
    assert "*specmon / Target detail*" in runbook
    assert f"first row, *{panels[0]['title']}*" in " ".join(runbook.split()), panels[0]["title"]
