"""The image built and run by a real OCI engine: Debian's podman, with runc.

The Dockerfile is built as it stands, by the chart README's own ``podman build`` line, from a
different base than its default: ``PYTHON_IMAGE`` names a Python 3.11 image made from
Debian bookworm's own packages with mmdebstrap (tests/realengines/provision.py,
``ensure_oci_base``: no registry is reachable here; the official python:3.11-slim-bookworm
is the same Debian release with python.org's build of 3.11 instead of Debian's). Then, as a
deployment runs it:

- read-only root filesystem (no tmpfs either), its own user, a named volume for its state;
- a simulated vLLM and a simulated llama.cpp in containers sharing its network namespace
  (the sidecar layout: the image's own config watches 127.0.0.1:8000 and :8080), scraped
  from inside the container; /healthz and /metrics answered through a published port;
- the HEALTHCHECK (kept by ``--format docker``) run by ``podman healthcheck run``;
- SIGHUP reloads the config, SIGTERM stops it with exit 0 and the state file written;
- nothing written outside the volume (``podman diff`` of a writable-root run);
- the image's size held to a budget;
- and every check shown failing on a run that breaks it (root, a write, no /healthz).

Cost on the 2-core reference machine (docs/testing.md): cold, the podman packages and the
mmdebstrap base add about 3 minutes to provisioning and the first build about 45 s; warm, a
build whose sources changed about 25 s (the dependencies' layer is cached), unchanged 5 s,
then about 30 s of containers.
"""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from specmon.state.store import decode
from tests.deploy.podman import (
    IMAGE_UID,
    Built,
    build_flags,
    containers,
    documented_commands,
    inspect,
    podman,
    run_detached,
    unique,
    user_problems,
    wait_until,
    write_problems,
)
from tests.deploy.tools import REPO
from tests.support.daemon import Exported, get

pytestmark = pytest.mark.deploytools

CHART = REPO / "deploy" / "helm" / "specmon"
README = CHART / "README.md"
KUBERNETES_DOC = REPO / "docs" / "kubernetes.md"
OVERLAYS = REPO / "deploy" / "kubernetes" / "overlays"
#: The image's size as podman counts it (its layers, uncompressed): 202 MB measured on
#: 2026-12-07 (the base 179 MB: Debian's python3 3.11.2 and its libraries; specmon's venv and
#: files 23 MB). The budget leaves room for Debian's point releases and a few dependencies.
IMAGE_BUDGET = 230_000_000
#: specmon's own layers (the image less its base): the venv with its dependencies.
OWN_LAYERS_BUDGET = 40_000_000
#: The state volume's mount point and the flags that use it (docs/deploying.md).
STATE = "/var/lib/specmon"
RUN_ARGS = ("--config.file=/etc/specmon/specmon.yml", f"--state.dir={STATE}")
#: Long enough for a loaded machine: these wait for conditions, never for time.
WAIT = 90.0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The image, built by the README's ``podman build`` line (plus this machine's flags and
    the base from Debian's packages), from the checkout."""
    if shutil.which("podman") is None:
        pytest.fail(
            "podman not found: ./dev.sh provision image (Debian's podman, runc, mmdebstrap)"
        )
    from tests.realengines.provision import ProvisionError, ensure_oci_base

    try:
        base = ensure_oci_base()  # provisioning made it; a warm check costs a second
    except ProvisionError as exc:
        pytest.fail(f"the base image could not be provisioned: {exc}")
    build = documented_commands(README.read_text())["build"]
    assert build[:2] == ["podman", "build"] and build[-1] == ".", build
    iidfile = tmp_path_factory.mktemp("image") / "iid"
    tag = build[build.index("-t") + 1]
    started = time.monotonic()
    result = podman(
        "build", *build_flags(), "--build-arg", f"PYTHON_IMAGE={base}",
        "--iidfile", str(iidfile), *build[2:],
        cwd=REPO, timeout=1800,
    )  # fmt: skip
    seconds = time.monotonic() - started
    return Built(iidfile.read_text().strip(), tag, base, seconds, result.stdout)


@pytest.fixture
def volume() -> Iterator[str]:
    name = unique("specmon-state")
    podman("volume", "create", name)
    try:
        yield name
    finally:
        podman("volume", "rm", "--force", name, check=False)


def _port(container: str) -> int:
    mapped = podman("port", container, "10920/tcp").stdout.strip()
    return int(mapped.rsplit(":", 1)[1])


def _metrics(port: int) -> Exported | None:
    try:
        status, body, _ = get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except OSError:
        return None
    return Exported.parse(body.decode()) if status == 200 else None


