"""deploy/helm/specmon rendered by the real Helm (v3.17.2 from the pinned wheel, tools.helm()):
lint, package, every documented values example, the strict schemas of test_kustomize.py, the
kustomize standalone overlay it reproduces, the toggles, kube-prometheus-stack's default
selectors, the shipped rules and dashboards byte for byte, and the sizes Kubernetes and Helm
allow. Nothing is installed (no cluster): `helm test` is rendered, not run."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import tools

REPO = tools.REPO
CHART = REPO / "deploy" / "helm" / "specmon"
EXAMPLES = {p.stem: p for p in sorted((CHART / "examples").glob("*.yaml"))}
DOCUMENTED_EXAMPLES = (
    "standalone",
    "sidecar",
    "sidecar-tap",
    "sharded",
    "prometheus-mode",
    "kube-prometheus-stack",
)
PROM_DIR = REPO / "deploy" / "prometheus"
RULES = sorted(PROM_DIR.glob("*.rules.yml"))
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
#: The Kubernetes version helm template renders for (the oldest the schemas check); sharding
#: needs 1.28.
KUBE_VERSION = "1.29.0"
NAMESPACE = "monitoring"
RELEASE = "specmon"
#: Labels Helm's conventions add, which the kustomize overlays do not carry.
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "release",
    }
)
#: kube-prometheus-stack's defaults, as its chart renders them for a release named R:
#: charts/kube-prometheus-stack/templates/prometheus/prometheus.yaml in
#: prometheus-community/helm-charts (serviceMonitorSelector, podMonitorSelector and
#: ruleSelector are `matchLabels: {release: R}` while the values' *SelectorNilUsesHelmValues
#: are true, their default, and the selectors themselves are unset), and its values.yaml's
#: grafana.sidecar.dashboards (label grafana_dashboard, labelValue "1", no searchNamespace:
#: the sidecar reads Grafana's own namespace). docs/kubernetes.md installs it as the release
#: "kube-prometheus-stack" in "monitoring".
STACK_RELEASE = "kube-prometheus-stack"
STACK_NAMESPACE = "monitoring"
STACK_SELECTORS = {
    "ServiceMonitor": {"release": STACK_RELEASE},
    "PodMonitor": {"release": STACK_RELEASE},
    "PrometheusRule": {"release": STACK_RELEASE},
}
STACK_DASHBOARD_LABEL = ("grafana_dashboard", "1")
#: What Kubernetes and Helm allow: an object's annotations (client-side apply's last-applied
#: copy of a ConfigMap) 256 KiB; a Secret (where Helm stores each release) 1 MiB.
ANNOTATION_LIMIT = 256 * 1024
RELEASE_LIMIT = 1024 * 1024

pytestmark = pytest.mark.deploytools


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [tools.helm(), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


@cache
def render_text(
    *values: str, sets: tuple[str, ...] = (), kube: str = KUBE_VERSION, chart: str = str(CHART)
) -> str:
    args = ["template", RELEASE, chart, "--namespace", NAMESPACE, "--kube-version", kube]
    args += ["--api-versions", "monitoring.coreos.com/v1"]
    for name in values:
        args += ["-f", str(EXAMPLES[name])]
    for item in sets:
        args += ["--set", item]
    return helm(*args).stdout


def render(*values: str, sets: tuple[str, ...] = (), kube: str = KUBE_VERSION) -> list[Any]:
    return [d for d in yaml.safe_load_all(render_text(*values, sets=sets, kube=kube)) if d]


def _kinds(docs: list[Any]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def _shipped_file(doc: dict[str, Any]) -> bool:
    """A PrometheusRule or dashboard ConfigMap: the shipped files, carried untemplated."""
    labels = doc.get("metadata", {}).get("labels") or {}
    return doc.get("kind") == "PrometheusRule" or (
        doc.get("kind") == "ConfigMap" and labels.get("app.kubernetes.io/component") == "dashboards"
    )


def _one(docs: list[Any], kind: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind]
    return dict(found)


def _is_dashboard(doc: dict[str, Any]) -> bool:
    return doc["kind"] == "ConfigMap" and "grafana_dashboard" in doc["metadata"].get("labels", {})


def _config(docs: list[Any]) -> dict[str, Any]:
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and not _is_dashboard(d)]
    parsed: dict[str, Any] = yaml.safe_load(configmap["data"]["specmon.yml"])
    return parsed


def _container(docs: list[Any]) -> dict[str, Any]:
    (workload,) = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(container)


def notes(*values: str, tmp_path: Path, sets: tuple[str, ...] = ()) -> str:
    """NOTES.txt as `helm install` prints it (helm template leaves it out, and a dry-run
    install needs a cluster): a copy of the chart whose extra template renders it into a
    ConfigMap."""
    chart = tmp_path / "specmon"
    shutil.copytree(CHART, chart)
    text = (CHART / "templates" / "NOTES.txt").read_text()
    (chart / "templates" / "zz-notes.yaml").write_text(
        '{{- define "test.notes" }}' + text + "{{- end }}\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ include "test.notes" . | toJson }}}\n'
    )
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    args += ["--kube-version", KUBE_VERSION, "--show-only", "templates/zz-notes.yaml"]
    for name in values:
        args += ["-f", str(EXAMPLES[name])]
    for item in sets:
        args += ["--set", item]
    note: str = yaml.safe_load(helm(*args).stdout)["data"]["notes"]
    return note


# --------------------------------------------------------------------------- Helm itself


def test_the_examples_are_the_documented_ones() -> None:
    assert sorted(EXAMPLES) == sorted(DOCUMENTED_EXAMPLES)
    readme = (CHART / "README.md").read_text()
    for name in DOCUMENTED_EXAMPLES:
        assert f"examples/{name}.yaml" in readme, name


@pytest.mark.parametrize("example", [None, *DOCUMENTED_EXAMPLES])
def test_helm_lint_strict_passes(example: str | None) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    if example is not None:
        args += ["-f", str(EXAMPLES[example])]
    result = helm(*args)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout


def test_helm_package_gives_the_chart_archive(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("*.tgz")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert archive.name == f"specmon-{chart['version']}.tgz"
    with tarfile.open(archive) as packed:
        names = set(packed.getnames())
    for needed in (
        "Chart.yaml",
        "values.yaml",
        "values.schema.json",
        "README.md",
        "templates/NOTES.txt",
        "templates/tests/test-metrics.yaml",
        *(f"files/rules/{p.name}" for p in RULES),
        *(f"files/dashboards/{p.name}" for p in DASHBOARDS),
    ):
        assert f"specmon/{needed}" in names, needed


def test_app_version_is_specmons_and_the_image_tag_defaults_to_it() -> None:
    from specmon import __version__

    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == __version__
    # The image the README's podman build makes (tests/deploy/test_image.py builds it so).
    assert _container(render())["image"] == f"localhost/specmon:{__version__}"
    tagged = render(sets=("image.tag=9.9.9", "image.registry=registry.example.com"))
    assert _container(tagged)["image"] == "registry.example.com/specmon:9.9.9"
    digest = "sha256:" + "ab" * 32
    assert _container(render(sets=(f"image.digest={digest}",)))["image"].endswith("@" + digest)


def test_rendering_is_deterministic() -> None:
    """Nothing generated at render time (no random password, no certificate, no date)."""
    once = render_text.__wrapped__()
    assert once == render_text.__wrapped__()


def test_a_values_file_with_an_unknown_key_fails_the_schema(tmp_path: Path) -> None:
    for bad, where in (
        ("serviceMonitr: {enabled: false}\n", "serviceMonitr"),
        ("prometheusRule: {enable: false}\n", "enable"),
        ("webConfig: {enabled: true, existingSecrets: mine}\n", "existingSecrets"),
        ("mode: daemonset\n", "mode"),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(bad)
        result = helm("template", RELEASE, str(CHART), "-f", str(path), check=False)
        assert result.returncode != 0, bad
        assert "values don't meet the specifications of the schema" in result.stderr, bad
        assert where in result.stderr, result.stderr


# --------------------------------------------------------------------------- what it renders

#: Every variant the tests render and validate: the defaults, the examples, and the toggles
#: that add objects.
VARIANTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "defaults": ((), ()),
    **{name: ((name,), ()) for name in DOCUMENTED_EXAMPLES},
    "persistence": ((), ("persistence.enabled=true",)),
    "sharded-persistence": (("sharded",), ("persistence.enabled=true",)),
    "everything-on": (
        ("kube-prometheus-stack",),
        ("podDisruptionBudget.enabled=true", "persistence.enabled=true"),
    ),
}


def test_every_rendered_object_validates_against_its_schema(tmp_path: Path) -> None:
    """The strict schemas of test_kustomize.py (Kubernetes 1.29 and 1.37, prometheus-operator's
    CRDs): every object of the defaults, of every example and of the toggles that add one."""
    from tests.deploy.test_kubernetes import validate

    paths, expected, seen = [], set(), set()
    for name, (values, sets) in VARIANTS.items():
        # Each distinct object once (the rules and dashboards are the same in every variant).
        docs = []
        for doc in render(*values, sets=sets):
            key = json.dumps(doc, sort_keys=True)
            if key not in seen:
                seen.add(key)
                docs.append(doc)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        paths.append(path)
        expected |= {(path.as_posix(), d["kind"], d["metadata"]["name"]) for d in docs}
    results = validate(paths)
    failures = [r for r in results if r["errors"]]
    assert not failures, json.dumps(failures, indent=1)
    assert {(r["file"], r["kind"], r["name"]) for r in results} == expected
    kinds = {r["kind"] for r in results}
    assert kinds == {
        "ConfigMap",
        "Deployment",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "Pod",
        "PodDisruptionBudget",
        "PodMonitor",
        "PrometheusRule",
        "Secret",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
        "StatefulSet",
    }


@pytest.mark.parametrize("variant", ["defaults", *DOCUMENTED_EXAMPLES])
def test_specmon_check_config_passes_on_the_rendered_config(variant: str, tmp_path: Path) -> None:
    values, sets = VARIANTS[variant]
    (configmap,) = [
        d for d in render(*values, sets=sets) if d["kind"] == "ConfigMap" and not _is_dashboard(d)
    ]
    path = tmp_path / "specmon.yml"
    path.write_text(configmap["data"]["specmon.yml"])
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The alert rules read the 5m and 15m windows.
    assert {"5m", "15m"} <= set(yaml.safe_load(path.read_text())["global"]["windows"])


def _without_helm_labels(node: Any) -> Any:
    """``node`` with Helm's labels taken out of every label map and selector."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            flat = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
            # labels, a selector's matchLabels, and a Service's selector (a flat map)
            if key in ("labels", "matchLabels", "selector") and flat:
                value = {k: v for k, v in value.items() if k not in HELM_LABELS}
            out[key] = _without_helm_labels(value)
        return out
    if isinstance(node, list):
        return [_without_helm_labels(item) for item in node]
    return node


