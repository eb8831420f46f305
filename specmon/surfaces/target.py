"""One target's page (``/target/NAME``): every model and window, survival by position as bars,
the load table against the baseline, the engine's derivation notes, recent errors and refused
readings, and the last 15 minutes of the verdict and the margin as inline SVG charts drawn
here. No scripts, no external resources; everything the target provides is escaped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape
from urllib.parse import quote

from specmon import __version__
from specmon.answer import Answer, ReadState, words
from specmon.daemon.history import SPAN, Event, Sample, Series
from specmon.daemon.severity import pick_window, target_severity, window_severity
from specmon.daemon.target import ModelView, TargetView, WindowView
from specmon.daemon.views import LoadFigures
from specmon.surfaces.classes import classes_html
from specmon.surfaces.epochs import changes_html, epochs_html
from specmon.surfaces.status import (
    BASE_CSS,
    bars,
    baseline_for_html,
    crossover_html,
    fmt,
    margin_html,
    marker,
    verdict_html,
)

__all__ = ["chart", "render_missing", "render_target"]

_CSS = (
    BASE_CSS
    + """
main{max-width:1100px}
.scroll{overflow-x:auto;max-width:100%;box-shadow:0 1px 2px #0002;margin:0 0 8px}
.scroll table{box-shadow:none;border-collapse:separate;border-spacing:0}
.scroll th,.scroll td{overflow-wrap:normal}
.scroll th,.scroll td.num{white-space:nowrap}
.scroll td:first-child{position:sticky;left:0;background:#fff;white-space:nowrap}
.scroll th:first-child{position:sticky;left:0}
@media (max-width:760px){body{margin:8px}th,td{padding:5px 6px}}
.charts{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;background:#fff;box-shadow:0 1px 2px #0002;padding:8px;flex:1 1 300px;
max-width:520px}
figcaption{font-size:12px;color:#404859;margin-bottom:4px}
svg{display:block;width:100%;height:auto}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0}
dt{color:#6b7385}dd{margin:0;overflow-wrap:anywhere}
ul{padding-left:20px}li{overflow-wrap:anywhere}
"""
)

_W, _H, _PAD = 300.0, 90.0, 16.0


def chart(
    samples: Sequence[Sample],
    *,
    pick: str,
    reference: float,
    now: float,
    label: str,
    unit: str = "",
) -> str:
    """A small line chart of ``pick`` ("speedup" or "margin") over the last ``SPAN`` seconds,
    with a dashed line at ``reference`` (1x, or a margin of 0); gaps where there was no
    figure. Pure SVG, sized by its container."""
    start = now - SPAN
    points = [
        (s.time, s.speedup if pick == "speedup" else s.margin) for s in samples if s.time >= start
    ]
    values = [v for _, v in points if v is not None and math.isfinite(v)]
    low = min([*values, reference])
    high = max([*values, reference])
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    spread = high - low
    low, high = low - spread * 0.1, high + spread * 0.1

    def x(t: float) -> float:
        return _PAD + (t - start) / SPAN * (_W - 2 * _PAD)

    def y(v: float) -> float:
        return _H - _PAD - (v - low) / (high - low) * (_H - 2 * _PAD)

    lines: list[list[str]] = [[]]
    for t, v in points:
        if v is None or not math.isfinite(v):
            if lines[-1]:
                lines.append([])
            continue
        lines[-1].append(f"{x(t):.1f},{y(v):.1f}")
    paths = "".join(
        f'<polyline points="{" ".join(pts)}" fill="none" stroke="#3b82f6" stroke-width="2"/>'
        if len(pts) > 1
        else f'<circle cx="{pts[0].split(",")[0]}" cy="{pts[0].split(",")[1]}" r="2.5" '
        'fill="#3b82f6"/>'
        for pts in lines
        if pts
    )
    last = next((v for _, v in reversed(points) if v is not None and math.isfinite(v)), None)
    last_text = "no figure" if last is None else f"{last:.3g}{unit}"
    summary = (
        f"{label}: {len(values)} samples in the last {SPAN / 60:.0f} minutes, now {last_text}"
        if values
        else f"{label}: no figures in the last {SPAN / 60:.0f} minutes"
    )
    ref_y = y(reference)
    return (
        f'<svg viewBox="0 0 {_W:.0f} {_H:.0f}" role="img" aria-label="{escape(summary)}"'
        ' xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(summary)}</title>"
        f'<rect x="{_PAD}" y="{_PAD}" width="{_W - 2 * _PAD}" height="{_H - 2 * _PAD}" '
        'fill="#fafbfc" stroke="#e6e8ec"/>'
        f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{ref_y:.1f}" y2="{ref_y:.1f}" '
        'stroke="#cf222e" stroke-dasharray="4 3"/>'
        f"{paths}"
        f'<text x="{_PAD}" y="11" font-size="10" fill="#6b7385">{high:.3g}{unit}</text>'
        f'<text x="{_PAD}" y="{_H - 3}" font-size="10" fill="#6b7385">'
        f"{low:.3g}{unit} &middot; &minus;{SPAN / 60:.0f} min</text>"
        f'<text x="{_W - _PAD}" y="{_H - 3}" font-size="10" fill="#6b7385" '
        'text-anchor="end">now</text>'
        f'<text x="{_W - _PAD}" y="11" font-size="10" fill="#1d2330" text-anchor="end">'
        f"{escape(last_text)}</text></svg>"
    )


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="15">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{escape(title)} &middot; specmon</title><style>{_CSS}</style></head>
<body><main>
<p class="sub"><a href="/">&larr; all targets</a></p>
{body}
<footer>specmon {escape(__version__)} &middot; <a href="/">status</a> &middot;
<a href="/metrics">/metrics</a></footer>
</main></body></html>
"""


def render_missing(name: str) -> str:
    """The page for a name no target has (served with 404)."""
    return _page(
        "no such target",
        f'<h1>No target named &ldquo;{escape(name[:200])}&rdquo;</h1><p class="sub">It may '
        "have been removed by a reload; the status page lists every target.</p>",
    )


def render_target(
    view: TargetView,
    *,
    primary_window: str,
    series: Sequence[Series],
    events: Sequence[Event],
    now: float | None = None,
) -> str:
    """The whole page of one target."""
    at = time.time() if now is None else now
    severity = target_severity(view, primary_window)
    parts = [
        f"<h1>{escape(view.name)}</h1>",
        f'<p class="sub s{int(severity)}">{marker(view, severity)}</p>',
        _facts(view),
        _advice(view, primary_window),
        '<h2 id="history">Verdict and margin, last 15 minutes</h2>',
        _charts(series, now=at),
    ]
    models = view.models if view.up or view.models else ()
    for model in models:
        parts.append(_model_section(model, primary_window))
    if not models:
        parts.append('<p class="muted">no models read yet</p>')
    parts.append(classes_html(view.classes))  # per request class: surfaces/classes.py
    parts.append('<h2 id="epochs">Configuration epochs</h2>' + epochs_html(view.epochs))
    parts.append('<h2 id="change">Did the change help?</h2>' + changes_html(view.changes))
    parts.append('<h2 id="notes">How the figures are derived</h2>')
    parts.append(_notes(view, primary_window))
    parts.append('<h2 id="events">Recent errors and refused readings</h2>')
    parts.append(_events(view, events, now=at))
    api = "/api/v1/targets?target=" + quote(view.name, safe="")
    parts.append(f'<p class="sub"><a href="{escape(api)}">this target as JSON</a></p>')
    return _page(view.name, "\n".join(parts))


def _facts(view: TargetView) -> str:
    rows = [
        ("url", f'<span title="{escape(view.url)}">{escape(view.url)}</span>'),
        ("engine", escape(view.engine.value) if view.engine else "&ndash;"),
    ]
    if view.baseline:
        rows.append(("baseline twin", escape(view.baseline)))
    if view.baseline_for:
        rows.append(("baseline", baseline_for_html(view)))
    if view.labels:
        shown = ", ".join(f"{escape(k)}={escape(v)}" for k, v in sorted(view.labels.items()))
        rows.append(("labels", shown))
    if view.last_duration is not None:
        rows.append(("last scrape", f"{view.last_duration * 1000:.0f} ms"))
    if view.error:
        rows.append(("error", f'<span class="err">{escape(view.error)}</span>'))
    elif view.message and not (view.baseline_for and not view.speculation):
        rows.append(("message", escape(view.message)))
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _charts(series: Sequence[Series], *, now: float) -> str:
    if not series:
        return '<p class="muted">no verdicts recorded yet</p>'
    figures = []
    for one in series:
        model = escape(one.model)
        figures.append(
            f"<figure><figcaption>{model}: verdict speed-up (dashed: 1&times;, no gain)"
            "</figcaption>"
            + chart(one.samples, pick="speedup", reference=1.0, now=now, label="speed-up", unit="x")
            + "</figure>"
        )
        figures.append(
            f"<figure><figcaption>{model}: margin, alpha &minus; break-even (dashed: 0)"
            "</figcaption>"
            + chart(one.samples, pick="margin", reference=0.0, now=now, label="margin")
            + "</figure>"
        )
    return '<div class="charts">' + "".join(figures) + "</div>"


def _model_section(model: ModelView, primary_window: str) -> str:
    shown = pick_window(model, primary_window)
    head = f"<h2>Model {escape(model.model)}</h2>"
    basis = model.basis
    facts = (
        f'<p class="sub">k = {basis.chain_length if basis.chain_length is not None else "?"}'
        f" ({escape(str(basis.chain_length_source or 'unknown'))}), configured draft cost c = "
        f"{basis.draft_cost:g}"
        + (
            f", engine-measured c = {model.engine_draft_cost:.3g}"
            if model.engine_draft_cost is not None
            else ""
        )
        + f", resets {model.resets}"
        + ("" if model.speculating else "; no speculation: load and speed only")
        + "</p>"
    )
    rows = []
    for window in model.windows:
        report = window.report
        answer = window.answer
        rows.append(
            "<tr>"
            f"<td>{escape(window.window)}</td>"
            f'<td class="num">{fmt(window.covered_seconds, 0, " s")}</td>'
            f'<td class="num">{window.drafts if window.drafts is not None else "&ndash;"}</td>'
            f'<td class="num">{verdict_html(answer, window_severity(window), window.straddle)}</td>'
            f'<td class="num">{margin_html(answer.alpha_margin if answer else None)}</td>'
            f'<td class="num">{fmt(report.alpha if report else None)}</td>'
            f'<td class="num">{fmt(answer.breakeven_alpha if answer else None)}</td>'
            f'<td class="num">{_best(answer)}</td>'
            "</tr>"
        )
    windows = (
        '<div class="scroll"><table><thead><tr><th>window</th><th>covered</th><th>drafts</th>'
        "<th>verdict</th><th>margin</th><th>alpha</th><th>break-even</th>"
        "<th>best k<br>at the verdict's c</th></tr></thead>"
        "<tbody>" + "".join(rows) + "</tbody></table></div>"
    )
    survival = ""
    if model.speculating:
        label = escape(shown.window) if shown else "&ndash;"
        survival = f"<h2>Survival by position ({label})</h2>{bars(shown)}"
    load = shown.load if shown is not None else None
    answer = shown.answer if shown is not None else None
    return head + facts + windows + survival + _load_table(load, answer, shown)


def _best(answer: Answer | None) -> str:
    if answer is None:
        return "&ndash;"
    best = escape(words.best_words(answer)).replace("x)", "&times;)")
    return f'{best}<br><span class="muted">{escape(words.cost_words(answer))}</span>'


def _advice(view: TargetView, primary_window: str) -> str:
    """The answer in one sentence per speculating model (the window the status page shows)."""
    items = []
    for model in view.models if view.up else ():
        shown = pick_window(model, primary_window)
        if model.speculating and shown is not None and shown.answer is not None:
            items.append(f"<li><b>{escape(model.model)}</b> ({escape(shown.window)}): "
                         f"{escape(words.advice(shown.answer))}</li>")  # fmt: skip
    return f'<ul class="advice">{"".join(items)}</ul>' if items else ""


def _load_table(load: LoadFigures | None, answer: Answer | None, window: WindowView | None) -> str:
    label = escape(window.window) if window is not None else "&ndash;"
    head = f"<h2>Load and baseline ({label})</h2>"
    if load is None:
        return head + '<p class="muted">no load series</p>'
    bucket = answer.bucket if answer is not None else None
    now = (
        f'<p class="sub">concurrency n &asymp; {fmt(load.concurrency, 1)} per engine step '
        f"(time average of requests running {fmt(load.mean_running, 1)}), "
        f"{fmt(None if load.time_per_output_token_seconds is None else load.time_per_output_token_seconds * 1000, 1)}"
        f" ms per token, step {fmt(None if load.step_seconds is None else load.step_seconds * 1000, 1)} ms"
        + (f", now in bucket {escape(bucket)}" if bucket else "")
        + "</p>"
    )
    if answer is None or not answer.compared:
        return (
            head + now + '<p class="muted">no baseline: a twin (baseline:) or a cost profile '
            "(cost_profile:) would measure the speed-up and the draft cost at each load</p>"
        )
    against = escape(answer.against or "")
    measuring = (
        f'<p class="sub">{escape(words.measuring_words(answer))}</p>'
        if answer.state is ReadState.MEASURING
        else ""
    )
    crossover = (
        f'<p class="sub">speculation stops paying at n &asymp; {crossover_html(answer.crossover)}'
        f"{' (95 % range)' if answer.crossover.low is not None else ''}"
        f"{'; ' + escape(answer.crossover.note) if answer.crossover.note else ''}</p>"
        if answer.crossover is not None
        else '<p class="sub muted">no crossover within the loads seen</p>'
    )
    rows = []
    for per in answer.per_load:
        current = " <b>(now)</b>" if per.label == bucket else ""
        realized = per.speedup
        cls = "muted" if realized is None else ("pos" if realized >= 1.0 else "neg")
        rows.append(
            "<tr>"
            f"<td>{escape(per.label)}{current}</td>"
            f'<td class="num">{fmt(per.concurrency, 1)}</td>'
            f'<td class="num"><span class="{cls}">{fmt(realized, 2, "&times;")}</span></td>'
            f'<td class="num">{fmt(per.draft_cost)}</td>'
            f'<td class="num">{_recommended(per.best_chain_length, per.best_speedup)}</td>'
            f'<td class="note">{escape(per.reason or "")}</td>'
            "</tr>"
        )
    table = (
        '<div class="scroll"><table><thead><tr><th>bucket</th><th>n</th>'
        f"<th>realized<br>vs {against}</th><th>measured c</th><th>recommended k</th>"
        "<th>why no figures</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="6" class="muted">no buckets with data yet</td></tr>')
        + "</tbody></table></div>"
    )
    return head + now + measuring + table + crossover


def _recommended(k: int | None, speedup: float | None) -> str:
    if k is None:
        return "&ndash;"
    if k == 0:
        return "0 (off)"
    return f"{k} ({fmt(speedup, 2, '&times;')})"


def _notes(view: TargetView, primary_window: str) -> str:
    items: list[str] = [*view.notes]
    for model in view.models:
        shown = pick_window(model, primary_window)
        if shown is None:
            continue
        if shown.load is not None:
            items.extend(shown.load.notes)
        if shown.answer is not None:
            items.append(f"{model.model}: verdict {words.detail(shown.answer)}")
            items.extend(shown.answer.notes)
        elif shown.straddle is not None:  # withheld at a configuration change: why
            items.append(f"{model.model}: {shown.straddle.text()}")
    unique = list(dict.fromkeys(items))
    if not unique:
        return '<p class="muted">every figure is read directly from the engine\'s counters</p>'
    return "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in unique) + "</ul>"


def _events(view: TargetView, events: Sequence[Event], *, now: float) -> str:
    items = [
        f'<li><span class="muted">{_ago(now - e.time)}</span> '
        f'<span class="err">{escape(e.text)}</span></li>'
        for e in events
    ]
    current = ""
    if view.up and view.rejected:
        current = (
            '<p class="sub">refused at the last scrape:</p><ul>'
            + "".join(f'<li class="err">{escape(str(r))}</li>' for r in view.rejected[:20])
            + "</ul>"
        )
    if not items and not current:
        return '<p class="muted">none recorded</p>'
    return current + ("<ul>" + "".join(items) + "</ul>" if items else "")


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