def _healthz(port: int) -> tuple[int, str] | None:
    try:
        status, body, _ = get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except OSError:
        return None
    return status, body.decode().strip()


def _logs(container: str) -> list[dict[str, object]]:
    """The container's log lines (specmon logs JSON to stderr), parsed."""
    result = podman("logs", container)
    lines = []
    for line in (result.stdout + result.stderr).splitlines():
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            lines.append({"raw": line})
    return lines


def _start_specmon(name: str, image: str, volume: str, *, extra: tuple[str, ...] = ()) -> None:
    """specmon as a deployment runs it: read-only root without even a tmpfs, the state
    volume, a port on the host's loopback (user-mode networking: nothing else of the host's)."""
    run_detached(
        name, image, *RUN_ARGS,
        options=("--read-only", "--read-only-tmpfs=false", "--volume", f"{volume}:{STATE}",
                 "--network", "slirp4netns", "--publish", "127.0.0.1::10920", *extra),
    )  # fmt: skip


def _start_engine(name: str, image: str, *, beside: str, engine: str, port: int) -> None:
    """A simulated engine in the image's own ``specmon simulate``, in specmon's network
    namespace (as a sidecar shares its engine's pod)."""
    run_detached(
        name, image, "simulate", "--engine", engine, "--listen", f"127.0.0.1:{port}",
        options=("--read-only", "--network", f"container:{beside}", "--entrypoint", "specmon"),
    )  # fmt: skip


def test_the_readme_commands_build_and_save_the_chart_default_image(
    built: Built, tmp_path: Path
) -> None:
    commands = documented_commands(README.read_text())
    # docs/kubernetes.md gives the same commands.
    assert documented_commands(KUBERNETES_DOC.read_text()) == commands
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = values["image"]
    default = f"{image['registry']}/{image['repository']}:{chart['appVersion']}"
    assert built.tag == default, "the README builds the image the chart installs by default"
    # ... and every kustomize layout (the sidecar's other container is vLLM's).
    images = {
        (path.relative_to(OVERLAYS).parts[0], found)
        for path in OVERLAYS.rglob("*.yaml")  # with an overlay's patches/
        for found in re.findall(r"^\s*image:\s*(\S+)", path.read_text(), re.MULTILINE)
        if "vllm" not in found
    }
    layouts = sorted(p.name for p in OVERLAYS.iterdir() if p.is_dir())
    assert sorted(images) == [(layout, default) for layout in layouts]
    # podman save, as the README says (then `kind load image-archive` takes the file).
    save = commands["save"]
    podman(*save[1:], cwd=tmp_path, timeout=600)
    archive = tmp_path / save[save.index("-o") + 1]
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        manifest = json.load(member)
    assert [entry["RepoTags"] for entry in manifest] == [[default]]
    print(f"image built in {built.seconds:.0f} s; saved archive {archive.stat().st_size} bytes")


def test_the_image_is_within_its_size_budget(built: Built) -> None:
    size, base = built.size(), built.base_size()
    print(f"image {size} bytes, base {base} bytes, specmon's layers {size - base} bytes")
    assert size <= IMAGE_BUDGET, f"{size / 1e6:.0f} MB, budget {IMAGE_BUDGET / 1e6:.0f} MB"
    assert size - base <= OWN_LAYERS_BUDGET, f"specmon's layers: {(size - base) / 1e6:.0f} MB"


