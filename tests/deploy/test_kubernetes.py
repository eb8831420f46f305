"""deploy/kubernetes/: the manifests behind the overlays (base/ and overlays/*/) as written:
the wiring between the objects, and the security and resource settings; the strict schema
validator that tests/deploy/test_kustomize.py runs on every rendered overlay."""

from __future__ import annotations

import json
import math
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon import __version__
from specmon.daemon.config import parse_config
from specmon.web.server import PROBE_PATHS
from tests.deploy import tools
from tests.deploy.dockerfile import stages
from tests.deploy.measure_resources import measure

REPO = tools.REPO
K8S = REPO / "deploy" / "kubernetes"
#: Every object the overlays are built from (kustomization.yaml files are not objects; the
#: dashboard ConfigMaps exist only once rendered: test_kustomize.py).
MANIFESTS = sorted(
    p
    for p in [
        *K8S.glob("base/*.yaml"),
        *K8S.glob("base/rules/*.yaml"),
        *K8S.glob("overlays/*/*.yaml"),
    ]
    if p.name != "kustomization.yaml"
)
RESOURCES = K8S / "resources.json"
VALIDATOR = Path(__file__).with_name("k8s_validate.py")
#: The oldest Kubernetes release still commonly run, and the newest the schemas cover.
K8S_VERSIONS = ("1.29", "1.37")


@cache
def documents() -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> document, over every manifest."""
    out = {}
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                key = (doc["kind"], doc["metadata"]["name"])
                assert key not in out, f"{key} twice"
                out[key] = {**doc, "_file": path.relative_to(K8S).as_posix()}
    return out


def validate(paths: list[Path]) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(tools.tools_python()), str(VALIDATOR), ",".join(K8S_VERSIONS), *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


#: The workload kinds that run specmon (a StatefulSet runs the shards).
WORKLOADS = ("Deployment", "StatefulSet")


def _workload(name: str) -> dict[str, Any]:
    (found,) = [documents()[(kind, name)] for kind in WORKLOADS if (kind, name) in documents()]
    return found


def _container(deployment: str, name: str) -> dict[str, Any]:
    spec = _workload(deployment)["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == name]
    assert isinstance(container, dict)
    return container


def _quantity(value: str) -> float:
    """Kubernetes quantity -> bytes or cores."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(value))
    assert match, f"not a quantity: {value!r}"
    number, unit = match.groups()
    assert unit in units or unit == "", f"unit {unit!r} in {value!r}"
    return float(number) * units.get(unit, 1)


# --------------------------------------------------------------------------- schemas


def test_the_manifests_are_every_object_the_overlays_use() -> None:
    """Each overlay's kustomization lists its directory's manifests and the base; the base
    lists web-config.yaml, rules/ and dashboards/: no manifest is left out of a layout."""
    listed = set()
    for kustomization in K8S.glob("*/**/kustomization.yaml"):
        if "examples" in kustomization.parts:
            continue
        for entry in yaml.safe_load(kustomization.read_text()).get("resources", []):
            path = (kustomization.parent / entry).resolve()
            if path.is_file():
                listed.add(path)
    assert listed == {p.resolve() for p in MANIFESTS}


@pytest.mark.deploytools
def test_validation_rejects_broken_manifests(tmp_path: Path) -> None:
    """Strict schemas: an unknown field, a wrong type and a malformed duration all fail."""
    broken = {
        "deployment.yaml": (K8S / "overlays" / "standalone" / "deployment.yaml")
        .read_text()
        .replace("readinessProbe:", "readinesProbe:"),
        "service.yaml": (K8S / "overlays" / "standalone" / "service.yaml")
        .read_text()
        .replace("port: 10920", "port: ten-thousand"),
        "servicemonitor.yaml": (K8S / "overlays" / "standalone" / "servicemonitor.yaml")
        .read_text()
        .replace("interval: 15s", "intervall: 15s"),
        "rule.yaml": (K8S / "base" / "rules" / "specmon-alerts.prometheusrule.yaml")
        .read_text()
        .replace("for: 15m", "for: 15 minutes", 1),
        "unknown.yaml": "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: x}\n",
    }
    paths = []
    for name, text in broken.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    results = validate(paths)
    for name in broken:
        errors = [e for r in results if r["file"].endswith(name) for e in r["errors"]]
        assert errors, f"{name} passed"
    joined = json.dumps(results)
    assert "readinesProbe" in joined and "intervall" in joined and "15 minutes" in joined
    assert "no schema" in joined


# --------------------------------------------------------------------------- wiring