def _comparable(docs: list[Any] | tuple[Any, ...]) -> dict[tuple[str, str], Any]:
    """(kind, name) -> the object without Helm's labels, the pods' checksum/config annotation
    and the `helm test` hook; config files and web configs parsed (Helm writes them with
    toYaml, the overlay by hand with comments)."""
    out = {}
    for doc in docs:
        if "helm.sh/hook" in doc["metadata"].get("annotations", {}):
            continue
        doc = _without_helm_labels(doc)
        template = doc.get("spec", {}).get("template", {}).get("metadata", {})
        annotations = template.get("annotations", {})
        annotations.pop("checksum/config", None)
        if "annotations" in template and not annotations:
            del template["annotations"]
        if doc["kind"] == "ConfigMap" and "specmon.yml" in doc["data"]:
            doc["data"]["specmon.yml"] = yaml.safe_load(doc["data"]["specmon.yml"])
        if doc["kind"] == "Secret" and "web.yml" in doc.get("stringData", {}):
            doc["stringData"]["web.yml"] = yaml.safe_load(doc["stringData"]["web.yml"])
        out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_standalone_example_renders_the_kustomize_standalone_overlay() -> None:
    """examples/standalone.yaml (fullnameOverride specmon, namespace monitoring): the overlay's
    objects, names, kinds and specs, apart from Helm's labels, the checksum/config annotation
    and the helm test pod (README, "The examples")."""
    from tests.deploy.test_kustomize import overlay

    chart = _comparable(render("standalone"))
    kustomize = _comparable(overlay("standalone"))
    assert sorted(chart) == sorted(kustomize)
    for key, expected in kustomize.items():
        assert chart[key] == expected, key
    # What was left out of the comparison is there, and only that.
    docs = render("standalone")
    hooks = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    assert [(d["kind"], d["metadata"]["annotations"]["helm.sh/hook"]) for d in hooks] == [
        ("Pod", "test")
    ]
    pod = _one(docs, "Deployment")["spec"]["template"]["metadata"]
    assert set(pod["annotations"]) == {"checksum/config"}


