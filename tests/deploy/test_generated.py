"""deploy/generate.py: the derived deployment files never drift from their sources."""

from __future__ import annotations

import importlib.util
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
K8S_RULES = REPO / "deploy" / "kubernetes" / "rules"
COMPOSE_DIR = REPO / "deploy" / "compose"


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
        "COMPOSE_DIR": COMPOSE_DIR,
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
    assert gen.stale_files() == ["deploy/kubernetes/rules/specmon-alerts.prometheusrule.yaml"]
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.stale_files() == []


def test_check_notices_new_and_removed_rules_files(sandbox_generator: ModuleType) -> None:
    gen = sandbox_generator
    (gen.PROM_DIR / "extra.rules.yml").write_text("groups: []\n")
    (gen.PROM_DIR / "engine-recording.rules.yml").unlink()
    stale = gen.stale_files()
    assert "deploy/kubernetes/rules/extra.prometheusrule.yaml" in stale
    assert any(s.startswith("deploy/kubernetes/rules/engine-recording") for s in stale)
    gen.main([])
    assert gen.stale_files() == []
    names = sorted(p.name for p in gen.K8S_RULES_DIR.glob("*.yaml"))
    assert names == ["extra.prometheusrule.yaml", "specmon-alerts.prometheusrule.yaml"]


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
