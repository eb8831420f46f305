"""The status page and its JSON twin, in-process: the summary, filters and pages, the load
column, and the per-view cache."""

from __future__ import annotations

import dataclasses
import json
import re
from html import unescape
from typing import Any

from specmon.answer import Evidence, ReadState, words
from specmon.surfaces.status import (
    MAX_PER_PAGE,
    StatusCache,
    TargetsQuery,
    parse_targets_query,
    render_status,
    targets_document,
    views_json,
)
from specmon.surfaces.target import render_target
from tests.support.answers import make_answer
from tests.support.strict_json import strict_loads
from tests.support.views import fleet_views


def rows_of(html: str) -> list[str]:
    """The targets in the table, in order (one per target: its name cell spans its rows)."""
    return [unescape(n) for n in re.findall(r'<a class="name" href="[^"]*">([^<]+)</a>', html)]


def test_summary_counts_every_target_and_names_its_problems() -> None:
    views = fleet_views()
    html = render_status(views, primary_window="5m", ready=True)
    # 11 targets: one down, one never scraped, one without speculation (vllm-off) and the
    # twin (vllm-loaded's baseline, without speculation by design); problems: the down one
    # only: vllm-loaded's realized speed-up at its current load (concurrency 16) is 1.0: not
    # below 1, so near break-even, not a problem.
    assert (
        "11 targets: 9 up, 1 down, 1 without speculative data, 1 baseline (twins without "
        "speculation)." in html
    )
    assert re.search(r"1 with a problem</b> \([^)]*\): <a href=\"/target/down\">down</a></p>",
                     html, re.M)  # fmt: skip
    # Worst first: down, near break-even, nothing to judge yet, fine, and the baseline last;
    # by name within each.
    assert rows_of(html) == [
        "down", "vllm-loaded", "pending", "vllm-idle", "vllm-off",
        "llama-b", "sglang-c", "vllm-a", "vllm-profiled", "vllm-v0", "vllm-twin",
    ]  # fmt: skip
    marks = re.findall(r'<span aria-hidden="true">.</span> ([A-Z -]+)</span>', html)
    assert marks[:3] == ["DOWN", "NEAR BREAK-EVEN", "PENDING"] and marks[-2:] == [
        "FINE",
        "BASELINE",
    ]
    assert marks.count("NO SPEC DATA") == 1  # vllm-off, not the twin
    twin = html[html.index('href="/target/vllm-twin"') :]
    assert 'baseline for <a href="/target/vllm-loaded">vllm-loaded</a>' in twin
    assert "speculation is off" not in twin


def test_filter_by_name_and_problems_and_pages() -> None:
    views = fleet_views()
    only = render_status(views, primary_window="5m", ready=True, query="LLAMA")
    assert set(rows_of(only)) == {"llama-b"}
    problems = render_status(views, primary_window="5m", ready=True, problems_only=True)
    assert set(rows_of(problems)) == {"down"}
    first = render_status(views, primary_window="5m", ready=True, per_page=4)
    second = render_status(views, primary_window="5m", ready=True, per_page=4, page=2)
    assert "page 1 of 3 (11 targets)" in first and "page=2" in first
    assert not set(rows_of(first)) & set(rows_of(second))
    beyond = render_status(views, primary_window="5m", ready=True, per_page=4, page=99)
    assert "page 3 of 3" in beyond


def test_the_load_column_says_what_the_baseline_says() -> None:
    views = {v.name: v for v in fleet_views()}
    html = render_status(
        [views["vllm-loaded"], views["vllm-twin"]], primary_window="5m", ready=True
    )
    assert "1.00&times;</span> vs vllm-twin" in html
    assert "stops paying at n &asymp; 16.2" in html
    assert "no speculation</span>" in html  # the twin's row
    profiled = render_status([views["vllm-profiled"]], primary_window="5m", ready=True)
    assert "1.86&times;</span> vs profile" in profiled