def _differences(a: Any, b: Any, path: str = "") -> set[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = set()
        for key in a.keys() | b.keys():
            if key not in a or key not in b:
                out.add(f"{path}.{key}")
            else:
                out |= _differences(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{path}[{i}]")
        }
    return set() if a == b else {path}


def test_the_defaults_differ_from_the_standalone_example_only_where_documented() -> None:
    """The README's "The defaults differ from it in" list, path by path (same release name,
    so the names compare)."""
    example = _comparable(render("standalone"))
    defaults = _comparable(render(sets=("fullnameOverride=specmon",)))
    assert set(example) - set(defaults) == {
        ("Secret", "specmon-web"),
        ("PersistentVolumeClaim", "specmon-state"),
    }
    assert set(defaults) - set(example) == {("ServiceAccount", "specmon")}
    found = {
        f"{kind}{where}"
        for key in set(example) & set(defaults)
        for kind in [key[0]]
        for where in _differences(example[key], defaults[key])
    }
    pod = "Deployment.spec.template.spec"
    container = f"{pod}.containers[0]"
    assert found == {
        # plain HTTP: the port's name, no --web.config.file, probes over HTTP
        f"{container}.args",
        f"{container}.ports[0].name",
        f"{container}.livenessProbe.httpGet.scheme",
        f"{container}.livenessProbe.httpGet.port",
        f"{container}.readinessProbe.httpGet.scheme",
        f"{container}.readinessProbe.httpGet.port",
        "Service.spec.ports[0].name",
        "Service.spec.ports[0].targetPort",
        # ... and no TLS or basic auth in the ServiceMonitor
        "ServiceMonitor.spec.endpoints[0].port",
        "ServiceMonitor.spec.endpoints[0].scheme",
        "ServiceMonitor.spec.endpoints[0].tlsConfig",
        "ServiceMonitor.spec.endpoints[0].basicAuth",
        # a ServiceAccount of its own
        f"{pod}.serviceAccountName",
        # the dashboards' folder annotation
        "ConfigMap.metadata.annotations",
        # no state volume: no --state.dir (args, above), no volume, no Recreate (the volumes
        # differ in number: the projected sources' difference, above, is inside this one)
        f"{container}.volumeMounts",
        f"{pod}.volumes",
        "Deployment.spec.strategy",
    }, sorted(found)


@pytest.mark.parametrize(
    ("setting", "kind"),
    [
        ("prometheusRule.enabled=false", "PrometheusRule"),
        ("serviceMonitor.enabled=false", "ServiceMonitor"),
        ("dashboards.enabled=false", "dashboards"),
        ("test.enabled=false", "Pod"),
        ("serviceAccount.create=false", "ServiceAccount"),
    ],
)
def test_a_toggle_leaves_its_objects_out_and_nothing_else(setting: str, kind: str) -> None:
    def matches(doc: dict[str, Any]) -> bool:
        return _is_dashboard(doc) if kind == "dashboards" else doc["kind"] == kind

    full = render()
    off = render(sets=(setting,))
    assert [d for d in full if matches(d)], f"the defaults render {kind}"
    assert not [d for d in off if matches(d)]
    kept = [d for d in full if not matches(d)]
    if kind == "ServiceAccount":
        # The pods then run as the namespace's default account.
        (workload,) = [d for d in kept if d["kind"] == "Deployment"]
        del workload["spec"]["template"]["spec"]["serviceAccountName"]
    assert _kinds(off) == _kinds(kept)
    assert off == kept


#: The labels prometheus-operator gives every target of a ServiceMonitor (its relabelling:
#: namespace, service, pod, container, endpoint, plus Prometheus's job and instance).
SERVICEMONITOR_TARGET_LABELS = frozenset(
    {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}
)


@pytest.mark.parametrize("variant", ["defaults", *DOCUMENTED_EXAMPLES])
def test_series_labels_that_clash_with_the_target_s_are_honoured(variant: str) -> None:
    """In Prometheus mode specmon's series carry each engine's instance labels; where they
    are the ServiceMonitor's own target labels (namespace, pod), Prometheus would rename
    them exported_* unless the endpoint honours them."""
    values, sets = VARIANTS[variant]
    docs = render(*values, sets=sets)
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and not _is_dashboard(d)]
    config = yaml.safe_load(configmap["data"]["specmon.yml"])
    carried = {
        label
        for source in config.get("sources") or []
        for label in source["prometheus"].get("instance_labels", ["instance"])
    } - {"instance", "job"}  # specmon drops these two (docs/fleet.md)
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert bool(endpoint.get("honorLabels")) == bool(carried & SERVICEMONITOR_TARGET_LABELS)
    if variant == "prometheus-mode":
        assert carried == {"namespace", "pod"} and monitors


def test_the_kustomize_prometheus_mode_honours_the_engines_labels() -> None:
    from tests.deploy.test_kustomize import overlay

    docs = overlay("prometheus-mode")
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and "specmon.yml" in d["data"]]
    (source,) = yaml.safe_load(configmap["data"]["specmon.yml"])["sources"]
    assert {"namespace", "pod"} <= set(source["prometheus"]["instance_labels"])


def test_the_notes_ask_for_honor_labels_in_prometheus_mode(tmp_path: Path) -> None:
    asked = "Set serviceMonitor.honorLabels=true"
    assert asked in notes(
        "prometheus-mode", tmp_path=tmp_path / "a", sets=("serviceMonitor.honorLabels=false",)
    )
    assert asked not in notes("prometheus-mode", tmp_path=tmp_path / "b")
    assert asked not in notes(tmp_path=tmp_path / "c")


