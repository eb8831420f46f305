"""The HTML status page at ``/`` and its JSON twin: every target at a glance.

Everything a target provides (model names, error messages, notes) is escaped. The page has
no scripts and no external resources; it refreshes itself every few seconds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

from specmon import __version__
from specmon.daemon.load_view import LoadFigures
from specmon.daemon.target import ModelView, TargetView, WindowView
from specmon.daemon.verdict import Evidence, Verdict
from specmon.formatting import number

__all__ = [
    "MAX_PER_PAGE",
    "Selection",
    "StatusCache",
    "TargetsQuery",
    "parse_targets_query",
    "render_status",
    "select_views",
    "target_rows",
    "targets_document",
    "views_json",
]

#: The most targets one page (of the status page or ``/api/v1/targets``) holds.
MAX_PER_PAGE = 5000

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


#: How a verdict's basis reads under its figure.
_BASIS_TEXT = {
    Evidence.TWIN: "vs its twin",
    Evidence.PROFILE: "vs its profile",
    Evidence.ENGINE: "engine's c",
    Evidence.CONFIGURED: "configured c",
    Evidence.DEFAULT: "default c: a guess",
}


def _verdict(verdict: Verdict | None) -> str:
    """The speed-up believed now and, under it, what it rests on (the whole line on hover)."""
    if verdict is None:
        return '<span class="muted">&ndash;</span>'
    value = verdict.speedup
    figure = (
        '<span class="muted">&ndash;</span>'
        if value is None
        else f'<span class="{"pos" if value >= 1.0 else "neg"}">{value:.2f}&times;</span>'
    )
    basis = escape(_BASIS_TEXT[verdict.basis])
    return f'{figure}<br><span class="muted" title="{escape(verdict.detail)}">{basis}</span>'


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


def target_rows(view: TargetView, *, primary_window: str) -> str:
    """The status page's rows of one target (one per model), escaped."""
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
    if view.up and view.rejected:
        shown = "; ".join(str(r) for r in view.rejected[:3])
        detail += f'<div class="err">refused: {escape(shown)}</div>'
    if not view.models or not view.up:
        return (
            f"<tr><td><b>{name}</b><br><span class='muted'>{url}</span></td><td>{state}"
            f"{detail}</td><td>{engine}</td>" + '<td colspan="10"></td></tr>'
        )
    rows = []
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
        load = window.load if window else None
        verdict = window.verdict if window else None
        notes = "".join(
            f'<div class="note">{escape(n)}</div>'
            for n in (*view.notes, *(load.notes if load else ()))
        )
        if not model.speculating:
            rows.append(
                "<tr>"
                f"<td><b>{name}</b><br><span class='muted'>{url}</span></td>"
                f"<td>{state}<div class='note'>no speculation: load and speed only</div></td>"
                f"<td>{engine}</td><td>{escape(model.model)}{notes}</td>"
                f"<td class='num'>{escape(window.window) if window else '&ndash;'}</td>"
                f"<td colspan='6'></td><td>{_load_cell(load)}</td><td></td></tr>"
            )
            continue
        rows.append(
            "<tr>"
            f"<td><b>{name}</b><br><span class='muted'>{url}</span></td>"
            f"<td>{state}{detail}</td>"
            f"<td>{engine}</td>"
            f"<td>{escape(model.model)}{notes}</td>"
            f"<td class='num'>{escape(window.window) if window else '&ndash;'}"
            f"<br><span class='muted'>{_drafts(window)}</span></td>"
            f"<td class='num'>{_fmt(report.alpha if report else None)}</td>"
            f"<td class='num'>{_fmt(verdict.breakeven_alpha if verdict else None)}</td>"
            f"<td class='num'>{_margin(verdict.alpha_margin if verdict else None)}</td>"
            f"<td class='num'>{_verdict(verdict)}</td>"
            f"<td class='num'>{model.basis.chain_length if model.basis.chain_length is not None else '&ndash;'}"
            f" / {best_text}</td>"
            f"<td class='num'>{model.basis.draft_cost:g}{_engine_cost(model)}</td>"
            f"<td>{_load_cell(load)}</td>"
            f"<td>{_bars(window)}</td>"
            "</tr>"
        )
    return "\n".join(rows)


