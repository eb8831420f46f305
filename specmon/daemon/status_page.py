"""The HTML status page at ``/`` and its JSON twin: every target at a glance.

Everything a target provides (model names, error messages, notes) is escaped. The page has
no scripts and no external resources; it refreshes itself every few seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from html import escape
from typing import Any

from specmon import __version__
from specmon.daemon.load_view import LoadFigures
from specmon.daemon.target import ModelView, TargetView, WindowView
from specmon.formatting import number

__all__ = ["render_status", "views_json"]

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2330;
background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px}
.sub{color:#5b6475;margin:0 0 16px}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%}
th,td{padding:6px 10px;border-bottom:1px solid #e6e8ec;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600;font-size:12px;text-transform:uppercase;color:#404859}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#1a7f37;font-weight:600}.down{color:#cf222e;font-weight:600}
.off{color:#9a6700;font-weight:600}
.pos{color:#1a7f37}.neg{color:#cf222e;font-weight:600}.muted{color:#8a93a5}
.bars{display:grid;grid-template-columns:auto 120px auto;gap:2px 6px;align-items:center;
font-size:12px}
.track{background:#e6e8ec;height:10px;border-radius:2px;overflow:hidden}
.fill{background:#3b82f6;height:10px}
.err{color:#cf222e;font-size:12px;max-width:420px;word-break:break-word}
.note{color:#5b6475;font-size:12px;max-width:420px}
footer{margin-top:16px;color:#8a93a5;font-size:12px}
"""


def _fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return number(value, digits, suffix=suffix, missing="&ndash;")


def _margin(value: float | None) -> str:
    if value is None:
        return '<span class="muted">&ndash;</span>'
    cls = "pos" if value >= 0 else "neg"
    return f'<span class="{cls}">{value:+.3f}</span>'


def _bars(window: WindowView | None) -> str:
    if window is None or window.report is None or not window.report.positions:
        return '<span class="muted">no per-position data</span>'
    rows = []
    for pos in window.report.positions:
        survival = pos.survival or 0.0
        width = max(0.0, min(survival, 1.0)) * 100
        rows.append(
            f'<span>{pos.position}</span><div class="track" title="survival {survival:.3f}">'
            f'<div class="fill" style="width:{width:.1f}%"></div></div>'
            f"<span>{_fmt(pos.survival)}</span>"
        )
    return '<div class="bars">' + "".join(rows) + "</div>"


def _pick_window(model: ModelView, preferred: str) -> WindowView | None:
    window = model.window(preferred)
    if window is not None and window.report is not None:
        return window
    with_data = [w for w in model.windows if w.report is not None]
    return with_data[0] if with_data else window


def render_status(views: Iterable[TargetView], *, primary_window: str, ready: bool) -> str:
    rows: list[str] = []
    for view in views:
        name = escape(view.name)
        url = escape(view.url)
        if not view.scraped:
            state = '<span class="muted">pending</span>'
        elif not view.up:
            state = '<span class="down">DOWN</span>'
        elif not view.speculation:
            state = '<span class="off">NO SPEC DATA</span>'
        else:
            state = '<span class="up">UP</span>'
        engine = escape(view.engine.value) if view.engine else "&ndash;"
        detail = ""
        if view.error:
            detail = f'<div class="err">{escape(view.error)}</div>'
        elif view.up and not view.speculation and view.message:
            detail = f'<div class="note">{escape(view.message)}</div>'
        if not view.models or not view.up:
            rows.append(
                f"<tr><td><b>{name}</b><br><span class='muted'>{url}</span></td><td>{state}"
                f"{detail}</td><td>{engine}</td>" + '<td colspan="9"></td></tr>'
            )
            continue
        for model in view.models:
            window = _pick_window(model, primary_window)
            report = window.report if window else None
            best = report.best_chain_length if report else None
            best_text = (
                "&ndash;"
                if best is None
                else (
                    "0 (off)"
                    if best == 0
                    else f"{best} ({_fmt(report.best_speedup if report else None, 2, '&times;')})"
                )
            )
            notes = "".join(f'<div class="note">{escape(n)}</div>' for n in view.notes)
            rows.append(
                "<tr>"
                f"<td><b>{name}</b><br><span class='muted'>{url}</span></td>"
                f"<td>{state}{detail}</td>"
                f"<td>{engine}</td>"
                f"<td>{escape(model.model)}{notes}</td>"
                f"<td class='num'>{escape(window.window) if window else '&ndash;'}"
                f"<br><span class='muted'>{_drafts(window)}</span></td>"
                f"<td class='num'>{_fmt(report.alpha if report else None)}</td>"
                f"<td class='num'>{_fmt(model.basis.breakeven_alpha)}</td>"
                f"<td class='num'>{_margin(report.alpha_margin if report else None)}</td>"
                f"<td class='num'>{_fmt(report.expected_speedup if report else None, 2, '&times;')}</td>"
                f"<td class='num'>{model.basis.chain_length if model.basis.chain_length is not None else '&ndash;'}"
                f" / {best_text}</td>"
                f"<td class='num'>{model.basis.draft_cost:g}{_engine_cost(model)}</td>"
                f"<td>{_bars(window)}</td>"
                "</tr>"
            )
    body = "\n".join(rows) or '<tr><td colspan="12" class="muted">no targets configured</td></tr>'
    readiness = "ready" if ready else "starting: waiting for the first scrape of every target"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>specmon</title><style>{_CSS}</style></head>
