"""The status page in a real browser (Debian's Chromium, headless, driven by Playwright).

Set SPECMON_UPDATE_SCREENSHOTS=1 to refresh docs/images/status-page.png from this test.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from specmon.sim.pages import PageKind
from tests.support.daemon import daemon
from tests.support.fake_engines import manual_target, running, set_counters

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "images" / "status-page.png"

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
    url: http://127.0.0.1:9/metrics
"""


def _step(target: object, n: int, survival: tuple[float, ...]) -> None:
    drafts = 200 * n
    per_pos = [int(drafts * s) for s in survival]
    set_counters(target, drafts, drafts * len(survival), per_pos)  # type: ignore[arg-type]


def test_status_page_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run ./dev.sh provision debian")
    from playwright.sync_api import sync_playwright

    good = manual_target("good", PageKind.VLLM, chain_length=4, model="llama-3.1-70b")
    bad = manual_target("bad", PageKind.VLLM, chain_length=4, model="mistral-large")
    hostile = manual_target("hostile", PageKind.VLLM, chain_length=3,
                            model='<img src=x onerror="window.__pwned=1">')  # fmt: skip
    with running([good, bad, hostile]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            CONFIG.format(
                good=engines.url("good"), bad=engines.url("bad"), hostile=engines.url("hostile")
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
                browser = p.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--no-first-run"],
                )  # fmt: skip
                page = browser.new_page(viewport={"width": 1500, "height": 560})
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on(
                    "console", lambda msg: errors.append(msg.text) if msg.type == "error" else None
                )
                response = page.goto(d.base + "/", wait_until="load")
                assert response is not None and response.status == 200
                rows = page.locator("tbody tr")
                assert rows.count() == 4
                text = page.inner_text("tbody")
                for name in ("vllm-eagle", "vllm-losing", "llamacpp-<i>x</i>", "vllm-down"):
                    assert name in text  # shown as text, not interpreted as markup
                assert page.locator("tbody i").count() == 0
                assert page.evaluate("window.__pwned") is None
                assert page.locator("tbody img").count() == 0
                # state, margins, verdicts and bars
                losing = page.locator("tr", has_text="vllm-losing")
                assert losing.locator(".neg").count() == 2  # its margin and its verdict
                eagle = page.locator("tr", has_text="vllm-eagle")
                assert eagle.locator(".pos").count() == 2
                assert "configured c" in eagle.inner_text()
                widths = eagle.locator(".fill").evaluate_all("els => els.map(e => e.style.width)")
                assert [float(w.rstrip("%")) for w in widths] == pytest.approx(
                    [90, 75, 60, 45], abs=0.2
                )
                down = page.locator("tr", has_text="vllm-down")
                assert "DOWN" in down.inner_text() and "cannot connect" in down.inner_text()
                shot = tmp_path / "status-page.png"
                page.screenshot(path=str(shot), full_page=True)
                browser.close()
    assert not errors, errors
    assert shot.stat().st_size > 10_000
    if os.environ.get("SPECMON_UPDATE_SCREENSHOTS") == "1":
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, DOCS_IMAGE)
