"""The per-class figures (specmon.classes) as the target page shows them and
``/api/v1/targets`` gives them. Pure: strings and JSON-ready documents."""

from __future__ import annotations

import dataclasses
from html import escape
from typing import Any

from specmon.classes import ClassesView, ClassWindow

__all__ = ["classes_html", "classes_json"]

_SOURCE = {
    "tap": "the specmon tap beside the engine (per-request fields of the responses it passed)",
    "sglang": "SGLang's custom-label tokenizer counters (moved when requests finish)",
}


def classes_json(view: ClassesView | None) -> dict[str, Any] | None:
    """Every window's classes, their figures and the coverage; None without classes."""
    if view is None:
        return None
    return dataclasses.asdict(view)


def _num(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return '<span class="muted">-</span>'
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}f}"


def _table(window: ClassWindow, breakeven: float | None) -> str:
    rows = []
    for c in window.classes:
        margin = c.alpha_margin
        cls = ' class="bad"' if margin is not None and margin < 0 else ""
        why = f' title="{escape(c.withheld)}"' if c.withheld else ""
        rows.append(
            f"<tr{cls}{why}><td>{escape(c.name)}</td><td>{_num(c.requests)}</td>"
            f"<td>{_num(c.draft_tokens)}</td><td>{_num(c.accepted_tokens)}</td>"
            f"<td>{_num(c.draft_acceptance_ratio)}</td><td>{_num(c.mean_acceptance_length, 2)}</td>"
            f"<td>{_num(c.alpha)}</td><td>{_num(margin)}</td></tr>"
        )
    coverage = (
        f"coverage {window.coverage:.0%}" if window.coverage is not None else "coverage unknown"
    )
    note = f" ({escape(window.coverage_note)})" if window.coverage_note else ""
    head = (
        "<tr><th>class</th><th>requests</th><th>drafted</th><th>accepted</th>"
        "<th>accepted / drafted</th><th>mean acceptance length</th><th>alpha</th>"
        f"<th>margin over {_num(breakeven)}</th></tr>"
    )
    return (
        f"<h3>{escape(window.window)} window</h3><table>{head}{''.join(rows)}</table>"
        f'<p class="sub">{coverage}{note}</p>'
    )


def classes_html(view: ClassesView | None) -> str:
    """The target page's section: a table per window; empty without classes."""
    if view is None:
        return ""
    parts = ['<h2 id="classes">Acceptance per request class</h2>']
    source = _SOURCE.get(view.source, view.source)
    k = "unknown" if view.chain_length is None else str(view.chain_length)
    parts.append(
        f'<p class="sub">From {escape(source)}; alpha and margin at k = {escape(k)} and '
        f"c = {view.draft_cost:g} (the target's basis). A class below 0 drafts below "
        "break-even; the coverage says how much of the engine's drafting the classes saw.</p>"
    )
    if view.error:
        parts.append(f'<p class="bad">{escape(view.error)}</p>')
    shown = [w for w in view.windows if w.classes]
    if not shown:
        parts.append('<p class="muted">no class window yet (two readings needed)</p>')
    parts.extend(_table(w, view.breakeven_alpha) for w in shown)
    parts.extend(f'<p class="muted">{escape(n)}</p>' for n in view.notes)
    return "\n".join(parts)