<body>
<h1>specmon</h1>
<p class="sub">Speculative decoding, live. Figures over the {escape(primary_window)} window
(or the first window with data); margin = alpha &minus; break-even; {escape(readiness)}.</p>
<table>
<thead><tr><th>target</th><th>state</th><th>engine</th><th>model</th><th>window</th>
<th>alpha</th><th>break-even</th><th>margin</th><th>expected speed-up</th>
<th>k / best k</th><th>draft cost</th><th>survival by position</th></tr></thead>
<tbody>
{body}
</tbody></table>
<footer>specmon {escape(__version__)} &middot; <a href="/metrics">/metrics</a> &middot;
<a href="/api/v1/targets">/api/v1/targets</a> &middot; <a href="/healthz">/healthz</a> &middot;
<a href="/readyz">/readyz</a></footer>
</body></html>
"""


def _drafts(window: WindowView | None) -> str:
    if window is not None and window.drafts is None and window.report is not None:
        return "drafts not counted"
    return f"{window.drafts if window and window.drafts is not None else 0} drafts"


def _engine_cost(model: ModelView) -> str:
    if model.engine_draft_cost is None:
        return ""
    return f"<br><span class='muted'>engine {model.engine_draft_cost:.3g}</span>"


def _report_json(window: WindowView) -> dict[str, Any]:
    return {
        "window": window.window,
        "seconds": window.seconds,
        "covered_seconds": window.covered_seconds,
        "drafts": window.drafts,
        "readings": window.readings,
        "generated_tokens": window.generated_tokens,
        "report": window.report.as_dict() if window.report else None,
        "load": _load_json(window.load),
    }


def _load_json(load: LoadFigures | None) -> dict[str, Any] | None:
    """The window's load figures (the shape ``specmon recommend --from`` reads)."""
    if load is None:
        return None
    return dataclasses.asdict(load)


def views_json(views: Iterable[TargetView]) -> list[dict[str, Any]]:
    out = []
    for view in views:
        out.append(
            {
                "target": view.name,
                "url": view.url,
                "labels": view.labels,
                "engine": view.engine.value if view.engine else None,
                "up": view.up,
                "scraped": view.scraped,
                "last_scrape_duration_seconds": view.last_duration,
                "last_success_timestamp_seconds": view.last_success,
                "error": view.error,
                "error_kind": view.error_kind,
                "speculation": view.speculation,
                "message": view.message,
                "notes": list(view.notes),
                "malformed_lines": view.malformed,
                "rejected": [
                    {
                        "model": r.model,
                        "reason": r.reason.value,
                        "detail": r.detail,
                        "whole_model": r.whole_model,
                    }
                    for r in view.rejected
                ],
                "models": [
                    {
                        "model": m.model,
                        "speculating": m.speculating,
                        "chain_length": m.basis.chain_length,
                        "chain_length_source": m.basis.chain_length_source,
                        "draft_cost": m.basis.draft_cost,
                        "engine_draft_cost": m.engine_draft_cost,
                        "engine_draft_overhead": m.engine_draft_overhead,
                        "breakeven_alpha": m.basis.breakeven_alpha,
                        "resets": m.resets,
                        "requests_running": m.requests_running,
                        "windows": [_report_json(w) for w in m.windows],
                    }
                    for m in view.models
                ],
            }
        )
    return out