def _dockerfile_user() -> tuple[int, int]:
    final = stages()[1][-1]
    user = next(i.args for i in final.body if i.keyword == "USER")
    uid, _, gid = user.partition(":")
    return int(uid), int(gid)


def _dockerfile_config_path() -> str:
    final = stages()[1][-1]
    cmd = json.loads(next(i.args for i in final.body if i.keyword == "CMD"))
    return str(cmd[0].split("=", 1)[1])


#: Every workload running specmon as a standalone exporter (its own pod).
EXPORTERS = ("specmon", "specmon-fleet", "specmon-shard")


@pytest.mark.parametrize(
    ("deployment", "container"), [*((e, "specmon") for e in EXPORTERS), ("vllm", "specmon")]
)
def test_specmon_container_is_locked_down(deployment: str, container: str) -> None:
    pod = _workload(deployment)["spec"]["template"]["spec"]
    c = _container(deployment, container)
    context = {**pod.get("securityContext", {}), **c["securityContext"]}
    uid, gid = _dockerfile_user()
    assert context["runAsNonRoot"] is True
    assert (context["runAsUser"], context["runAsGroup"]) == (uid, gid)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert context["seccompProfile"]["type"] == "RuntimeDefault"
    assert c["image"] == f"localhost/specmon:{__version__}"
    # The image's ENTRYPOINT is kept (specmon run); args name the image's config path.
    assert "command" not in c
    assert f"--config.file={_dockerfile_config_path()}" in c["args"]
    mount = c["volumeMounts"][0]
    assert mount["mountPath"] == str(Path(_dockerfile_config_path()).parent)
    assert mount["readOnly"] is True
    # The state volume (an exporter's), writable; nothing else.
    assert [m["mountPath"] for m in c["volumeMounts"][1:]] in ([], ["/var/lib/specmon"])


