"""Commit subjects: "area: what changed", at most 72 characters.

    python tools/commit_subjects.py --msg-file .git/COMMIT_EDITMSG   # the commit-msg hook
    python tools/commit_subjects.py --since REV                      # CI: every commit after REV

The area is a lowercase word (a package, a folder or a topic: ``daemon``, ``docs``,
``promsource``, ``grafana/k8s``); what follows the colon says what changed. Details, figures
and reasons go in the body. Merge commits are checked too (``merge: what came in (branch)``);
git's own subjects ("Merge branch ...", "Revert \"...\"", fixup!/squash!) are skipped.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

MAX_LENGTH = 72
_FORM = re.compile(r"^[a-z0-9][a-z0-9._/-]*(, [a-z0-9][a-z0-9._/-]*)*: \S")
_SKIP = re.compile(r"^(Merge |Revert \"|fixup! |squash! )")


def problem(subject: str) -> str | None:
    """Why ``subject`` breaks the rule, or None."""
    if _SKIP.match(subject):
        return None
    if len(subject) > MAX_LENGTH:
        return f"{len(subject)} characters; at most {MAX_LENGTH} (details go in the body)"
    if not _FORM.match(subject):
        return 'not in the form "area: what changed" (a lowercase area, a colon, a space)'
    return None


def _subjects_since(rev: str) -> list[tuple[str, str]] | None:
    known = subprocess.run(
        ["git", "cat-file", "-e", f"{rev}^{{commit}}"], capture_output=True, check=False
    )
    if known.returncode != 0:
        return None
    out = subprocess.run(
        ["git", "log", "--format=%h %s", f"{rev}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [_split(line) for line in out.splitlines() if line]


def _split(line: str) -> tuple[str, str]:
    sha, _, subject = line.partition(" ")
    return sha, subject


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="commit_subjects")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--msg-file", type=Path)
    group.add_argument("--since", metavar="REV")
    args = parser.parse_args(argv)
    if args.msg_file is not None:
        lines = [
            line
            for line in args.msg_file.read_text("utf-8").splitlines()
            if not line.startswith("#")
        ]
        subject = lines[0] if lines else ""
        why = problem(subject)
        if why is not None:
            print(f"commit subject {subject!r}: {why}", file=sys.stderr)
            return 1
        return 0
    subjects = _subjects_since(args.since)
    if subjects is None:
        # A shallow clone without the starting commit: check what is here.
        print(f"commit_subjects: {args.since} is not in this clone; checking HEAD only")
        head = subprocess.run(
            ["git", "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        subjects = [_split(head)] if head else []
    bad = [(sha, s, why) for sha, s in subjects if (why := problem(s)) is not None]
    for sha, subject, why in bad:
        print(f"{sha} {subject[:90]!r}: {why}", file=sys.stderr)
    print(f"commit_subjects: {len(subjects)} commits checked, {len(bad)} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
