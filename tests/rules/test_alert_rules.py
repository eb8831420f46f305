"""Static checks of the shipped Prometheus rules and their documentation (no promtool)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.dashboards.queries import duration_seconds
from tests.rules.alert_rules import (
    ALERTS_FILE,
    RECORDING_FILE,
    alert_rules,
    dump_rules,
    iter_rules,
    load_rules,
    recording_rules,
    with_durations,
)
from tests.rules.common import (
    DOCS_DIR,
    PROM_DIR,
    contract_metric_names,
    github_anchor,
    markdown_anchors,
    promql_label_names,
    promql_metric_names,
)

REQUIRED_ALERTS = {
    "SpecmonBelowBreakEven",
    "SpecmonMarginThin",
    "SpecmonChainTooLong",
    "SpecmonAcceptanceDrop",
    "SpecmonSlowerThanBaseline",
    "SpecmonAboveCrossover",
    "SpecmonChangeRegressed",
    "SpecmonSpeculationMissing",
    "SpecmonTargetDown",
    "SpecmonReadingsRejected",
    "SpecmonAbsent",
    "SpecmonEventLoopStalled",
    "SpecmonOverloaded",
    "SpecmonStateNotWritten",
    "SpecmonRequestAcceptanceOutliers",
}
#: Alerts computed from windowed acceptance data: they need the minimum-traffic guard.
ACCEPTANCE_ALERTS = {
    "SpecmonBelowBreakEven",
    "SpecmonMarginThin",
    "SpecmonChainTooLong",
    "SpecmonAcceptanceDrop",
}
#: Alerts on figures measured against a baseline: the same guard, and a `baseline` label.
LOAD_ALERTS = {"SpecmonSlowerThanBaseline", "SpecmonAboveCrossover"}
RUNBOOK_BASE = "https://github.com/specmon/specmon/blob/main/docs/runbook.md#"
MIN_DRAFTS = 400
CONTRACT_LABELS = {
    "target",
    "engine",
    "model",
    "window",
    "position",
    "source",
    "result",
    "baseline",
    "le",  # the bucket bound of specmon's own histograms
    "reason",  # why a reading was refused (specmon_rejected_readings_total)
    "basis",  # what the verdict rests on (specmon_verdict_info)
    "file",  # the state file (specmon_state_last_write_*)
    "class",  # a specmon tap's request class (specmon_tap_*)
}
_RECORD_NAME = re.compile(r"^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$")


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load_rules(ALERTS_FILE)


@pytest.fixture(scope="module")
def alerts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return alert_rules(doc)


def test_every_required_alert_is_shipped(alerts: list[dict[str, Any]]) -> None:
    assert {a["alert"] for a in alerts} == REQUIRED_ALERTS


def test_every_alert_has_severity_summary_description_runbook(
    alerts: list[dict[str, Any]],
) -> None:
    for alert in alerts:
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"info", "warning", "critical"}, name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert annotations["summary"].strip(), name
        assert annotations["runbook_url"] == RUNBOOK_BASE + name.lower(), name


def test_only_the_severe_break_even_tier_pages(alerts: list[dict[str, Any]]) -> None:
    # info: a blind spot of specmon's own, never a slowdown.
    assert [a["alert"] for a in alerts if a["labels"]["severity"] == "info"] == [
        "SpecmonReadingsRejected"
    ]
    critical = [a for a in alerts if a["labels"]["severity"] == "critical"]
    assert [a["alert"] for a in critical] == ["SpecmonBelowBreakEven"]
    # The critical tier must be a strict subset of the warning tier's condition.
    warning = next(
        a
        for a in alerts
        if a["alert"] == "SpecmonBelowBreakEven" and a["labels"]["severity"] == "warning"
    )
    # Both tiers read the best-evidence verdict, the page at a lower speed-up than the warning.
    tiers = {}
    for tier in (warning, critical[0]):
        found = re.findall(
            r'specmon_verdict_speedup_ratio\{window="5m"\} < ([0-9.]+)', tier["expr"]
        )
        assert len(found) == 1, tier["expr"]
        tiers[tier["labels"]["severity"]] = float(found[0])
        assert "specmon_expected_speedup_ratio" not in tier["expr"], tier["expr"]
        assert "specmon_alpha_margin_ratio" not in tier["expr"], tier["expr"]
    assert tiers == {"warning": 1.0, "critical": 0.75}
    assert critical[0]["for"] == warning["for"]


def test_runbook_has_a_section_for_every_alert(alerts: list[dict[str, Any]]) -> None:
    anchors = markdown_anchors(DOCS_DIR / "runbook.md")
    for alert in alerts:
        anchor = alert["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"docs/runbook.md has no heading for #{anchor}"


def test_github_anchor() -> None:
    assert github_anchor("SpecmonBelowBreakEven") == "specmonbelowbreakeven"
    assert github_anchor("Why these delays are right, at 3 a.m.") == (
        "why-these-delays-are-right-at-3-am"
    )


def test_every_for_is_a_plain_duration_that_does_not_flap(alerts: list[dict[str, Any]]) -> None:
    for alert in alerts:
        seconds = duration_seconds(alert["for"])
        # At 15 s evaluation, anything shorter than 5 minutes follows single noisy samples.
        assert seconds >= 300, alert["alert"]
        if "keep_firing_for" in alert:
            assert duration_seconds(alert["keep_firing_for"]) > 0, alert["alert"]


def test_acceptance_alerts_have_the_traffic_guard_in_their_own_window(
    alerts: list[dict[str, Any]],
) -> None:
    for alert in alerts:
        if alert["alert"] not in ACCEPTANCE_ALERTS | LOAD_ALERTS:
            continue
        expr = alert["expr"]
        windows = set(re.findall(r'window="(\w+)"', expr))
        assert len(windows) == 1, f"{alert['alert']} reads one window, got {windows}"
        (window,) = windows
        guard = f'specmon_window_drafts{{window="{window}"}} >= {MIN_DRAFTS}'
        assert guard in expr, f"{alert['alert']} lacks {guard}"


def test_acceptance_descriptions_quote_the_live_values(alerts: list[dict[str, Any]]) -> None:
    for alert in alerts:
        if alert["alert"] not in ACCEPTANCE_ALERTS:
            continue
        text = alert["annotations"]["description"]
        for needle in (
            "$labels.target",
            "$labels.model",
            "$labels.window",
            "$value",
            "_breakeven_alpha_ratio{",
            "specmon_window_drafts{",
        ):
            assert needle in text, f"{alert['alert']}: description lacks {needle}"
        assert "alpha" in text and "margin" in text, alert["alert"]
        # The alerts that read the verdict say what it rests on.
        if "specmon_verdict_" in alert["expr"]:
            assert "specmon_verdict_info{" in text, alert["alert"]
            assert "specmon_breakeven_alpha_ratio{" not in text, alert["alert"]


def test_load_alerts_join_the_guard_across_the_baseline_label(
    alerts: list[dict[str, Any]],
) -> None:
    """The figures against a baseline carry a `baseline` label that specmon_window_drafts and
    specmon_concurrency lack: without ignoring (baseline) the joins match nothing and the alerts
    can never fire."""
    load = [a for a in alerts if a["alert"] in LOAD_ALERTS]
    assert {a["alert"] for a in load} == LOAD_ALERTS
    for alert in load:
        expr = alert["expr"]
        assert "and ignoring (baseline)" in expr, alert["alert"]
        text = alert["annotations"]["description"]
        for needle in (
            "$labels.target",
            "$labels.model",
            "$labels.window",
            "$labels.baseline",
            "$value",
            "specmon_concurrency{",
            "specmon_requests_running{",
            "specmon recommend --from",
        ):
            assert needle in text, f"{alert['alert']}: description lacks {needle}"
    crossover = next(a for a in load if a["alert"] == "SpecmonAboveCrossover")
    # The value is the low end of the crossover's range, else the point (left side), compared
    # with the same window's concurrency.
    left = " ".join(crossover["expr"].split()).lstrip("( ")
    assert left.startswith(
        'specmon_crossover_lower_concurrency{window="15m"} or specmon_crossover_concurrency{'
    ), left
    assert 'specmon_concurrency{window="15m"}' in crossover["expr"]


def test_speculation_missing_leaves_baseline_twins_out(alerts: list[dict[str, Any]]) -> None:
    (missing,) = [a for a in alerts if a["alert"] == "SpecmonSpeculationMissing"]
    assert "specmon_baseline_info" in missing["expr"]


def test_chain_too_long_names_the_better_chain_length(alerts: list[dict[str, Any]]) -> None:
    alert = next(a for a in alerts if a["alert"] == "SpecmonChainTooLong")
    assert alert["expr"].lstrip("( \n").startswith("specmon_best_chain_length")
    assert "k' = {{ $value" in alert["annotations"]["description"]


def test_rules_reference_only_contract_metrics(doc: dict[str, Any]) -> None:
    recorded = {r["record"] for r in recording_rules(doc)}
    allowed = contract_metric_names() | recorded
    for rule in iter_rules(doc):
        names = promql_metric_names(rule["expr"])
        assert names, rule
        assert names <= allowed, f"unknown metrics {names - allowed} in {rule.get('alert')}"
        assert promql_label_names(rule["expr"]) <= CONTRACT_LABELS, rule


def test_promql_scanner_finds_names_not_functions_or_labels() -> None:
    expr = (
        'sum without (engine) (rate(vllm:spec_decode_num_drafts_total{model_name="x"}[5m])) '
        "/ ignoring (position) group_left () (foo:bar:rate5m > 0) and on (target) up offset 5m"
    )
    assert promql_metric_names(expr) == {
        "vllm:spec_decode_num_drafts_total",
        "foo:bar:rate5m",
        "up",
    }
    assert promql_label_names(expr) == {"engine", "model_name", "position", "target"}


def test_recording_rules_follow_the_naming_convention() -> None:
    for path in (ALERTS_FILE, RECORDING_FILE):
        for rule in recording_rules(load_rules(path)):
            assert _RECORD_NAME.match(rule["record"]), rule["record"]


def test_with_durations_rewrites_only_durations(doc: dict[str, Any]) -> None:
    short = with_durations(doc, for_="30s", keep_firing_for="0s")
    assert all(a["for"] == "30s" for a in alert_rules(short))
    assert all(a.get("keep_firing_for", "0s") == "0s" for a in alert_rules(short))
    # Per-alert mapping; alerts not named keep theirs.
    mapped = with_durations(doc, for_={"SpecmonAbsent": "1m"})
    fors = {a["alert"]: a["for"] for a in alert_rules(mapped)}
    assert fors["SpecmonAbsent"] == "1m"
    assert fors["SpecmonMarginThin"] == "1h"
    # The original is untouched, and the dump round-trips to the same rules otherwise.
    assert {a["for"] for a in alert_rules(doc)} != {"30s"}
    reloaded = yaml.safe_load(dump_rules(short))
    for before, after in zip(alert_rules(doc), alert_rules(reloaded), strict=True):
        assert {k: v for k, v in before.items() if k not in ("for", "keep_firing_for")} == {
            k: v for k, v in after.items() if k not in ("for", "keep_firing_for")
        }


def test_alerting_doc_covers_every_alert_and_its_time_to_fire(
    alerts: list[dict[str, Any]],
) -> None:
    text = (DOCS_DIR / "alerting.md").read_text("utf-8")
    section = text.split("## Time to fire", 1)[1]
    for alert in alerts:
        name = alert["alert"]
        assert f"| {name}" in text.split("## Time to fire", 1)[0], name
        assert f"| {name}" in section, f"no time-to-fire row for {name}"
        # The documented `for` matches the rules file.
        rows = [line for line in text.splitlines() if line.startswith(f"| {name} |")]
        assert any(f"| {alert['for']} |" in row for row in rows), name


def test_example_configs_reference_the_shipped_files() -> None:
    prom = yaml.safe_load((PROM_DIR / "prometheus.example.yml").read_text("utf-8"))
    assert set(prom["rule_files"]) == {ALERTS_FILE.name, RECORDING_FILE.name}
    assert prom["global"]["evaluation_interval"] == "15s"
    am = yaml.safe_load((PROM_DIR / "alertmanager.example.yml").read_text("utf-8"))
    critical_routes = [r for r in am["route"]["routes"] if 'severity="critical"' in r["matchers"]]
    assert critical_routes and critical_routes[0]["receiver"] != am["route"]["receiver"]


def test_every_query_of_the_draft_cost_names_its_source() -> None:
    """specmon_draft_cost_ratio has several sources (configured, engine, measured); a query
    over them would mix them (in `first`, the one Prometheus saw first wins). Expressions and
    annotation templates of every shipped rule select one."""
    selector = re.compile(r"specmon_draft_cost_ratio(\{[^}]*\})?")
    found = 0
    for path in (ALERTS_FILE, RECORDING_FILE):
        for rule in iter_rules(load_rules(path)):
            texts = [rule["expr"], *(rule.get("annotations") or {}).values()]
            for text in texts:
                for match in selector.finditer(text):
                    found += 1
                    matchers = match.group(1) or ""
                    assert re.search(r'source=\\?"(configured|engine|measured)\\?"', matchers), (
                        rule.get("alert") or rule.get("record"),
                        match.group(),
                    )
    # Today no rule reads it: every figure beside a verdict is at the verdict's own c
    # (specmon_verdict_draft_cost_ratio, one series per window; the next test).
    assert found >= 0


#: Figures at the configured c whatever the verdict rests on: beside a measured verdict they
#: contradict it (issue 62), so no alert quotes them.
CONFIGURED_C = (
    "specmon_expected_speedup_ratio{",
    "specmon_alpha_margin_ratio{",
    "specmon_breakeven_alpha_ratio{",
    'source=\\"configured\\"',
)


def test_alerts_quote_the_answers_figures_not_the_configured_c(
    alerts: list[dict[str, Any]],
) -> None:
    for alert in alerts:
        texts = [alert["expr"], *alert["annotations"].values()]
        for needle in CONFIGURED_C:
            assert not any(needle in text for text in texts), (alert["alert"], needle)
