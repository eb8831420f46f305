"""The Dockerfile: its shape, its lint, its install steps in a clean venv, and the result run as
the image would run it (its user, a read-only root, PID 1, its own network namespace)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from specmon import __version__
from tests.deploy import tools
from tests.deploy.dockerfile import (
    DOCKERFILE,
    REPO,
    Image,
    build_context,
    ignored,
    instructions,
    stages,
)
from tests.deploy.sandbox import require_sandbox, sandboxed, world_traversable

CONFIG_PATH = "/etc/specmon/specmon.yml"  # the documented path (deploy/README.md)


# --------------------------------------------------------------------------- shape


def test_multi_stage_on_one_pinned_slim_python() -> None:
    _, all_stages = stages()
    assert len(all_stages) == 2
    build, final = all_stages
    assert build.name == "build" and final.name is None
    assert build.base == final.base, "the venv is copied between stages: same Python in both"
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-[a-z]+", final.base), final.base
    copies = [i.args for i in final.body if i.keyword == "COPY"]
    assert "--from=build /opt/specmon /opt/specmon" in copies
    assert not [i for i in final.body if i.keyword == "RUN"], "nothing is installed at run time"


def test_runtime_settings() -> None:
    final = stages()[1][-1]
    by_keyword: dict[str, list[str]] = {}
    for ins in final.body:
        by_keyword.setdefault(ins.keyword, []).append(ins.args)
    (user,) = by_keyword["USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) > 0 and int(gid) > 0, user
    assert by_keyword["EXPOSE"] == ["10920"]
    (entrypoint,) = by_keyword["ENTRYPOINT"]
    assert json.loads(entrypoint) == ["specmon", "run"], "exec form, specmon run"
    (cmd,) = by_keyword["CMD"]
    assert json.loads(cmd) == [f"--config.file={CONFIG_PATH}"]
    assert f"deploy/systemd/specmon.yml {CONFIG_PATH}" in by_keyword["COPY"]
    (health,) = by_keyword["HEALTHCHECK"]
    options, _, command = health.partition(" CMD ")
    argv = json.loads(command)
    assert argv[0] == "python", "exec form, the image's Python"
    assert "http://127.0.0.1:10920/healthz" in argv[-1]
    assert not re.search(r"\b(curl|wget)\b", health)
    assert "--timeout=" in options and "--interval=" in options


def test_dockerignore_sends_only_what_the_build_copies() -> None:
    context = build_context()
    assert {"pyproject.toml", "README.md", "deploy/systemd/specmon.yml"} <= set(context)
    assert "specmon/cli/main.py" in context
    assert all(
        f in {"pyproject.toml", "README.md", "deploy/systemd/specmon.yml"}
        or f.startswith("specmon/")
        for f in context
    ), context
    for path in (
        ".venv/bin/python",
        ".git/config",
        "tests/deploy/conftest.py",
        "specmon/__pycache__/arithmetic.cpython-311.pyc",
        ".tmp/deploy-tools/x",
        "deploy/kubernetes/overlays/standalone/deployment.yaml",
        "bench/run.py",
    ):
        assert ignored(path), path
    # The package data the simulator renders from ships too.
    assert any(f.startswith("specmon/sim/templates/") for f in context)


def test_dockerignore_matcher_follows_docker_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.deploy import dockerfile

    rules = tmp_path / ".dockerignore"
    rules.write_text("*\n!src/\n**/*.pyc\n!src/keep.pyc\ndocs/*.md\n")
    monkeypatch.setattr(dockerfile, "DOCKERIGNORE", rules)
    assert dockerfile.ignored("top.txt")
    assert not dockerfile.ignored("src/a/b.py")
    assert dockerfile.ignored("src/a/b.pyc")
    assert not dockerfile.ignored("src/keep.pyc")
    assert dockerfile.ignored("docs/x.md")  # "*" already excluded it
    assert not dockerfile.ignored("src/docs/x.md")


def test_instructions_join_continuations_and_skip_comments() -> None:
    parsed = instructions('FROM a AS b\n# c\nRUN x \\\n  # inside\n  && y\nCMD ["z"]\n')
    assert [(i.keyword, i.args) for i in parsed] == [
        ("FROM", "a AS b"),
        ("RUN", "x && y"),
        ("CMD", '["z"]'),
    ]


@pytest.mark.deploytools
def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [str(tools.hadolint()), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


@pytest.mark.deploytools
def test_hadolint_does_flag_a_careless_dockerfile(tmp_path: Path) -> None:
    careless = tmp_path / "Dockerfile"
    careless.write_text(
        DOCKERFILE.read_text().replace(
            "ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm", "ARG PYTHON_IMAGE=python"
        )
        + "RUN apt-get update && apt-get install -y curl\n"
    )
    result = subprocess.run(
        [str(tools.hadolint()), "--no-color", str(careless)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "DL3008" in result.stdout  # apt-get install without versions


# --------------------------------------------------------------------------- the build


@pytest.mark.deploytools
def test_build_steps_install_a_working_specmon(image: Image) -> None:
    specmon = image.host("/opt/specmon/bin/specmon")
    version = subprocess.run(
        [str(specmon), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert version.returncode == 0 and version.stdout.strip() == f"specmon {__version__}"
    config = image.host(CONFIG_PATH)
    assert config.read_text() == (REPO / "deploy/systemd/specmon.yml").read_text()
    check = subprocess.run(
        [str(specmon), "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert check.returncode == 0 and check.stdout.startswith("OK "), check.stdout
    assert "2 target(s)" in check.stdout
    # The build's own smoke test ran (the RUN line's last commands), and pip is gone.
    assert f"specmon {__version__}" in image.run_log[-1]
    assert "OK specmon.yml: 2 target(s)" in image.run_log[-1]
    assert not image.host("/opt/specmon/bin/pip").exists()
    # Nothing points outside the venv but the base image's Python.
    shebang = specmon.read_text().splitlines()[0]
    assert shebang == f"#!{image.host('/opt/specmon/bin/python')}"


@pytest.mark.deploytools
def test_build_fails_when_the_shipped_config_is_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's check-config is real: a broken config fails the RUN step."""
    from tests.deploy import dockerfile

    broken_repo = tmp_path / "repo"
    for rel in build_context():
        target = broken_repo / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO / rel).read_bytes())
    (broken_repo / "deploy/systemd/specmon.yml").write_text("targets:\n  - name: x\n")
    monkeypatch.setattr(dockerfile, "REPO", broken_repo)
    monkeypatch.setattr(dockerfile, "build_context", lambda: build_context())
    with pytest.raises(AssertionError, match=r"RUN exited 1[\s\S]*url: is required"):
        dockerfile.run_build(tmp_path / "root")