def test_rows_and_documents_are_made_once_per_view() -> None:
    views = fleet_views()
    cache = StatusCache()
    first = [cache.rows(v, "5m") for v in views]
    assert [cache.rows(v, "5m") for v in views] == first
    assert all(a is b for a, b in zip(first, [cache.rows(v, "5m") for v in views], strict=True))
    assert views[0].name == "down"
    changed = dataclasses.replace(views[0], error="cannot connect to 127.0.0.1:9: a new error")
    assert "a new error" in cache.rows(changed, "5m") and "a new error" not in first[0]
    documents = strict_loads("[" + ", ".join(cache.json(v) for v in views) + "]")
    assert documents == json.loads(json.dumps(views_json(views)))
    cache.forget(["down"])
    assert cache.json(views[0]) == json.dumps(views_json([views[0]])[0])


def test_a_new_view_lets_the_old_views_pieces_go() -> None:
    """The daemon drops a target's cached rows and document at its new view (so the cache
    never keeps a replaced view alive), renders its series, and leaves the others' pieces."""
    from specmon.daemon.app import Daemon

    views = fleet_views()
    daemon = Daemon(config_path=None)
    cache = daemon._status
    first = [cache.json(v) for v in views]
    rows = [cache.rows(v, "5m") for v in views]
    newer = dataclasses.replace(views[0], error="cannot connect to 127.0.0.1:9: a new error")
    daemon._view_changed(newer)
    assert views[0].name not in cache._json and views[0].name not in cache._rows
    assert all(cache._json[v.name][0] is v for v in views[1:])
    assert all(cache._rows[v.name][0] is v for v in views[1:])
    assert cache.json(views[1]) is first[1] and cache.rows(views[1], "5m") is rows[1]
    assert "a new error" in cache.json(newer)
    assert daemon.exposition.targets() == [views[0].name]


def document(views: list[Any], **params: str) -> dict[str, Any]:
    asked = parse_targets_query(params)
    assert isinstance(asked, TargetsQuery), asked
    doc: dict[str, Any] = strict_loads(
        targets_document(views, ready=True, asked=asked, cache=StatusCache(), primary_window="5m")
    )
    return doc


def test_the_api_pages_and_filters_as_the_status_page_does() -> None:
    views = fleet_views()
    names = [v.name for v in views]
    whole = document(views)
    assert [t["target"] for t in whole["targets"]] == names
    assert whole["total"] == len(names) and "page" not in whole  # the document as before
    assert whole["targets"] == json.loads(json.dumps(views_json(views)))
    pages = [document(views, per_page="4", page=str(n)) for n in (1, 2, 3)]
    assert [p["page"] for p in pages] == [1, 2, 3]
    assert all(p["pages"] == 3 and p["per_page"] == 4 and p["total"] == 11 for p in pages)
    assert [t["target"] for p in pages for t in p["targets"]] == names  # each once, in order
    assert document(views, per_page="4", page="99")["page"] == 3  # past the end: the last
    assert document(views, page="2")["per_page"] == 200  # the status page's default
    assert [t["target"] for t in document(views, q="LLAMA")["targets"]] == ["llama-b"]
    problems = document(views, problems="1")
    assert [t["target"] for t in problems["targets"]] == ["down"] and problems["total"] == 1
    one = document(views, target="llama-b")
    assert [t["target"] for t in one["targets"]] == ["llama-b"] and one["total"] == 1
    assert document(views, target="LLAMA-B")["targets"] == []  # exact name, not a search
    # The HTML page chooses the same targets from the same parameters, worst first.
    html = [
        rows_of(render_status(views, primary_window="5m", ready=True, per_page=4, page=n))
        for n in (1, 2, 3)
    ]
    assert sorted(n for names in html for n in names) == names
    assert html[0][:2] == ["down", "vllm-loaded"]


