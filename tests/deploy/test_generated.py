"""deploy/generate.py: the derived deployment files never drift from their sources, and the
mixin's marks sit at every selector of a scraped series and nowhere else."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.deploy.tools import REPO

GENERATE = REPO / "deploy" / "generate.py"
PROM_DIR = REPO / "deploy" / "prometheus"
K8S_BASE = REPO / "deploy" / "kubernetes" / "base"
K8S_RULES = K8S_BASE / "rules"
K8S_DASHBOARDS = K8S_BASE / "dashboards"
GRAFANA_DASHBOARDS = REPO / "grafana" / "dashboards"
MIXIN_GENERATED = REPO / "deploy" / "mixin" / "generated"
COMPOSE_DIR = REPO / "deploy" / "compose"
HELM_FILES = REPO / "deploy" / "helm" / "specmon" / "files"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_generate", GENERATE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_files_are_up_to_date() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATE), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_prometheus_rules_carry_every_rules_file_unchanged() -> None:
    sources = sorted(PROM_DIR.glob("*.rules.yml"))
    assert len(sources) >= 2
    generated = sorted(K8S_RULES.glob("*.prometheusrule.yaml"))
    kustomization = yaml.safe_load((K8S_RULES / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [p.name for p in generated]
    assert [p.name.removesuffix(".prometheusrule.yaml") for p in generated] == [
        p.name.removesuffix(".rules.yml") for p in sources
    ]
    names = set()
    for source, manifest_path in zip(sources, generated, strict=True):
        manifest = yaml.safe_load(manifest_path.read_text())
        assert manifest["apiVersion"] == "monitoring.coreos.com/v1"
        assert manifest["kind"] == "PrometheusRule"
        assert manifest["spec"]["groups"] == yaml.safe_load(source.read_text())["groups"]
        names.add(manifest["metadata"]["name"])
    assert len(names) == len(generated), "each PrometheusRule needs its own name"


def test_compose_alertmanager_keeps_routing_and_inhibition() -> None:
    example = yaml.safe_load((PROM_DIR / "alertmanager.example.yml").read_text())
    compose = yaml.safe_load((COMPOSE_DIR / "alertmanager.yml").read_text())
    assert compose["route"] == example["route"]
    assert compose["inhibit_rules"] == example["inhibit_rules"]
    assert [r["name"] for r in compose["receivers"]] == [r["name"] for r in example["receivers"]]
    assert all(set(r) == {"name"} for r in compose["receivers"]), "the demo sends nowhere"


def test_compose_datasource_differs_only_in_url() -> None:
    source = yaml.safe_load(
        (REPO / "grafana" / "provisioning" / "datasources" / "specmon.yml").read_text()
    )
    compose = yaml.safe_load((COMPOSE_DIR / "grafana-datasource.yml").read_text())
    assert compose["datasources"][0].pop("url") == "http://prometheus:9090"
    source["datasources"][0].pop("url")
    assert compose == source


@pytest.fixture
def sandbox_generator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The generator pointed at a copy of its sources and outputs."""
    module = _load_generator()
    copies = {
        "PROM_DIR": PROM_DIR,
        "K8S_RULES_DIR": K8S_RULES,
        "K8S_DASHBOARDS_DIR": K8S_DASHBOARDS,
        "GRAFANA_DASHBOARDS": GRAFANA_DASHBOARDS,
        "MIXIN_GENERATED": MIXIN_GENERATED,
        "COMPOSE_DIR": COMPOSE_DIR,
        "HELM_RULES_DIR": HELM_FILES / "rules",
        "HELM_DASHBOARDS_DIR": HELM_FILES / "dashboards",
    }
    for attribute, path in copies.items():
        target = tmp_path / path.relative_to(REPO)
        shutil.copytree(path, target)
        monkeypatch.setattr(module, attribute, target)
    datasource = tmp_path / module.GRAFANA_DATASOURCE.relative_to(REPO)
    datasource.parent.mkdir(parents=True)
    shutil.copy(module.GRAFANA_DATASOURCE, datasource)
    monkeypatch.setattr(module, "GRAFANA_DATASOURCE", datasource)
    monkeypatch.setattr(module, "REPO", tmp_path)
    return module


def test_check_notices_a_changed_rule(sandbox_generator: ModuleType) -> None:
    gen = sandbox_generator
    assert gen.stale_files() == []
    rules = gen.PROM_DIR / "specmon-alerts.rules.yml"
    rules.write_text(rules.read_text().replace("for: 15m", "for: 20m", 1))
    assert sorted(gen.stale_files()) == [
        "deploy/helm/specmon/files/rules/specmon-alerts.rules.yml",
        "deploy/kubernetes/base/rules/specmon-alerts.prometheusrule.yaml",
        "deploy/mixin/generated/specmon-alerts.rules.json",
    ]
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.stale_files() == []