def _load_cell(load: LoadFigures | None) -> str:
    """Load now, and against the baseline: realized speed-up, measured c, crossover."""
    if load is None:
        return '<span class="muted">no load series</span>'
    parts = [
        f"n &asymp; {_fmt(load.concurrency, 1)}",
        f"<span class='muted'>{_fmt(_ms(load.time_per_output_token_seconds), 1)} ms/token</span>",
    ]
    if load.baseline is not None:
        against = escape(load.baseline)
        if load.realized_speedup is not None:
            realized = load.realized_speedup
            cls = "pos" if realized >= 1.0 else "neg"
            parts.append(
                f"<span class='{cls}'>{realized:.2f}&times;</span> vs {against}"
                f"<br><span class='muted'>c {_fmt(load.measured_draft_cost, 3)}</span>"
            )
        else:
            parts.append(
                f"<span class='muted'>vs {against}: {escape(load.reason or 'no figures yet')}"
                "</span>"
            )
        if load.crossover is not None:
            parts.append(f"stops paying at n &asymp; {load.crossover.concurrency:.1f}")
    return "<br>".join(parts)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _is_problem(view: TargetView) -> bool:
    """Down, refused readings, a negative margin or slower than its baseline, at the configured
    cost or on the verdict's best evidence."""
    if view.scraped and not view.up:
        return True
    if view.rejected:
        return True
    for model in view.models:
        for window in model.windows:
            verdict = window.verdict
            if verdict is not None and (
                (verdict.alpha_margin or 0.0) < 0 or (verdict.speedup or 1.0) < 1.0
            ):
                return True
            if window.report is not None and (window.report.alpha_margin or 0.0) < 0:
                return True
            if window.load is not None and (window.load.realized_speedup or 1.0) < 1.0:
                return True
    return False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Selection:
    """One page of the targets a filter chose."""

    views: Sequence[TargetView]
    #: Targets the filter chose, on every page.
    total: int
    #: This page (1-based; a page past the last is the last) and how many there are.
    page: int
    pages: int
    per_page: int