@pytest.mark.parametrize("workload", EXPORTERS)
def test_the_state_dir_is_a_volume_kept_by_one_pod(workload: str) -> None:
    """--state.dir is the mounted state volume: a PVC held by one pod at a time (a Deployment
    replaced with strategy Recreate) or a StatefulSet's claim per replica, writable by the
    image's group (fsGroup)."""
    found = _workload(workload)
    pod = found["spec"]["template"]["spec"]
    c = _container(workload, "specmon")
    (state,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/var/lib/specmon"]
    assert f"--state.dir={state['mountPath']}" in c["args"]
    assert pod["securityContext"]["fsGroup"] == _dockerfile_user()[1]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    if found["kind"] == "StatefulSet":
        claims = [t["metadata"]["name"] for t in found["spec"]["volumeClaimTemplates"]]
        assert state["name"] in claims and state["name"] not in volumes
        return
    claim = documents()[
        ("PersistentVolumeClaim", volumes[state["name"]]["persistentVolumeClaim"]["claimName"])
    ]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert found["spec"]["replicas"] == 1
    assert found["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize(
    ("deployment", "port"), [*((e, "https") for e in EXPORTERS), ("vllm", "specmon-metrics")]
)
def test_probes(deployment: str, port: str) -> None:
    """Over HTTPS (specmon serves TLS with the web config) and on the paths basic auth leaves
    open (specmon.web.server.PROBE_PATHS): the kubelet sends no password."""
    c = _container(deployment, "specmon")
    (declared,) = [p for p in c["ports"] if p["name"] == port]
    assert declared["containerPort"] == 10920
    assert c["livenessProbe"]["httpGet"] == {"scheme": "HTTPS", "path": "/healthz", "port": port}
    assert {"/healthz", "/readyz"} == PROBE_PATHS
    if deployment in EXPORTERS:
        assert c["readinessProbe"]["httpGet"] == {
            "scheme": "HTTPS",
            "path": "/readyz",
            "port": port,
        }
    else:
        # A sidecar must not take the engine out of its Service: liveness only.
        assert "readinessProbe" not in c


@pytest.mark.parametrize(
    ("deployment", "configmap"),
    [*((e, e) for e in EXPORTERS), ("vllm", "specmon-sidecar")],
)
def test_configmap_holds_a_valid_config(deployment: str, configmap: str) -> None:
    sources = _projected_sources(deployment)
    assert [s["configMap"]["name"] for s in sources if "configMap" in s] == [configmap]
    data = documents()[("ConfigMap", configmap)]["data"]
    file_name = Path(_dockerfile_config_path()).name
    assert set(data) == {file_name}
    config = parse_config(data[file_name], source=configmap)
    assert {"5m", "15m"} <= {f"{int(w // 60)}m" for w in config.global_.windows}
    if deployment == "vllm":
        (target,) = config.targets
        assert target.url == "http://127.0.0.1:8000/metrics"
        vllm = _container("vllm", "vllm")
        assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in vllm["ports"]
        spec_arg = next(a for a in vllm["args"] if a.startswith("--speculative-config="))
        speculative = json.loads(spec_arg.split("=", 1)[1])
        assert speculative["num_speculative_tokens"] == target.chain_length
    if deployment == "specmon-fleet":
        # Prometheus mode: one source, no direct target, windows it can fill.
        (source,) = config.sources
        assert not config.targets and not config.file_sd
        assert source.url.startswith("http://prometheus-operated.monitoring.svc:")
        assert source.instance_labels == ("namespace", "pod")
        assert source.group_labels == ("namespace", "service")  # a rollout keeps the past
        assert 2 * source.interval <= min(config.global_.windows)
        assert source.settings_for({"namespace": "inference", "pod": "llama-server-0"}).model
    else:
        assert not config.sources


def test_the_statefulset_gives_each_replica_its_shard_from_its_ordinal() -> None:
    """--shard=$(SHARD_INDEX)/N with N the replica count and SHARD_INDEX the pod-index label
    (Kubernetes expands $(VAR) in args from the container's env)."""
    from specmon.sharding import parse_shard

    statefulset = _workload("specmon-shard")
    replicas = statefulset["spec"]["replicas"]
    c = _container("specmon-shard", "specmon")
    (shard_arg,) = [a for a in c["args"] if a.startswith("--shard=")]
    value = shard_arg.split("=", 1)[1]
    assert value == f"$(SHARD_INDEX)/{replicas}"
    (env,) = [e for e in c["env"] if e["name"] == "SHARD_INDEX"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    # What each pod ends up with is a valid shard, and together they are all the shards.
    shards = [parse_shard(value.replace("$(SHARD_INDEX)", str(i))) for i in range(replicas)]
    assert [(s.index, s.count) for s in shards] == [(i, replicas) for i in range(replicas)]
    assert statefulset["spec"]["serviceName"] == "specmon-shard"
    (service,) = [d for (k, n), d in documents().items() if (k, n) == ("Service", "specmon-shard")]
    assert service["spec"]["clusterIP"] == "None"
    # The shards split the ConfigMap's target list, every target exactly once.
    config = parse_config(
        documents()[("ConfigMap", "specmon-shard")]["data"]["specmon.yml"], source="shard"
    )
    names = [t.name for t in config.targets]
    kept = [shard.select(names, key=lambda n: n) for shard in shards]
    assert sorted(n for k in kept for n in k) == sorted(names)


def _projected_sources(deployment: str) -> list[dict[str, Any]]:
    """The sources of the projected volume mounted at the config's directory."""
    pod = _workload(deployment)["spec"]["template"]["spec"]
    mount = _container(deployment, "specmon")["volumeMounts"][0]  # the config; then the state
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    sources: list[dict[str, Any]] = volume["projected"]["sources"]
    return sources


def _projected_files(deployment: str) -> dict[str, tuple[str, str]]:
    """Path under the mount -> (Secret name, key), for the Secrets in the projected volume."""
    out = {}
    for source in _projected_sources(deployment):
        if "secret" in source:
            for item in source["secret"]["items"]:
                out[item["path"]] = (source["secret"]["name"], item["key"])
    return out


@pytest.mark.parametrize(
    ("deployment", "monitor"),
    [*((e, ("ServiceMonitor", e)) for e in EXPORTERS), ("vllm", ("PodMonitor", "vllm-specmon"))],
)
def test_specmon_serves_https_with_basic_auth_and_prometheus_follows(
    deployment: str, monitor: tuple[str, str], tmp_path: Path
) -> None:
    """The web config Secret is valid (with a certificate in the projected layout, loaded as
    specmon loads it), its paths are where the projected volume puts the TLS Secret, and the
    monitor scrapes over HTTPS with that Secret's CA, the name the docs' certificate carries,
    and a basic-auth Secret for the user the web config knows."""
    import concurrent.futures

    from specmon.web.server import load_web_settings
    from tests.support.tls import make_pki

    c = _container(deployment, "specmon")
    config_dir = Path(_dockerfile_config_path()).parent
    (web_arg,) = [a for a in c["args"] if a.startswith("--web.config.file=")]
    web_path = Path(web_arg.split("=", 1)[1])
    files = _projected_files(deployment)
    web_secret, web_key = files[web_path.relative_to(config_dir).as_posix()]
    web_text = documents()[("Secret", web_secret)]["stringData"][web_key]
    web = yaml.safe_load(web_text)
    tls_secret = {files[web["tls_server_config"][k]][0] for k in ("cert_file", "key_file")}
    assert len(tls_secret) == 1
    assert files[web["tls_server_config"]["cert_file"]][1] == "tls.crt"
    assert files[web["tls_server_config"]["key_file"]][1] == "tls.key"

    # The projected directory, with a test certificate where the TLS Secret lands.
    root = tmp_path / "etc-specmon"
    (root / "tls").mkdir(parents=True)
    pki = make_pki(tmp_path / "pki")
    (root / web["tls_server_config"]["cert_file"]).write_bytes(pki.server_cert.read_bytes())
    (root / web["tls_server_config"]["key_file"]).write_bytes(pki.server_key.read_bytes())
    (root / web_path.name).write_text(web_text)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        settings = load_web_settings(root / web_path.name, executor=pool)
    assert settings.tls and settings.auth is not None
    assert "--web.enable-lifecycle" not in c["args"]

    kind, name = monitor
    spec = documents()[(kind, name)]["spec"]
    (endpoint,) = spec["endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": tls_secret.pop(), "key": "ca.crt"}
    auth = endpoint["basicAuth"]
    assert auth["username"]["name"] == auth["password"]["name"]
    assert (auth["username"]["key"], auth["password"]["key"]) == ("username", "password")
    readme = (REPO / "docs" / "kubernetes.md").read_text()
    server_name = endpoint["tlsConfig"]["serverName"]
    assert f"DNS:{server_name}" in readme, "the docs' certificate is valid for serverName"
    assert f"create secret generic {auth['username']['name']}" in readme
    (user,) = web["basic_auth_users"]
    assert f"--from-literal=username={user}" in readme


def test_services_and_monitors_select_what_exists() -> None:
    docs = documents()
    for (kind, name), doc in docs.items():
        if kind == "Service":
            (deployment,) = [
                d
                for (k, _), d in docs.items()
                if k in WORKLOADS
                and doc["spec"]["selector"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            names = {
                p["name"]
                for c in deployment["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])
            }
            for port in doc["spec"]["ports"]:
                assert port["targetPort"] in names, (name, port)
        if kind == "ServiceMonitor":
            services = [
                d
                for (k, _), d in docs.items()
                if k == "Service"
                and doc["spec"]["selector"]["matchLabels"].items()
                <= d["metadata"]["labels"].items()
            ]
            assert [s["metadata"]["name"] for s in services] == [name]
            ports = {p["name"]: p["port"] for p in services[0]["spec"]["ports"]}
            (endpoint,) = doc["spec"]["endpoints"]
            assert ports[endpoint["port"]] == 10920 and endpoint["path"] == "/metrics"
        if kind == "PodMonitor":
            (endpoint,) = doc["spec"]["podMetricsEndpoints"]
            pods = [
                d
                for (k, _), d in docs.items()
                if k == "Deployment"
                and doc["spec"]["selector"]["matchLabels"].items()
                <= d["spec"]["template"]["metadata"]["labels"].items()
            ]
            assert [p["metadata"]["name"] for p in pods] == ["vllm"]
            container = _container("vllm", "specmon")
            assert endpoint["port"] in {p["name"] for p in container["ports"]}


def test_scrape_interval_matches_grafana() -> None:
    datasource = yaml.safe_load((REPO / "grafana/provisioning/datasources/specmon.yml").read_text())
    interval = datasource["datasources"][0]["jsonData"]["timeInterval"]
    for exporter in EXPORTERS:
        monitor = documents()[("ServiceMonitor", exporter)]
        assert monitor["spec"]["endpoints"][0]["interval"] == interval
    assert (
        documents()[("PodMonitor", "vllm-specmon")]["spec"]["podMetricsEndpoints"][0]["interval"]
        == interval
    )


# --------------------------------------------------------------------------- resources


def _ceil_to(value: float, step: float) -> float:
    return math.ceil(value / step - 1e-9) * step


def derived_resources() -> dict[str, dict[str, str]]:
    """Requests and limits from the measured figures, by the rules in resources.json."""
    data = json.loads(RESOURCES.read_text())
    runs = {run["targets"]: run for run in data["runs"]}
    state = data["state"]  # the state directory's memory a target, measured at 1,000
    per_target = (state["rss_mib_peak"] - state["rss_mib_peak_without"]) / state["targets"]
    out = {}
    for name, rule in data["derive"].items():

        def measured(kind: str, figure: str, rule: dict[str, Any] = rule) -> float:
            value = runs[rule[f"{kind}_from_targets"]][figure] * rule[f"{kind}_factor"]
            return float(value + per_target * rule.get(f"{kind}_state_targets", 0))

        # Memory in MiB rounded up to 8 (requests) and 32 (limits); CPU in millicores
        # rounded up to 10 (requests) and 100 (limits).
        out[name] = {
            "memory_request": f"{_ceil_to(measured('memory_request', 'rss_mib_peak'), 8):.0f}Mi",
            "memory_limit": f"{_ceil_to(measured('memory_limit', 'rss_mib_peak'), 32):.0f}Mi",
            "cpu_request": f"{_ceil_to(measured('cpu_request', 'cpu_cores') * 1000, 10):.0f}m",
            "cpu_limit": f"{_ceil_to(measured('cpu_limit', 'cpu_cores') * 1000, 100):.0f}m",
        }
    return out


@pytest.mark.parametrize(
    ("deployment", "rule"),
    [("specmon", "standalone"), ("specmon-shard", "standalone"), ("vllm", "sidecar")],
)
def test_requests_and_limits_follow_the_measurements(deployment: str, rule: str) -> None:
    resources = _container(deployment, "specmon")["resources"]
    expected = derived_resources()[rule]
    assert resources == {
        "requests": {"cpu": expected["cpu_request"], "memory": expected["memory_request"]},
        "limits": {"cpu": expected["cpu_limit"], "memory": expected["memory_limit"]},
    }
    for kind in ("cpu", "memory"):
        assert _quantity(resources["requests"][kind]) <= _quantity(resources["limits"][kind])


def test_prometheus_mode_requests_and_limits_follow_the_benchmark() -> None:
    """deploy/kubernetes/fleet-resources.json: the 2,000-instance run of bench/fleet.py."""
    data = json.loads((K8S / "fleet-resources.json").read_text())
    run, rule = data["run"], data["derive"]
    peak, cores = run["rss_mib_peak"], run["cpu_cores"]
    resources = _container("specmon-fleet", "specmon")["resources"]
    assert resources == {
        "requests": {
            "cpu": f"{_ceil_to(cores * rule['cpu_request_factor'] * 1000, 10):.0f}m",
            "memory": f"{_ceil_to(peak * rule['memory_request_factor'], 8):.0f}Mi",
        },
        "limits": {
            "cpu": f"{_ceil_to(cores * rule['cpu_limit_factor'] * 1000, 100):.0f}m",
            "memory": f"{_ceil_to(peak * rule['memory_limit_factor'], 32):.0f}Mi",
        },
    }
    fleet_doc = (REPO / "docs" / "fleet.md").read_text()
    assert f"{peak:.0f} MiB" in fleet_doc and f"{100 * cores:.1f} % of one core" in fleet_doc


def test_systemd_memory_limits_follow_the_measurements() -> None:
    unit = (REPO / "deploy/systemd/specmon.service").read_text()
    limit = derived_resources()["standalone"]["memory_limit"]
    assert f"MemoryMax={limit.removesuffix('i')}\n" in unit
    high = int(_quantity(limit) * 0.75 / 2**20)
    assert f"MemoryHigh={high}M\n" in unit


def test_readme_table_shows_the_recorded_figures() -> None:
    readme = (REPO / "deploy" / "README.md").read_text()
    for run in json.loads(RESOURCES.read_text())["runs"]:
        row = (
            f"| {run['targets']} | {run['rss_mib_peak']:.1f} MiB | {run['cpu_cores'] * 1000:.1f}m |"
        )
        assert row in readme, row
    for name, values in derived_resources().items():
        row = (
            f"| {name} | {values['cpu_request']} | {values['cpu_limit']} | "
            f"{values['memory_request']} | {values['memory_limit']} |"
        )
        assert row in readme, row


def test_a_fresh_daemon_stays_inside_the_requests(tmp_path: Path) -> None:
    """A short live run with 50 targets: resident memory under the standalone memory request,
    CPU under its limit (the 20-minute measurement behind resources.json: README)."""
    result = measure(50, 8.0, workdir=tmp_path)
    assert result.series_ok
    standalone = derived_resources()["standalone"]
    assert result.rss_mib_peak * 2**20 < _quantity(standalone["memory_request"])
    assert result.cpu_cores_avg < _quantity(standalone["cpu_limit"])