def test_check_notices_new_and_removed_rules_files(sandbox_generator: ModuleType) -> None:
    gen = sandbox_generator
    (gen.PROM_DIR / "extra.rules.yml").write_text("groups: []\n")
    (gen.PROM_DIR / "engine-recording.rules.yml").unlink()
    stale = gen.stale_files()
    assert "deploy/kubernetes/base/rules/extra.prometheusrule.yaml" in stale
    assert "deploy/kubernetes/base/rules/kustomization.yaml" in stale
    assert "deploy/mixin/generated/sources.libsonnet" in stale
    assert any(s.startswith("deploy/kubernetes/base/rules/engine-recording") for s in stale)
    assert any(s.startswith("deploy/mixin/generated/engine-recording") for s in stale)
    gen.main([])
    assert gen.stale_files() == []
    names = sorted(p.name for p in gen.K8S_RULES_DIR.glob("*.yaml"))
    assert names == [
        "extra.prometheusrule.yaml",
        "kustomization.yaml",
        "specmon-alerts.prometheusrule.yaml",
    ]
    assert yaml.safe_load((gen.K8S_RULES_DIR / "kustomization.yaml").read_text())["resources"] == [
        "extra.prometheusrule.yaml",
        "specmon-alerts.prometheusrule.yaml",
    ]
    sources = (gen.MIXIN_GENERATED / "sources.libsonnet").read_text()
    assert "extra.rules.json" in sources and "engine-recording" not in sources


def test_check_notices_changed_routing_and_datasource(sandbox_generator: ModuleType) -> None:
    gen = sandbox_generator
    example = gen.PROM_DIR / "alertmanager.example.yml"
    example.write_text(example.read_text().replace("group_wait: 30s", "group_wait: 1m"))
    gen.GRAFANA_DATASOURCE.write_text(
        gen.GRAFANA_DATASOURCE.read_text().replace("timeInterval: 15s", "timeInterval: 30s")
    )
    assert sorted(gen.stale_files()) == [
        "deploy/compose/alertmanager.yml",
        "deploy/compose/grafana-datasource.yml",
    ]


def test_check_notices_changed_new_and_removed_dashboards(sandbox_generator: ModuleType) -> None:
    """Regenerating after a dashboard changes is one command, whatever the JSON's form."""
    gen = sandbox_generator
    overview = gen.GRAFANA_DASHBOARDS / "specmon-overview.json"
    overview.write_text(overview.read_text().replace('"specmon / Overview"', '"Overview"'))
    assert sorted(gen.stale_files()) == [
        "deploy/helm/specmon/files/dashboards/specmon-overview.json",
        "deploy/kubernetes/base/dashboards/specmon-overview.json",
        "deploy/mixin/generated/dashboards/specmon-overview.json",
    ]
    (gen.GRAFANA_DASHBOARDS / "specmon-target.json").rename(gen.GRAFANA_DASHBOARDS / "fleet.json")
    stale = gen.stale_files()
    assert "deploy/kubernetes/base/dashboards/kustomization.yaml" in stale
    assert "deploy/kubernetes/base/dashboards/specmon-target.json (its source is gone)" in stale
    assert "deploy/helm/specmon/files/dashboards/specmon-target.json (its source is gone)" in stale
    assert gen.main([]) == 0
    assert gen.stale_files() == []
    assert sorted(p.name for p in gen.K8S_DASHBOARDS_DIR.glob("*.json")) == [
        "fleet.json",
        "specmon-overview.json",
    ]
    kustomization = yaml.safe_load((gen.K8S_DASHBOARDS_DIR / "kustomization.yaml").read_text())
    generators = {g["name"]: g for g in kustomization["configMapGenerator"]}
    assert sorted(generators) == ["specmon-fleet-dashboard", "specmon-overview-dashboard"]
    for entry in generators.values():
        assert entry["options"]["labels"]["grafana_dashboard"] == "1"
        assert entry["options"]["disableNameSuffixHash"] is True
    copied = (gen.K8S_DASHBOARDS_DIR / "specmon-overview.json").read_text()
    assert copied == overview.read_text()


def test_generated_dashboard_and_rule_copies_are_the_sources() -> None:
    for source in sorted(GRAFANA_DASHBOARDS.glob("*.json")):
        assert (K8S_DASHBOARDS / source.name).read_bytes() == source.read_bytes()


# --------------------------------------------------------------------------- PromQL marks


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return _load_generator()


