"""deploy/helm/specmon's README values table (tools/helm_values_table.py) and values.schema.json
against values.yaml, without Helm (fast tier; tests/deploy/test_helm.py renders the chart)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "specmon"
SCRIPT = REPO / "tools" / "helm_values_table.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("helm_values_table", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_values_table_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_changed_comment_makes_the_table_stale(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    chart.mkdir()
    for name in ("README.md", "values.yaml"):
        (chart / name).write_text((CHART / name).read_text())
    check = [sys.executable, str(SCRIPT), "--check", "--chart", str(chart)]
    assert subprocess.run(check, capture_output=True, timeout=60).returncode == 0
    values = (chart / "values.yaml").read_text()
    (chart / "values.yaml").write_text(
        values.replace("# -- Service type.", "# -- The Service's type.")
    )
    stale = subprocess.run(check, capture_output=True, text=True, timeout=60)
    assert stale.returncode == 1 and "stale" in stale.stderr
    subprocess.run([*check[:2], "--chart", str(chart)], check=True, capture_output=True)
    assert '| `service.type` | string | `"ClusterIP"` | The Service\'s type. |' in (
        (chart / "README.md").read_text()
    )


def test_rows_follow_the_comments_and_the_parsed_defaults() -> None:
    text = (
        "# a header, not documentation\n"
        "# -- Top.\n"
        "top: 1\n"
        "group:\n"
        "  # -- Inner, on\n"
        "  # two lines.\n"
        "  inner: {a: 1}\n"
        "  plain: true\n"
        "# -- A list.\n"
        "items:\n"
        "  - name: x\n"
    )
    rows = _script().rows(text)
    assert [(r.key, r.type, r.default, r.description) for r in rows] == [
        ("top", "int", 1, "Top."),
        ("group.inner", "object", {"a": 1}, "Inner, on two lines."),
        ("items", "list", [{"name": "x"}], "A list."),
    ]


def test_every_value_is_documented_and_in_the_schema() -> None:
    """Every key of values.yaml has a `# --` comment, or sits under one that has (config,
    resources, ...); the schema knows every top-level key (and rejects any other: Helm checks
    the defaults against it, tests/deploy/test_helm.py an unknown key)."""
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    documented = {row.key for row in _script().rows(text)}

    def missing(node: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for key, value in node.items():
            path = f"{prefix}{key}"
            if path in documented:
                continue
            if isinstance(value, dict) and value:
                out += missing(value, path + ".")
            else:
                out.append(path)
        return out

    assert missing(values, "") == []
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) - {"global"} == set(values)
    for key, value in values.items():
        if isinstance(value, dict) and schema["properties"][key].get("properties"):
            assert set(value) <= set(schema["properties"][key]["properties"]), key
            assert schema["properties"][key]["additionalProperties"] is False, key


def test_the_kubernetes_page_offers_helm_first_and_names_the_three_traps() -> None:
    """docs/kubernetes.md as a new user reads it: Helm before kustomize; the sharded layout
    needs a 1.28 cluster (kubectl 1.27 is kustomize's need only); the standalone overlay as
    shipped is not loaded by a default kube-prometheus-stack and gets 401, and what to change;
    the sidecar layout's Secrets in the engines' namespace."""
    doc = (REPO / "docs" / "kubernetes.md").read_text()
    helm = doc.index("helm install specmon deploy/helm/specmon")
    kustomize = doc.index("kubectl apply -k deploy/kubernetes/overlays/standalone")
    assert doc.index("## 2. With Helm") < helm < doc.index("## 3. With kustomize") < kustomize
    assert "1.28 or later **cluster**" in doc
    shipped = doc[kustomize : doc.index("The patches, each as in the example")]
    for needle in ("loads nothing", "release: kube-prometheus-stack", "401", "patch 3", "patch 5"):
        assert needle in shipped, needle
    secrets = doc[doc.index("### The certificate and the password") : doc.index("### Apply")]
    assert "**`inference` for the\nsidecar layout**" in secrets and "-n inference" in secrets
    readme = (CHART / "README.md").read_text()
    assert "helm install specmon deploy/helm/specmon --namespace monitoring" in readme
