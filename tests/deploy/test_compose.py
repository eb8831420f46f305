"""deploy/compose/: Docker Compose's own validation, the wiring between the services, and the
stack's programs run as compose would run them (no engine here: on loopback, not in
containers), down to SpecmonBelowBreakEven reaching Alertmanager."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon import arithmetic
from specmon.cli.main import build_parser
from specmon.config_values import parse_duration
from specmon.daemon.config import load_config
from specmon.sim.scenario import load_scenario
from tests.deploy import tools
from tests.deploy.dockerfile import stages
from tests.rules.alert_rules import load_rules, with_durations

REPO = tools.REPO
COMPOSE_DIR = REPO / "deploy" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
SECURE_FILE = COMPOSE_DIR / "compose.secure.yaml"
SPECMON_IMAGE_SERVICES = {
    "specmon",
    "vllm-eagle",
    "llamacpp-draft",
    "vllm-degrading",
    "tap",
    "traffic",
}


def _compose(
    *args: str, file: Path = COMPOSE_FILE, overrides: tuple[Path, ...] = ()
) -> subprocess.CompletedProcess[str]:
    files = [arg for f in (file, *overrides) for arg in ("-f", str(f))]
    return subprocess.run(
        [*tools.docker_compose(), *files, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=file.parent,
    )


@cache
def _model() -> dict[str, Any]:
    """The project as Docker Compose resolves it (anchors merged, paths absolute)."""
    result = _compose("config", "--format", "json")
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


def _bind_sources(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts."""
    return {
        v["target"]: Path(v["source"]) for v in service.get("volumes", []) if v["type"] == "bind"
    }


# --------------------------------------------------------------------------- compose itself


@pytest.mark.deploytools
def test_docker_compose_accepts_the_file() -> None:
    result = _compose("config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


@pytest.mark.deploytools
def test_docker_compose_rejects_a_broken_copy(tmp_path: Path) -> None:
    """The check is real: Compose's schema refuses an unknown service key."""
    for item in COMPOSE_DIR.iterdir():
        if item.is_file():
            (tmp_path / item.name).write_bytes(item.read_bytes())
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        COMPOSE_FILE.read_text().replace(
            "    restart: unless-stopped\n", "    restrat: unless-stopped\n", 1
        )
    )
    result = _compose("config", "--quiet", file=broken)
    assert result.returncode != 0
    assert "restrat" in result.stderr


@pytest.mark.deploytools
def test_every_bind_mount_exists_and_images_are_pinned() -> None:
    model = _model()
    for name, service in model["services"].items():
        for target, source in _bind_sources(service).items():
            # Compose would create a missing source as an empty directory: check it exists.
            assert source.exists(), f"{name}: {source} (mounted at {target}) does not exist"
            assert source.resolve().is_relative_to(REPO), source
        image = service["image"]
        if "build" in service:
            assert image == "specmon:demo"
            assert Path(service["build"]["context"]) == REPO
            assert service["build"]["dockerfile"] == "Dockerfile"
        else:
            assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+", image), f"{name}: unpinned {image}"
    assert {n for n, s in model["services"].items() if "build" in s} == SPECMON_IMAGE_SERVICES


@pytest.mark.deploytools
def test_specmon_containers_are_confined() -> None:
    for name in SPECMON_IMAGE_SERVICES:
        service = _model()["services"][name]
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name


@pytest.mark.deploytools
def test_specmon_service_uses_the_image_defaults_and_its_config() -> None:
    service = _model()["services"]["specmon"]
    assert service.get("entrypoint") is None and service.get("command") is None
    (final,) = stages()[1][-1:]
    cmd = next(json.loads(i.args) for i in final.body if i.keyword == "CMD")
    config_path = cmd[0].split("=", 1)[1]
    assert _bind_sources(service)[config_path] == COMPOSE_DIR / "specmon.yml"
    assert [p["target"] for p in service["ports"]] == [10920]


@pytest.mark.deploytools
def test_specmon_keeps_its_state_on_a_named_volume() -> None:
    """state_dir (specmon.yml) is a named volume's mount: created owned by the image's user
    (the Dockerfile makes the directory so), kept across `docker compose up` after a change."""
    model = _model()
    service = model["services"]["specmon"]
    volumes = {v["target"]: v for v in service["volumes"] if v["type"] == "volume"}
    state_dir = str(load_config(COMPOSE_DIR / "specmon.yml").global_.state_dir)
    assert volumes[state_dir]["source"] == "specmon-state"
    assert not volumes[state_dir].get("read_only")
    assert "specmon-state" in model["volumes"]
    final = stages()[1][-1]
    assert f"--from=build --chown=10920:10920 {state_dir} {state_dir}" in [
        i.args for i in final.body if i.keyword == "COPY"
    ]


