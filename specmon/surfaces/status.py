"""The HTML status page at ``/`` and its JSON twin: every target at a glance.

Problems first: targets in severity order (specmon.daemon.severity), each marked by a word and
an icon, not only a colour; one verdict per row as its first figure; the engines' derivation
notes on the target's own page (specmon.surfaces.target), a badge here. On a narrow screen
each target is a card. Everything a target provides (names, model names, error messages,
notes) is escaped. The page has no scripts and no external resources; it refreshes itself
every few seconds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from urllib.parse import quote, urlencode

from specmon import __version__, jsontext
from specmon.answer import Answer, Crossover, ReadState, words
from specmon.daemon.severity import Severity, pick_window, target_severity, window_severity
from specmon.daemon.target import ModelView, TargetView, WindowView
from specmon.daemon.views import LoadFigures
from specmon.daemon.window_rules import Straddle
from specmon.formatting import number
from specmon.surfaces.api import views_json

__all__ = [
    "BASE_CSS",
    "MAX_PER_PAGE",
    "Selection",
    "StatusCache",
    "TargetsQuery",
    "bars",
    "baseline_for_html",
    "fmt",
    "margin_html",
    "marker",
    "parse_targets_query",
    "render_status",
    "select_views",
    "target_href",
    "target_rows",
    "targets_document",
    "verdict_html",
    "views_json",
]

#: The most targets one page (of the status page or ``/api/v1/targets``) holds.
MAX_PER_PAGE = 5000
#: Problem targets named in the summary (the rest: "and N more", a link to the filter).
_NAMED_PROBLEMS = 10

#: Shared with the target page.
BASE_CSS = """
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 20px;
color:#1d2330;background:#f6f7f9}
h1{font-size:20px;margin:0 0 4px;overflow-wrap:anywhere}
h2{font-size:16px;margin:20px 0 6px;overflow-wrap:anywhere}
a{color:#0b5cad}
.sub{color:#5b6475;margin:0 0 12px;overflow-wrap:anywhere}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0002;width:100%}
th,td{padding:6px 8px;border-bottom:1px solid #e6e8ec;text-align:left;vertical-align:top;
overflow-wrap:anywhere}
th{background:#eef0f4;font-weight:600;font-size:12px;text-transform:uppercase;color:#404859}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.pos{color:#1a7f37}.neg{color:#cf222e;font-weight:600}.warn{color:#9a6700;font-weight:600}
.muted{color:#6b7385}
.nowrap{white-space:nowrap}
.mk{font-weight:700}
.s0 .mk,.s1 .mk,.s2 .mk,.s3 .mk{color:#cf222e}.s4 .mk{color:#9a6700}
.s5 .mk{color:#5b6475}.s6 .mk{color:#1a7f37}
.big{font-size:17px;font-weight:700;white-space:nowrap}
.bars{display:grid;grid-template-columns:auto minmax(60px,160px) auto;gap:2px 6px;
align-items:center;font-size:12px;max-width:320px}
.track{background:#e6e8ec;height:10px;border-radius:2px;overflow:hidden}
.fill{background:#3b82f6;height:10px}
.err{color:#cf222e;font-size:12px;overflow-wrap:anywhere}
.note{color:#5b6475;font-size:12px}
.badge{display:inline-block;font-size:11px;padding:0 6px;margin:2px 2px 0 0;border-radius:8px;
background:#eef0f4;color:#404859;border:1px solid #d0d5de;white-space:nowrap}
footer{margin-top:16px;color:#6b7385;font-size:12px}
"""

_CSS = (
    BASE_CSS
    + """
.name{font-weight:700}
.url{display:block;max-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;
font-size:12px}
tbody.s0 td:first-child,tbody.s1 td:first-child,tbody.s2 td:first-child,
tbody.s3 td:first-child{box-shadow:inset 4px 0 #cf222e}
tbody.s4 td:first-child{box-shadow:inset 4px 0 #d4a72c}
table.targets{table-layout:fixed}
col.c1{width:21%}col.c2{width:15%}col.c3{width:10%}col.c4{width:15%}col.c5{width:11%}
col.c6{width:10%}col.c7{width:18%}
@media (max-width:760px){
body{margin:8px}
table{background:none;box-shadow:none}
table,tbody,tr,td{display:block;width:100%}
thead{display:none}
tbody{background:#fff;margin:0 0 10px;border-radius:6px;box-shadow:0 1px 2px #0003;
padding:6px 0}
tbody.s0,tbody.s1,tbody.s2,tbody.s3{border-left:5px solid #cf222e}
tbody.s4{border-left:5px solid #d4a72c}
tbody td:first-child{box-shadow:none!important}
td{border:0;padding:2px 12px}
td.num{text-align:left}
td[data-l]::before{content:attr(data-l) ": ";color:#6b7385;font-size:12px}
td.wide{display:none}
}
"""
)

#: The word (and icon) each severity shows: read by screen readers, seen by the colour-blind.
_MARKS = {
    Severity.DOWN: ("\u2716", "DOWN"),
    Severity.REFUSED: ("\u26a0", "REFUSED"),
    Severity.SLOWER: ("\u25bc", "SLOWER"),
    Severity.BELOW: ("\u25bc", "BELOW BREAK-EVEN"),
    Severity.NEAR: ("\u25c6", "NEAR BREAK-EVEN"),
    Severity.MEASURING: ("\u25cc", "MEASURING"),
    Severity.UNJUDGED: ("\u2026", "NO VERDICT"),
    Severity.FINE: ("\u2714", "FINE"),
    Severity.BASELINE: ("\u25cb", "BASELINE"),
}
_MARK_TITLES = {
    Severity.DOWN: "the last scrape failed",
    Severity.REFUSED: "readings refused at the last scrape (their figures are left out)",
    Severity.SLOWER: "slower than without speculation, on the verdict's evidence",
    Severity.BELOW: "acceptance below break-even on the verdict's evidence",
    Severity.NEAR: "within 0.05 of break-even, or under 1.05x",
    Severity.MEASURING: "the load moved to one no evidence has measured yet: no figure until it is",
    Severity.UNJUDGED: "nothing to judge yet",
    Severity.FINE: "speculation pays on the verdict's evidence",
    Severity.BASELINE: "the twin other targets are compared with: no speculation, by design",
}


def marker(view: TargetView, severity: Severity) -> str:
    """The state's icon and word (``PENDING`` or ``NO SPEC DATA`` for an unjudged target
    that has not been scraped or publishes no speculative figures)."""
    icon, word = _MARKS[severity]
    if severity is Severity.UNJUDGED:
        if not view.scraped:
            word = "PENDING"
        elif view.up and not view.speculation:
            word = "NO SPEC DATA"
    return (
        f'<span class="mk" title="{_MARK_TITLES[severity]}">'
        f'<span aria-hidden="true">{icon}</span> {word}</span>'
    )


def baseline_for_html(view: TargetView) -> str:
    """ "baseline for X, Y": the targets compared with this one, linked (the first few)."""
    shown = ", ".join(
        f'<a href="{escape(target_href(n))}">{escape(n)}</a>'
        for n in view.baseline_for[:_NAMED_PROBLEMS]
    )
    more = len(view.baseline_for) - _NAMED_PROBLEMS
    return f"baseline for {shown}" + (f" and {more} more" if more > 0 else "")


def target_href(name: str) -> str:
    """The target page's address: the name percent-encoded whole (``/``, ``?``, ``#`` and
    ``%`` included); a name of dots only goes in the query (a path segment of dots is a
    directory step to a browser, encoded or not)."""
    if name.strip(".") == "":
        return "/target?name=" + quote(name, safe="")
    return "/target/" + quote(name, safe="")


def fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return number(value, digits, suffix=suffix, missing="&ndash;")


def margin_html(value: float | None) -> str:
    if value is None:
        return '<span class="muted">&ndash;</span>'
    cls = "pos" if value >= 0 else "neg"
    return f'<span class="{cls}">{value:+.3f}</span>'


#: The answer's figure's colour: green only when the window is fine.
_FIGURE_CLASS = {
    Severity.SLOWER: "neg",
    Severity.BELOW: "neg",
    Severity.NEAR: "warn",
    Severity.FINE: "pos",
}


def crossover_html(crossover: Crossover) -> str:
    """The crossover with its 95 % range ("10.9 (10.2-11.6)"), and its gap note on hover."""
    text = escape(words.crossover_words(crossover)).replace("-", "&ndash;")
    if crossover.note:
        text += f' <span class="muted" title="{escape(crossover.note)}">&#9888; gap</span>'
    return text


def verdict_html(answer: Answer | None, severity: Severity, cut: Straddle | None = None) -> str:
    """The answer's speed-up, coloured by its standing (never green for a window slower
    than its baseline), and what it rests on (the whole line on hover); a window cut at a
    configuration change says so (specmon.daemon.window_rules); a new load being measured
    says so, with the last figure and its load."""
    if answer is None:
        if cut is not None and cut.held is not None:
            return (f'<span class="muted" title="{escape(cut.text())}">&ndash;<br>changed '
                    f"{cut.seconds:.0f} s ago: too little yet</span>")  # fmt: skip
        return '<span class="muted">&ndash;</span>'
    value = answer.speedup
    cls = _FIGURE_CLASS.get(severity, "muted")
    if answer.state is ReadState.MEASURING:
        figure = '<span class="big muted">measuring</span>'
    elif value is None:
        figure = '<span class="big muted">&ndash;</span>'
    else:
        figure = f'<span class="big {cls}">{value:.2f}&times;</span>'
    if value is not None and answer.interval is not None:
        low, high = answer.interval
        figure += (
            f' <span class="muted nowrap" title="95 % interval">({low:.2f}&ndash;{high:.2f})</span>'
        )
    since = f", since the {cut.clock} change" if cut is not None else ""
    basis = escape(words.basis_words(answer) + since)
    return (f'{figure}<br><span class="muted" title="{escape(words.detail(answer))}">'
            f"{basis}</span>")  # fmt: skip


def bars(window: WindowView | None) -> str:
    """Survival by position as bars."""
    if window is None or window.report is None or not window.report.positions:
        return '<span class="muted">no per-position data</span>'
    rows = []
    for pos in window.report.positions:
        survival = pos.survival or 0.0
        width = max(0.0, min(survival, 1.0)) * 100
        rows.append(
            f'<span>{pos.position}</span><div class="track" title="survival {survival:.3f}">'
            f'<div class="fill" style="width:{width:.1f}%"></div></div>'
            f"<span>{fmt(pos.survival)}</span>"
        )
    return '<div class="bars">' + "".join(rows) + "</div>"


def _badges(view: TargetView, loads: Iterable[LoadFigures | None]) -> str:
    badges = []
    if view.notes:
        badges.append(("derived counts", len(view.notes)))
    load_notes = {n for load in loads if load is not None for n in load.notes}
    if load_notes:
        badges.append(("load notes", len(load_notes)))
    return "".join(
        f'<span class="badge" title="{count} note(s): the full text is on the target page">'
        f"{label}</span>"
        for label, count in badges
    )


def target_rows(view: TargetView, *, primary_window: str) -> str:
    """One target's ``<tbody>`` (a card on a narrow screen): a row per model, the target's
    name, link, state and badges once. Escaped."""
    severity = target_severity(view, primary_window)
    name = escape(view.name)
    url = escape(view.url)
    engine = escape(view.engine.value) if view.engine else "&ndash;"
    detail = ""
    if view.error:
        detail = f'<div class="err">{escape(view.error)}</div>'
    elif severity is Severity.BASELINE:
        detail = f'<div class="note">{baseline_for_html(view)}</div>'
    elif view.up and not view.speculation and view.message:
        detail = f'<div class="note">{escape(view.message)}</div>'
    if view.up and view.rejected:
        shown = "; ".join(str(r) for r in view.rejected[:3])
        detail += f'<div class="err">refused: {escape(shown)}</div>'
    models = view.models if view.up else ()
    picked = [(m, pick_window(m, primary_window)) for m in models]
    span = max(1, len(picked))
    head = (
        f'<td rowspan="{span}"><a class="name" href="{escape(target_href(view.name))}">'
        f'{name}</a><span class="url muted" title="{url}">{url}</span>'
        f'<span class="muted">{engine}</span> '
        f"{_badges(view, (w.load if w else None for _, w in picked))}</td>"
        f'<td rowspan="{span}" data-l="state">{marker(view, severity)}{detail}</td>'
    )
    if not picked:
        return (
            f'<tbody class="s{int(severity)}"><tr>{head}'
            '<td colspan="5" class="wide"></td></tr></tbody>'
        )
    rows = []
    for index, (model, window) in enumerate(picked):
        first = head if index == 0 else ""
        report = window.report if window else None
        load = window.load if window else None
        answer = window.answer if window else None
        where = (
            f'<td data-l="model">{escape(model.model)}<br><span class="muted">'
            f"{escape(window.window) if window else '&ndash;'} &middot; {_drafts(window)}"
            "</span></td>"
        )
        if not model.speculating:
            rows.append(
                f"<tr>{first}"
                '<td class="num" data-l="verdict"><span class="muted">no speculation</span></td>'
                f"{where}<td class='wide'></td><td class='wide'></td>"
                f"<td class='wide'>{_load_cell(load, None)}</td></tr>"
            )
            continue
        best_text = (
            escape(words.best_words(answer)).replace("x)", "&times;)") if answer else "&ndash;"
        )
        at_c = escape(words.cost_words(answer)) if answer else ""
        k = model.basis.chain_length
        rows.append(
            f"<tr>{first}"
            f'<td class="num" data-l="verdict">'
            f"{verdict_html(answer, window_severity(window), window.straddle if window else None)}</td>"
            f"{where}"
            f'<td class="num" data-l="margin">'
            f"{margin_html(answer.alpha_margin if answer else None)}"
            f'<br><span class="muted">&alpha; {fmt(report.alpha if report else None)}'
            f" / {fmt(answer.breakeven_alpha if answer else None)}</span></td>"
            f'<td class="num wide">{k if k is not None else "&ndash;"} / {best_text}'
            f'<br><span class="muted">{at_c}{_engine_cost(model)}</span>'
            "</td>"
            f'<td class="wide">{_load_cell(load, answer)}</td>'
            "</tr>"
        )
    return f'<tbody class="s{int(severity)}">' + "".join(rows) + "</tbody>"


def _load_cell(load: LoadFigures | None, answer: Answer | None) -> str:
    """Load now, and against the baseline: realized speed-up, measured c, crossover (the
    answer's), or the new load being measured."""
    if load is None:
        return '<span class="muted">no load series</span>'
    mean = (
        f"n &asymp; {fmt(load.concurrency, 1)}"
        f" <span class='muted'>{fmt(_ms(load.time_per_output_token_seconds), 1)} ms/token</span>"
    )
    parts = [mean]
    if answer is None or not answer.compared:
        return mean
    if answer.concurrency is not None:
        # The answer's own load: the bucket it reads, not the window's mean (which can lie
        # between the loads the window saw).
        parts = [
            f"now n &asymp; {answer.concurrency:.1f} in bucket {escape(answer.bucket or '?')}"
            f" <span class='muted'>{fmt(_ms(answer.time_per_output_token_seconds), 1)}"
            " ms/token</span>",
            f"<span class='muted'>window average n &asymp; {fmt(answer.mean_concurrency, 1)}"
            "</span>",
        ]
    against = escape(answer.against or "")
    if answer.state is ReadState.MEASURING:
        parts.append(f"<span class='muted'>vs {against}: {escape(words.measuring_words(answer))}"
                     "</span>")  # fmt: skip
    elif answer.speedup is not None:
        cls = "pos" if answer.speedup >= 1.0 else "neg"
        how = ", off the cost curve" if answer.state is ReadState.INTERPOLATED else ""
        parts.append(
            f"<span class='{cls}'>{answer.speedup:.2f}&times;</span> vs {against}"
            f" <span class='muted'>c {fmt(answer.draft_cost, 3)}{how}</span>"
        )
    if answer.crossover is not None:
        parts.append(f"stops paying at n &asymp; {crossover_html(answer.crossover)}")
    return "<br>".join(parts)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _drafts(window: WindowView | None) -> str:
    if window is not None and window.drafts is None and window.report is not None:
        return "drafts not counted"
    return f"{window.drafts if window and window.drafts is not None else 0} drafts"


def _engine_cost(model: ModelView) -> str:
    if model.engine_draft_cost is None:
        return ""
    return f" &middot; engine {model.engine_draft_cost:.3g}"


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
    primary_window: str,
    query: str = "",
    problems_only: bool = False,
    page: int = 1,
    per_page: int | None = None,
    severities: StatusCache | None = None,
) -> Selection:
    """The status page's filter and pages, shared with ``/api/v1/targets``: targets whose
    name holds ``query`` (any case), only those with a problem (on the window the page
    shows, ``primary_window``) when ``problems_only``, in pages of ``per_page`` (None: all
    on one page), in the order given."""
    needle = query.lower()

    def problem(view: TargetView) -> bool:
        if severities is not None:
            return severities.severity(view, primary_window).problem
        return target_severity(view, primary_window).problem

    chosen = [
        v for v in views
        if (not needle or needle in v.name.lower()) and (not problems_only or problem(v))
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
    views: Sequence[TargetView],
    *,
    ready: bool,
    asked: TargetsQuery,
    cache: StatusCache,
    primary_window: str,
) -> str:
    """The JSON of ``/api/v1/targets``: ``ready``, ``total`` (targets chosen, on every page),
    ``targets`` (this page's documents, each made once per view) and, when a page was asked
    for, ``page``, ``pages`` and ``per_page``."""
    if asked.target is not None:
        views = [v for v in views if v.name == asked.target]
    chosen = select_views(
        views,
        primary_window=primary_window,
        severities=cache,
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
        self._severity: dict[str, tuple[TargetView, str, Severity]] = {}

    def severity(self, view: TargetView, primary_window: str) -> Severity:
        cached = self._severity.get(view.name)
        if cached is None or cached[0] is not view or cached[1] != primary_window:
            cached = (view, primary_window, target_severity(view, primary_window))
            self._severity[view.name] = cached
        return cached[2]

    def rows(self, view: TargetView, primary_window: str) -> str:
        cached = self._rows.get(view.name)
        if cached is None or cached[0] is not view or cached[1] != primary_window:
            cached = (view, primary_window, target_rows(view, primary_window=primary_window))
            self._rows[view.name] = cached
        return cached[2]

    def json(self, view: TargetView) -> str:
        cached = self._json.get(view.name)
        if cached is None or cached[0] is not view:
            cached = (view, jsontext.dumps(views_json([view])[0]))
            self._json[view.name] = cached
        return cached[1]

    def changed(self, name: str) -> None:
        """``name`` has a new view: its pieces are stale."""
        self._rows.pop(name, None)
        self._json.pop(name, None)
        self._severity.pop(name, None)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the targets no longer configured."""
        names = set(keep)
        for cache in (self._rows, self._json, self._severity):
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
    """The status page: a summary naming the targets with problems, then one page of targets
    worst first (severity, then name; filtered by name and by problems), with links to the
    other pages."""
    store = cache if cache is not None else StatusCache()
    ranked = sorted(views, key=lambda v: (store.severity(v, primary_window), v.name))
    up = sum(1 for v in views if v.up)
    down = sum(1 for v in views if v.scraped and not v.up)
    baselines = sum(1 for v in views if v.up and not v.speculation and v.baseline_for)
    spec_off = sum(1 for v in views if v.up and not v.speculation) - baselines
    problems = [v for v in ranked if store.severity(v, primary_window).problem]
    chosen = select_views(
        ranked,
        primary_window=primary_window,
        query=query,
        problems_only=problems_only,
        page=page,
        per_page=per_page,
        severities=store,
    )
    page, pages = chosen.page, chosen.pages
    body = "\n".join(store.rows(v, primary_window) for v in chosen.views) or (
        '<tbody><tr><td colspan="7" class="muted">no targets'
        + (" match" if query or problems_only else " configured")
        + "</td></tr></tbody>"
    )
    readiness = "ready" if ready else "starting: waiting for the first scrape of every target"
    counts = (
        f"{len(views)} targets: {up} up, {down} down, {spec_off} without speculative data"
        + (
            f", {baselines} baseline{'s' if baselines != 1 else ''} (twins without speculation)"
            if baselines
            else ""
        )
        + "."
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
<p class="sub">Speculative decoding, live. Worst first; each verdict is the speed-up believed
now over the {escape(primary_window)} window (or the first window with data), on the best
evidence (its basis under it); margin = alpha &minus; break-even; {escape(readiness)}.</p>
<p class="sub">{escape(counts)} {_problem_summary(problems, per_page)}</p>
{nav}
<table class="targets">
<colgroup><col class="c1"><col class="c2"><col class="c3"><col class="c4"><col class="c5">
<col class="c6"><col class="c7"></colgroup>
<thead><tr><th>target</th><th>state</th><th>verdict</th><th>model &middot; window</th>
<th>margin<br>&alpha; / break-even</th><th>k / best k<br>at the verdict's c</th>
<th>load and baseline</th></tr></thead>
{body}
</table>
<footer>specmon {escape(__version__)} &middot; <a href="/metrics">/metrics</a> &middot;
<a href="/api/v1/targets">/api/v1/targets</a> &middot; <a href="/healthz">/healthz</a> &middot;
<a href="/readyz">/readyz</a></footer>
</body></html>
"""


def _problem_summary(problems: Sequence[TargetView], per_page: int) -> str:
    """ "No problems", or how many and which (the first few, linked; the rest by the filter)."""
    if not problems:
        return '<span class="pos"><span aria-hidden="true">\u2714</span> no problems</span>'
    named = ", ".join(
        f'<a href="{escape(target_href(v.name))}">{escape(v.name)}</a>'
        for v in problems[:_NAMED_PROBLEMS]
    )
    more = len(problems) - _NAMED_PROBLEMS
    rest = (
        f' and <a href="?{escape(urlencode({"problems": "1", "per_page": str(per_page)}))}">'
        f"{more} more</a>"
        if more > 0
        else ""
    )
    return (
        f'<b class="neg"><span aria-hidden="true">\u26a0</span> {len(problems)} with a problem'
        f"</b> (down, refused readings, slower than without speculation or below break-even):"
        f" {named}{rest}"
    )


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
        f'<input name="q" value="{escape(query)}" placeholder="target name" aria-label="target'
        ' name"> '
        f'<label><input type="checkbox" name="problems" value="1"{checked}> problems only</label>'
        ' <button type="submit">filter</button> '
        f"page {page} of {pages} ({count} targets) {' '.join(links)}</form>"
    )
