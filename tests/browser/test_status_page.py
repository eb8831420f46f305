"""The status page and a target's page in a real browser (Debian's Chromium, headless, driven
by Playwright), at a laptop's 1280 x 800 and a phone's 390 x 844: worst first, the markers, no
horizontal scroll, escaped names, and the target page's contents.

The README's screenshots are of the demo (docs/images/, taken as docs/testing.md says).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from specmon.sim.pages import PageKind
from tests.support.daemon import daemon
from tests.support.fake_engines import manual_target, running, set_counters

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"

CONFIG = """\
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  windows: [5s, 30s]
  draft_cost: 0.1
targets:
  - name: vllm-eagle
    url: {good}
  - name: vllm-losing
    url: {bad}
    draft_cost: 0.3
  - name: llamacpp-<i>x</i>
    url: {hostile}
    model: qwen3-8b
  - name: vllm-down
    url: http://127.0.0.1:9/{long_path}/metrics?token=secret
  - name: "odd/name?x=1#frag %2F and a very-long-name-without-any-break-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    url: {good}
"""


def _step(target: object, n: int, survival: tuple[float, ...]) -> None:
    drafts = 200 * n
    per_pos = [int(drafts * s) for s in survival]
    set_counters(target, drafts, drafts * len(survival), per_pos)  # type: ignore[arg-type]


ODD = (
    "odd/name?x=1#frag %2F and a very-long-name-without-any-break-"
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def _no_horizontal_scroll(page: Any) -> None:
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths


def _check_index(page: Any, base: str) -> None:
    response = page.goto(base + "/", wait_until="load")
    assert response is not None and response.status == 200
    _no_horizontal_scroll(page)
    cards = page.locator("tbody")
    names = cards.locator("a.name").all_inner_texts()
    # worst first: down, then slower than no speculation, then the rest by name
    assert names[:2] == ["vllm-down", "vllm-losing"], names
    assert sorted(names[2:]) == names[2:] and len(names) == 5
    marks = [c.locator(".mk").first.inner_text() for c in cards.all()]
    assert "DOWN" in marks[0] and "SLOWER" in marks[1] and all("FINE" in m for m in marks[2:])
    # the summary names the problems
    summary = page.locator("p.sub", has_text="with a problem").inner_text()
    assert "2 with a problem" in summary and "vllm-down, vllm-losing" in summary
    # names shown as text, never as markup
    assert "llamacpp-<i>x</i>" in names and page.locator("tbody i").count() == 0
    assert page.evaluate("window.__pwned") is None and page.locator("tbody img").count() == 0
    # the losing target's headline is red, never green
    losing = cards.nth(1)
    assert losing.locator(".big.neg").count() == 1 and losing.locator(".big.pos").count() == 0
    assert "configured c" in losing.inner_text()
    eagle = page.locator("tbody", has=page.locator("a.name", has_text="vllm-eagle"))
    assert eagle.locator(".big.pos").count() == 1
    # every card's name, state and verdict visible in full, inside the window
    width = page.viewport_size["width"]
    for card in cards.all():
        for part in (card.locator("a.name"), card.locator(".mk").first):
            box = part.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5
            assert part.evaluate("e => e.scrollWidth <= e.clientWidth + 1")
    for verdict in page.locator("td[data-l=verdict] .big").all():
        box = verdict.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width + 0.5
    # the long URL is cut or wrapped, its full text in the title
    url = page.locator("tbody", has=page.locator("a.name", has_text="vllm-down")).locator(".url")
    assert url.get_attribute("title").endswith("pppp/metrics")  # query strings never shown
    box = url.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width + 0.5
    # a verdict's 95 % interval never breaks inside itself ("(0.68-" / "0.76)")
    intervals = page.locator('[title="95 % interval"]')
    assert intervals.count() >= 1
    lines = intervals.evaluate_all("els => els.map(e => e.getClientRects().length)")
    assert lines == [1] * len(lines), lines


def _check_target_page(page: Any, base: str) -> None:
    page.goto(base + "/", wait_until="load")
    page.locator("a.name", has_text="odd/name").click()
    page.wait_for_load_state("load")
    assert "/target/odd%2Fname%3Fx%3D1%23frag%20%252F" in page.url
    assert page.locator("h1").inner_text() == ODD
    _no_horizontal_scroll(page)
    page.goto(base + "/", wait_until="load")
    page.locator("a.name", has_text="llamacpp-").click()
    page.wait_for_load_state("load")
    assert page.locator("h1").inner_text() == "llamacpp-<i>x</i>"
    page.goto(base + "/", wait_until="load")
    page.locator("a.name", has_text="vllm-eagle").click()
    page.wait_for_load_state("load")
    _no_horizontal_scroll(page)
    text = page.inner_text("body")
    assert "Model llama-3.1-70b" in text and "Survival by position" in text
    windows = page.locator("table").first.locator("tbody tr td:first-child").all_inner_texts()
    assert windows == ["5s", "30s"]
    widths = page.locator(".fill").evaluate_all("els => els.map(e => e.style.width)")
    assert [float(w.rstrip("%")) for w in widths] == pytest.approx([90, 75, 60, 45], abs=0.5)
    assert "Load and baseline" in text and "How the figures are derived" in text
    assert "at the configured draft cost" in text
    # the speed-up and the margin over the last minutes (a point each, or a line once the
    # history spans two 15 s steps)
    assert page.locator("svg").count() == 2
    assert page.locator("svg polyline, svg circle").count() >= 2
    page.goto(base + "/", wait_until="load")
    page.locator("a.name", has_text="vllm-down").click()
    page.wait_for_load_state("load")
    events = page.locator("#events + *").inner_text()
    assert "error: cannot connect" in events


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_status_and_target_pages_in_chromium(tmp_path: Path, width: int, height: int) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run ./dev.sh provision debian")
    from playwright.sync_api import sync_playwright

    good = manual_target("good", PageKind.VLLM, chain_length=4, model="llama-3.1-70b")
    bad = manual_target("bad", PageKind.VLLM, chain_length=4, model="mistral-large")
    hostile = manual_target("hostile", PageKind.VLLM, chain_length=3,
                            model='<img src=x onerror="window.__pwned=1">')  # fmt: skip
    errors: list[str] = []
    with running([good, bad, hostile]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            CONFIG.format(
                good=engines.url("good"),
                bad=engines.url("bad"),
                hostile=engines.url("hostile"),
                long_path="a-long-path-without-breaks-" + "p" * 200,
            )
        )
        with daemon(cfg, tmp_path) as d:
            for n in range(1, 6):
                _step(good, n, (0.9, 0.75, 0.6, 0.45))
                _step(bad, n, (0.3, 0.08, 0.02, 0.005))
                _step(hostile, n, (0.7, 0.4, 0.2))
                time.sleep(0.6)
            d.wait_for(
                lambda: d.metrics().value("specmon_alpha_ratio", target="vllm-losing", window="30s")
            )
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": width, "height": height})
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on(
                    "console", lambda msg: errors.append(msg.text) if msg.type == "error" else None
                )
                _check_index(page, d.base)
                _check_target_page(page, d.base)
                browser.close()
    assert not errors, errors
