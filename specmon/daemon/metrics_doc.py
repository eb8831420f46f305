"""docs/metrics.md's tables, generated from the metric table in :mod:`specmon.daemon.metrics`:
``python -m specmon.daemon.metrics_doc docs/metrics.md`` rewrites them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from specmon.daemon.metrics import FAMILIES, Scope

__all__ = ["BEGIN", "END", "render_markdown", "update_doc"]

BEGIN = "<!-- BEGIN GENERATED from specmon/daemon/metrics.py; do not edit by hand -->"
END = "<!-- END GENERATED -->"


def render_markdown() -> str:
    """The generated part of docs/metrics.md: one table per scope."""
    out: list[str] = [BEGIN, ""]
    for scope in Scope:
        out += [
            f"### {scope.value}",
            "",
            "| metric | type | labels | meaning |",
            "|---|---|---|---|",
        ]
        for d in FAMILIES:
            if d.scope is scope:
                labels = ", ".join((*d.labels, *(f"[{o}]" for o in d.optional)))
                meaning = d.meaning.replace("|", "\\|")
                out.append(f"| `{d.sample_name}` | {d.kind.value} | {labels} | {meaning} |")
        out.append("")
    out.append(END)
    return "\n".join(out)


def update_doc(path: Path) -> bool:
    """Rewrite the generated part of ``path``; True when it changed."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{path}: no generated section ({BEGIN!r} ... {END!r})")
    new = pattern.sub(lambda _: render_markdown(), text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":  # pragma: no cover - a developer tool
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/metrics.md")
    print(f"{target}: {'updated' if update_doc(target) else 'up to date'}")