def _engine_services() -> dict[str, dict[str, Any]]:
    return {
        name: s
        for name, s in _model()["services"].items()
        if (s.get("entrypoint") or [])[:2] == ["specmon", "simulate"]
    }


def _simulate_args(service: dict[str, Any]) -> Any:
    return build_parser().parse_args(["simulate", *service["command"]])


@pytest.mark.deploytools
def test_specmon_config_names_each_engine_service_and_port() -> None:
    config = load_config(COMPOSE_DIR / "specmon.yml")
    engines = _engine_services()
    assert {t.name for t in config.targets} == set(engines)
    for target in config.targets:
        args = _simulate_args(engines[target.name])
        host, port = args.listen.rsplit(":", 1)
        assert host == "0.0.0.0", "an engine must listen beyond its container's loopback"
        assert target.url == f"http://{target.name}:{port}/metrics"
        health = engines[target.name]["healthcheck"]["test"]
        assert f"http://127.0.0.1:{port}/metrics" in health[-1]
    # The alert rules read these windows.
    assert {"5m", "15m"} <= {f"{int(w // 60)}m" for w in config.global_.windows}


@pytest.mark.deploytools
def test_prometheus_loads_every_shipped_rules_file_and_reaches_the_stack() -> None:
    service = _model()["services"]["prometheus"]
    mounts = _bind_sources(service)
    prom_config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    (pattern,) = prom_config["rule_files"]
    directory, _, glob = pattern.rpartition("/")
    assert mounts[directory] == REPO / "deploy" / "prometheus", "the directory, not copies"
    loaded = sorted(p.name for p in (REPO / "deploy" / "prometheus").glob(glob))
    assert loaded == ["engine-recording.rules.yml", "specmon-alerts.rules.yml"]
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom_config["scrape_configs"]}
    assert jobs["specmon"] == ["specmon:10920"]
    engines = _engine_services()
    assert sorted(jobs["engines"]) == sorted(
        f"{name}:{_simulate_args(s).listen.rsplit(':', 1)[1]}" for name, s in engines.items()
    )
    ((am,),) = [a["static_configs"] for a in prom_config["alerting"]["alertmanagers"]]
    assert am["targets"] == ["alertmanager:9093"]
    am_service = _model()["services"]["alertmanager"]
    assert _bind_sources(am_service)["/etc/alertmanager/alertmanager.yml"] == (
        COMPOSE_DIR / "alertmanager.yml"
    )


@pytest.mark.deploytools
def test_grafana_gets_the_repository_provisioning_and_dashboards() -> None:
    mounts = _bind_sources(_model()["services"]["grafana"])
    provider_dir = mounts["/etc/grafana/provisioning/dashboards"]
    assert provider_dir == REPO / "grafana" / "provisioning" / "dashboards"
    (provider,) = yaml.safe_load((provider_dir / "specmon.yml").read_text())["providers"]
    dashboards = mounts[provider["options"]["path"]]
    assert dashboards == REPO / "grafana" / "dashboards"
    assert sorted(p.name for p in dashboards.glob("*.json")) == [
        "specmon-overview.json",
        "specmon-target.json",
    ]
    datasource = mounts["/etc/grafana/provisioning/datasources/specmon.yml"]
    assert datasource == COMPOSE_DIR / "grafana-datasource.yml"
    (source,) = yaml.safe_load(datasource.read_text())["datasources"]
    assert source["url"] == "http://prometheus:9090"
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    # $__rate_interval is right only when timeInterval equals the scrape interval.
    assert source["jsonData"]["timeInterval"] == prom["global"]["scrape_interval"]
    env = _model()["services"]["grafana"]["environment"]
    home = env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (dashboards / home.rsplit("/", 1)[1]).exists()


# --------------------------------------------------------------------------- plain file checks


def test_specmon_config_is_valid() -> None:
    config = load_config(COMPOSE_DIR / "specmon.yml")
    assert len(config.targets) == 3


