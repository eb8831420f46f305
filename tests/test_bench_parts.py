"""``bench load --parts``: each part of a scrape timed, and every timed function put back."""

from __future__ import annotations

import pytest

from bench import loadcost
from specmon.daemon.target import TargetState


def test_the_parts_are_timed_and_put_back(capsys: pytest.CaptureFixture[str]) -> None:
    observe, model_view = TargetState.observe, TargetState._model_view
    spec = loadcost.fleet_pages(speculation=True, scrapes=30, interval=5.0, seed=1)
    base = loadcost.fleet_pages(speculation=False, scrapes=30, interval=5.0, seed=2)
    pair = loadcost.Variant("twin pair, baseline", (("twin", None, base), ("spec", "twin", spec)))
    assert loadcost.print_parts([pair], windows=(60.0,), interval=5.0, rounds=1) == 0
    assert TargetState.observe is observe and TargetState._model_view is model_view
    assert vars(loadcost)["read_page"].__module__ == "specmon.engines"
    rows = {
        line.split("|")[1].replace("&nbsp;", "").strip(): float(line.split("|")[2])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("| ") and not line.startswith("| twin pair")
    }
    # The pair's twin compared at each of the speculating target's scrapes.
    for part in ("observe (all below)", "_answer (compare + decide)", "read_comparison"):
        assert rows[part] > 0.0, part
    assert rows["observe (all below)"] > rows["_model_view (windows, answers)"]
    assert rows["all (timed parts included)"] >= rows["observe (all below)"]
