"""Run a program the way a container runtime or systemd would confine it, without either.

Needs root and util-linux's ``unshare``/``nsenter``/``setpriv`` (Debian's base system). The
program gets its own network namespace (its own loopback, so ``:10920`` is free and
``127.0.0.1`` is private, as in a pod), optionally its own PID namespace (it is PID 1, as in a
container, where a signal without a handler is ignored), a read-only view of the whole
filesystem (``readOnlyRootFilesystem`` / ``ProtectSystem=strict``), empty tmpfs over given
directories (``PrivateTmp``, ``ProtectHome``), a numeric unprivileged user with no
capabilities and ``no_new_privs``, optionally W^X memory refused by the kernel
(``PR_SET_MDWE``, which is what ``MemoryDenyWriteExecute`` asks for) and a umask.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Sandbox", "require_sandbox", "sandboxed"]

_MDWE = (
    "import ctypes, os, sys; "
    "libc = ctypes.CDLL(None, use_errno=True); "
    "assert libc.prctl(65, 1, 0, 0, 0) == 0, 'PR_SET_MDWE failed'; "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def require_sandbox() -> None:
    """Skip unless this process can make namespaces (root, util-linux present)."""
    if os.geteuid() != 0:
        pytest.skip("needs root for unshare --mount --net (CI and sessions here run as root)")
    for tool in ("unshare", "nsenter", "setpriv", "ip"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found (util-linux / iproute2)")


def world_traversable(path: Path) -> bool:
    """Whether an unprivileged user can reach ``path`` (every directory on the way has o+x)."""
    for parent in [path, *path.parents]:
        if parent.is_dir() and not os.stat(parent).st_mode & 0o001:
            return False
    return True


@dataclass
class Sandbox:
    proc: subprocess.Popen[bytes]
    pid: int  # the confined program's PID as the host sees it
    uid: int
    gid: int
    log: Path
    pid_namespace: bool

    def run(
        self, argv: Sequence[str], *, timeout: float = 30.0, as_user: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the program's network namespace (as its user, by default)."""
        prefix = ["nsenter", f"--target={self.pid}", "--net", "--"]
        if as_user:
            prefix += [
                "setpriv",
                f"--reuid={self.uid}",
                f"--regid={self.gid}",
                "--clear-groups",
                "--",
            ]
        return subprocess.run(
            [*prefix, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )

    def spawn(self, argv: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        """Start a helper (an engine) beside the program: its namespaces (so the same
        read-only filesystem and loopback), its user, no capabilities, no_new_privs."""
        # Without a PID namespace nsenter execs the helper itself, so terminate() reaches it;
        # in one it forks, and the helper dies with the namespace's PID 1.
        pid = ["--pid"] if self.pid_namespace else []
        with log.open("wb") as out:
            return subprocess.Popen(
                [
                    "nsenter",
                    f"--target={self.pid}",
                    "--net",
                    "--mount",
                    *pid,
                    "--",
                    "setpriv",
                    f"--reuid={self.uid}",
                    f"--regid={self.gid}",
                    "--clear-groups",
                    "--no-new-privs",
                    "--inh-caps=-all",
                    "--bounding-set=-all",
                    "--",
                    *argv,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
            )

    def fetch(
        self,
        url: str,
        python: str,
        *,
        method: str = "GET",
        cafile: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        """HTTP(S) from inside the namespace: (status, body); status 0 when nothing answers.
        ``cafile``: the CA to verify an https:// server with; ``headers``: e.g. basic auth."""
        code = (
            "import ssl, sys, urllib.request, urllib.error\n"
            f"req = urllib.request.Request({url!r}, method={method!r}, headers={headers or {}!r})\n"
            f"ctx = ssl.create_default_context(cafile={cafile!r}) if {cafile!r} else None\n"
            "try:\n"
            "    r = urllib.request.urlopen(req, timeout=5, context=ctx); print(r.status); print(r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code); print(e.read().decode())\n"
            "except OSError as e:\n"
            "    print(0); print(e)\n"
        )
        result = self.run([python, "-c", code])
        status, _, body = result.stdout.partition("\n")
        return (int(status) if status.strip().isdigit() else -1), body

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_for(self, predicate: object, *, timeout: float = 30.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if callable(predicate) and predicate():
                return
            if not self.alive():
                raise AssertionError(
                    f"exited {self.proc.returncode} while waiting for {what}:\n{self.log_text()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log_text()[-4000:]}")

    def proc_status(self) -> dict[str, str]:
        lines = Path(f"/proc/{self.pid}/status").read_text().splitlines()
        return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _child_pid(parent: int, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{parent}/task/{parent}/children")
        text = children.read_text().split() if children.exists() else []
        if text:
            return int(text[0])
        time.sleep(0.02)
    raise AssertionError("unshare --fork started no child")


@contextmanager
def sandboxed(
    argv: Sequence[str],
    *,
    log: Path,
    uid: int,
    gid: int,
    pid_namespace: bool = True,
    tmpfs: Sequence[str] = (),
    mdwe: bool = False,
    umask: str | None = None,
    env: dict[str, str] | None = None,
    python: str = "/usr/bin/python3",
) -> Iterator[Sandbox]:
    require_sandbox()
    steps = ["set -e", "ip link set lo up", "mount -o remount,bind,ro /"]
    steps += [f"mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs {shlex.quote(d)}" for d in tmpfs]
    if umask:
        steps.append(f"umask {umask}")
    program = list(argv)
    if mdwe:
        program = [python, "-c", _MDWE, *program]
    steps.append(
        "exec setpriv "
        f"--reuid={uid} --regid={gid} --clear-groups --no-new-privs "
        "--inh-caps=-all --bounding-set=-all -- " + shlex.join(program)
    )
    unshare = ["unshare", "--mount", "--net", "--propagation", "private"]
    if pid_namespace:
        unshare += ["--pid", "--fork", "--mount-proc", "--kill-child"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*unshare, "/bin/sh", "-c", "\n".join(steps)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env if env is not None else {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
    try:
        pid = _child_pid(proc.pid) if pid_namespace else proc.pid
        yield Sandbox(proc, pid, uid, gid, log, pid_namespace)
    finally:
        if proc.poll() is None:
            with_pid = _child_pid(proc.pid) if pid_namespace else proc.pid
            os.kill(with_pid, signal.SIGKILL)
            proc.wait(timeout=10)