def test_degrading_engine_crosses_break_even_and_only_it() -> None:
    """The demo's story, from the files: vllm-degrading starts well above break-even and its
    scenario takes it below, by more than noise, with enough drafts for the alerts' guard
    (400 in the 5m window); the other engines stay clear above."""
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    config = {t.name: t for t in load_config(COMPOSE_DIR / "specmon.yml").targets}
    for name in ("vllm-eagle", "llamacpp-draft", "vllm-degrading"):
        args = build_parser().parse_args(["simulate", *compose["services"][name]["command"]])
        k, c = len(args.survival), config[name].draft_cost
        breakeven = arithmetic.breakeven_alpha(k, c)
        assert breakeven is not None
        alpha = arithmetic.effective_alpha(sum(args.survival), k)
        assert alpha is not None and alpha - breakeven > 0.2, (name, alpha, breakeven)
        assert args.drafts_per_second * 300 >= 10 * 400
        if name != "vllm-degrading":
            assert args.scenario is None
            continue
        scenario = load_scenario(COMPOSE_DIR / Path(args.scenario).name)
        (drop,) = scenario.phases
        assert 0 < drop.at <= 300 and not scenario.repeat
        after = drop.changes["survival"]
        assert len(after) == k
        alpha_after = arithmetic.effective_alpha(sum(after), k)
        assert alpha_after is not None and alpha_after < breakeven - 0.1, alpha_after
        # Warning, not the paging tier: expected speed-up stays above 0.75.
        assert 0.75 < (1 + sum(after)) / (1 + k * c) < 1


# --------------------------------------------------------------------------- the stack, run


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # loopback only
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _wait(
    what: str,
    probe: Callable[[], Any],
    procs: dict[str, subprocess.Popen[bytes]],
    logs: Path,
    timeout: float,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise AssertionError(
                    f"{name} exited {proc.returncode}:\n"
                    + (logs / f"{name}.log").read_text()[-3000:]
                )
        result = probe()
        if result:
            return result
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in logs.glob("*.log"))
    raise AssertionError(f"timed out waiting for {what}\n{tails}")