def test_the_api_names_every_bad_parameter_at_once() -> None:
    problems = parse_targets_query(
        {"page": "0", "per_page": "x" * 500, "problems": "yes", "sort": "name", "q": "a" * 201}
    )
    assert isinstance(problems, list)
    text = "\n".join(problems)
    assert "unknown parameter(s) 'sort'" in text
    assert "page: expected a whole number from 1 to 1000000, got '0'" in text
    assert f"per_page: expected a whole number from 1 to {MAX_PER_PAGE}" in text
    assert "problems: expected 0 or 1, got 'yes'" in text
    assert "q: longer than 200 characters" in text
    assert len(problems) == 5 and max(len(p) for p in problems) < 200  # nothing echoed whole
    for bad in ("-1", "1.5", "\uff11", "1e3", "", str(MAX_PER_PAGE + 1)):
        assert isinstance(parse_targets_query({"per_page": bad}), list), bad
    assert parse_targets_query({"per_page": str(MAX_PER_PAGE)}) == TargetsQuery(
        page=1, per_page=MAX_PER_PAGE
    )


def test_a_verdict_below_break_even_is_a_problem() -> None:
    """A target whose configured-cost figures look fine but whose best evidence (here the
    engine's own measured draft cost) says speculation costs time is listed as a problem."""
    views = {v.name: v for v in fleet_views()}
    healthy = views["llama-b"]
    assert not set(rows_of(render_status([healthy], primary_window="5m", ready=True,
                                         problems_only=True)))  # fmt: skip
    losing = make_answer(0.93, basis=Evidence.ENGINE, cost=0.4, breakeven=0.8, margin=-0.06)
    model = healthy.models[0]
    windows = tuple(dataclasses.replace(w, answer=losing) for w in model.windows)
    changed = dataclasses.replace(
        healthy, models=(dataclasses.replace(model, windows=windows), *healthy.models[1:])
    )
    html = render_status([changed], primary_window="5m", ready=True, problems_only=True)
    assert rows_of(html) == ["llama-b"]
    assert "engine&#x27;s c" in html and "0.93&times;" in html


def test_each_row_heads_with_its_verdict_and_says_its_basis() -> None:
    """The row's first figure is the verdict on its basis: with a twin the realized speed-up,
    with a profile the profile's at the current load, with no draft cost configured the
    default c, said to be a guess."""
    views = fleet_views()
    html = render_status(views, primary_window="5m", ready=True)
    names = rows_of(html)
    starts = [html.index(f'">{n}</a>') for n in names]
    rows = {n: html[a:b] for n, a, b in zip(names, starts, [*starts[1:], len(html)], strict=True)}
    expected = {"vllm-loaded": "vs its twin", "vllm-profiled": "vs its profile",
                "llama-b": "default c: a guess"}  # fmt: skip
    by_name = {v.name: v for v in views}
    for name, basis in expected.items():
        verdict = next(w.answer for m in by_name[name].models for w in m.windows if w.answer)
        assert verdict is not None and verdict.speedup is not None
        row = rows[name]
        assert basis in unescape(row), (name, row)
        # The first figure of the row (after its name, URL, engine and state) is the verdict.
        first = re.search(r"(\d+\.\d\d)&times;", row)
        assert first is not None and float(first.group(1)) == round(verdict.speedup, 2), row
    assert verdict.basis is Evidence.DEFAULT


def test_figures_on_the_configured_cost_say_so() -> None:
    """The k / best k column follows the verdict's basis (issue 54): at the draft cost measured
    in the verdict's bucket on a twin, else at the configured (or default) c, every cell saying
    which; the target page's configured-cost columns say so."""
    views = fleet_views()
    html = render_status(views, primary_window="5m", ready=True)
    assert "<th>k / best k<br>at the verdict's c</th>" in html
    loaded = html[html.index('href="/target/vllm-loaded"') :].split("</tbody>")[0]
    assert "vs its twin" in loaded  # the verdict on the twin's evidence ...
    assert '<span class="muted">at measured c 0.' in loaded  # ... and best k on it too
    speculating = [v for v in views if v.up and v.speculation and v.models]
    found = re.findall(r'<td class="num wide">[^<]*<br><span class="muted">([^<]*)</span>', html)
    cells = [c for c in found if c]  # a window with no answer yet has no c to name
    assert len(cells) >= len(speculating) and all(
        c.startswith(("at configured c ", "at default c ", "at measured c ")) for c in cells
    ), cells
    # A c nobody measured says it is a guess wherever it stands.
    assert all(c.endswith("(a guess)") for c in cells if not c.startswith("at measured")), cells
    [view] = [v for v in views if v.name == "vllm-loaded"]
    page = render_target(view, primary_window="5m", series=(), events=(), now=0.0)
    assert "<th>best k<br>at the verdict&#x27;s c</th>" in page or (
        "<th>best k<br>at the verdict's c</th>" in page
    )
    assert "at configured c" not in page.split("Did the change help")[0] or "(a guess)" in page


