"""A draft-less llama-server's first epoch on every surface (specmon.state.epochs): not yet
known to speculate at first sight (its draft counters are published at 0), then settled in
place without speculation; never a speculating epoch closed by ``speculation_off``."""

from __future__ import annotations

import json
from typing import Any

from specmon.daemon.collector import target_samples
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.state.epochs import OFF_SCRAPES
from specmon.surfaces.api import views_json
from specmon.surfaces.target import render_target
from tests.support.captured import DRAFTLESS, PAGES
from tests.support.views import feed_one, state


def _surfaces(target: TargetState) -> tuple[set[tuple[str | None, ...]], list[Any], str]:
    view = target.view
    info = {
        tuple(s.values[3:5])
        for s in target_samples(view)
        if s.family.name == "specmon_config_epoch_info"
    }
    (api,) = views_json([view])
    epochs = [(e["epoch"], e["speculation"], e["reason"]) for e in api["epochs"][0]["epochs"]]
    page = render_target(view, primary_window="10s", series=(), events=(), now=0.0)
    return info, epochs, page


def test_a_draftless_llama_server_is_unknown_then_without_speculation_everywhere() -> None:
    target = state("llama-plain")
    pages = [read_page((PAGES / name).read_text()) for name in DRAFTLESS]
    feed_one(target, pages[0], 0)
    info, epochs, page = _surfaces(target)
    assert info == {("1", "unknown")}
    assert epochs == [(1, None, "first_seen")]
    assert "speculation not yet known" in page and "0 of 400 tokens" in page
    for i, reading in enumerate(pages[1:], start=1):
        feed_one(target, reading, i)
        if i < OFF_SCRAPES:
            assert _surfaces(target)[1] == [(1, None, "first_seen")], i
    info, epochs, page = _surfaces(target)
    assert info == {("1", "false")}
    assert epochs == [(1, False, "first_seen")]
    assert "without speculation" in page and "not yet known" not in page
    assert "speculation_off" not in json.dumps(views_json([target.view]))
