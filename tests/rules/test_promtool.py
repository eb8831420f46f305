"""Run Debian's promtool/amtool over the shipped rules, their unit tests and the dashboards."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.queries import load_dashboard, panel_queries
from tests.rules.alert_rules import (
    ALERTS_FILE,
    RECORDING_FILE,
    alert_rules,
    dump_rules,
    load_rules,
    with_durations,
)
from tests.rules.common import DASHBOARD_DIR, PROM_DIR, run_tool
from tests.rules.fleet import STEP, fleet_series

pytestmark = pytest.mark.prometheus

ALERT_TESTS = PROM_DIR / "tests" / "specmon-alerts.test.yml"
RECORDING_TESTS = PROM_DIR / "tests" / "engine-recording.test.yml"


def _ok(result: Any) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_rules() -> None:
    result = run_tool(["promtool", "check", "rules", str(ALERTS_FILE), str(RECORDING_FILE)])
    _ok(result)
    assert "SUCCESS: 9 rules found" in result.stdout
    assert "SUCCESS: 14 rules found" in result.stdout


def test_alert_unit_tests_pass() -> None:
    result = run_tool(["promtool", "test", "rules", str(ALERT_TESTS)])
    _ok(result)
    assert "SUCCESS" in result.stdout


def test_recording_rule_unit_tests_pass() -> None:
    result = run_tool(["promtool", "test", "rules", str(RECORDING_TESTS)])
    _ok(result)


def test_unit_tests_cover_firing_and_silence_for_every_alert() -> None:
    spec = yaml.safe_load(ALERT_TESTS.read_text("utf-8"))
    fired: set[str] = set()
    silent: set[str] = set()
    for case in spec["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {rule["alert"] for rule in alert_rules(load_rules())}
    assert fired == names
    assert silent == names
    titles = " | ".join(case["name"] for case in spec["tests"])
    for scenario in (
        "idle server",
        "thin traffic",
        "noisy but healthy",
        "target down",
        "absent",
        "busy server that drafts nothing",
    ):
        assert scenario in titles, scenario


# Each mutation weakens the rules in one way; the named unit test must catch it.
MUTATIONS = [
    pytest.param(r">= 400", ">= 0", "thin traffic stays silent", id="no-traffic-guard"),
    pytest.param(
        r"for: (15m|1h|10m)",
        "for: 1m",
        "noisy but healthy acceptance stays silent",
        id="short-for-flaps",
    ),
    pytest.param(
        r"keep_firing_for: 10m",
        "keep_firing_for: 0s",
        "resolves 10 minutes after recovery",
        id="no-keep-firing",
    ),
    pytest.param(r"< 0\.05 >= -0\.05", "< 0.05", "margin thin fires after an hour", id="band"),
    pytest.param(
        r">= 1\.05 \*", ">= 1.0 *", "chain too long names the better chain", id="no-min-gain"
    ),
    pytest.param(r"\) >= 30", ") >= 0", "acceptance drop needs a baseline", id="no-baseline"),
    pytest.param(
        r"avg_over_time\(specmon_up\[5m\]\) < 0\.5",
        "avg_over_time(specmon_up[5m]) < 0.7",
        "flaky target stays silent",
        id="flaky-target",
    ),
    pytest.param(r"< 0\.75\)", "< 0.95)", "resolves 10 minutes after recovery", id="page-0.95"),
    # SpecmonSpeculationMissing's "busy, but nothing drafted" branch: an idle server (no
    # tokens) and a trickle (150 tokens per window) must stay silent, a speculating one too.
    pytest.param(
        r'generated_tokens\{window="5m"\} >= 400',
        'generated_tokens{window="5m"} >= 0',
        "idle server stays silent",
        id="busy-guard-idle",
    ),
    pytest.param(
        r'generated_tokens\{window="5m"\} >= 400',
        'generated_tokens{window="5m"} > 0',
        "busy server that drafts nothing",
        id="busy-guard-trickle",
    ),
    pytest.param(
        r'specmon_window_drafts\{window="5m"\} == 0',
        'specmon_window_drafts{window="5m"} >= 0',
        "busy server that drafts nothing",
        id="no-drafts",
    ),
]


@pytest.mark.parametrize(("pattern", "replacement", "failing_test"), MUTATIONS)
def test_unit_tests_catch_weakened_rules(
    tmp_path: Path, pattern: str, replacement: str, failing_test: str
) -> None:
    original = ALERTS_FILE.read_text("utf-8")
    mutated, count = re.subn(pattern, replacement, original)
    assert count, f"mutation {pattern!r} no longer applies"
    (tmp_path / ALERTS_FILE.name).write_text(mutated, "utf-8")
    (tmp_path / "tests").mkdir()
    shutil.copy(ALERT_TESTS, tmp_path / "tests" / ALERT_TESTS.name)
    _ok(run_tool(["promtool", "check", "rules", str(tmp_path / ALERTS_FILE.name)]))
    result = run_tool(["promtool", "test", "rules", str(tmp_path / "tests" / ALERT_TESTS.name)])
    output = result.stdout + result.stderr
    assert result.returncode != 0, f"the unit tests accepted the mutation {pattern!r}"
    assert failing_test in output, output[-3000:]


def test_shortened_rules_fire_fast(tmp_path: Path) -> None:
    """What the end-to-end test does: rewrite `for:` and watch an alert fire in seconds."""
    rules = tmp_path / "short.rules.yml"
    rules.write_text(dump_rules(with_durations(load_rules(), for_="30s", keep_firing_for="0s")))
    _ok(run_tool(["promtool", "check", "rules", str(rules)]))
    labels = 'target="gpu1",engine="vllm",model="llama",window="5m"'
    spec = {
        "rule_files": [rules.name],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {"series": f"specmon_alpha_margin_ratio{{{labels}}}", "values": "-0.1x20"},
                    {"series": f"specmon_window_drafts{{{labels}}}", "values": "1000x20"},
                ],
                "alert_rule_test": [
                    {"eval_time": "15s", "alertname": "SpecmonBelowBreakEven", "exp_alerts": []},
                    {
                        "eval_time": "30s",
                        "alertname": "SpecmonBelowBreakEven",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "warning",
                                    "target": "gpu1",
                                    "engine": "vllm",
                                    "model": "llama",
                                    "window": "5m",
                                },
                                "exp_annotations": {
                                    "summary": "Speculative decoding is slower than no "
                                    "speculation.",
                                    "description": "gpu1 (engine vllm, model llama): over the "
                                    "last 5m the effective acceptance rate alpha is , below the "
                                    "break-even alpha  for chain length k =  and draft cost c =  "
                                    "(margin -0.100 over 1000 drafts; expected speed-up x). "
                                    "Drafting costs more time than it saves; the output itself "
                                    "is unaffected.",
                                    "runbook_url": "https://github.com/specmon/specmon/blob/main"
                                    "/docs/runbook.md#specmonbelowbreakeven",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "short.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    _ok(run_tool(["promtool", "test", "rules", str(test_file)]))


def test_example_prometheus_config() -> None:
    result = run_tool(["promtool", "check", "config", "prometheus.example.yml"], cwd=PROM_DIR)
    _ok(result)
    assert "2 rule files found" in result.stdout


def test_example_alertmanager_config_routes_and_inhibits() -> None:
    config = str(PROM_DIR / "alertmanager.example.yml")
    result = run_tool(["amtool", "check-config", config])
    _ok(result)
    assert "2 inhibit rules" in result.stdout
    inhibit = yaml.safe_load((PROM_DIR / "alertmanager.example.yml").read_text("utf-8"))
    (tier,) = [r for r in inhibit["inhibit_rules"] if 'severity="critical"' in r["source_matchers"]]
    assert 'severity="warning"' in tier["target_matchers"]
    assert set(tier["equal"]) == {"target", "model"}

    def receiver(*labels: str) -> str:
        result = run_tool(
            ["amtool", "config", "routes", "test", f"--config.file={config}", *labels]
        )
        _ok(result)
        return result.stdout.strip()

    assert receiver("alertname=SpecmonBelowBreakEven", "severity=critical") == "pager"
    assert receiver("alertname=SpecmonBelowBreakEven", "severity=warning") == "tickets"
    assert receiver("alertname=SpecmonAbsent", "severity=warning") == "tickets"


# --------------------------------------------------------------------------- dashboards

DASHBOARD_VARIABLES: dict[str, list[dict[str, str | list[str]]]] = {
    "specmon-overview.json": [{"target": ["gpu1", "cpu1", "down1"], "window": "5m"}],
    "specmon-target.json": [
        {"target": "gpu1", "model": "llama", "window": "5m"},
        {"target": "cpu1", "model": "default", "window": "15m"},
    ],
}


@pytest.mark.parametrize("name", sorted(DASHBOARD_VARIABLES))
def test_every_dashboard_query_returns_data(tmp_path: Path, name: str) -> None:
    """Each panel query, substituted, is valid PromQL and returns data on a synthetic fleet."""
    board = load_dashboard(DASHBOARD_DIR / name)
    queries = [
        q
        for variables in DASHBOARD_VARIABLES[name]
        for q in panel_queries(board, variables, rate_interval="1m", interval="15s")
    ]
    assert queries
    rules = tmp_path / "none.rules.yml"
    rules.write_text("groups: []\n")
    spec = {
        "rule_files": [rules.name],
        "evaluation_interval": STEP,
        "tests": [
            {
                "interval": STEP,
                "input_series": fleet_series(),
                "promql_expr_test": [
                    {"expr": f"absent({q.expr})", "eval_time": "30m", "exp_samples": []}
                    for q in queries
                ],
            }
        ],
    }
    test_file = tmp_path / "dashboard.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = run_tool(["promtool", "test", "rules", str(test_file)])
    _ok(result)


def test_overview_up_column_joins_models(tmp_path: Path) -> None:
    """The table's `up` query spreads specmon_up over each target's models, keeps down ones."""
    board = load_dashboard(DASHBOARD_DIR / "specmon-overview.json")
    (up,) = [
        q
        for q in panel_queries(board, {"target": ["gpu1", "cpu1", "down1"], "window": "5m"})
        if q.panel_title == "Targets" and q.ref_id == "A"
    ]
    rules = tmp_path / "none.rules.yml"
    rules.write_text("groups: []\n")
    spec = {
        "rule_files": [rules.name],
        "evaluation_interval": STEP,
        "tests": [
            {
                "interval": STEP,
                "input_series": fleet_series(),
                "promql_expr_test": [
                    {
                        "expr": up.expr,
                        "eval_time": "30m",
                        "exp_samples": [
                            {"labels": '{target="gpu1",model="llama"}', "value": 1},
                            {"labels": '{target="cpu1",model="default"}', "value": 1},
                            {"labels": '{target="down1"}', "value": 0},
                        ],
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "up.test.yml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    _ok(run_tool(["promtool", "test", "rules", str(test_file)]))