def _filled(gen: ModuleType, marked: str, specmon: str, engine: str = "", tap: str = "") -> str:
    """What deploy/mixin/mixin.libsonnet does with a marked expression (tested against the
    real jsonnet in test_kustomize.py)."""
    out = marked
    for kind, selector in (("specmon", specmon), ("engine", engine), ("tap", tap)):
        forms = {
            "append": "," + selector if selector else "",
            "braces": "{" + selector + "}" if selector else "",
            "inside": selector,
        }
        for form, text in forms.items():
            out = out.replace(gen.mark(kind, form), text)
    return out


RECORDED = frozenset({"instance:vllm_drafts:increase5m"})


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("specmon_up", 'specmon_up{job="s"}'),
        ('specmon_up{window="5m"}', 'specmon_up{window="5m",job="s"}'),
        ('specmon_up{window="5m",}', 'specmon_up{window="5m",job="s"}'),
        ("specmon_up{}", 'specmon_up{job="s"}'),
        ("rate(specmon_drafts_total[5m])", 'rate(specmon_drafts_total{job="s"}[5m])'),
        (
            "sum by (target, model) (rate(specmon_x[$__rate_interval]))",
            'sum by (target, model) (rate(specmon_x{job="s"}[$__rate_interval]))',
        ),
        (
            "max without (engine) (specmon_a) * on (target) group_left (model) specmon_b",
            'max without (engine) (specmon_a{job="s"}) * on (target) group_left (model) '
            'specmon_b{job="s"}',
        ),
        (
            'increase({__name__=~"vllm:a_total|vllm_a_total"}[5m])',
            'increase({__name__=~"vllm:a_total|vllm_a_total",ns="i"}[5m])',
        ),
        ("vllm:num_drafts_total offset 5m", 'vllm:num_drafts_total{ns="i"} offset 5m'),
        # Recorded series and Prometheus's ALERTS are computed, not scraped: no mark.
        ("instance:vllm_drafts:increase5m / 2", "instance:vllm_drafts:increase5m / 2"),
        ('ALERTS{alertname="X"} or vector(0)', 'ALERTS{alertname="X"} or vector(0)'),
        # Strings, label names, Grafana variables and numbers are not series.
        (
            'label_replace(specmon_up, "a", "$1", "b", "(x{1})")',
            'label_replace(specmon_up{job="s"}, "a", "$1", "b", "(x{1})")',
        ),
        ("label_values(specmon_up, target)", 'label_values(specmon_up{job="s"}, target)'),
        ("label_values(target)", "label_values(target)"),
        (
            'specmon_up{target=~"$target"} > 1e6 and bool 0.5',
            'specmon_up{target=~"$target",job="s"} > 1e6 and bool 0.5',
        ),
        (
            "avg_over_time((specmon_a and specmon_b >= 400)[1h:1m] offset 30m)",
            'avg_over_time((specmon_a{job="s"} and specmon_b{job="s"} >= 400)[1h:1m] offset 30m)',
        ),
        ("# specmon_up in a comment\nspecmon_up", '# specmon_up in a comment\nspecmon_up{job="s"}'),
        # A specmon tap's series take the tap's selector.
        (
            'rate(specmon_tap_requests_total{class="a"}[5m]) / specmon_up',
            'rate(specmon_tap_requests_total{class="a",job="t"}[5m]) / specmon_up{job="s"}',
        ),
    ],
)
def test_marks_take_the_selector_wherever_a_series_is_read(
    gen: ModuleType, expr: str, expected: str
) -> None:
    marked = gen.mark_selectors(expr, RECORDED)
    assert _filled(gen, marked, 'job="s"', 'ns="i"', 'job="t"') == expected
    assert _filled(gen, marked, "") == expr, "no selector: the expression as it was"


def test_marks_refuse_an_expression_holding_the_delimiter(gen: ModuleType) -> None:
    with pytest.raises(ValueError, match="delimiter"):
        gen.mark_selectors(f'specmon_up{{a="{gen.MARK}"}}', RECORDED)


def test_every_shipped_expression_round_trips(gen: ModuleType) -> None:
    """The generated mixin sources, with the marks removed, are the shipped files."""
    for source in sorted(PROM_DIR.glob("*.rules.yml")):
        marked = json.loads(
            (MIXIN_GENERATED / (source.name.removesuffix(".yml") + ".json")).read_text()
        )
        for group in marked["groups"]:
            for rule in group["rules"]:
                rule["expr"] = _filled(gen, rule["expr"], "")
        assert marked == yaml.safe_load(source.read_text())
    for source in sorted(GRAFANA_DASHBOARDS.glob("*.json")):
        marked = json.loads((MIXIN_GENERATED / "dashboards" / source.name).read_text())
        for owner, key in gen.dashboard_queries(marked):
            owner[key] = _filled(gen, owner[key], "")
        assert marked == json.loads(source.read_text())