def test_the_sidecar_toggle_leaves_the_podmonitor_out() -> None:
    assert _kinds([d for d in render("sidecar") if d["kind"] == "PodMonitor"])
    off = render("sidecar", sets=("podMonitor.enabled=false",))
    assert not [d for d in off if d["kind"] == "PodMonitor"]


def test_optional_objects_are_off_by_default_and_on_when_asked() -> None:
    kinds = {d["kind"] for d in render()}
    assert not kinds & {"PodDisruptionBudget", "NetworkPolicy", "PersistentVolumeClaim"}
    on = render(sets=("podDisruptionBudget.enabled=true", "networkPolicy.enabled=true"))
    pdb, policy = _one(on, "PodDisruptionBudget"), _one(on, "NetworkPolicy")
    selector = _one(on, "Deployment")["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert policy["spec"]["podSelector"]["matchLabels"] == selector
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    # By default, kube-prometheus-stack's Prometheus pods in its namespace, and the chart's
    # `helm test` pod in the release's.
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": STACK_NAMESPACE}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        },
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "specmon",
                    "app.kubernetes.io/component": "test",
                    "app.kubernetes.io/instance": RELEASE,
                }
            }
        },
    ]


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) against labels; an empty
    selector selects everything."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def _admits(policy: dict[str, Any], *, labels: dict[str, str], namespace: str, port: str) -> bool:
    """Does this NetworkPolicy let a pod with ``labels`` in ``namespace`` reach ``port`` (a
    named port)? Kubernetes' rules for ingress peers: a podSelector alone means the policy's
    namespace; a namespaceSelector matches the namespace's labels, which include
    kubernetes.io/metadata.name; both in one peer must both match."""
    ns_labels = {"kubernetes.io/metadata.name": namespace}
    home = policy["metadata"]["namespace"]
    for rule in policy["spec"].get("ingress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port for p in ports):
            continue
        for peer in rule.get("from") or []:
            if "ipBlock" in peer:
                continue
            if "namespaceSelector" in peer:
                ns_ok = _selects(peer["namespaceSelector"], ns_labels)
            else:
                ns_ok = namespace == home
            if ns_ok and _selects(peer.get("podSelector"), labels):
                return True
    return False


def test_the_secured_network_policy_admits_the_chart_test_pod_and_prometheus() -> None:
    """The secured example (networkPolicy on, HTTPS): its NetworkPolicy's selectors, read
    against the `helm test` pod's labels and namespace and the port it reaches through the
    Service, admit it; Prometheus too; any other pod of the namespace not."""
    docs = render("kube-prometheus-stack")
    policy = _one(docs, "NetworkPolicy")
    pod = _one(docs, "Pod")
    workload = _one(docs, "Deployment")["spec"]["template"]
    assert _selects(policy["spec"]["podSelector"], workload["metadata"]["labels"])
    # The test pod asks the Service; its port leads to the container's named port.
    (service_port,) = _one(docs, "Service")["spec"]["ports"]
    (container_port,) = workload["spec"]["containers"][0]["ports"]
    assert service_port["targetPort"] == container_port["name"] == "https"
    assert f":{service_port['port']}/metrics" in pod["spec"]["containers"][0]["env"][0]["value"]
    test = {"labels": pod["metadata"]["labels"], "namespace": pod["metadata"]["namespace"]}
    assert _admits(policy, **test, port="https")
    prometheus = {"app.kubernetes.io/name": "prometheus"}
    assert _admits(policy, labels=prometheus, namespace=STACK_NAMESPACE, port="https")
    stranger = {"app.kubernetes.io/name": "curl"}
    assert not _admits(policy, labels=stranger, namespace=NAMESPACE, port="https")
    assert not _admits(policy, labels=prometheus, namespace="elsewhere", port="https")
    # The same labels elsewhere are not the test pod: the rule keeps to the namespace.
    assert not _admits(policy, labels=test["labels"], namespace="elsewhere", port="https")
    # Without the test pod, no rule for it.
    off = render("kube-prometheus-stack", sets=("test.enabled=false",))
    assert not [d for d in off if d["kind"] == "Pod"]
    assert not _admits(_one(off, "NetworkPolicy"), **test, port="https")


# --------------------------------------------------------------------------- kube-prometheus-stack


@pytest.mark.parametrize("variant", ["defaults", "sidecar", "sharded", "prometheus-mode"])
def test_the_defaults_are_loaded_by_a_default_kube_prometheus_stack(variant: str) -> None:
    """Monitors and rules match the stack's default selectors (STACK_SELECTORS, with their
    source); plain HTTP with no password to get wrong (no 401); the dashboards carry the
    sidecar's default label in the namespace Grafana reads."""
    values, sets = VARIANTS[variant]
    docs = render(*values, sets=sets)
    selected = [d for d in docs if d["kind"] in STACK_SELECTORS]
    assert {d["kind"] for d in selected} >= {"PrometheusRule"}
    assert {d["kind"] for d in selected} & {"ServiceMonitor", "PodMonitor"}
    for doc in selected:
        labels = doc["metadata"]["labels"]
        for key, value in STACK_SELECTORS[doc["kind"]].items():
            assert labels.get(key) == value, (doc["kind"], doc["metadata"]["name"])
        assert doc["metadata"]["namespace"] == NAMESPACE
    for monitor in [d for d in docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]:
        endpoints = monitor["spec"].get("endpoints") or monitor["spec"]["podMetricsEndpoints"]
        for endpoint in endpoints:
            assert endpoint["scheme"] == "http"
            assert "basicAuth" not in endpoint and "tlsConfig" not in endpoint
    dashboards = [d for d in docs if _is_dashboard(d)]
    assert len(dashboards) == len(DASHBOARDS)
    label, value = STACK_DASHBOARD_LABEL
    for dashboard in dashboards:
        assert dashboard["metadata"]["labels"][label] == value
        assert dashboard["metadata"]["namespace"] == STACK_NAMESPACE


def test_the_sidecar_example_puts_its_dashboards_where_grafana_reads() -> None:
    """Installed in the engines' namespace, its dashboards still go to the stack's."""
    args = ["template", RELEASE, str(CHART), "--namespace", "inference", "--kube-version"]
    args += [KUBE_VERSION, "--api-versions", "monitoring.coreos.com/v1", "-f"]
    args += [str(EXAMPLES["sidecar"])]
    rendered = [d for d in yaml.safe_load_all(helm(*args).stdout) if d]
    for doc in rendered:
        expected = STACK_NAMESPACE if _is_dashboard(doc) else "inference"
        assert doc["metadata"]["namespace"] == expected, doc["metadata"]["name"]
    assert _kinds(rendered) == [
        ("ConfigMap", "specmon-sidecar"),
        ("ConfigMap", "specmon-sidecar-overview-dashboard"),
        ("ConfigMap", "specmon-sidecar-target-dashboard"),
        ("PodMonitor", "specmon-sidecar"),
        ("PrometheusRule", "specmon-sidecar-alerts"),
        ("PrometheusRule", "specmon-sidecar-engine-recording"),
    ]
    monitor = _one(rendered, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "vllm"}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "specmon-metrics"


def test_the_sidecar_notes_give_the_container_to_add(tmp_path: Path) -> None:
    """A chart cannot inject a container: NOTES prints it, rendered from the values, with the
    volume it mounts; it is the README's, and the kustomize sidecar's but for plain HTTP."""
    from tests.deploy.test_kubernetes import derived_resources

    text = notes("sidecar", tmp_path=tmp_path)
    block = "      containers:\n" + text.split("      containers:\n", 1)[1].split("\n\n", 1)[0]
    spec = yaml.safe_load(textwrap.dedent(block))
    (container,) = spec["containers"]
    (volume,) = spec["volumes"]
    assert container["name"] == "specmon"
    assert container["ports"] == [
        {"name": "specmon-metrics", "containerPort": 10920, "protocol": "TCP"}
    ]
    assert "readinessProbe" not in container, "a sidecar must never make the engine unready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["volumeMounts"] == [
        {"name": "specmon-config", "mountPath": "/etc/specmon", "readOnly": True}
    ]
    assert volume["projected"]["sources"] == [{"configMap": {"name": "specmon-sidecar"}}]
    # The kustomize sidecar's container settings: the engine's pod sets nothing of specmon's.
    from tests.deploy.test_kustomize import overlay

    (vllm,) = [d for d in overlay("sidecar") if d["kind"] == "Deployment"]
    (twin,) = [c for c in vllm["spec"]["template"]["spec"]["containers"] if c["name"] == "specmon"]
    assert container["securityContext"] == twin["securityContext"]
    for key in ("image", "resources", "volumeMounts"):
        assert container[key] == twin[key], key
    twin_probe, probe = twin["livenessProbe"], container["livenessProbe"]
    assert {**twin_probe, "httpGet": {**twin_probe["httpGet"], "scheme": "HTTP"}} == probe
    expected = derived_resources()["sidecar"]
    assert container["resources"] == {
        "requests": {"cpu": expected["cpu_request"], "memory": expected["memory_request"]},
        "limits": {"cpu": expected["cpu_limit"], "memory": expected["memory_limit"]},
    }
    readme = (CHART / "README.md").read_text()
    (shown,) = [block for block in readme.split("```yaml\n")[1:] if block.startswith("containers:")]
    readme_spec = yaml.safe_load(shown.split("```", 1)[0])
    assert readme_spec["containers"] == [container]
    assert readme_spec["volumes"] == [volume]


