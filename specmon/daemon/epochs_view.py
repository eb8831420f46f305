"""The configuration epochs as the target page lists them and ``/api/v1/targets`` gives them
(specmon.state.epochs): what changed, when, why, and what each epoch counted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape
from typing import Any

from specmon.state.epochs import Epoch, ModelEpochs

__all__ = ["epochs_html", "epochs_json"]


def _epoch_json(e: Epoch) -> dict[str, Any]:
    return {
        "epoch": e.number,
        "start_timestamp_seconds": e.start,
        "end_timestamp_seconds": e.end,
        "speculation": e.speculation,
        "chain_length": e.chain_length,
        "reason": e.reason.value,
        "note": e.note or None,
        "drafts": e.drafts,
        "draft_tokens": e.draft_tokens,
        "accepted_tokens": e.accepted_tokens,
        "generated_tokens": e.generated_tokens,
        "scrapes": e.scrapes,
    }


def epochs_json(models: Sequence[ModelEpochs]) -> list[dict[str, Any]]:
    """Each model's epochs, oldest first, its pending change and recent events."""
    return [
        {
            "model": m.model,
            "epochs": [_epoch_json(e) for e in m.epochs],
            "pending_change": m.pending,
            "events": [{"timestamp_seconds": t, "text": text} for t, text in m.events],
        }
        for m in models
    ]


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def epochs_html(models: Sequence[ModelEpochs]) -> str:
    """The target page's section: a table per model, newest epoch first."""
    if not models:
        return '<p class="muted">no configuration seen yet</p>'
    parts: list[str] = []
    for m in models:
        rows = []
        for e in reversed(m.epochs):
            until = "now" if e.end is None else _when(e.end)
            acceptance = (
                f"{e.accepted_tokens / e.draft_tokens:.3f}"
                if e.speculation and e.draft_tokens
                else "&ndash;"
            )
            rows.append(
                f"<tr><td>{e.number}</td><td>{_when(e.start)} &ndash; {until}</td>"
                f"<td>{escape(e.describe())}</td><td>{escape(e.reason.value)}</td>"
                f"<td>{e.generated_tokens}</td><td>{acceptance}</td></tr>"
            )
        parts.append(
            f'<p class="sub">model {escape(m.model)}</p><table><tr><th>epoch</th>'
            "<th>from &ndash; to</th><th>configuration</th><th>began by</th>"
            "<th>tokens generated</th><th>draft acceptance</th></tr>" + "".join(rows) + "</table>"
        )
        if m.pending:
            parts.append(f'<p class="sub">change being confirmed: {escape(m.pending)}</p>')
        if m.events:
            items = "".join(
                f'<li><span class="muted">{_when(t)}</span> {escape(text)}</li>'
                for t, text in m.events
            )
            parts.append(f"<ul>{items}</ul>")
    return "".join(parts)