@contextmanager
def _started(
    name: str, argv: list[str], logs: Path, procs: dict[str, subprocess.Popen[bytes]]
) -> Iterator[None]:
    with (logs / f"{name}.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=logs)
    procs[name] = proc
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _mapped(arg: str, mounts: dict[str, Path]) -> str:
    for target, source in mounts.items():
        if target in arg:
            return arg.replace(target, str(source))
    return arg


@pytest.mark.prometheus
@pytest.mark.deploytools
def test_the_stack_fires_below_break_even_into_alertmanager(tmp_path: Path) -> None:
    """Each service's command from the resolved compose model, on loopback: the engines with
    their flags (scenario drop at 2 s instead of 2 min), specmon with the stack's config
    (scrapes every 1 s), Debian's Prometheus with the stack's prometheus.yml and every rules
    file it globs (intervals 1 s; every alert's `for:` 5 s, as tests/rules/alert_rules.py
    allows), Debian's Alertmanager with the generated alertmanager.yml. SpecmonBelowBreakEven
    reaches Alertmanager for vllm-degrading and for no other target."""
    for binary in ("prometheus", "prometheus-alertmanager"):
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} not found: ./dev.sh provision debian, or -m 'not prometheus'")
    model = _model()["services"]
    ports = {name: _free_port() for name in model}
    addresses: dict[str, str] = {}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = tmp_path
    with ExitStack() as stack:
        for name, service in _engine_services().items():
            mounts = _bind_sources(service)
            args = [_mapped(a, mounts) for a in service["command"]]
            container_port = _simulate_args(service).listen.rsplit(":", 1)[1]
            addresses[f"{name}:{container_port}"] = f"127.0.0.1:{ports[name]}"
            args = [
                f"--listen=127.0.0.1:{ports[name]}" if a.startswith("--listen=") else a
                for a in args
            ]
            for i, a in enumerate(args):
                if a.startswith("--scenario="):
                    scenario = yaml.safe_load(Path(a.split("=", 1)[1]).read_text())
                    assert parse_duration(scenario["phases"][0]["at"]) == 120
                    scenario["phases"][0]["at"] = "2s"
                    fast = tmp_path / "degrading.scenario.yml"
                    fast.write_text(yaml.safe_dump(scenario))
                    args[i] = f"--scenario={fast}"
            stack.enter_context(
                _started(name, [sys.executable, "-m", "specmon", "simulate", *args], logs, procs)
            )

        # The tap in front of vllm-eagle, as the tap service runs it (Prometheus scrapes it and
        # specmon reads it beside the engine); the traffic service is left out.
        tap_args = []
        for a in model["tap"]["command"]:
            if a.startswith("--listen="):
                tap_port = a.rsplit(":", 1)[1]
                a = f"--listen=127.0.0.1:{ports['tap']}"
            for container, host in addresses.items():
                a = a.replace(f"//{container}", f"//{host}")
            tap_args.append(a)
        stack.enter_context(
            _started("tap", [sys.executable, "-m", "specmon", "tap", *tap_args], logs, procs)
        )
        addresses[f"tap:{tap_port}"] = f"127.0.0.1:{ports['tap']}"

        specmon_config = (COMPOSE_DIR / "specmon.yml").read_text()
        for container, host in addresses.items():
            specmon_config = specmon_config.replace(f"http://{container}/", f"http://{host}/")
        specmon_config = specmon_config.replace("scrape_interval: 5s", "scrape_interval: 1s")
        specmon_config = specmon_config.replace("scrape_timeout: 3s", "scrape_timeout: 800ms")
        (tmp_path / "specmon.yml").write_text(specmon_config)
        stack.enter_context(
            _started(
                "specmon",
                [
                    sys.executable,
                    "-m",
                    "specmon",
                    "run",
                    f"--config.file={tmp_path / 'specmon.yml'}",
                    f"--web.listen-address=127.0.0.1:{ports['specmon']}",
                    "--log.format=json",
                ],
                logs,
                procs,
            )
        )
        addresses["specmon:10920"] = f"127.0.0.1:{ports['specmon']}"

        am = model["alertmanager"]
        am_args = [_mapped(a, _bind_sources(am)) for a in am["command"]]
        am_args = [
            f"--storage.path={tmp_path / 'am'}" if a.startswith("--storage.path") else a
            for a in am_args
        ]
        am_args += [
            f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
            "--cluster.listen-address=",
        ]
        stack.enter_context(
            _started("alertmanager", ["prometheus-alertmanager", *am_args], logs, procs)
        )
        addresses["alertmanager:9093"] = f"127.0.0.1:{ports['alertmanager']}"

        prom = model["prometheus"]
        mounts = _bind_sources(prom)
        rules_dir = tmp_path / "rules"
        rules_dir.mkdir()
        prom_config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
        (pattern,) = prom_config["rule_files"]
        directory, _, glob = pattern.rpartition("/")
        for rules in sorted(mounts[directory].glob(glob)):
            fast_rules = with_durations(load_rules(rules), for_="5s", keep_firing_for="5s")
            (rules_dir / rules.name).write_text(yaml.safe_dump(fast_rules, sort_keys=False))
        prom_config["rule_files"] = [str(rules_dir / glob)]
        prom_config["global"].update(scrape_interval="1s", evaluation_interval="1s")
        text = yaml.safe_dump(prom_config, sort_keys=False)
        for container, host in addresses.items():
            text = text.replace(container, host)
        (tmp_path / "prometheus.yml").write_text(text)
        prom_args = [_mapped(a, mounts) for a in prom["command"]]
        prom_args = [
            f"--config.file={tmp_path / 'prometheus.yml'}"
            if a.startswith("--config.file")
            else f"--storage.tsdb.path={tmp_path / 'tsdb'}"
            if a.startswith("--storage.tsdb.path")
            else a
            for a in prom_args
        ]
        prom_args.append(f"--web.listen-address=127.0.0.1:{ports['prometheus']}")
        stack.enter_context(_started("prometheus", ["prometheus", *prom_args], logs, procs))
        prom_base = f"http://127.0.0.1:{ports['prometheus']}"

        def rules_loaded() -> int:
            code, body = _get(prom_base + "/api/v1/rules")
            if code != 200:
                return 0
            return len([r for g in json.loads(body)["data"]["groups"] for r in g["rules"]])

        loaded = _wait("Prometheus to load the rules", rules_loaded, procs, logs, 60)
        shipped = sum(
            len(g["rules"]) for p in mounts[directory].glob(glob) for g in load_rules(p)["groups"]
        )
        assert loaded == shipped

        def targets_up() -> bool:
            code, body = _get(prom_base + "/api/v1/targets")
            active = json.loads(body)["data"]["activeTargets"] if code == 200 else []
            return len(active) == 5 and all(t["health"] == "up" for t in active)

        _wait("all five scrape targets up", targets_up, procs, logs, 60)

        am_base = f"http://127.0.0.1:{ports['alertmanager']}"

        def received() -> list[dict[str, Any]]:
            code, body = _get(am_base + "/api/v2/alerts")
            if code != 200:
                return []
            return [
                a
                for a in json.loads(body)
                if a["labels"].get("alertname") == "SpecmonBelowBreakEven"
            ]

        alerts = _wait("SpecmonBelowBreakEven in Alertmanager", received, procs, logs, 150)
        assert {a["labels"]["target"] for a in alerts} == {"vllm-degrading"}
        assert {a["labels"]["severity"] for a in alerts} == {"warning"}
        assert alerts[0]["labels"]["fleet"] == "demo"
        # The receivers send nowhere: Alertmanager logs no failed notification.
        assert "Notify for alerts failed" not in (logs / "alertmanager.log").read_text()


