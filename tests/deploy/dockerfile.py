"""Read the Dockerfile and .dockerignore, and carry out the image's steps without Docker.

No Docker engine runs here, so the tests do what the build does, step by step, from the file
itself: the build context is the repository filtered by .dockerignore (Docker's matching
rules: last matching pattern wins, ``*`` stays within one path segment, ``**`` spans any
number); COPY, WORKDIR and ENV happen under a temporary root that stands for the image's
``/``; every RUN of the build stage runs with ``/bin/sh -c`` and the stage's environment, and
``python`` is Debian's Python 3.11 (the image's is python:3.11 too). What this cannot show:
the base image itself, and that the pinned tag exists (no registry for images is reachable).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
#: What the official python:*-slim images set before the Dockerfile's own ENV lines.
BASE_IMAGE_ENV = {
    "PATH": "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}

__all__ = [
    "Image",
    "Instruction",
    "build_context",
    "ignored",
    "instructions",
    "run_build",
    "stages",
]


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int

    def json_args(self) -> list[str]:
        """Exec form (a JSON array), as ENTRYPOINT, CMD and HEALTHCHECK CMD use it."""
        value = json.loads(self.args)
        assert isinstance(value, list) and all(isinstance(v, str) for v in value), self.args
        return value


@dataclass
class Stage:
    base: str
    name: str | None
    body: list[Instruction] = field(default_factory=list)


def instructions(text: str | None = None) -> list[Instruction]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped."""
    text = DOCKERFILE.read_text("utf-8") if text is None else text
    out: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    assert not pending, "the Dockerfile ends inside a continuation line"
    return out


