"""The configuration epochs as the target page lists them and ``/api/v1/targets`` gives them
(specmon.state.epochs): what changed, when, why, and what each epoch counted."""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape
from typing import Any

from specmon.daemon.epoch_curves import ChangeView
from specmon.load.matched import MatchedBucket
from specmon.state.epochs import Epoch, ModelEpochs

__all__ = ["changes_html", "changes_json", "epochs_api", "epochs_html", "epochs_json"]


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
                f"<tr><td>{e.number}</td><td>{_when(e.start)} &ndash;<br>{until}</td>"
                f"<td>{escape(e.describe())}</td><td>{escape(e.reason.value)}</td>"
                f'<td class="num">{e.generated_tokens}</td><td class="num">{acceptance}</td></tr>'
            )
        # The target page's table layout (specmon.surfaces.target): the table scrolls in
        # its box on a phone, headers and numbers never break inside.
        parts.append(
            f'<p class="sub">model {escape(m.model)}</p><div class="scroll"><table><thead><tr>'
            "<th>epoch</th><th>from &ndash; to</th><th>configuration</th><th>began by</th>"
            "<th>tokens<br>generated</th><th>draft<br>acceptance</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table></div>"
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


def _pair(value: tuple[float, float] | None) -> list[float] | None:
    return list(value) if value is not None else None


def _bucket_json(b: MatchedBucket) -> dict[str, Any]:
    return {
        "concurrency": b.label,
        "concurrency_before": b.concurrency[0],
        "concurrency_after": b.concurrency[1],
        "speedup_ratio": b.speedup,
        "speedup_interval": _pair(b.interval),
        "acceptance_before": b.acceptance[0],
        "acceptance_after": b.acceptance[1],
        "acceptance_change": b.acceptance_change,
        "acceptance_change_interval": _pair(b.acceptance_interval),
    }


def changes_json(changes: Sequence[ChangeView]) -> list[dict[str, Any]]:
    """ "Did the change help?": each model's newest change per load bucket both epochs
    measured, and the loads each saw."""
    return [
        {
            "model": c.model,
            "epoch_before": c.before.number,
            "epoch_after": c.after.number,
            "before": c.before.describe(),
            "after": c.after.describe(),
            "buckets": [_bucket_json(b) for b in c.buckets],
            "loads_before": list(c.loads_before),
            "loads_after": list(c.loads_after),
        }
        for c in changes
    ]


def epochs_api(view: Any) -> dict[str, Any]:
    """A target view's ``epochs`` and ``changes`` for ``/api/v1/targets``."""
    return {"epochs": epochs_json(view.epochs), "changes": changes_json(view.changes)}


def _interval(value: tuple[float, float] | None, fmt: str) -> str:
    return "&ndash;" if value is None else f"{value[0]:{fmt}} &ndash; {value[1]:{fmt}}"


def changes_html(changes: Sequence[ChangeView]) -> str:
    """The target page's "Did the change help?": per model, per load bucket both epochs
    measured, the newer configuration's speed-up and the change in acceptance (95 %)."""
    parts: list[str] = []
    for c in changes:
        head = (f'<p class="sub">model {escape(c.model)}: epoch {c.after.number} '
                f"({escape(c.after.describe())}) against epoch {c.before.number} "
                f"({escape(c.before.describe())})</p>")  # fmt: skip
        if not c.buckets:
            saw = ", ".join(c.loads_before) or "none yet"
            mine = ", ".join(c.loads_after) or "none yet"
            parts.append(head + f'<p class="muted">no load both epochs measured: epoch '
                         f"{c.before.number} saw concurrency buckets {escape(saw)}, epoch "
                         f"{c.after.number} {escape(mine)}</p>")  # fmt: skip
            continue
        rows = "".join(
            f"<tr><td>{escape(b.label)}</td><td>{b.speedup:.3f}</td>"
            f"<td>{_interval(b.interval, '.3f')}</td><td>"
            + ("&ndash;" if b.acceptance_change is None else f"{b.acceptance_change:+.3f}")
            + f"</td><td>{_interval(b.acceptance_interval, '+.3f')}</td></tr>"
            for b in c.buckets
        )
        parts.append(head + "<table><tr><th>concurrency</th><th>speed-up</th><th>95 %</th>"
                     "<th>acceptance change</th><th>95 %</th></tr>" + rows + "</table>")  # fmt: skip
    if not parts:
        return '<p class="muted">no change of configuration seen yet</p>'
    return "".join(parts)
