#!/usr/bin/env python3
"""Write the values table of deploy/helm/specmon/README.md from values.yaml's comments.

    python tools/helm_values_table.py          # rewrite the table in the README
    python tools/helm_values_table.py --check  # exit 1 when the README's table is stale

A key is documented by a comment starting with ``# --`` on the lines just above it (helm-docs'
convention; further ``#`` lines continue it). Its row gives the dotted key, the type and the
default from the parsed values.yaml, and the description. The table sits between the README's
``<!-- values-table:start -->`` and ``<!-- values-table:end -->`` lines. A key with a ``# --``
comment that values.yaml does not define, or a documented key the README table lacks, cannot
happen: the table is rebuilt whole.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy" / "helm" / "specmon"
START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
#: Defaults longer than this are shown as "see values.yaml".
MAX_DEFAULT = 60

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*):(?:\s|$)")
_DOC = re.compile(r"^ *# -- ?(?P<text>.*)$")
_MORE = re.compile(r"^ *#(?: (?P<text>.*))?$")

__all__ = ["Row", "main", "rows", "table"]


class Row(NamedTuple):
    key: str
    type: str
    default: Any
    description: str


def _lookup(values: Any, path: list[str]) -> Any:
    for part in path:
        values = values[part]
    return values


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def rows(text: str) -> list[Row]:
    """Every documented key of a values.yaml text, in file order."""
    values = yaml.safe_load(text)
    stack: list[tuple[int, str]] = []
    doc: list[str] | None = None
    out = []
    for line in text.splitlines():
        if (match := _DOC.match(line)) is not None:
            doc = [match.group("text").strip()]
            continue
        if doc is not None and (more := _MORE.match(line)) is not None:
            doc.append((more.group("text") or "").strip())
            continue
        key = _KEY.match(line)
        if key is None:
            if line.strip() and not line.lstrip().startswith("#"):
                doc = None  # a list item or a continuation: not a documented key
            continue
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.group("key")))
        if doc is not None:
            path = [name for _, name in stack]
            value = _lookup(values, path)
            out.append(Row(".".join(path), _type(value), value, " ".join(doc).strip()))
        doc = None
    return out


def _default(value: Any) -> str:
    shown = json.dumps(value, separators=(", ", ": "))
    if len(shown) > MAX_DEFAULT:
        return "see values.yaml"
    return "`" + shown.replace("|", "\\|") + "`"


def table(text: str) -> str:
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for row in rows(text):
        description = row.description.replace("|", "\\|")
        lines.append(f"| `{row.key}` | {row.type} | {_default(row.default)} | {description} |")
    return "\n".join(lines) + "\n"


def render(readme: str, values: str) -> str:
    """The README with its table replaced by the one values.yaml gives."""
    if START not in readme or END not in readme:
        raise ValueError(f"the README has no {START} ... {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(values)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only report a stale table")
    parser.add_argument("--chart", type=Path, default=CHART)
    args = parser.parse_args(argv)
    readme_path = args.chart / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    rendered = render(readme, (args.chart / "values.yaml").read_text(encoding="utf-8"))
    if args.check:
        if rendered != readme:
            sys.stderr.write(
                f"{readme_path}: the values table is stale "
                "(run python tools/helm_values_table.py)\n"
            )
            return 1
        return 0
    if rendered != readme:
        readme_path.write_text(rendered, encoding="utf-8")
        print(f"wrote {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