def _expand(value: str, variables: dict[str, str]) -> str:
    def sub(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return variables.get(name, "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", sub, value)


def _pairs(args: str) -> dict[str, str]:
    """``KEY=value KEY2="v w"`` (ENV, LABEL, ARG with defaults)."""
    out = {}
    for token in shlex.split(args):
        key, sep, value = token.partition("=")
        assert sep, f"expected KEY=value, got {token!r}"
        out[key] = value
    return out


def stages() -> tuple[dict[str, str], list[Stage]]:
    """Global ARGs and the stages, FROM lines resolved with those ARGs."""
    global_args: dict[str, str] = {}
    result: list[Stage] = []
    for ins in instructions():
        if ins.keyword == "FROM":
            parts = ins.args.split()
            base = _expand(parts[0], global_args)
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            result.append(Stage(base=base, name=name))
        elif not result:
            assert ins.keyword == "ARG", f"line {ins.line}: only ARG may precede FROM"
            global_args.update(_pairs(ins.args))
        else:
            result[-1].body.append(ins)
    return global_args, result


# --------------------------------------------------------------------------- .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's translation (moby/patternmatcher): ``*`` and ``?`` stay within a segment,
    ``**`` spans segments, ``**/`` may match nothing."""
    out = ""
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
            continue
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            continue
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[":
            close = pattern.index("]", i)
            out += pattern[i : close + 1]
            i = close + 1
            continue
        else:
            out += re.escape(char)
        i += 1
    return re.compile(f"{out}\\Z")


def _patterns() -> list[tuple[bool, re.Pattern[str]]]:
    out = []
    for raw in DOCKERIGNORE.read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        out.append((negate, _pattern_regex(pattern)))
    return out


def ignored(relpath: str) -> bool:
    """Whether Docker leaves ``relpath`` (a file, slash-separated) out of the build context.

    A pattern matches a path or any of its parent directories; the last match decides."""
    parts = relpath.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, regex in _patterns():
        if any(regex.match(c) for c in candidates):
            result = not negate
    return result


def build_context() -> list[str]:
    """Files of the repository (as git would list them, plus untracked) that Docker sends."""
    files = []
    skip_dirs = {
        ".git",
        ".venv",
        ".tmp",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
    }
    for dirpath, dirnames, filenames in os.walk(REPO):
        dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        for name in filenames:
            rel = Path(dirpath, name).relative_to(REPO).as_posix()
            if not ignored(rel):
                files.append(rel)
    return sorted(files)


# --------------------------------------------------------------------------- the build


@dataclass
class Image:
    """What the build left: the root that stands for ``/``, and the final stage's settings."""

    root: Path
    env: dict[str, str]
    user: str
    expose: list[str]
    healthcheck: list[str]
    healthcheck_options: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    labels: dict[str, str]
    run_log: list[str] = field(default_factory=list)

    def host(self, container_path: str) -> Path:
        """Where a path of the image lies under ``root``."""
        assert container_path.startswith("/"), container_path
        return self.root / container_path.lstrip("/")

    def map_arg(self, arg: str) -> str:
        """An argument with its absolute image paths (those that exist in ``root``) mapped."""

        def sub(match: re.Match[str]) -> str:
            path = match.group(0)
            return str(self.host(path)) if self.host(path).exists() else path

        return re.sub(r"(?<![\w.:/])/[\w.\-/]+", sub, arg)

    def resolve(self, program: str) -> str:
        """A program name looked up on the image's PATH (image paths mapped)."""
        if "/" in program:
            return self.map_arg(program)
        for directory in self.env.get("PATH", "").split(":"):
            candidate = Path(self.map_arg(directory)) / program
            if candidate.exists():
                return str(candidate)
        raise AssertionError(f"{program} is not on the image's PATH {self.env.get('PATH')}")

    def argv(self) -> list[str]:
        """ENTRYPOINT + CMD, the program resolved on the image's PATH, paths mapped."""
        argv = [self.map_arg(a) for a in [*self.entrypoint, *self.cmd]]
        return [self.resolve(argv[0]), *argv[1:]]


def _interpreter() -> str:
    """The ``python`` of the build: Debian's 3.11 when present (readable by any user, as the
    image's is), else the base interpreter of the one running the tests."""
    debian = Path("/usr/bin/python3.11")
    if debian.exists():
        return str(debian)
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


def _copy(sources: list[Path], dest: Path, dest_is_dir: bool) -> None:
    for source in sources:
        if source.is_dir():
            shutil.copytree(
                source,
                dest,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            target = dest / source.name if dest_is_dir else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def run_build(root: Path, *, timeout: float = 900.0) -> Image:
    """Carry out every instruction of every stage under ``root``; RUN only in build stages.

    Build stages' RUN lines execute for real; the final stage has none (asserted), so it
    needs nothing that cannot be reproduced without Docker."""
    global_args, all_stages = stages()
    context = set(build_context())
    bin_dir = root / ".build-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").symlink_to(_interpreter())
    image: Image | None = None
    log: list[str] = []

    def host(path: str, cwd: Path) -> Path:
        return root / path.lstrip("/") if path.startswith("/") else cwd / path

    for index, stage in enumerate(all_stages):
        final = index == len(all_stages) - 1
        env: dict[str, str] = dict(BASE_IMAGE_ENV)
        cwd = root
        user = "0"
        expose: list[str] = []
        health: list[str] = []
        health_options: dict[str, str] = {}
        entrypoint: list[str] = []
        cmd: list[str] = []
        labels: dict[str, str] = {}
        for ins in stage.body:
            variables = {**global_args, **env}
            if ins.keyword == "ENV":
                for key, value in _pairs(_expand(ins.args, variables)).items():
                    env[key] = value
            elif ins.keyword == "WORKDIR":
                cwd = host(_expand(ins.args, variables), cwd)
                cwd.mkdir(parents=True, exist_ok=True)
            elif ins.keyword == "COPY":
                words = shlex.split(ins.args)
                options = [w for w in words if w.startswith("--")]
                paths = [w for w in words if not w.startswith("--")]
                *sources, dest = paths
                from_stage = [o.split("=", 1)[1] for o in options if o.startswith("--from=")]
                target = host(dest, cwd)
                dest_is_dir = dest.endswith("/") or len(sources) > 1
                if from_stage:
                    assert from_stage[0] in {s.name for s in all_stages[:index]}, ins.args
                    resolved = [root / s.lstrip("/") for s in sources]
                    if all(r == target for r in resolved):
                        continue  # the same image path in both stages: already in place
                else:
                    resolved = []
                    for source in sources:
                        source = source.rstrip("/")
                        included = [f for f in context if f == source or f.startswith(source + "/")]
                        assert included, f"line {ins.line}: COPY {source}: not in the build context"
                        resolved.append(REPO / source)
                _copy(resolved, target, dest_is_dir)
            elif ins.keyword == "RUN":
                assert not final, f"line {ins.line}: the final stage must not RUN (no Docker here)"
                script = ins.args
                assert not script.startswith("["), "RUN in exec form is not emulated"
                run_env = {
                    "HOME": str(root / "root"),
                    **{
                        k: str(host(v, cwd)) if v.startswith("/") and ":" not in v else v
                        for k, v in env.items()
                    },
                }
                run_env["PATH"] = ":".join(
                    [str(bin_dir)]
                    + [
                        str(host(d, cwd)) if host(d, cwd).exists() else d
                        for d in env["PATH"].split(":")
                    ]
                )
                result = subprocess.run(
                    ["/bin/sh", "-c", script],
                    cwd=cwd,
                    env=run_env,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    check=False,
                )
                log.append(f"$ {script}\n{result.stdout}{result.stderr}")
                if result.returncode != 0:
                    raise AssertionError(
                        f"Dockerfile line {ins.line}: RUN exited {result.returncode}\n{log[-1]}"
                    )
            elif ins.keyword == "USER":
                user = ins.args
            elif ins.keyword == "EXPOSE":
                expose += ins.args.split()
            elif ins.keyword == "HEALTHCHECK":
                words = ins.args.split(" CMD ", 1)
                health_options = dict(w.removeprefix("--").split("=", 1) for w in words[0].split())
                health = json.loads(words[1])
            elif ins.keyword == "ENTRYPOINT":
                entrypoint = ins.json_args()
            elif ins.keyword == "CMD":
                cmd = ins.json_args()
            elif ins.keyword == "LABEL":
                labels.update(_pairs(ins.args))
            elif ins.keyword == "ARG":
                continue
            else:
                raise AssertionError(f"line {ins.line}: {ins.keyword} is not emulated")
        if final:
            image = Image(
                root, env, user, expose, health, health_options, entrypoint, cmd, labels, log
            )
    assert image is not None
    return image