def test_one_answer_on_every_surface() -> None:
    """The verdict with its 95 % interval, the load of its own bucket, best k on its basis and
    the configured c said as such, on the status page and the demo's terminal view (issue 54)."""
    from specmon.cli.demo import render_rows

    views = {v.name: v for v in fleet_views()}
    loaded = views["vllm-loaded"]
    window = loaded.models[0].window("5m")
    assert window is not None and window.answer is not None
    verdict = window.answer
    assert verdict.interval is not None and verdict.concurrency is not None
    low, high = verdict.interval
    html = render_status([loaded], primary_window="5m", ready=True)
    assert f"({low:.2f}&ndash;{high:.2f})" in html
    assert f"now n &asymp; {verdict.concurrency:.1f} in bucket {verdict.bucket}" in html
    assert "window average n &asymp;" in html
    guessed = render_status([views["vllm-a"]], primary_window="5m", ready=True)
    assert "at default c 0.1" in guessed  # no draft_cost configured: the default, a guess
    rows = "\n".join(render_rows([loaded, views["vllm-a"]], window="5m", color=False))
    assert f"{verdict.speedup:.2f}x ({low:.2f}-{high:.2f})" in rows
    assert f"now n~{verdict.concurrency:.1f} in bucket {verdict.bucket}" in rows
    assert " default " in rows and " guess " not in rows  # the API's basis words


def test_the_terminal_calls_only_a_twin_a_baseline() -> None:
    """A server without speculation is "baseline for X" in the demo's terminal view only when
    a target compares with it (the demo's vllm-switched, off until its restart, is none)."""
    from dataclasses import replace

    from specmon.cli.demo import render_rows

    twin = {v.name: v for v in fleet_views()}["vllm-twin"]
    assert twin.baseline_for
    alone = replace(twin, name="vllm-alone", baseline_for=())
    twin_row, alone_row = render_rows([twin, alone], window="5m", color=False)[1:]
    assert f"no speculation (baseline for {', '.join(twin.baseline_for)}):" in twin_row
    assert "no speculation:" in alone_row and "baseline" not in alone_row


def test_best_k_rests_on_the_verdicts_measured_c() -> None:
    """Best k on the answer's basis where the basis measured its own c: the server's own past
    (the demo's vllm-switched after its switch) and TensorRT-LLM's engine-measured c (said as
    the engine's, not as "configured"); not the configured c beside them."""
    from specmon.report import best_chain
    from tests.support.demo_fleet import DemoFleet

    fleet = DemoFleet(names=("vllm-switched", "trtllm-draft"))
    fleet.advance(150)
    for name, basis, word in (
        ("vllm-switched", Evidence.HISTORY, "measured"),
        ("trtllm-draft", Evidence.ENGINE, "the engine's"),
    ):
        model = fleet.states[name].view.models[0]
        window = model.window("30s")
        assert window is not None and window.answer is not None and window.report is not None
        v, r = window.answer, window.report
        assert v.basis is basis and v.draft_cost is not None, (name, v)
        assert v.state is not ReadState.GUESS
        if basis is Evidence.HISTORY:  # measured, not the configured c the report used
            assert abs(v.draft_cost - r.draft_cost) > 0.01, (v.draft_cost, r.draft_cost)
        survival = [p.survival for p in r.positions]
        want = best_chain(draft_cost=v.draft_cost, chain_length=r.chain_length,
                          survival=[s for s in survival if s is not None],
                          drafted_per_draft=r.mean_draft_length)  # fmt: skip
        assert want is not None
        assert (v.best_chain_length, v.best_speedup) == (want.chain_length, want.speedup), name
        assert words.cost_words(v) == f"at {word} c {v.draft_cost:.3f}"
