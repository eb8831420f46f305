"""Paths and small parsers shared by the rules and dashboard tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest

from specmon.daemon import metrics
from specmon.tap.metrics import SAMPLE_NAMES

#: A specmon tap's samples (specmon/tap/metrics.py): the per-request alarm reads them.
TAP_SAMPLES = frozenset(SAMPLE_NAMES)

__all__ = [
    "DASHBOARD_DIR",
    "DOCS_DIR",
    "GRAFANA_DIR",
    "PROM_DIR",
    "REPO",
    "contract_metric_names",
    "github_anchor",
    "markdown_anchors",
    "promql_label_names",
    "promql_metric_names",
    "run_tool",
]

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "deploy" / "prometheus"
GRAFANA_DIR = REPO / "grafana"
DASHBOARD_DIR = GRAFANA_DIR / "dashboards"
DOCS_DIR = REPO / "docs"


@cache
def contract_metric_names() -> frozenset[str]:
    """Every sample name of the metric contract: specmon's metric table (which
    docs/metrics.md is generated from, and which tests/daemon/test_metrics_contract.py holds
    the served page to), and a specmon tap's samples."""
    return frozenset(name for d in metrics.FAMILIES for name in d.sample_names) | TAP_SAMPLES


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    anchors = set()
    in_code = False
    for line in path.read_text("utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)):
            anchors.add(github_anchor(m.group(1)))
    return anchors


# --------------------------------------------------------------------------- PromQL scanning

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENT = re.compile(r"(?<![\w:.])[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "offset", "bool", "inf", "nan", "Inf", "NaN", "atan2", "@"}
)
_LABEL_IN_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def promql_metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (not functions, keywords or labels)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def promql_label_names(expr: str) -> set[str]:
    """Label names used in matchers and in by/without/on/ignoring/group_x lists."""
    text = _STRING.sub('""', expr)
    labels: set[str] = set()
    for body in _MATCHERS.findall(text):
        labels.update(_LABEL_IN_MATCHER.findall(body))
    for body in _GROUPING.findall(text):
        labels.update(x.strip() for x in body.split(",") if x.strip())
    return labels


def run_tool(args: Sequence[str], *, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool/amtool; fail (not skip) the test when the tool is missing."""
    if shutil.which(args[0]) is None:
        pytest.fail(
            f"{args[0]} not found: install Debian's prometheus and prometheus-alertmanager "
            "(./dev.sh provision debian) or deselect with -m 'not prometheus'"
        )
    return subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
