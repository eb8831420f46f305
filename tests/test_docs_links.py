"""The docs as a new user follows them: every relative link in the README and docs/ leads to a
file that exists (and, into a Markdown file, to a heading that exists, as GitHub names its
anchors), every repository path the docs quote in backticks exists, and docs/architecture.md
names every module of the packages a newcomer looks things up in."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The pages a user reads (CHANGELOG.md is history: its old paths stay as they were).
PAGES = (
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "deploy" / "README.md",
    REPO / "deploy" / "helm" / "specmon" / "README.md",
    REPO / "bench" / "RESULTS.md",
)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: A file of this repository quoted in backticks (directories and globs are not checked).
_PATH = re.compile(
    r"`((?:specmon|tests|docs|deploy|grafana|bench|tools)/[\w./-]*\w\.(?:py|md|yml|yaml|json|sh|txt))`"
)
_FENCE = re.compile(r"^(```|~~~)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    problems = []
    for link in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            problems.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            problems.append(f"{link}: no such heading in {target.relative_to(REPO)}")
    return problems


def test_every_relative_link_leads_somewhere() -> None:
    problems = {
        str(page.relative_to(REPO)): found for page in PAGES if (found := broken_links(page))
    }
    assert not problems, problems


def test_every_quoted_repository_file_exists() -> None:
    problems = {
        str(page.relative_to(REPO)): missing
        for page in PAGES
        if (
            missing := sorted(
                {p for p in _PATH.findall(page.read_text()) if not (REPO / p).exists()}
            )
        )
    }
    assert not problems, problems


def test_the_anchor_rule_matches_github() -> None:
    page = REPO / "docs" / "security.md"
    names = anchors(page)
    # Headings with backticks, colons, dots and apostrophes, as the page's own table of
    # contents links them.
    assert "the-web-config---webconfigfile" in names
    assert "threat-model-the-exporters-surface" in names
    assert "sizing-one-daemon-scraping-engines-directly-bench-cost" in anchors(
        REPO / "bench" / "RESULTS.md"
    )


def test_architecture_names_every_module_of_the_core_packages() -> None:
    """A newcomer finds any module of the pipeline from docs/architecture.md in one step: each
    module of the top level, load/, state/, daemon/, sources/ and surfaces/ is named there in backticks
    (as `name`, `name.py` or a path ending in it)."""
    text = re.sub(r"(?ms)^```.*?^```", "", (REPO / "docs" / "architecture.md").read_text())
    quoted = set()
    for item in re.findall(r"`([^`]+)`", text):
        for word in re.findall(r"[\w./]+", item):
            quoted.add(Path(word).stem if word.endswith(".py") else word.rsplit("/", 1)[-1])
    package = REPO / "specmon"
    modules = [
        *package.glob("*.py"),
        *(
            p
            for sub in ("load", "state", "daemon", "sources", "surfaces")
            for p in (package / sub).rglob("*.py")
        ),
    ]
    assert len(modules) > 60  # the globs found the package
    missing = sorted(
        str(m.relative_to(REPO))
        for m in modules
        if m.stem not in ("__init__", "__main__") and m.stem not in quoted
    )
    assert not missing, f"docs/architecture.md does not name: {missing}"
