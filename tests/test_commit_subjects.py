"""The commit-subject rule CI and the commit-msg hook apply."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.commit_subjects import MAX_LENGTH, problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "subject",
    [
        "daemon: stop within a deadline; cancellation wins over a failed query",
        "promsource: bounded decoding",
        "grafana/k8s: dashboards as ConfigMaps",
        "docs, readme: one page a topic",
        "Merge branch 'h-loadpkg'",
        "x" * 10 + ": " + "y" * (MAX_LENGTH - 12),
    ],
)
def test_good_subjects(subject: str) -> None:
    assert problem(subject) is None


@pytest.mark.parametrize(
    ("subject", "why"),
    [
        ("Docs only: the README's sizing row says where its figure comes from", "form"),
        ("fix stuff", "form"),
        ("daemon:no space", "form"),
        (": nothing", "form"),
        ("daemon: " + "x" * MAX_LENGTH, "characters"),
    ],
)
def test_bad_subjects(subject: str, why: str) -> None:
    found = problem(subject)
    assert found is not None and why in found


def test_the_hook_reads_the_message_file(tmp_path: Path) -> None:
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("# a comment git adds\ndaemon: a subject\n\nA body.\n")
    bad.write_text("A subject without its area\n")
    script = str(ROOT / "tools" / "commit_subjects.py")
    ok = subprocess.run([sys.executable, script, "--msg-file", str(good)], check=False)
    refused = subprocess.run(
        [sys.executable, script, "--msg-file", str(bad)], capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    assert ok.returncode == 0
    assert refused.returncode == 1 and "area: what changed" in refused.stderr


def test_the_pre_commit_config_parses_and_runs_the_same_script() -> None:
    import yaml

    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text("utf-8"))
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert hooks["commit-subject"]["stages"] == ["commit-msg"]
    assert "tools/commit_subjects.py" in hooks["commit-subject"]["entry"]
    assert "tools/commit_subjects.py" in (ROOT / ".ci" / "run").read_text("utf-8")


def test_since_checks_written_merge_subjects(tmp_path: Path) -> None:
    """A merge whose subject someone wrote is held to the rule (one of 77 characters slipped
    through while merges were skipped); git's own "Merge branch ..." is not."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(tmp_path), *args], check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.invalid")
    git("config", "user.name", "t")
    git("commit", "-q", "--allow-empty", "-m", "tests: the start")
    start = git("rev-parse", "HEAD")
    git("checkout", "-q", "-b", "side")
    git("commit", "-q", "--allow-empty", "-m", "tests: on the side")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "side", "-m", "Merge branch 'side'")
    script = str(ROOT / "tools" / "commit_subjects.py")

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, script, "--since", start], cwd=tmp_path,
            capture_output=True, text=True, check=False,
        )  # fmt: skip

    assert check().returncode == 0
    git("checkout", "-q", "side")
    git("commit", "-q", "--allow-empty", "-m", "tests: more on the side")
    git("checkout", "-q", "main")
    git("merge", "-q", "--no-ff", "side", "-m", "merge side: " + "x" * MAX_LENGTH)
    refused = check()
    assert refused.returncode == 1 and "characters" in refused.stdout + refused.stderr