# --------------------------------------------------------------------------- the secured stack

SECURE_DIR = COMPOSE_DIR / "secure"
#: What make-certs.sh writes into deploy/compose/tls/ (gitignored).
MADE_BY_SCRIPT = {"ca.crt", "specmon.crt", "specmon.key"}


@cache
def _secure_model() -> dict[str, Any]:
    result = _compose("config", "--format", "json", overrides=(SECURE_FILE,))
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


@pytest.mark.deploytools
def test_docker_compose_accepts_the_secure_override() -> None:
    """compose.yaml + compose.secure.yaml resolve; specmon reads the web config, Prometheus
    the secured prometheus.yml, the CA and the password; every bind mount exists but the
    files make-certs.sh creates."""
    services = _secure_model()["services"]
    specmon = services["specmon"]
    assert specmon["command"] == [
        "--config.file=/etc/specmon/specmon.yml",
        "--web.config.file=/etc/specmon/web.yml",
    ]
    mounts = _bind_sources(specmon)
    assert mounts["/etc/specmon/specmon.yml"] == COMPOSE_DIR / "specmon.yml"
    assert mounts["/etc/specmon/web.yml"] == SECURE_DIR / "web.yml"
    prom = _bind_sources(services["prometheus"])
    assert prom["/etc/prometheus/prometheus.yml"] == SECURE_DIR / "prometheus.yml"
    missing = {
        source
        for service in services.values()
        for source in _bind_sources(service).values()
        if not source.exists()
    }
    assert {p.relative_to(COMPOSE_DIR).as_posix() for p in missing} <= {
        f"tls/{name}" for name in MADE_BY_SCRIPT
    }, missing
    for name in SPECMON_IMAGE_SERVICES:  # the override loosens nothing
        assert services[name]["read_only"] is True and services[name]["cap_drop"] == ["ALL"]