# --------------------------------------------------------------------------- run as the image


def _stripped(response: tuple[int, str]) -> tuple[int, str]:
    return response[0], response[1].strip()


def _uid_gid(image: Image) -> tuple[int, int]:
    uid, _, gid = image.user.partition(":")
    return int(uid), int(gid or uid)


def _container_env(image: Image) -> dict[str, str]:
    env = {k: image.map_arg(v) for k, v in image.env.items()}
    env["PATH"] = (
        ":".join(image.map_arg(d) for d in image.env["PATH"].split(":")) + ":/usr/sbin:/sbin"
    )
    return env


@pytest.mark.deploytools
def test_image_runs_as_its_user_on_a_read_only_root_as_pid_1(image: Image, tmp_path: Path) -> None:
    """ENTRYPOINT + CMD as the image's USER, PID 1 of its own PID namespace, the whole
    filesystem read-only: the healthcheck passes, /readyz answers, the image's config watches
    an engine on the pod's loopback (the sidecar case), SIGHUP reloads, SIGTERM exits 0."""
    require_sandbox()
    if not world_traversable(image.root):
        pytest.skip(f"{image.root} is not reachable by an unprivileged user")
    uid, gid = _uid_gid(image)
    python = image.host("/opt/specmon/bin/python")
    with sandboxed(
        image.argv(), log=tmp_path / "container.log", uid=uid, gid=gid, env=_container_env(image)
    ) as box:
        # The HEALTHCHECK's own command, as Docker runs it inside the container.
        health = [image.resolve(image.healthcheck[0]), *image.healthcheck[1:]]
        assert health[0] == str(python)
        box.wait_for(lambda: box.run(health).returncode == 0, timeout=20, what="the healthcheck")
        status = box.proc_status()
        assert status["Uid"].split()[0] == str(uid) and status["Gid"].split()[0] == str(gid)
        assert status["NoNewPrivs"] == "1" and status["CapEff"] == "0000000000000000"
        assert status["NSpid"].split()[-1] == "1", "PID 1 in its PID namespace"
        # An engine beside it, on its loopback: the image's config finds it at 127.0.0.1:8000.
        engine = box.spawn(
            [
                str(image.host("/opt/specmon/bin/specmon")),
                "simulate",
                "--engine",
                "vllm",
                "--listen",
                "127.0.0.1:8000",
                "--survival",
                "0.9,0.7,0.5",
                "--seed",
                "1",
            ],
            tmp_path / "engine.log",
        )
        try:
            base = "http://127.0.0.1:10920"

            def scraped() -> bool:
                code, body = box.fetch(base + "/metrics", str(python))
                return code == 200 and 'specmon_up{target="vllm"} 1.0' in body

            box.wait_for(scraped, timeout=30, what="specmon_up{target=vllm} 1")
            # Ready once every target was scraped once (first scrapes are spread over the
            # 5 s interval); the other target of the image's config has nothing behind it.
            box.wait_for(
                lambda: _stripped(box.fetch(base + "/readyz", str(python))) == (200, "ready"),
                timeout=10,
                what="/readyz 200",
            )
            _, body = box.fetch(base + "/metrics", str(python))
            assert 'specmon_up{target="llamacpp"} 0.0' in body
            # docker kill -s HUP: PID 1 reloads.
            os.kill(box.pid, signal.SIGHUP)
            box.wait_for(
                lambda: '"config_loaded"' in box.log_text(), timeout=10, what="the reload logged"
            )
            assert box.alive()
            # docker stop: SIGTERM to PID 1, which must exit 0 well inside Docker's 10 s.
            started = time.monotonic()
            os.kill(box.pid, signal.SIGTERM)
            assert box.proc.wait(timeout=10) == 0, box.log_text()
            assert time.monotonic() - started < 5
        finally:
            engine.terminate()
            engine.wait(timeout=10)
    log = (tmp_path / "container.log").read_text()
    assert "Read-only file system" not in log and "Traceback" not in log, log


@pytest.mark.deploytools
def test_healthcheck_fails_when_nothing_serves(image: Image, tmp_path: Path) -> None:
    require_sandbox()
    python = str(image.host("/opt/specmon/bin/python"))
    health = [python, *image.healthcheck[1:]]
    result = subprocess.run(
        ["unshare", "--net", "--", *health], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode != 0
    # specmon.web.probe names both URLs it tried (http, then https) and why each failed.
    assert "http://127.0.0.1:10920/healthz: <urlopen error" in result.stderr, result.stderr
    assert "https://127.0.0.1:10920/healthz: <urlopen error" in result.stderr
