"""deploy/systemd/specmon.service: systemd's own checks, and the unit's commands run under the
confinement it asks for (as far as it can be reproduced without systemd as PID 1)."""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from specmon import __version__
from specmon.daemon.config import load_config
from tests.deploy.dockerfile import Image, stages
from tests.deploy.sandbox import sandboxed, world_traversable
from tests.deploy.tools import REPO
from tests.support.tls import bcrypt_hash, make_pki

UNIT = REPO / "deploy" / "systemd" / "specmon.service"
WEB_CONFIG = REPO / "deploy" / "systemd" / "web.yml"
INSTALL_PREFIX = "/opt/specmon"
CONFIG = "/etc/specmon/specmon.yml"
#: What the unit hands the service as credentials: name -> file (LoadCredential=).
CREDENTIALS = {
    "web.yml": "/etc/specmon/web.yml",
    "specmon.crt": "/etc/specmon/tls/specmon.crt",
    "specmon.key": "/etc/specmon/tls/specmon.key",
}
#: The first UID systemd hands out to DynamicUser= services.
DYNAMIC_UID = 61184


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value (a key may repeat), comments dropped."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"directive before any section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not a directive: {line}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _one(unit: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    (value,) = unit[section][key]
    return value


def _credentials(unit: dict[str, dict[str, list[str]]]) -> dict[str, str]:
    return dict(c.split(":", 1) for c in unit["Service"].get("LoadCredential", []))


def _test_web_config(password: str) -> str:
    """The shipped web.yml with its placeholder hash replaced, as the instructions say."""
    web = yaml.safe_load(WEB_CONFIG.read_text())
    (user,) = web["basic_auth_users"]
    web["basic_auth_users"][user] = bcrypt_hash(password)
    return yaml.safe_dump(web)


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze not found: apt-get install systemd (Debian's base system)")
    return path


def _local_copy(tmp_path: Path, specmon_prefix: Path) -> Path:
    """The unit with /opt/specmon pointing at an existing install (verify checks it exists)."""
    copy = tmp_path / "specmon.service"
    copy.write_text(UNIT.read_text().replace(INSTALL_PREFIX, str(specmon_prefix)))
    return copy


def test_unit_asks_for_the_hardening() -> None:
    unit = parse_unit(UNIT.read_text())
    service = unit["Service"]
    expected = {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "MemoryDenyWriteExecute": "yes",
        "CapabilityBoundingSet": "",
        "Type": "exec",
        "Restart": "on-failure",
    }
    for key, value in expected.items():
        assert service.get(key) == [value], key
    assert _one(unit, "Install", "WantedBy") == "multi-user.target"


def test_unit_commands() -> None:
    unit = parse_unit(UNIT.read_text())
    assert _one(unit, "Service", "ExecReload") == "/bin/kill -HUP $MAINPID"
    start = shlex.split(_one(unit, "Service", "ExecStart"))
    assert start[:2] == [f"{INSTALL_PREFIX}/bin/specmon", "run"]
    assert f"--config.file={CONFIG}" in start
    assert "--web.listen-address=:10920" in start
    # HTTPS and basic auth: the web config and the certificate reach the service as
    # credentials (%d, readable by its dynamic user only); no lifecycle API.
    assert "--web.config.file=%d/web.yml" in start
    assert not [a for a in start if a.startswith("--web.enable-lifecycle")]
    # The state (configuration epochs) in the directory systemd makes for the dynamic user.
    assert "--state.dir=/var/lib/specmon" in start
    assert _one(unit, "Service", "StateDirectory") == "specmon"
    assert _one(unit, "Service", "StateDirectoryMode") == "0700"
    assert _credentials(unit) == CREDENTIALS
    pre = [shlex.split(p) for p in unit["Service"]["ExecStartPre"]]
    assert pre == [
        [f"{INSTALL_PREFIX}/bin/specmon", "check-config", CONFIG],
        [f"{INSTALL_PREFIX}/bin/specmon", "check-web-config", "%d/web.yml"],
    ]
    web = yaml.safe_load(WEB_CONFIG.read_text())
    assert {web["tls_server_config"]["cert_file"], web["tls_server_config"]["key_file"]} == {
        "specmon.crt",
        "specmon.key",
    }, "relative to the credentials directory, by their credential names"
    # The same config path and install prefix as the image.
    final = stages()[1][-1]
    cmd = next(i.args for i in final.body if i.keyword == "CMD")
    assert CONFIG in cmd
    assert any(i.args == f"--from=build {INSTALL_PREFIX} {INSTALL_PREFIX}" for i in final.body)
    # The config the instructions install is valid.
    assert load_config(REPO / "deploy" / "systemd" / "specmon.yml").targets


def test_systemd_analyze_verify_is_silent(tmp_path: Path) -> None:
    venv = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv"))
    assert (venv / "bin" / "specmon").exists()
    unit = _local_copy(tmp_path, venv)
    result = subprocess.run(
        [_systemd_analyze(), "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == ""


def test_systemd_analyze_verify_does_complain(tmp_path: Path) -> None:
    """verify is a real check here: a mistyped directive and a missing binary are reported."""
    unit = tmp_path / "specmon.service"
    unit.write_text(UNIT.read_text().replace("ProtectHome=yes", "ProtectHme=yes"))
    result = subprocess.run(
        [_systemd_analyze(), "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    assert "Unknown key 'ProtectHme'" in output
    assert f"{INSTALL_PREFIX}/bin/specmon is not executable" in output


def test_systemd_analyze_security_rates_it_ok(tmp_path: Path) -> None:
    venv = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv"))
    unit = _local_copy(tmp_path, venv)
    result = subprocess.run(
        [_systemd_analyze(), "security", "--offline=yes", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    match = re.search(r"Overall exposure level for specmon\.service: ([\d.]+) (\w+)", result.stdout)
    assert match, result.stdout + result.stderr
    # systemd's scale: 0 = fully confined, 10 = unconfined; "OK" is below 2.0 (a default
    # unit scores 9.6 "UNSAFE").
    assert float(match.group(1)) <= 2.0, result.stdout
    assert match.group(2) == "OK"


@pytest.mark.deploytools
def test_unit_commands_run_under_its_confinement(image: Image, tmp_path: Path) -> None:
    """ExecStartPre and ExecStart with the image's install as /opt/specmon, confined as the
    unit asks: a dynamic UID with no capabilities and no_new_privs (DynamicUser,
    NoNewPrivileges, CapabilityBoundingSet=), everything read-only (ProtectSystem=strict), empty
    /tmp and /var/tmp (PrivateTmp), empty /home, /root and /run/user (ProtectHome), W^X memory
    refused by the kernel (MemoryDenyWriteExecute), UMask=0077. It scrapes an engine, reloads
    on ExecReload and exits 0 on SIGTERM. (Not reproduced: the seccomp filter, the /proc and
    /dev restrictions and the namespaces systemd adds.)"""
    unit = parse_unit(UNIT.read_text())
    service = unit["Service"]
    prefix = image.host(INSTALL_PREFIX)
    # Beside the install (readable by any user, and not under /tmp, which PrivateTmp hides).
    config = image.root / "systemd-test-etc" / "specmon.yml"
    config.parent.mkdir(exist_ok=True)
    config.write_text((REPO / "deploy" / "systemd" / "specmon.yml").read_text())
    config.parent.chmod(0o755)
    config.chmod(0o644)
    if not world_traversable(prefix) or not world_traversable(config):
        pytest.skip("the install or the config is not reachable by an unprivileged user")
    # LoadCredential=, as systemd does it: copies owned by the service's user, mode 0400, in
    # a directory only it can enter ($CREDENTIALS_DIRECTORY, %d in the unit). The files are
    # a test certificate and the shipped web.yml with a known password's hash.
    pki = make_pki(tmp_path / "pki")
    ca = config.parent / "server-ca.crt"  # for the test's client, readable by the service
    ca.write_bytes(pki.server_ca.read_bytes())
    ca.chmod(0o644)
    credentials = image.root / "systemd-test-credentials"
    credentials.mkdir(exist_ok=True)
    content = {
        CREDENTIALS["web.yml"]: _test_web_config("scrape me").encode(),
        CREDENTIALS["specmon.crt"]: pki.server_cert.read_bytes(),
        CREDENTIALS["specmon.key"]: pki.server_key.read_bytes(),
    }
    for name, source in _credentials(unit).items():
        (credentials / name).write_bytes(content[source])
        os.chown(credentials / name, DYNAMIC_UID, DYNAMIC_UID)
        (credentials / name).chmod(0o400)
    os.chown(credentials, DYNAMIC_UID, DYNAMIC_UID)
    credentials.chmod(0o500)
    auth = {"Authorization": "Basic " + base64.b64encode(b"prometheus:scrape me").decode()}

    def command(text: str) -> list[str]:
        return shlex.split(
            text.replace(INSTALL_PREFIX, str(prefix))
            .replace(CONFIG, str(config))
            .replace("%d", str(credentials))
        )

    for text in service["ExecStartPre"]:
        pre = subprocess.run(command(text), capture_output=True, text=True, timeout=60, check=False)
        assert pre.returncode == 0 and pre.stdout.startswith("OK "), pre.stdout + pre.stderr

    environment = dict(e.split("=", 1) for e in service.get("Environment", []))
    masked = [
        d
        for d in ("/tmp", "/var/tmp", "/home", "/root", "/run/user")
        if Path(d).is_dir() and not prefix.is_relative_to(d) and not config.is_relative_to(d)
    ]
    assert {"/home", "/root"} & set(masked) or not Path("/root").is_dir()
    python = str(prefix / "bin" / "python")
    with sandboxed(
        command(_one(unit, "Service", "ExecStart")),
        log=tmp_path / "service.log",
        uid=DYNAMIC_UID,
        gid=DYNAMIC_UID,
        pid_namespace=False,
        tmpfs=masked,
        mdwe=True,
        umask=_one(unit, "Service", "UMask"),
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", **environment},
        python="/usr/bin/python3",
    ) as box:
        base = "https://127.0.0.1:10920"
        box.wait_for(
            lambda: box.fetch(base + "/healthz", python, cafile=str(ca))[0] == 200,
            timeout=20,
            what="/healthz over HTTPS",
        )
        assert box.fetch(base + "/metrics", python, cafile=str(ca))[0] == 401
        status = box.proc_status()
        assert status["Uid"].split()[0] == str(DYNAMIC_UID)
        assert status["NoNewPrivs"] == "1" and status["CapBnd"] == "0000000000000000"
        assert status["Umask"] == "0077"
        engine = box.spawn(
            [
                str(prefix / "bin" / "specmon"),
                "simulate",
                "--engine",
                "llamacpp",
                "--listen",
                "127.0.0.1:8080",
                "--survival",
                "0.9,0.6",
                "--seed",
                "2",
            ],
            tmp_path / "engine.log",
        )
        try:
            box.wait_for(
                lambda: (
                    'specmon_up{target="llamacpp"} 1.0'
                    in box.fetch(base + "/metrics", python, cafile=str(ca), headers=auth)[1]
                ),
                timeout=30,
                what="the llama.cpp engine scraped",
            )
            reload = _one(unit, "Service", "ExecReload").replace("$MAINPID", str(box.pid))
            assert subprocess.run(shlex.split(reload), timeout=10, check=False).returncode == 0
            box.wait_for(lambda: '"config_loaded"' in box.log_text(), timeout=10, what="the reload")
            stop_timeout = float(_one(unit, "Service", "TimeoutStopSec").rstrip("s"))
            started = time.monotonic()
            os.kill(box.pid, signal.SIGTERM)
            assert box.proc.wait(timeout=stop_timeout) == 0, box.log_text()
            assert time.monotonic() - started < 5
        finally:
            engine.terminate()
            engine.wait(timeout=10)
    log = (tmp_path / "service.log").read_text()
    assert "Traceback" not in log and "Read-only file system" not in log, log


def _readme_block(heading: str) -> list[str]:
    text = (REPO / "deploy" / "README.md").read_text()
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


@pytest.mark.deploytools
def test_readme_systemd_steps_work_as_written(tmp_path: Path) -> None:
    """deploy/README.md's systemd commands, as a new user runs them from the checkout (sudo
    dropped: the tests run as root), in a mount namespace where /opt is empty and /etc is an
    overlay, so the host is untouched. The systemctl and journalctl lines need systemd as
    PID 1 and are not run; everything before them must succeed and verify must be silent."""
    require_root_namespaces = shutil.which("unshare") is not None and os.geteuid() == 0
    if not require_root_namespaces:
        pytest.skip("needs root and unshare for a private /opt and /etc")
    lines = _readme_block("systemd")
    runnable = []
    for line in lines:
        command = line.removeprefix("sudo ")
        if command.startswith(("systemctl ", "journalctl ")):
            continue
        runnable.append(command.replace("/path/to/specmon", str(REPO)))
    assert [c.split()[0] for c in runnable] == [
        "python3",
        "/opt/specmon/bin/pip",
        "install",
        "install",
        "install",
        "openssl",
        "install",
        "systemd-analyze",
    ]
    upper, work = tmp_path / "upper", tmp_path / "work"
    upper.mkdir()
    work.mkdir()
    unit = parse_unit(UNIT.read_text())
    # LoadCredential=: copies of the installed files under their credential names (%d).
    credentials = tmp_path / "credentials"
    load_credentials = [
        f"mkdir -p {credentials}",
        *(f"cp {source} {credentials}/{name}" for name, source in _credentials(unit).items()),
    ]
    script = "\n".join(
        [
            "set -e",
            "mount -t tmpfs tmpfs /opt",
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc",
            # systemd-analyze verify exits 0 even on warnings: its output must be empty.
            *(
                f'v=$({c} 2>&1); if [ -n "$v" ]; then echo "$v" >&2; exit 3; fi'
                if c.startswith("systemd-analyze")
                else c
                for c in runnable
            ),
            "/opt/specmon/bin/specmon --version",
            *load_credentials,
            *(c.replace("%d", str(credentials)) for c in unit["Service"]["ExecStartPre"]),
        ]
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout.splitlines()
    assert out[-3:] == [
        f"specmon {__version__}",
        "OK /etc/specmon/specmon.yml: 2 target(s); scrape every 5s (timeout 3s); windows "
        "1m, 5m, 15m",
        f"OK {credentials}/web.yml: TLS TLS12-TLS13, client certificates: NoClientCert; "
        "1 basic-auth user(s); headers X-Content-Type-Options, X-Frame-Options",
    ]
    assert (upper / "systemd" / "system" / "specmon.service").read_text() == UNIT.read_text()
    assert not Path("/opt/specmon").exists() and not Path("/etc/specmon").exists()