def select_views(
    views: Sequence[TargetView],
    *,
    query: str = "",
    problems_only: bool = False,
    page: int = 1,
    per_page: int | None = None,
) -> Selection:
    """The status page's filter and pages, shared with ``/api/v1/targets``: targets whose
    name holds ``query`` (any case), only those with a problem when ``problems_only``, in
    pages of ``per_page`` (None: all on one page)."""
    needle = query.lower()
    chosen = [
        v for v in views
        if (not needle or needle in v.name.lower()) and (not problems_only or _is_problem(v))
    ]  # fmt: skip
    size = max(1, len(chosen) if per_page is None else per_page)
    pages = max(1, -(-len(chosen) // size))
    page = min(max(page, 1), pages)
    return Selection(
        views=chosen[(page - 1) * size : page * size],
        total=len(chosen),
        page=page,
        pages=pages,
        per_page=size,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class TargetsQuery:
    """What a request to ``/api/v1/targets`` asked for."""

    #: One target by exact name.
    target: str | None = None
    query: str = ""
    problems_only: bool = False
    #: None: every chosen target (the document as it has always been).
    page: int | None = None
    per_page: int | None = None

    @property
    def paginated(self) -> bool:
        return self.page is not None or self.per_page is not None


#: Longest value of ``target`` and ``q`` read (a target's name is at most this long anyway).
_MAX_QUERY_TEXT = 200
_PER_PAGE_DEFAULT = 200


def parse_targets_query(params: Mapping[str, str]) -> TargetsQuery | list[str]:
    """``/api/v1/targets``'s parameters (``target``, ``q``, ``problems``, ``page``,
    ``per_page``), or every problem with them: a program asking for a page gets an error
    for a bad number, not a page it did not ask for (the HTML page clamps instead)."""
    problems: list[str] = []
    unknown = sorted(set(params) - {"target", "q", "problems", "page", "per_page"})
    if unknown:
        shown = ", ".join(repr(k[:40]) for k in unknown[:5])
        problems.append(f"unknown parameter(s) {shown}; known: target, q, problems, page, per_page")

    def text(key: str) -> str | None:
        value = params.get(key)
        if value is not None and len(value) > _MAX_QUERY_TEXT:
            problems.append(f"{key}: longer than {_MAX_QUERY_TEXT} characters")
            return None
        return value

    def number(key: str, high: int) -> int | None:
        raw = params.get(key)
        if raw is None:
            return None
        if not (raw.isascii() and raw.isdigit()) or len(raw) > 9 or not 1 <= int(raw) <= high:
            problems.append(f"{key}: expected a whole number from 1 to {high}, got {raw[:20]!r}")
            return None
        return int(raw)

    target, query = text("target"), text("q") or ""
    flag = params.get("problems")
    if flag not in (None, "0", "1"):
        problems.append(f"problems: expected 0 or 1, got {flag[:20]!r}")
    page, per_page = number("page", 1_000_000), number("per_page", MAX_PER_PAGE)
    if problems:
        return problems
    if page is not None and per_page is None:
        per_page = _PER_PAGE_DEFAULT
    return TargetsQuery(
        target=target,
        query=query,
        problems_only=flag == "1",
        page=page if page is not None else (1 if per_page is not None else None),
        per_page=per_page,
    )


def targets_document(
    views: Sequence[TargetView], *, ready: bool, asked: TargetsQuery, cache: StatusCache
) -> str:
    """The JSON of ``/api/v1/targets``: ``ready``, ``total`` (targets chosen, on every page),
    ``targets`` (this page's documents, each made once per view) and, when a page was asked
    for, ``page``, ``pages`` and ``per_page``."""
    if asked.target is not None:
        views = [v for v in views if v.name == asked.target]
    chosen = select_views(
        views,
        query=asked.query,
        problems_only=asked.problems_only,
        page=asked.page or 1,
        per_page=asked.per_page,
    )
    paging = (
        f', "page": {chosen.page}, "pages": {chosen.pages}, "per_page": {chosen.per_page}'
        if asked.paginated
        else ""
    )
    return (
        '{"ready": '
        + ("true" if ready else "false")
        + f', "total": {chosen.total}{paging}, "targets": ['
        + ", ".join(cache.json(v) for v in chosen.views)
        + "]}"
    )


class StatusCache:
    """Each target's status rows and JSON document, made again only when its view changes
    (the views are immutable and swapped whole: identity says "changed"). The daemon calls
    :meth:`changed` at every new view, so an entry lives only while its view is current: an
    entry held until the next request kept the replaced view alive with it (at 1,000 targets,
    after one ``/api/v1/targets``: 4.3 MB of documents and every target's previous view,
    until the next request)."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[TargetView, str, str]] = {}
        self._json: dict[str, tuple[TargetView, str]] = {}

    def rows(self, view: TargetView, primary_window: str) -> str:
        cached = self._rows.get(view.name)
        if cached is None or cached[0] is not view or cached[1] != primary_window:
            cached = (view, primary_window, target_rows(view, primary_window=primary_window))
            self._rows[view.name] = cached
        return cached[2]

    def json(self, view: TargetView) -> str:
        cached = self._json.get(view.name)
        if cached is None or cached[0] is not view:
            cached = (view, json.dumps(views_json([view])[0]))
            self._json[view.name] = cached
        return cached[1]

    def changed(self, name: str) -> None:
        """``name`` has a new view: its pieces are stale."""
        self._rows.pop(name, None)
        self._json.pop(name, None)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the targets no longer configured."""
        names = set(keep)
        for cache in (self._rows, self._json):
            for name in set(cache) - names:
                del cache[name]


def render_status(
    views: Sequence[TargetView],
    *,
    primary_window: str,
    ready: bool,
    page: int = 1,
    per_page: int = 200,
    query: str = "",
    problems_only: bool = False,
    cache: StatusCache | None = None,
) -> str:
    """The status page: a summary of every target, then one page of rows (filtered by name
    and by problems), with links to the other pages."""
    store = cache if cache is not None else StatusCache()
    up = sum(1 for v in views if v.up)
    down = sum(1 for v in views if v.scraped and not v.up)
    spec_off = sum(1 for v in views if v.up and not v.speculation)
    problem_count = sum(1 for v in views if _is_problem(v))
    chosen = select_views(
        views, query=query, problems_only=problems_only, page=page, per_page=per_page
    )
    page, pages = chosen.page, chosen.pages
    body = "\n".join(store.rows(v, primary_window) for v in chosen.views) or (
        '<tr><td colspan="13" class="muted">no targets'
        + (" match" if query or problems_only else " configured")
        + "</td></tr>"
    )
    readiness = "ready" if ready else "starting: waiting for the first scrape of every target"
    summary = (
        f"{len(views)} targets: {up} up, {down} down, {spec_off} without speculative data; "
        f"{problem_count} with a problem (down, refused readings, negative margin, or slower "
        "than its baseline)"
    )
    nav = _nav(page, pages, per_page, query, problems_only, chosen.total)
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
<p class="sub">{escape(summary)}</p>
{nav}
<table>
<thead><tr><th>target</th><th>state</th><th>engine</th><th>model</th><th>window</th>
<th>alpha</th><th>break-even</th><th>margin</th><th>verdict</th>
<th>k / best k</th><th>draft cost</th><th>load and baseline</th>
<th>survival by position</th></tr></thead>
<tbody>
{body}
</tbody></table>
<footer>specmon {escape(__version__)} &middot; <a href="/metrics">/metrics</a> &middot;
<a href="/api/v1/targets">/api/v1/targets</a> &middot; <a href="/healthz">/healthz</a> &middot;
<a href="/readyz">/readyz</a></footer>
</body></html>
"""


def _nav(page: int, pages: int, per_page: int, query: str, problems: bool, count: int) -> str:
    """Filter form and page links (a page of 1,000 targets is too long to read anyway)."""
    base = {"per_page": str(per_page), "q": query} | ({"problems": "1"} if problems else {})

    def link(label: str, target: int) -> str:
        href = "?" + urlencode({**base, "page": str(target)})
        return f'<a href="{escape(href)}">{label}</a>'

    links = []
    if page > 1:
        links.append(link("&larr; previous", page - 1))
    if page < pages:
        links.append(link("next &rarr;", page + 1))
    checked = " checked" if problems else ""
    return (
        '<form class="sub" method="get">'
        f'<input name="q" value="{escape(query)}" placeholder="target name">'
        f'<label><input type="checkbox" name="problems" value="1"{checked}> problems only</label>'
        '<button type="submit">filter</button> '
        f"page {page} of {pages} ({count} targets) {' '.join(links)}</form>"
    )


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
        "verdict": dataclasses.asdict(window.verdict) if window.verdict else None,
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
