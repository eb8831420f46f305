"""The target page (``/target/NAME``), in-process: its contents, the charts, and the routing of
names holding any character, through the daemon's real HTTP app on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from html import escape, unescape
from pathlib import Path

import aiohttp
import yarl

from specmon.answer import Evidence
from specmon.daemon.app import Daemon
from specmon.daemon.history import Sample
from specmon.surfaces.status import target_href
from specmon.surfaces.target import chart, render_missing, render_target
from tests.support.answers import make_answer
from tests.support.views import fleet_views

#: Names a config may hold (no control characters) that break naive routing or markup.
HOSTILE_NAMES = [
    "plain",
    "a/b",
    "/lead",
    "trail/",
    "a//b",
    "q?x=1&y=2",
    "frag#top",
    "pct%2Fencoded",
    "%",
    "..",
    ".",
    "a/../b",
    "sp ace+plus",
    "<script>window.__pwned=1</script>",
    "\"quote' <b>x</b>",
    "ünï-名前",
]


def test_hrefs_encode_the_whole_name() -> None:
    assert target_href("a/b?c#d") == "/target/a%2Fb%3Fc%23d"
    assert target_href("pct%2F") == "/target/pct%252F"
    assert target_href("..") == "/target?name=.."  # a dots-only segment is a directory step
    assert target_href(".") == "/target?name=."
    assert target_href("a.b") == "/target/a.b"


def _names_and_links(html: str) -> list[tuple[str, str]]:
    return [
        (unescape(name), unescape(href))
        for href, name in re.findall(r'<a class="name" href="([^"]*)">([^<]+)</a>', html)
    ]


async def _crawl(config: Path) -> tuple[str, dict[str, tuple[int, str]], list[int]]:
    daemon = Daemon(config_path=config, listen="127.0.0.1:0")
    await daemon.start()
    try:
        base = f"http://127.0.0.1:{daemon.bound_port}"
        async with aiohttp.ClientSession() as session:
            for _ in range(100):  # every target scraped (and down) once
                if daemon.ready:
                    break
                await asyncio.sleep(0.05)
            async with session.get(base + "/") as response:
                index = await response.text()
            pages = {}
            for name, href in _names_and_links(index):
                # Sent exactly as a browser sends the link (no client re-quoting).
                async with session.get(yarl.URL(base + href, encoded=True)) as response:
                    pages[name] = (response.status, await response.text())
            missing = []
            for href in ("/target/nobody", "/target/" + "x" * 3000, "/target?name=", "/target"):
                async with session.get(yarl.URL(base + href, encoded=True)) as response:
                    missing.append(response.status)
    finally:
        await daemon.stop()
    return index, pages, missing


def test_every_name_routes_to_its_own_page_and_is_escaped(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    targets = [
        {"name": n, "url": f"http://127.0.0.1:9/{i}/metrics"} for i, n in enumerate(HOSTILE_NAMES)
    ]
    config.write_text(
        json.dumps(
            {"global": {"scrape_interval": "1s", "scrape_timeout": "500ms"}, "targets": targets}
        )
    )
    index, pages, missing = asyncio.run(_crawl(config))
    assert "<script>window" not in index and "<b>x</b>" not in index
    assert set(pages) == set(HOSTILE_NAMES)
    for name, (status, html) in pages.items():
        assert status == 200, name
        # its own page: the heading is this name (escaped), not a neighbour's
        assert f"<h1>{escape(name)}</h1>" in html, name
        assert "<script>window" not in html and "<b>x</b>" not in html
        assert "DOWN" in html and "cannot connect" in html
    assert missing == [404, 404, 404, 404]


def test_the_target_page_holds_every_window_the_load_table_and_the_charts() -> None:
    view = next(v for v in fleet_views() if v.name == "vllm-loaded")
    samples = tuple(Sample(1000.0 + 15 * i, 1.4 - 0.02 * i, 0.2 - 0.01 * i) for i in range(40))
    from specmon.daemon.history import Event, Series

    html = render_target(
        view,
        primary_window="5m",
        series=(Series("qwen", samples),),
        events=(Event(1500.0, "refused: qwen: <b>negative</b> counter"),),
        now=1000.0 + 15 * 39,
    )
    assert "<h1>vllm-loaded</h1>" in html and "NEAR BREAK-EVEN" in html
    # every window of the model, with its verdict
    windows = re.findall(r"<tr><td>(1m|5m)</td>", html)
    assert windows == ["1m", "5m"]
    # the load table: buckets, realized speed-up against the twin, measured c, recommended k
    assert "realized<br>vs vllm-twin" in html and "recommended k" in html
    buckets = re.findall(r"<tr><td>([^<]+?)(?: <b>\(now\)</b>)?</td><td class=\"num\">", html)
    assert len(buckets) >= 2
    assert "speculation stops paying at n &asymp; 16.2" in html
    # the verdict's derivation is in the notes
    assert "realized against the twin vllm-twin" in html
    # two charts: the speed-up and the margin, each a line of 40 points, no external asset
    assert html.count("<svg") == 2 and html.count("<polyline") == 2
    assert len(re.search(r'<polyline points="([^"]+)"', html)[1].split()) == 40  # type: ignore[index]
    assert "src=" not in html and "<script" not in html and "http://" not in html.split("<dl>")[0]
    # recent events, escaped
    assert "refused: qwen: &lt;b&gt;negative&lt;/b&gt; counter" in html


def test_engine_notes_are_on_the_target_page_not_in_the_table() -> None:
    from specmon.surfaces.status import render_status

    base = next(v for v in fleet_views() if v.name == "sglang-c")
    note = "drafts = spec_verify_calls_total (verification steps); accepted derived as <x>"
    view = dataclasses.replace(base, notes=(note,))
    table = render_status([view], primary_window="5m", ready=True)
    assert "spec_verify_calls_total" not in table
    assert '<span class="badge"' in table and ">derived counts</span>" in table
    page = render_target(view, primary_window="5m", series=(), events=(), now=0.0)
    assert f"<li>{escape(note)}</li>" in page
    assert "no verdicts recorded yet" in page


def test_a_slower_target_never_shows_a_green_headline() -> None:
    """The configured-cost figures say 2x, the verdict (here the engine's c) says 0.93x: the
    row is marked SLOWER and its first figure is red, on the table and on the target page."""
    from specmon.surfaces.status import render_status

    healthy = next(v for v in fleet_views() if v.name == "llama-b")
    losing = make_answer(0.93, basis=Evidence.ENGINE, cost=0.4, breakeven=0.8, margin=0.01)
    model = healthy.models[0]
    windows = tuple(dataclasses.replace(w, answer=losing) for w in model.windows)
    view = dataclasses.replace(healthy, models=(dataclasses.replace(model, windows=windows),))
    for html in (
        render_status([view], primary_window="5m", ready=True),
        render_target(view, primary_window="5m", series=(), events=(), now=0.0),
    ):
        assert "SLOWER" in html
        assert '<span class="big neg">0.93&times;</span>' in html
        assert 'class="big pos"' not in html


def test_chart_gaps_reference_and_bounds() -> None:
    samples = [Sample(100.0 + 15 * i, None if i == 5 else 1.0 + i / 10, None) for i in range(10)]
    svg = chart(samples, pick="speedup", reference=1.0, now=250.0, label="speed-up", unit="x")
    assert svg.count("<polyline") == 2  # a gap where the figure was missing
    assert 'stroke-dasharray="4 3"' in svg  # the 1x line
    assert "9 samples in the last 15 minutes, now 1.9x" in svg
    for x, y in re.findall(r"([\d.]+),([\d.]+)", svg):
        assert 0 <= float(x) <= 300 and 0 <= float(y) <= 90
    old = chart([Sample(0.0, 2.0, 0.1)], pick="margin", reference=0.0, now=2000.0, label="margin")
    assert "no figures in the last 15 minutes" in old and "<polyline" not in old


def test_the_missing_page_escapes_the_name() -> None:
    html = render_missing("<img src=x onerror=alert(1)>" + "y" * 500)
    assert "<img" not in html and "&lt;img" in html and "y" * 201 not in html
