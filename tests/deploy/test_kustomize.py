"""deploy/kubernetes/ rendered by the real kubectl kustomize, and deploy/mixin/ evaluated by the
real jsonnet: both give back exactly the shipped rules (deploy/prometheus/*.rules.yml) and
dashboards (grafana/dashboards/*.json). The tools: tests/deploy/tools.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from specmon.daemon.config import parse_config
from tests.deploy import tools

REPO = tools.REPO
K8S = REPO / "deploy" / "kubernetes"
OVERLAYS = ("standalone", "sidecar", "sidecar-tap", "sharded", "prometheus-mode")
EXAMPLE = K8S / "examples" / "kube-prometheus-stack"
PROM_DIR = REPO / "deploy" / "prometheus"
ALERTS_FILE = PROM_DIR / "specmon-alerts.rules.yml"
RECORDING_FILE = PROM_DIR / "engine-recording.rules.yml"
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
MIXIN = REPO / "deploy" / "mixin" / "mixin.libsonnet"
#: The client-side apply annotation (kubectl.kubernetes.io/last-applied-configuration) holds
#: the whole object, and annotations may total 256 KiB.
ANNOTATION_LIMIT = 256 * 1024
#: The namespace each overlay puts its objects in.
NAMESPACES = {
    "standalone": "monitoring",
    "sidecar": "inference",
    "sidecar-tap": "inference",
    "sharded": "monitoring",
    "prometheus-mode": "monitoring",
}

pytestmark = pytest.mark.deploytools


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_generate", REPO / "deploy/generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    result = subprocess.run(
        [tools.kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d)


def overlay(name: str) -> tuple[dict[str, Any], ...]:
    return render(K8S / "overlays" / name)


def _kinds(docs: tuple[dict[str, Any], ...]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def _dashboard_configmaps(docs: tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["kind"] == "ConfigMap"
        and d["metadata"].get("labels", {}).get("grafana_dashboard") is not None
    ]


# --------------------------------------------------------------------------- kustomize


def test_every_overlay_renders_its_workload_with_the_shared_pieces() -> None:
    shared = {
        ("Secret", "specmon-web"),
        ("PrometheusRule", "specmon-alerts"),
        ("PrometheusRule", "specmon-engine-recording"),
        *(("ConfigMap", p.name.removesuffix(".json") + "-dashboard") for p in DASHBOARDS),
    }
    own = {
        "standalone": {
            ("ConfigMap", "specmon"),
            ("Deployment", "specmon"),
            ("PersistentVolumeClaim", "specmon-state"),
            ("Service", "specmon"),
            ("ServiceMonitor", "specmon"),
        },
        "sidecar": {
            ("ConfigMap", "specmon-sidecar"),
            ("Deployment", "vllm"),
            ("Service", "vllm"),
            ("PodMonitor", "vllm-specmon"),
        },
        "sidecar-tap": {
            ("ConfigMap", "specmon-sidecar"),
            ("Deployment", "vllm"),
            ("Service", "vllm"),
            ("PodMonitor", "vllm-specmon"),
        },
        "sharded": {
            ("ConfigMap", "specmon-shard"),
            ("StatefulSet", "specmon-shard"),
            ("Service", "specmon-shard"),
            ("ServiceMonitor", "specmon-shard"),
        },
        "prometheus-mode": {
            ("ConfigMap", "specmon-fleet"),
            ("Deployment", "specmon-fleet"),
            ("PersistentVolumeClaim", "specmon-fleet-state"),
            ("Service", "specmon-fleet"),
            ("ServiceMonitor", "specmon-fleet"),
        },
    }
    for name in OVERLAYS:
        docs = overlay(name)
        kinds = _kinds(docs)
        assert len(kinds) == len(set(kinds)), f"{name}: an object twice"
        assert set(kinds) == shared | own[name], name
        assert {d["metadata"]["namespace"] for d in docs} == {NAMESPACES[name]}, name


def test_the_tap_overlay_puts_the_tap_on_the_request_path(tmp_path: Path) -> None:
    """sidecar-tap: the Service reaches the tap, the tap reaches vLLM on the pod's loopback,
    vLLM gives its per-request figures, specmon reads the tap, the PodMonitor scrapes both."""
    docs = overlay("sidecar-tap")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"vllm", "specmon", "specmon-tap"}
    tap = containers["specmon-tap"]
    assert tap["command"] == ["specmon", "tap"]
    assert "--upstream=http://127.0.0.1:8000" in tap["args"]
    assert tap["ports"] == [{"name": "tap", "containerPort": 9410, "protocol": "TCP"}]
    assert tap["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "tap"}
    assert "cpu" not in tap["resources"]["limits"]
    assert "--per-request-spec-decode-metrics=summary" in containers["vllm"]["args"]
    assert containers["specmon"] == next(
        c
        for c in next(d for d in overlay("sidecar") if d["kind"] == "Deployment")["spec"][
            "template"
        ]["spec"]["containers"]
        if c["name"] == "specmon"
    )
    service = next(d for d in docs if d["kind"] == "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "tap"
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["specmon-metrics", "tap"]
    config = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "specmon-sidecar"
    )
    path = tmp_path / "specmon.yml"
    path.write_text(config["data"]["specmon.yml"])
    (target,) = yaml.safe_load(path.read_text())["targets"]
    assert target["tap"] == "http://127.0.0.1:9410/metrics"
    from specmon.cli.main import main as cli_main

    assert cli_main(["check-config", str(path)]) == 0
    classes = next(a for a in tap["args"] if a.startswith("--classes="))
    assert cli_main(["tap", "--upstream=http://127.0.0.1:8000", "--class-header=x-request-class",
                     classes, "--check-config"]) == 0  # fmt: skip


def test_standalone_holds_one_labelled_configmap_per_dashboard() -> None:
    docs = overlay("standalone")
    kinds = {kind for kind, _ in _kinds(docs)}
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule"} <= kinds
    configmaps = _dashboard_configmaps(docs)
    assert len(configmaps) == len(DASHBOARDS) >= 2
    for configmap in configmaps:
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        # A fixed name (no hash suffix): re-applying replaces the dashboard, never adds one.
        (key,) = configmap["data"]
        assert configmap["metadata"]["name"] == key.removesuffix(".json") + "-dashboard"


def test_every_configmap_fits_the_client_side_apply_annotation() -> None:
    sizes = {}
    for name in OVERLAYS:
        for doc in overlay(name):
            if doc["kind"] == "ConfigMap":
                size = len(json.dumps(doc, separators=(",", ":")).encode())
                sizes[doc["metadata"]["name"]] = size
                assert size < ANNOTATION_LIMIT, (name, doc["metadata"]["name"], size)
    assert max(sizes.values()) > 50_000, "the dashboards were measured"


@pytest.mark.parametrize("name", OVERLAYS)
def test_rendered_rules_equal_the_shipped_rules_files(name: str) -> None:
    rules = {
        d["metadata"]["name"]: d["spec"]["groups"]
        for d in overlay(name)
        if d["kind"] == "PrometheusRule"
    }
    assert rules == {
        "specmon-alerts": yaml.safe_load(ALERTS_FILE.read_text())["groups"],
        "specmon-engine-recording": yaml.safe_load(RECORDING_FILE.read_text())["groups"],
    }
    assert {p.name for p in PROM_DIR.glob("*.rules.yml")} == {
        ALERTS_FILE.name,
        RECORDING_FILE.name,
    }


@pytest.mark.parametrize("name", OVERLAYS)
def test_rendered_dashboards_equal_the_shipped_json(name: str) -> None:
    found = {}
    for configmap in _dashboard_configmaps(overlay(name)):
        ((key, text),) = configmap["data"].items()
        found[key] = text
    assert sorted(found) == [p.name for p in DASHBOARDS]
    for path in DASHBOARDS:
        # The very file, so a dashboard's diff is the grafana/ one.
        assert found[path.name] == path.read_text(), path.name
        assert json.loads(found[path.name]) == json.loads(path.read_text())


def test_every_rendered_object_validates_against_its_schema(tmp_path: Path) -> None:
    """The strict schema check of test_kubernetes.py, on what kubectl kustomize renders."""
    from tests.deploy.test_kubernetes import K8S_VERSIONS, validate

    paths = []
    expected = set()
    for name in (*OVERLAYS, "example"):
        docs = render(EXAMPLE) if name == "example" else overlay(name)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        paths.append(path)
        expected |= {(path.as_posix(), d["kind"], d["metadata"]["name"]) for d in docs}
    results = validate(paths)
    failures = [r for r in results if r["errors"]]
    assert not failures, json.dumps(failures, indent=1)
    assert {(r["file"], r["kind"], r["name"]) for r in results} == expected
    crd = {r["kind"] for r in results if "CRD" in r["schema"]}
    assert crd == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    for version in K8S_VERSIONS:
        assert {r["kind"] for r in results if r["schema"] == f"kubernetes {version} (strict)"} == {
            "ConfigMap",
            "Deployment",
            "PersistentVolumeClaim",
            "Secret",
            "Service",
            "StatefulSet",
        }


def test_the_example_overlay_applies_the_documented_patches() -> None:
    """examples/kube-prometheus-stack/: namespace, image, release label, the dashboards'
    label and folder annotation, the ServiceMonitor's serverName and the web config's hash,
    each as docs/kubernetes.md shows it; nothing else changes."""
    docs = render(EXAMPLE)
    base = overlay("standalone")
    assert _kinds(docs) == _kinds(base)
    assert {d["metadata"]["namespace"] for d in docs} == {"observability"}
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            assert labels["release"] == "kube-prometheus-stack", doc["metadata"]["name"]
        else:
            assert "release" not in labels
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example.com/specmon:0.1.0"
    for configmap in _dashboard_configmaps(docs):
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "specmon"
        assert configmap["metadata"]["annotations"] == {"grafana_folder": "specmon"}
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == (
        "specmon.observability.svc"
    )
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    (shipped,) = [d for d in base if d["kind"] == "Secret"]
    web, shipped_web = (yaml.safe_load(s["stringData"]["web.yml"]) for s in (secret, shipped))
    assert web["basic_auth_users"] != shipped_web["basic_auth_users"]
    web.pop("basic_auth_users"), shipped_web.pop("basic_auth_users")
    assert web == shipped_web, "the patch keeps the shipped TLS and header settings"
    # 6: the config file beside the kustomization replaces the shipped example's.
    (config,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "specmon"]
    assert config["data"] == {"specmon.yml": (EXAMPLE / "specmon.yml").read_text()}
    parse_config(config["data"]["specmon.yml"], source="example")
    # The dashboards and rules themselves are untouched.
    for kind in ("PrometheusRule",):
        assert [d["spec"] for d in docs if d["kind"] == kind] == [
            d["spec"] for d in base if d["kind"] == kind
        ]
    assert [d["data"] for d in _dashboard_configmaps(docs)] == [
        d["data"] for d in _dashboard_configmaps(base)
    ]


def test_the_docs_show_what_the_tests_render() -> None:
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    for name in OVERLAYS:
        assert f"deploy/kubernetes/overlays/{name}" in doc, name
    assert "kubectl apply -k deploy/kubernetes/overlays/standalone" in doc
    example = (EXAMPLE / "kustomization.yaml").read_text()
    assert "release: kube-prometheus-stack" in doc or "value: kube-prometheus-stack" in example
    for needle in ("grafana_dashboard", "grafana_folder", "ruleSelector", "release"):
        assert needle in doc, needle


# --------------------------------------------------------------------------- mixin


def evaluate(config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The mixin's three fields, with ``config`` merged into its _config."""
    overrides = json.dumps(config or {})
    code = (
        f"local mixin = (import '{MIXIN.name}') + {{ _config+:: {overrides} }};\n"
        "{ alerts: mixin.prometheusAlerts, rules: mixin.prometheusRules,"
        " dashboards: mixin.grafanaDashboards }"
    )
    result = subprocess.run(
        [tools.jsonnet(), "-J", str(MIXIN.parent), "-e", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=MIXIN.parent,
    )
    assert result.returncode == 0, result.stderr
    evaluated: dict[str, Any] = json.loads(result.stdout)
    return evaluated


@cache
def _default() -> dict[str, Any]:
    return evaluate()


def test_mixin_with_the_default_config_is_the_shipped_rules_and_dashboards() -> None:
    mixin = _default()
    assert mixin["alerts"] == yaml.safe_load(ALERTS_FILE.read_text())
    assert mixin["rules"] == yaml.safe_load(RECORDING_FILE.read_text())
    assert sorted(mixin["dashboards"]) == [p.name for p in DASHBOARDS]
    for path in DASHBOARDS:
        assert mixin["dashboards"][path.name] == json.loads(path.read_text()), path.name
    alerts = [r for g in mixin["alerts"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(alerts) >= 10
    assert not [r for g in mixin["rules"]["groups"] for r in g["rules"] if "alert" in r]


SPECMON = 'job="specmon"'
ENGINE = 'namespace="inference"'
TAP = 'job="specmon-tap"'


def _expressions(mixin: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every rule expression and dashboard query."""
    gen = _generator()
    out = [
        (f"{field}:{rule.get('alert') or rule.get('record')}", rule["expr"])
        for field in ("alerts", "rules")
        for group in mixin[field]["groups"]
        for rule in group["rules"]
    ]
    for name, dashboard in mixin["dashboards"].items():
        out += [(name, owner[key]) for owner, key in gen.dashboard_queries(dashboard)]
    return out


def test_mixin_selectors_reach_every_series_selector() -> None:
    """With the three selectors set, every selector of a scraped series in every expression
    and dashboard query carries its matcher; nothing else changes."""
    gen = _generator()
    recorded = gen.recorded_series()
    selected = evaluate({"specmonSelector": SPECMON, "engineSelector": ENGINE, "tapSelector": TAP})
    expressions = _expressions(selected)
    shipped = _expressions(_default())
    assert [where for where, _ in expressions] == [where for where, _ in shipped]
    assert len(expressions) > 150
    counts = {"specmon": 0, "engine": 0, "tap": 0}
    for (where, expr), (_, original) in zip(expressions, shipped, strict=True):
        found = gen.selectors(expr, recorded)
        assert len(found) == len(gen.selectors(original, recorded)), where
        for selector in found:
            if selector.kind is None:
                continue
            wanted = {"specmon": SPECMON, "engine": ENGINE, "tap": TAP}[selector.kind]
            assert selector.matchers is not None and wanted in selector.matchers, (where, expr)
            counts[selector.kind] += 1
        # Removing the matchers gives back the shipped expression.
        stripped = (
            expr.replace("," + SPECMON, "")
            .replace("{" + SPECMON + "}", "")
            .replace("," + ENGINE, "")
            .replace("{" + ENGINE + "}", "")
            .replace("," + TAP, "")
            .replace("{" + TAP + "}", "")
        )
        assert stripped == original, where
    assert counts["specmon"] > 150 and counts["engine"] >= 40 and counts["tap"] >= 6
    # The dashboards' data source variable is left alone, and so is everything but queries.
    assert selected["dashboards"].keys() == _default()["dashboards"].keys()


#: The runbook base every shipped runbook_url starts with: the mixin's and the chart's default.
SHIPPED_RUNBOOK = "https://github.com/specmon/specmon/blob/main/docs/runbook.md"


def routed(rules: dict[str, Any], *, base: str, labels: dict[str, str]) -> dict[str, Any]:
    """The shipped rules as they should come out with a runbook base and alert labels: every
    alert's runbook_url on ``base`` (the anchor kept), ``labels`` added where the alert has
    no label of that name; recording rules untouched."""
    out = copy.deepcopy(rules)
    for group in out["groups"]:
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            rule["labels"] = {**labels, **rule.get("labels", {})}
            url = rule["annotations"]["runbook_url"]
            assert url.startswith(SHIPPED_RUNBOOK + "#"), url
            rule["annotations"]["runbook_url"] = base + url[len(SHIPPED_RUNBOOK) :]
    return out


def test_mixin_runbook_base_and_alert_labels() -> None:
    """The defaults point at the repository's runbook (every shipped alert has its section
    there); _config moves every link and adds routing labels to alerts alone, an alert's own
    severity kept."""
    base = "https://wiki.example.com/specmon/runbook"
    labels = {"team": "ml-platform", "severity": "page"}
    config = {"runbookURLBase": base, "alertLabels": labels}
    mixin = evaluate(config)
    shipped = yaml.safe_load(ALERTS_FILE.read_text())
    expected = routed(shipped, base=base, labels=labels)
    assert mixin["alerts"] == expected
    assert mixin["alerts"] != shipped
    severities = {r["labels"]["severity"] for g in mixin["alerts"]["groups"] for r in g["rules"]
                  if "alert" in r}  # fmt: skip
    assert severities <= {"warning", "critical", "info"}
    assert mixin["rules"] == _default()["rules"]
    defaults = subprocess.run(
        [tools.jsonnet(), "-e", f"(import '{MIXIN.parent / 'config.libsonnet'}')._config"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(defaults.stdout)["runbookURLBase"] == SHIPPED_RUNBOOK
    # ... where every alert has its section (GitHub's anchor of each "## Name" heading).
    anchors = {
        url.split("#")[1] for url in re.findall(r"runbook_url: (\S+)", ALERTS_FILE.read_text())
    }
    headings = re.findall(r"^## (\S+)$", (REPO / "docs" / "runbook.md").read_text(), re.M)
    assert anchors and anchors <= {heading.lower() for heading in headings}


def test_mixin_datasource_regex_sets_the_picker_only() -> None:
    mixin = evaluate({"datasourceRegex": "/^prometheus-.*/"})
    for name, dashboard in mixin["dashboards"].items():
        shipped = _default()["dashboards"][name]
        (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
        assert variable["regex"] == "/^prometheus-.*/"
        variable["regex"] = ""
        assert dashboard == shipped


@pytest.mark.prometheus
def test_promtool_runs_the_rule_tests_on_the_mixin_with_selectors(tmp_path: Path) -> None:
    """The shipped promtool unit tests (deploy/prometheus/tests/) pass on the mixin's rules
    with selectors that every test series matches, so each matcher sits where it is valid
    PromQL and changes no result; with selectors no test series matches, they fail."""
    from tests.rules.common import run_tool

    def run(specmon: str, engine: str, tap: str) -> subprocess.CompletedProcess[str]:
        directory = tmp_path / f"{len(list(tmp_path.iterdir()))}"
        shutil.copytree(PROM_DIR / "tests", directory / "tests")
        mixin = evaluate({"specmonSelector": specmon, "engineSelector": engine, "tapSelector": tap})
        (directory / ALERTS_FILE.name).write_text(yaml.safe_dump(mixin["alerts"]))
        (directory / RECORDING_FILE.name).write_text(yaml.safe_dump(mixin["rules"]))
        assert run_tool(["promtool", "check", "rules", ALERTS_FILE.name], cwd=directory)
        return run_tool(
            [
                "promtool",
                "test",
                "rules",
                *sorted(p.name for p in (directory / "tests").glob("*.test.yml")),
            ],
            cwd=directory / "tests",
        )

    neutral = run('job!="not-specmon"', 'namespace!="elsewhere"', 'job!="not-a-tap"')
    assert neutral.returncode == 0, neutral.stdout[-3000:] + neutral.stderr[-3000:]
    assert "SUCCESS" in neutral.stdout
    narrowed = run('job="nowhere"', 'namespace="nowhere"', 'job="nowhere"')
    assert narrowed.returncode != 0