def test_secure_files_fit_together(tmp_path: Path) -> None:
    """The secured stack's files, checked against each other without Docker: the web config
    is valid with make-certs.sh's certificates, its hash is the password Prometheus sends,
    and every path one file names is where another puts it."""
    import bcrypt

    from specmon.web.server import load_web_settings

    compose = yaml.safe_load(SECURE_FILE.read_text())["services"]

    def mounts(service: str) -> dict[str, str]:
        return {v.split(":")[1]: v.split(":")[0] for v in compose[service]["volumes"] if ":" in v}

    specmon_mounts, prom_mounts = mounts("specmon"), mounts("prometheus")
    web_target = next(a.split("=", 1)[1] for a in compose["specmon"]["command"]
                      if a.startswith("--web.config.file="))  # fmt: skip
    assert specmon_mounts[web_target] == "./secure/web.yml"
    web = yaml.safe_load((SECURE_DIR / "web.yml").read_text())
    web_dir = Path(web_target).parent
    for key, file in (("cert_file", "specmon.crt"), ("key_file", "specmon.key")):
        assert specmon_mounts[str(web_dir / web["tls_server_config"][key])] == f"./tls/{file}"

    # make-certs.sh, then the web config loaded as specmon would (certificate and key).
    tls = tmp_path / "tls"
    made = subprocess.run(
        ["sh", str(COMPOSE_DIR / "make-certs.sh"), str(tls)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert {p.name for p in tls.iterdir()} == MADE_BY_SCRIPT
    (tmp_path / "web.yml").write_text((SECURE_DIR / "web.yml").read_text())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        settings = load_web_settings(tmp_path / "web.yml", executor=pool)
    assert settings.tls and settings.auth is not None

    prom = yaml.safe_load((SECURE_DIR / "prometheus.yml").read_text())
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "specmon"]
    assert job["scheme"] == "https"
    assert prom_mounts[job["tls_config"]["ca_file"]] == "./tls/ca.crt"
    assert prom_mounts[job["basic_auth"]["password_file"]] == "./secure/scrape-password"
    password = (SECURE_DIR / "scrape-password").read_text().strip()
    hashed = web["basic_auth_users"][job["basic_auth"]["username"]]
    assert bcrypt.checkpw(password.encode(), hashed.encode())
    # The certificate is valid for the name Prometheus checks.
    cert_text = subprocess.run(
        ["openssl", "x509", "-in", str(tls / "specmon.crt"), "-noout", "-ext", "subjectAltName"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    assert f"DNS:{job['tls_config']['server_name']}" in cert_text
    # Apart from the specmon job's security, the secured prometheus.yml is prometheus.yml.
    plain = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    for key in ("scheme", "tls_config", "basic_auth"):
        job.pop(key)
    assert prom == plain


# --------------------------------------------------------------------------- Prometheus mode

FLEET_FILE = COMPOSE_DIR / "compose.fleet.yaml"


@pytest.mark.deploytools
def test_docker_compose_accepts_the_fleet_override() -> None:
    """compose.yaml + compose.fleet.yaml resolve: specmon reads fleet/specmon.yml, nothing
    else changes."""
    result = _compose("config", "--format", "json", overrides=(FLEET_FILE,))
    assert result.returncode == 0, result.stderr
    services = json.loads(result.stdout)["services"]
    mounts = _bind_sources(services["specmon"])
    assert mounts["/etc/specmon/specmon.yml"] == COMPOSE_DIR / "fleet" / "specmon.yml"
    plain = _model()["services"]
    assert set(services) == set(plain)
    for name in set(services) - {"specmon"}:
        assert services[name] == plain[name], name


def test_fleet_files_fit_together() -> None:
    """fleet/specmon.yml reads the stack's Prometheus service, selects the job that scrapes
    the engines, reads as often as it scrapes them, and gives each engine the settings the
    direct config gives it: the same figures under the engine's instance name."""
    compose = yaml.safe_load(FLEET_FILE.read_text())["services"]
    (volume,) = compose["specmon"]["volumes"]
    assert volume == "./fleet/specmon.yml:/etc/specmon/specmon.yml:ro"
    fleet = load_config(COMPOSE_DIR / "fleet" / "specmon.yml")
    direct = load_config(COMPOSE_DIR / "specmon.yml")
    (source,) = fleet.sources
    assert not fleet.targets
    assert source.url == "http://prometheus:9090"
    base = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    assert "9090:9090" in base["prometheus"]["ports"]
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    (matcher,) = source.selector.matchers
    job = jobs[matcher.value]
    assert source.selector.matches({"job": job["job_name"]})
    ((static,),) = [job["static_configs"]]
    assert parse_duration(prom["global"]["scrape_interval"]) == source.interval
    assert fleet.global_.windows == direct.global_.windows
    by_host = {urllib.parse.urlsplit(t.url).netloc: t for t in direct.targets}
    assert sorted(static["targets"]) == sorted(by_host)
    for instance, target in by_host.items():
        settings = source.settings_for({"instance": instance, "job": job["job_name"]})
        assert (settings.draft_cost, settings.chain_length, settings.model) == (
            target.draft_cost,
            target.chain_length,
            target.model,
        ), instance


@pytest.mark.deploytools
def test_the_tap_stands_in_front_of_an_engine_that_gives_its_fields() -> None:
    """The tap service passes requests to vllm-eagle, which serves vLLM's per-request object;
    specmon reads the tap beside the engine, Prometheus scrapes it, the traffic reaches it."""
    services = _model()["services"]
    args = build_parser().parse_args(["tap", *services["tap"]["command"]])
    assert args.upstream == "http://vllm-eagle:8000"
    host, port = args.listen.rsplit(":", 1)
    assert host == "0.0.0.0"
    engine = _simulate_args(services["vllm-eagle"])
    assert engine.per_request_spec_decode_metrics == "summary"
    config = load_config(COMPOSE_DIR / "specmon.yml")
    (target,) = [t for t in config.targets if t.name == "vllm-eagle"]
    assert target.tap == f"http://tap:{port}/metrics"
    prom = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert jobs["specmon-tap"] == [f"tap:{port}"]
    (script,) = services["traffic"]["command"]
    assert f"http://tap:{port}/v1/chat/completions" in script
    for name in ("code", "chat"):
        assert f'"{name}"' in script and name in args.classes.split(",")
