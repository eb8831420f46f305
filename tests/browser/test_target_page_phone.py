"""A target's page fits a phone: the demo's load-aware targets (their engines, config and target
states on a simulated clock, the page rendered as the daemon renders it) in Debian's Chromium
at 390 x 844 and 1280 x 800: no horizontal overflow of the page, every number and every
header on its own line(s) without a break inside (a wide table scrolls inside its box), and
at 1280 px every table whole, with nothing to scroll.

Measured, not assumed: each text node of a numeric cell or a header is one line box when its
range has one client rectangle (``Range.getClientRects``); a number broken inside itself, as
"0.<br>80<br>8", has one per line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specmon.surfaces.target import render_target
from tests.browser.test_status_page import ARGS, CHROMIUM
from tests.support.demo_fleet import DemoFleet

pytestmark = pytest.mark.browser

#: Every text node of a numeric cell or a header that spans more than one line box.
BROKEN = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll('td.num, th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      const lines = [...range.getClientRects()].filter(r => r.width > 0).length;
      if (lines > 1) broken.push(`${cell.tagName} ${node.textContent.trim()}: ${lines} lines`);
    }
  }
  return broken;
}"""

#: Each table's box: its width, and the width of what it holds.
BOXES = """() => [...document.querySelectorAll('.scroll')].map(
  b => [b.getBoundingClientRect().right, b.clientWidth, b.scrollWidth])"""


def _pages() -> dict[str, str]:
    """The demo's load-aware targets' pages at two moments: 45 s in (buckets without
    figures, their reasons in the table) and 130 s in (a whole load cycle measured)."""
    fleet = DemoFleet(names=("vllm-loaded", "vllm-baseline", "tgi-loaded", "tgi-baseline"))
    pages = {}
    for moment in (45.0, 130.0):
        fleet.advance(moment)
        for name in ("vllm-loaded", "tgi-loaded", "vllm-baseline"):
            pages[f"{name} at {moment:g} s"] = render_target(
                fleet.states[name].view, primary_window="30s", series=(), events=(), now=moment
            )
    return pages


@pytest.mark.parametrize(("width", "height"), [(390, 844), (1280, 800)])
def test_the_target_page_fits_a_phone(tmp_path: Path, width: int, height: int) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run ./dev.sh provision debian")
    from playwright.sync_api import sync_playwright

    pages = _pages()
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": height})
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        for what, html in pages.items():
            page.set_content(html, wait_until="load")
            _check(page, what, width)
            if what == "vllm-loaded at 130 s":
                page.screenshot(path=str(tmp_path / f"vllm-loaded-{width}.png"), full_page=True)
        browser.close()
    assert not errors, errors


def _check(page: Any, what: str, width: int) -> None:
    scroll, client = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert scroll <= client, (what, scroll, client)
    assert page.locator("td.num").count() >= 10, what  # the tables are there to measure
    assert page.evaluate(BROKEN) == [], what
    boxes = page.evaluate(BOXES)
    # The windows, the load table of a target with a baseline, and the configuration epochs
    # of the target's one model (each demo target has an epoch from its first reading).
    assert len(boxes) == (2 if what.startswith("vllm-baseline") else 3), (what, boxes)
    assert page.locator("#epochs ~ .scroll").count() == 1, what
    for right, box, inside in boxes:
        assert right <= width + 0.5, (what, boxes)  # each box inside the window
        if width >= 1280:
            assert inside <= box, (what, boxes)  # on a laptop nothing to scroll
    if width < 760:
        # On a phone the windows table is wider than the screen: it scrolls in its box.
        assert boxes[0][2] > boxes[0][1], (what, boxes)