def test_the_notes_say_how_to_build_and_load_the_default_image(tmp_path: Path) -> None:
    """The default image is built, not pulled: NOTES gives the commands (the README's, which
    tests/deploy/test_image.py runs), and says nothing of it for a registry's image."""
    from tests.deploy.podman import documented_commands

    readme = documented_commands((CHART / "README.md").read_text())
    text = notes(tmp_path=tmp_path / "default")
    printed = documented_commands(text)
    assert printed == readme
    assert "kind load image-archive specmon-image.tar" in text
    assert "ErrImagePull" in text
    pushed = notes("kube-prometheus-stack", tmp_path=tmp_path / "registry")
    assert "podman build" not in pushed and "ErrImagePull" not in pushed


def test_the_tap_example_prints_the_tap_container_and_scrapes_it(tmp_path: Path) -> None:
    """sidecar-tap: NOTES print specmon's container and the tap's, which is the kustomize
    sidecar-tap overlay's; the PodMonitor scrapes both; a tap outside sidecar mode, or a class
    header without classes, is refused."""
    from tests.deploy.test_kustomize import overlay

    text = notes("sidecar-tap", tmp_path=tmp_path)
    block = "      containers:\n" + text.split("      containers:\n", 1)[1].split("\n\n", 1)[0]
    spec = yaml.safe_load(textwrap.dedent(block))
    specmon, tap = spec["containers"]
    assert specmon["name"] == "specmon"
    (vllm,) = [d for d in overlay("sidecar-tap") if d["kind"] == "Deployment"]
    (twin,) = [
        c for c in vllm["spec"]["template"]["spec"]["containers"] if c["name"] == "specmon-tap"
    ]
    assert tap == twin
    assert "tap: http://127.0.0.1:9410/metrics" in text
    docs = render("sidecar-tap")
    monitor = _one(docs, "PodMonitor")
    endpoints = monitor["spec"]["podMetricsEndpoints"]
    assert [(e["port"], e["scheme"]) for e in endpoints] == [
        ("specmon-metrics", "http"),
        ("tap", "http"),
    ]
    (target,) = _config(docs)["targets"]
    assert target["tap"] == "http://127.0.0.1:9410/metrics"
    failed = helm("template", RELEASE, str(CHART), "--set", "tap.enabled=true", check=False)
    assert failed.returncode != 0 and "sidecar" in failed.stderr
    bad = helm("template", RELEASE, str(CHART), "-f", str(EXAMPLES["sidecar"]), "--set",
               "tap.enabled=true", "--set", "tap.classHeader=x-c", check=False)  # fmt: skip
    assert bad.returncode != 0 and "classes" in bad.stderr