def test_runs_read_only_as_its_user_scrapes_a_sidecar_engine_reloads_and_stops(
    built: Built, volume: str
) -> None:
    (image,) = json.loads(podman("image", "inspect", built.image_id).stdout)
    assert image["Config"].get("User") == f"{IMAGE_UID}:{IMAGE_UID}"
    # Kept by --format docker (the OCI format has no HEALTHCHECK).
    assert image["Healthcheck"]["Test"][:4] == ["CMD", "python", "-m", "specmon.web.probe"]
    with containers() as names:
        specmon = unique("specmon")
        names.append(specmon)
        _start_specmon(specmon, built.image_id, volume)
        for engine, port in (("vllm", 8000), ("llamacpp", 8080)):
            names.append(unique(f"sim-{engine}"))
            _start_engine(names[-1], built.image_id, beside=specmon, engine=engine, port=port)
        port = _port(specmon)
        assert wait_until(lambda: _healthz(port), timeout=WAIT, what="/healthz") == (200, "ok")
        assert user_problems(specmon) == []

        # The image's own config: both engines on the shared loopback, scraped.
        def both_up() -> Exported | None:
            m = _metrics(port)
            up = m.samples.get("specmon_up", {}) if m else {}
            values = {dict(labels).get("target"): v for labels, v in up.items()}
            return m if values == {"vllm": 1.0, "llamacpp": 1.0} else None

        exported = wait_until(both_up, timeout=WAIT, what="specmon_up 1 for vllm and llamacpp")
        health = podman("healthcheck", "run", specmon, check=False)
        assert health.returncode == 0, health.stdout + health.stderr

        # SIGHUP: the config is read again (its success time moves), the process stays.
        pid = inspect(specmon, "{{.State.Pid}}")
        stamp = "specmon_config_last_reload_success_timestamp_seconds"
        before = exported.samples[stamp][()]
        podman("kill", "--signal", "HUP", specmon)

        def reloaded() -> float | None:
            m = _metrics(port)
            after = m.samples.get(stamp, {}).get(()) if m else None
            return after if after is not None and after > before else None

        wait_until(reloaded, timeout=WAIT, what="a newer reload time after SIGHUP")
        current = _metrics(port)
        assert (
            current is not None
            and current.samples["specmon_config_last_reload_successful"][()] == 1
        )
        assert inspect(specmon, "{{.State.Pid}}") == pid

        # SIGTERM (podman stop), well within the grace period: exit 0, the state written.
        podman("stop", "--time", "60", specmon, timeout=120)
        assert inspect(specmon, "{{.State.ExitCode}}") == "0"
        events = [line.get("event") for line in _logs(specmon)]
        assert "config_loaded" in events and events[-1] == "specmon_stopped", events[-5:]
        errors = [line for line in _logs(specmon) if line.get("level") in ("error", "critical")]
        assert errors == [], errors
    mountpoint = Path(
        podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()
    )
    state = mountpoint / "specmon-state.json"
    info = state.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (IMAGE_UID, IMAGE_UID, 0o600)
    body = decode(state.read_bytes())
    assert {"vllm", "llamacpp"} <= set(json.dumps(body).split('"')), "both targets' epochs kept"


def test_writes_nothing_outside_its_volume(built: Built, volume: str) -> None:
    """A writable root this time, so that ``podman diff`` can show what the process wrote."""
    with containers() as names:
        specmon = unique("specmon-rw")
        names.append(specmon)
        run_detached(
            specmon, built.image_id, *RUN_ARGS,
            options=("--volume", f"{volume}:{STATE}", "--network", "none"),
        )  # fmt: skip
        names.append(unique("sim-vllm"))
        _start_engine(names[-1], built.image_id, beside=specmon, engine="vllm", port=8000)
        wait_until(
            lambda: podman("healthcheck", "run", specmon, check=False).returncode == 0,
            timeout=WAIT, what="the HEALTHCHECK passing",
        )  # fmt: skip
        podman("kill", "--signal", "HUP", specmon)
        podman("stop", "--time", "60", specmon, timeout=120)
        assert inspect(specmon, "{{.State.ExitCode}}") == "0"
        assert write_problems(specmon) == []
    mountpoint = Path(
        podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).stdout.strip()
    )
    assert (mountpoint / "specmon-state.json").is_file()


def test_each_check_fails_on_a_run_that_breaks_it(built: Built) -> None:
    """Root, a write outside the volume, no /healthz: each check above reports it."""
    with containers() as names:
        # As root (--user 0 overrides the image's USER).
        root = unique("specmon-root")
        names.append(root)
        run_detached(
            root, built.image_id, RUN_ARGS[0], options=("--user", "0:0", "--network", "none")
        )  # no --state.dir: nothing of its own to write
        wait_until(
            lambda: inspect(root, "{{.State.Running}}") == "true", timeout=WAIT, what="running"
        )
        assert [p.split()[0] for p in user_problems(root)] == ["Uid", "Gid"]
        # A write outside the volume.
        assert write_problems(root) == []
        podman("exec", root, "sh", "-c", "echo x > /tmp/written")
        assert write_problems(root) == ["/tmp", "/tmp/written"]
        # Serving elsewhere than the HEALTHCHECK and the published port ask: no /healthz.
        elsewhere = unique("specmon-elsewhere")
        names.append(elsewhere)
        run_detached(
            elsewhere, built.image_id, *RUN_ARGS, "--web.listen-address=127.0.0.1:10921",
            options=("--read-only", "--network", "slirp4netns", "--publish", "127.0.0.1::10920"),
        )  # fmt: skip
        port = _port(elsewhere)
        wait_until(
            lambda: any(line.get("event") == "specmon_started" for line in _logs(elsewhere)),
            timeout=WAIT, what="specmon started",
        )  # fmt: skip
        assert _healthz(port) is None or _healthz(port) != (200, "ok")
        health = podman("healthcheck", "run", elsewhere, check=False)
        assert health.returncode != 0 and "unhealthy" in health.stdout + health.stderr
