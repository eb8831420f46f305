"""podman, as the image test drives it (tests/deploy/test_image.py): commands with the flags
these machines need, containers named apart per run, and the checks an image must pass, each
a function returning the problems it found (so that a test can also show a check failing).

The flags and the base image come from tests/realengines/provision.py (``podman_flags``,
``ensure_oci_base``); shared/reference/containers.md says why each flag is there.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.realengines.provision import podman_flags

__all__ = [
    "IMAGE_GID",
    "IMAGE_UID",
    "Built",
    "build_flags",
    "documented_commands",
    "podman",
    "unique",
    "user_problems",
    "wait_until",
    "write_problems",
]

#: The image's user and group (Dockerfile: USER 10920:10920).
IMAGE_UID = 10920
IMAGE_GID = 10920
#: What podman itself changes in a container's root filesystem, whatever the image: the
#: name and resolver files it bind-mounts into /etc, the passwd and group lines it adds for
#: a numeric user without one, and /run/.containerenv.
PODMAN_OWN = frozenset(
    {
        "/etc",
        "/etc/group",
        "/etc/passwd",
        "/etc/hosts",
        "/etc/hostname",
        "/etc/resolv.conf",
        "/run",
        "/run/.containerenv",
        "/run/secrets",
    }
)
#: podman logs this at every container start and stop without systemd (the healthcheck's
#: timers): noise, dropped from error messages.
_NOISE = "unable to get systemd connection"

T = TypeVar("T")


def podman(
    *args: str, timeout: float = 120.0, check: bool = True, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``podman ARGS``; with ``check``, an AssertionError carrying its output on failure."""
    result = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )
    if check and result.returncode != 0:
        stderr = "\n".join(ln for ln in result.stderr.splitlines() if _NOISE not in ln)
        raise AssertionError(
            f"podman {shlex.join(args)} exited {result.returncode}:\n{result.stdout}\n{stderr}"
        )
    return result


def unique(prefix: str) -> str:
    """A container or volume name no other run (another worktree's tests) can hold."""
    return f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def wait_until(
    check: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.25
) -> T:
    """Poll ``check`` until it returns something truthy; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f} s (last: {last!r})")


def build_flags() -> list[str]:
    """What a build here adds to the documented ``podman build``: the runtime and limits,
    the host's network (the package index), and the machine's pip configuration and CA
    certificates (the index may sit behind this machine's own TLS proxy), as
    shared/reference/containers.md does."""
    flags = [*podman_flags(), "--network=host"]
    for path in ("/etc/pip.conf", "/etc/ssl/certs"):
        if Path(path).exists():
            flags += ["--volume", f"{path}:{path}:ro"]
    return flags


def documented_commands(text: str) -> dict[str, list[str]]:
    """The ``podman build`` and ``podman save`` lines of a document, as argument lists
    (a line may hold one command; each must appear exactly once)."""
    found: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        for verb in ("build", "save"):
            if line.startswith(f"podman {verb} "):
                assert verb not in found, f"two 'podman {verb}' lines: {line}"
                found[verb] = shlex.split(line)
    return found


@dataclass(frozen=True)
class Built:
    """The image the test built: its id (runs use it, not a tag another run may move)."""

    image_id: str
    tag: str
    base: str
    seconds: float
    log: str

    def size(self) -> int:
        return int(podman("image", "inspect", "--format", "{{.Size}}", self.image_id).stdout)

    def base_size(self) -> int:
        return int(podman("image", "inspect", "--format", "{{.Size}}", self.base).stdout)


def inspect(container: str, template: str) -> str:
    return podman("inspect", "--format", template, container).stdout.strip()


def user_problems(container: str) -> list[str]:
    """What is wrong with the user the container's main process runs as: anything but the
    image's uid and gid (read from /proc on the host: rootful podman maps no ids)."""
    pid = int(inspect(container, "{{.State.Pid}}"))
    if pid <= 0:
        return [f"{container} is not running"]
    status = Path(f"/proc/{pid}/status").read_text()
    problems = []
    for field, wanted in (("Uid", IMAGE_UID), ("Gid", IMAGE_GID)):
        line = next(ln for ln in status.splitlines() if ln.startswith(f"{field}:"))
        ids = [int(v) for v in line.split()[1:]]
        if any(v != wanted for v in ids):
            problems.append(f"{field} {ids} (real, effective, saved, fs), not {wanted}")
    return problems


def write_problems(container: str) -> list[str]:
    """Paths the container changed in its root filesystem, besides podman's own (volumes are
    not part of it): anything here is a write outside the state volume."""
    changes = json.loads(podman("diff", "--format", "json", container).stdout or "{}")
    paths = sorted(
        {p for kind in ("changed", "added", "deleted") for p in (changes.get(kind) or [])}
    )
    return [p for p in paths if p not in PODMAN_OWN]


@contextmanager
def containers() -> Iterator[list[str]]:
    """A list to put container names in; every one is removed at the end (volumes first go
    with ``podman volume rm``, by the caller)."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in reversed(names):
            podman("rm", "--force", "--time", "0", name, check=False)


def run_detached(name: str, image: str, *args: str, options: Sequence[str] = ()) -> None:
    """``podman run -d`` with this machine's flags."""
    podman("run", "--detach", "--name", name, *podman_flags(), *options, image, *args)