def test_resources_follow_the_measurements() -> None:
    """The defaults are the standalone sizing (deploy/README.md, "Resources"), the sidecar
    and Prometheus-mode examples the kustomize overlays' (test_kubernetes.py derives those)."""
    from tests.deploy.test_kubernetes import derived_resources
    from tests.deploy.test_kustomize import overlay

    expected = derived_resources()["standalone"]
    assert _container(render())["resources"] == {
        "requests": {"cpu": expected["cpu_request"], "memory": expected["memory_request"]},
        "limits": {"cpu": expected["cpu_limit"], "memory": expected["memory_limit"]},
    }
    (fleet,) = [d for d in overlay("prometheus-mode") if d["kind"] == "Deployment"]
    fleet_resources = fleet["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert _container(render("prometheus-mode"))["resources"] == fleet_resources


# --------------------------------------------------------------------------- sharding, state


def test_sharding_needs_kubernetes_1_28_and_takes_its_count_from_replicas() -> None:
    old = helm(
        "template", RELEASE, str(CHART), "-f", str(EXAMPLES["sharded"]),
        "--kube-version", "1.27.9", check=False,
    )  # fmt: skip
    assert old.returncode != 0
    assert "Kubernetes 1.28 and later" in old.stderr
    # One replica needs no pod-index label: a Deployment on any supported version (Chart.yaml's
    # kubeVersion: 1.25 and later).
    assert _one(render(kube="1.25.0"), "Deployment")
    older = helm("template", RELEASE, str(CHART), "--kube-version", "1.24.0", check=False)
    assert older.returncode != 0 and "requires kubeVersion" in older.stderr
    for replicas in (3, 5):
        docs = render("sharded", sets=(f"replicas={replicas}",), kube="1.28.0")
        statefulset = _one(docs, "StatefulSet")
        assert statefulset["spec"]["replicas"] == replicas
        assert statefulset["spec"]["serviceName"] == _one(docs, "Service")["metadata"]["name"]
        assert _one(docs, "Service")["spec"]["clusterIP"] == "None"
        container = _container(docs)
        assert f"--shard=$(SHARD_INDEX)/{replicas}" in container["args"]
        (env,) = [e for e in container["env"] if e["name"] == "SHARD_INDEX"]
        assert env["valueFrom"]["fieldRef"]["fieldPath"] == (
            "metadata.labels['apps.kubernetes.io/pod-index']"
        )
    assert not [a for a in _container(render())["args"] if a.startswith("--shard")]


def test_the_state_directory_is_used_only_with_persistence() -> None:
    """Off by default: no --state.dir, no state_dir key, no claim (issue 55's daemon writes
    nothing then). On: a claim and --state.dir where it is mounted; a Deployment then
    recreates its pod (one ReadWriteOnce volume), a StatefulSet claims one per replica."""
    for variant in ("defaults", *DOCUMENTED_EXAMPLES):
        values, sets = VARIANTS[variant]
        # The shipped rules and dashboards mention state_dir in their own texts (the
        # SpecmonChangeRegressed comment): judge the objects the chart templates itself.
        own = [d for d in render(*values, sets=sets) if not _shipped_file(d)]
        text = yaml.safe_dump_all(own)
        if variant == "standalone":  # the kustomize overlay's: a claim, strategy Recreate
            assert "--state.dir=/var/lib/specmon" in text and "PersistentVolumeClaim" in text
            continue
        assert "state.dir" not in text and "state_dir" not in text, variant
        assert "PersistentVolumeClaim" not in text and "volumeClaimTemplates" not in text
    on = render(sets=("persistence.enabled=true",))
    deployment = _one(on, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    claim = _one(on, "PersistentVolumeClaim")
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    container = _container(on)
    assert "--state.dir=/var/lib/specmon" in container["args"]
    assert {"name": "state", "mountPath": "/var/lib/specmon"} in container["volumeMounts"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {
        "name": "state",
        "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
    } in volumes
    sharded = render("sharded", sets=("persistence.enabled=true",))
    assert not [d for d in sharded if d["kind"] == "PersistentVolumeClaim"]
    (template,) = _one(sharded, "StatefulSet")["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "state"
    assert "--state.dir=/var/lib/specmon" in _container(sharded)["args"]


def test_a_config_change_rolls_the_pods() -> None:
    def checksum(*sets: str) -> str:
        workload = _one(render(sets=sets), "Deployment")
        value: str = workload["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        return value

    base = checksum()
    assert len(base) == 64
    assert checksum("config.global.draft_cost=0.2") != base
    # The web config the chart writes is one of the files; unused, or in your own Secret, not.
    web = checksum("webConfig.enabled=true")
    assert web != base
    new_hash = "webConfig.config.basic_auth_users.prometheus=x"
    assert checksum("webConfig.enabled=true", new_hash) != web
    assert checksum(new_hash) == base
    existing = checksum("webConfig.enabled=true", "webConfig.existingSecret=mine")
    assert (
        existing
        == base
        == checksum("webConfig.enabled=true", "webConfig.existingSecret=mine", new_hash)
    )
    # Arguments are in the pod template itself: they roll it without the annotation.
    assert checksum("logFormat=console") == base


def test_the_helm_test_hook_fetches_metrics_through_the_service() -> None:
    for variant, scheme in (("defaults", "http"), ("kube-prometheus-stack", "https")):
        values, sets = VARIANTS[variant]
        docs = render(*values, sets=sets)
        pod = _one(docs, "Pod")
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        (container,) = pod["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        service = _one(docs, "Service")
        port = service["spec"]["ports"][0]["port"]
        assert env["URL"]["value"] == (
            f"{scheme}://{service['metadata']['name']}.{NAMESPACE}.svc:{port}/metrics"
        )
        assert "specmon_build_info" in container["args"][0]
        if scheme == "https":
            assert env["PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "specmon-scrape-auth"
    assert not [d for d in render("sidecar") if d["kind"] == "Pod"]


# --------------------------------------------------------------------------- the shipped files


def _documents_text(text: str) -> list[str]:
    return [part for part in text.split("\n---\n") if "\nkind:" in part]


def test_runbook_base_and_alert_labels_reach_every_alert() -> None:
    """prometheusRule.runbookBaseURL and alertLabels give the mixin's result with the same
    _config (tests/deploy/test_kustomize.py, routed()); the base alone keeps every other byte."""
    from tests.deploy.test_kustomize import SHIPPED_RUNBOOK, routed

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseURL"] == SHIPPED_RUNBOOK
    base = "https://wiki.example.com/specmon/runbook"
    labels = {"team": "ml-platform", "severity": "page"}
    sets = (f"prometheusRule.runbookBaseURL={base}",
            *(f"prometheusRule.alertLabels.{k}={v}" for k, v in labels.items()))  # fmt: skip
    alerts = 0
    for path in RULES:
        shipped = yaml.safe_load(path.read_text())
        expected = routed(shipped, base=base, labels=labels)
        name = f"specmon-{path.name.removesuffix('.rules.yml').removeprefix('specmon-')}"
        (rule,) = [
            d for d in render(sets=sets)
            if d["kind"] == "PrometheusRule" and d["metadata"]["name"] == name
        ]  # fmt: skip
        assert rule["spec"] == expected, path.name
        alerts += sum("alert" in r for g in expected["groups"] for r in g["rules"])
        (moved,) = [
            d for d in render(sets=sets[:1])
            if d["kind"] == "PrometheusRule" and d["metadata"]["name"] == name
        ]  # fmt: skip
        assert moved["spec"] == routed(shipped, base=base, labels={}), path.name
    assert alerts >= 10
    refused = helm("template", RELEASE, str(CHART), "--set",
                   "prometheusRule.runbookBaseURL=not a url", check=False)  # fmt: skip
    assert refused.returncode != 0 and "runbookBaseURL" in refused.stderr


def test_rendered_rules_are_the_shipped_files_byte_for_byte() -> None:
    """Each PrometheusRule's spec is its rules file, every line as it is (comments too),
    indented by two: the file is included untemplated, its own {{ }} untouched."""
    found = {}
    for part in _documents_text(render_text()):
        if "\nkind: PrometheusRule\n" not in part:
            continue
        name = yaml.safe_load(part)["metadata"]["name"]
        spec = part.split("\nspec:\n", 1)[1]
        found[name] = "".join(
            line[2:] if line.startswith("  ") else line.lstrip(" ")
            for line in spec.splitlines(keepends=True)
        )
    assert sorted(found) == sorted(
        f"specmon-{p.name.removesuffix('.rules.yml').removeprefix('specmon-')}" for p in RULES
    )
    for path in RULES:
        name = f"specmon-{path.name.removesuffix('.rules.yml').removeprefix('specmon-')}"
        assert found[name].rstrip("\n") == path.read_text().rstrip("\n"), path.name
    # Prometheus's own templates, which Helm would have tried to execute, came through.
    assert any("{{ $labels" in p.read_text() for p in RULES)
    # The copies the chart reads are the files (deploy/generate.py --check: test_generated.py).
    for path in RULES:
        assert (CHART / "files" / "rules" / path.name).read_bytes() == path.read_bytes()
    for path in DASHBOARDS:
        assert (CHART / "files" / "dashboards" / path.name).read_bytes() == path.read_bytes()


def test_rendered_dashboards_are_the_shipped_files_byte_for_byte() -> None:
    docs = render()
    found = {}
    for configmap in [d for d in docs if _is_dashboard(d)]:
        ((key, text),) = configmap["data"].items()
        found[key] = text
    assert sorted(found) == [p.name for p in DASHBOARDS]
    for path in DASHBOARDS:
        assert found[path.name] == path.read_text(), path.name


def _release_payload(manifest: str) -> bytes:
    """What Helm stores for a release (a Secret sh.helm.release.v1.<name>.v<N>): the release as
    JSON (the chart's metadata, templates, values, schema and files, the manifest), gzipped and
    base64-encoded (helm/pkg/storage/driver/util.go encodeRelease)."""
    files = {}
    for path in sorted(CHART.rglob("*")):
        if path.is_file():
            files[path.relative_to(CHART).as_posix()] = path.read_bytes()
    release = {
        "name": RELEASE,
        "chart": {
            "metadata": yaml.safe_load(files.pop("Chart.yaml")),
            "templates": [
                {"name": n, "data": base64.b64encode(d).decode()}
                for n, d in files.items()
                if n.startswith("templates/")
            ],
            "values": yaml.safe_load(files["values.yaml"]),
            "schema": base64.b64encode(files["values.schema.json"]).decode(),
            "files": [
                {"name": n, "data": base64.b64encode(d).decode()}
                for n, d in files.items()
                if not n.startswith("templates/")
            ],
        },
        "config": {},
        "manifest": manifest,
        "version": 1,
        "namespace": NAMESPACE,
    }
    return base64.b64encode(gzip.compress(json.dumps(release).encode(), compresslevel=9))


def test_sizes_fit_what_kubernetes_and_helm_allow() -> None:
    """The largest ConfigMap under client-side apply's 256 KiB annotation, and the release as
    Helm stores it under a Secret's 1 MiB, for the largest variant."""
    largest = {}
    for name, (values, sets) in VARIANTS.items():
        for doc in render(*values, sets=sets):
            if doc["kind"] == "ConfigMap":
                size = len(json.dumps(doc, separators=(",", ":")).encode())
                largest[(name, doc["metadata"]["name"])] = size
    assert 50_000 < max(largest.values()) < ANNOTATION_LIMIT, max(
        largest.items(), key=lambda i: i[1]
    )
    payload = max(
        len(_release_payload(render_text(*values, sets=sets))) for values, sets in VARIANTS.values()
    )
    assert 10_000 < payload < RELEASE_LIMIT
    # The chart itself: the payload with an empty manifest.
    assert len(_release_payload("")) < payload


def test_the_helm_test_script_passes_on_specmon_and_fails_elsewhere(tmp_path: Path) -> None:
    """The hook's own script (rendered, not run by Helm here), run against a real specmon on
    loopback: /metrics holds specmon_build_info; a page without it (/healthz) fails."""
    from tests.support.daemon import daemon

    (container,) = _one(render(), "Pod")["spec"]["containers"]
    assert container["command"] == ["python", "-c"]
    (script,) = container["args"]
    config = tmp_path / "specmon.yml"
    config.write_text(
        "global: {scrape_interval: 5s, windows: [1m, 5m, 15m]}\n"
        "targets: [{name: nowhere, url: 'http://127.0.0.1:9/metrics'}]\n"
    )

    def run(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"URL": url, "PATH": "/usr/bin:/bin"},
        )

    with daemon(config, tmp_path, ready=False) as running:
        passed = run(f"{running.base}/metrics")
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert passed.stdout.startswith("specmon_build_info{")
        failed = run(f"{running.base}/healthz")
        assert failed.returncode == 1
        assert "no specmon_build_info" in failed.stdout


def test_the_readmes_file_sd_snippet_renders_and_checks(tmp_path: Path) -> None:
    """The chart README's file_sd values: the mount sits beside the config in /etc/specmon,
    every object validates, and check-config accepts the config with a file at that path."""
    from tests.deploy.test_kubernetes import validate

    readme = (CHART / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```yaml\n")[1:]]
    (snippet,) = [b for b in blocks if "file_sd" in b]
    values = tmp_path / "file-sd.yaml"
    values.write_text(snippet)
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(values)]
    args += ["--kube-version", KUBE_VERSION, "--api-versions", "monitoring.coreos.com/v1"]
    text = helm(*args).stdout
    docs = [d for d in yaml.safe_load_all(text) if d]
    container = _container(docs)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"config": "/etc/specmon", "file-sd": "/etc/specmon/file_sd"}
    rendered = tmp_path / "rendered.yaml"
    rendered.write_text(text)
    assert not [r for r in validate([rendered]) if r["errors"]]
    config = _config(docs)
    (pattern,) = config["file_sd_configs"][0]["files"]
    root = tmp_path / "etc-specmon"
    (root / "file_sd").mkdir(parents=True)
    (root / "file_sd" / "engines.yaml").write_text(
        "- targets: ['vllm-0.vllm.inference.svc:8000']\n"
    )
    config["file_sd_configs"][0]["files"] = [pattern.replace("/etc/specmon", str(root))]
    (root / "specmon.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "check-config", str(root / "specmon.yml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- issue 61


def _render_fails(*values_yaml: str, tmp_path: Path) -> str:
    """Render with a values file holding ``values_yaml``; the error Helm gave ("" if none)."""
    path = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text("\n".join(values_yaml) + "\n")
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version"]
    result = helm(*args, KUBE_VERSION, "-f", str(path), check=False)
    return "" if result.returncode == 0 else result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ('["--web.config.file=/dev/null"]', "would override the chart's own --web.config.file"),
        ('["--web.config", "/dev/null"]', "would override the chart's own --web.config.file"),
        ('["--config.file=/tmp/other.yml"]', "--config.file: set it through `config`"),
        ('["--shard=0/1"]', "set `replicas`"),
        ('["--log.format=console"]', "set `logFormat`"),
        ('["--state.dir=/tmp"]', "set `persistence`"),
        ('["--web.listen-address=:80"]', "the chart's port"),
        ('["--log.level=debug"]', None),
        ('["--web.enable-lifecycle"]', None),  # with webConfig's password: allowed
    ],
)
def test_extra_args_cannot_override_the_charts_own_flags(
    tmp_path: Path, args: str, says: str | None
) -> None:
    """Issue 61: `extraArgs: [--web.config.file=/dev/null]` rendered after the chart's own
    flag turned TLS and basic auth off while webConfig.enabled was true (argparse takes the
    last, and any unambiguous prefix)."""
    error = _render_fails("webConfig: {enabled: true}", f"extraArgs: {args}", tmp_path=tmp_path)
    if says is None:
        assert error == ""
    else:
        assert "extraArgs:" in error and says in error, error


def test_the_lifecycle_api_needs_the_web_configs_password(tmp_path: Path) -> None:
    for flag in ("--web.enable-lifecycle", "--web.enable"):
        error = _render_fails(f"extraArgs: [{flag}]", tmp_path=tmp_path)
        assert "opens POST /-/reload and /-/mark" in error and "webConfig.enabled" in error


@pytest.mark.parametrize(
    "header", ["X-Api-Key", "x-auth-token", "Cookie", "X-Client-Secret", "Proxy-Authorization"]
)
@pytest.mark.parametrize("where", ["target", "source"])
def test_secret_looking_headers_are_refused_in_the_configmap(
    tmp_path: Path, header: str, where: str
) -> None:
    """Issue 61: a secret header other than Authorization (X-Api-Key) in
    config.targets[].headers rendered into the ConfigMap."""
    if where == "target":
        config = ("config:", "  targets:", "    - {name: a, url: 'http://a:8000/metrics',",
                  f"       headers: {{X-Scope: team-a, {header}: s3cr3t}}}}")  # fmt: skip
        path = f"config.targets[0].headers.{header}"
    else:
        config = ("config:", "  sources:", "    - prometheus: {url: 'http://p:9090',",
                  f"       headers: {{X-Scope-OrgID: team-a, {header}: s3cr3t}}}}")  # fmt: skip
        path = f"config.sources[0].prometheus.headers.{header}"
    error = _render_fails(*config, tmp_path=tmp_path)
    assert f"{path} looks like a secret" in error and "existingConfigSecret" in error, error
    assert "s3cr3t" not in error


def test_plain_headers_render_and_a_config_secret_replaces_the_configmap(tmp_path: Path) -> None:
    docs = render(sets=("config.targets[0].headers.X-Scope=team-a",))
    assert _config(docs)["targets"][0]["headers"] == {"X-Scope": "team-a"}
    docs = render(sets=("existingConfigSecret=specmon-config",
                        "config.targets[0].headers.X-Api-Key=s3cr3t"))  # fmt: skip
    assert not [d for d in docs if d["kind"] == "ConfigMap" and not _is_dashboard(d)]
    assert "s3cr3t" not in yaml.safe_dump_all(docs)
    volumes = _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    (config,) = [v for v in volumes if v["name"] == "config"]
    assert {"secret": {"name": "specmon-config",
                       "items": [{"key": "specmon.yml", "path": "specmon.yml"}]}} in (
        config["projected"]["sources"]
    )  # fmt: skip
