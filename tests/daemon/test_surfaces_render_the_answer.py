"""Every surface renders the answer (specmon.answer) and computes none of its figures: one
window's answer replaced by one with odd values nobody could compute from the window's
counters, then the JSON API, /metrics, the status page, the target page and the terminal view
each checked to show exactly those values, and none of the configured-c figures the window's
report would give in their place."""

from __future__ import annotations

import dataclasses
from html import unescape

from specmon.answer import (
    Answer,
    Crossover,
    Evidence,
    PerLoad,
    ReadState,
    Standing,
    words,
)
from specmon.cli.demo import render_rows
from specmon.daemon.collector import target_samples
from specmon.daemon.target import TargetView
from specmon.surfaces.api import views_json
from specmon.surfaces.status import render_status
from specmon.surfaces.target import render_target
from tests.support.views import fleet_views

#: A crossover at 7.89 (6.54-9.87) and two loads with their own odd figures.
CROSSING = Crossover(7.89, 6.01, 13.03, 0.8765, 12.35, 1.02, 24.5, low=6.54, high=9.87)
PER_LOAD = (
    PerLoad("4", 3.0, 6.0, 4.04, 1.6543, 0.1234, 3, 1.7011),
    PerLoad("16", 12.0, 24.0, 15.97, 0.8765, 0.9876, 0, 1.0),
)
ODD = Answer(
    Evidence.TWIN, ReadState.MEASURED, 1.2345, (1.1111, 1.3579), 0.4321, 0.6543, -0.0987, 2,
    1.2468, Standing.BELOW, crossover=CROSSING, per_load=PER_LOAD, against="vllm-twin",
    concurrency=5.55, bucket="4", time_per_output_token_seconds=0.00321,
    mean_concurrency=6.66,
)  # fmt: skip


def _with(answer: Answer) -> TargetView:
    """vllm-loaded with every window's answer replaced by ``answer``."""
    view = next(v for v in fleet_views() if v.name == "vllm-loaded")
    model = view.models[0]
    windows = tuple(dataclasses.replace(w, answer=answer) for w in model.windows)
    return dataclasses.replace(view, models=(dataclasses.replace(model, windows=windows),))


def _configured_figures(view: TargetView) -> list[str]:
    """The window's own figures at the configured c, as a surface would print them."""
    report = view.models[0].windows[0].report
    assert report is not None
    out = []
    for value in (report.expected_speedup, report.best_speedup):
        assert value is not None
        out.append(f"{value:.2f}")
    assert report.breakeven_alpha is not None and report.alpha_margin is not None
    out += [f"{report.breakeven_alpha:.3f}", f"{report.alpha_margin:+.3f}"]
    return out


def test_the_api_is_the_answer() -> None:
    (document,) = views_json([_with(ODD)])
    verdict = document["models"][0]["windows"][0]["verdict"]
    assert verdict["speedup"] == 1.2345 and list(verdict["speedup_interval"]) == [1.1111, 1.3579]
    assert (verdict["basis"], verdict["state"], verdict["standing"]) == (
        "twin",
        "measured",
        "below",
    )
    assert (verdict["draft_cost"], verdict["breakeven_alpha"], verdict["alpha_margin"]) == (
        0.4321, 0.6543, -0.0987,
    )  # fmt: skip
    assert (verdict["best_chain_length"], verdict["best_speedup"]) == (2, 1.2468)
    assert verdict["crossover"]["concurrency"] == 7.89 and verdict["crossover"]["low"] == 6.54
    assert [p["speedup"] for p in verdict["per_load"]] == [1.6543, 0.8765]
    assert verdict["detail"] == words.detail(ODD) and verdict["advice"] == words.advice(ODD)


def test_metrics_are_the_answer() -> None:
    samples = {
        (s.family.name, s.values[3] if len(s.values) > 3 else None, s.values[-1]): s.value
        for s in target_samples(_with(ODD))
    }

    def one(name: str, last: str | None = None) -> float:
        found = [v for (n, w, tail), v in samples.items() if n == name and w == "1m"
                 and (last is None or tail == last)]  # fmt: skip
        assert len(found) == 1, (name, found)
        return found[0]

    assert one("specmon_verdict_speedup_ratio") == 1.2345
    assert one("specmon_verdict_speedup_lower_ratio") == 1.1111
    assert one("specmon_verdict_speedup_upper_ratio") == 1.3579
    assert one("specmon_verdict_draft_cost_ratio") == 0.4321
    assert one("specmon_verdict_breakeven_alpha_ratio") == 0.6543
    assert one("specmon_verdict_alpha_margin_ratio") == -0.0987
    assert one("specmon_best_chain_length") == 2 and one("specmon_best_speedup_ratio") == 1.2468
    assert one("specmon_realized_speedup_ratio") == 1.2345
    assert one("specmon_crossover_concurrency") == 7.89
    assert one("specmon_crossover_lower_concurrency") == 6.54
    assert one("specmon_bucket_realized_speedup_ratio", "16") == 0.8765
    assert one("specmon_bucket_best_chain_length", "4") == 3
    assert one("specmon_verdict_info", "measured") == 1.0


def test_the_pages_and_the_terminal_are_the_answer() -> None:
    view = _with(ODD)
    status = unescape(render_status([view], primary_window="1m", ready=True))
    page = unescape(render_target(view, primary_window="1m", series=(), events=(), now=0.0))
    terminal = "\n".join(render_rows([view], window="1m", color=False))
    for surface, text in (("status", status), ("target", page), ("terminal", terminal)):
        speed = "1.23×" if surface != "terminal" else "1.23x"
        assert speed in text, surface
        assert "1.11" in text and "1.36" in text, surface  # the interval
        assert "-0.099" in text and "0.654" in text, surface  # margin, break-even
        assert "at measured c 0.432" in text, surface
        assert ("7.9 (6.5" in text and "9.9)" in text) or "7.9 (6.5–9.9)" in text, surface
        for figure in _configured_figures(view):  # nothing at the configured c
            assert figure not in text, (surface, figure)
    assert "2 (1.25×)" in status and "2 (1.25×)" in page and "best k 2" in terminal
    # The figures per load, with the advice they give: a k per load, not "switch it off".
    assert "3 (1.70×)" in page and "0 (off)" in page
    assert words.advice(ODD) in page
    assert "4:3 16:0" in terminal


def test_measuring_shows_no_figure_on_any_surface() -> None:
    measuring = dataclasses.replace(
        ODD, state=ReadState.MEASURING, speedup=None, interval=None, draft_cost=None,
        breakeven_alpha=None, alpha_margin=None, best_chain_length=None, best_speedup=None,
        standing=Standing.MEASURING, bucket="16", concurrency=16.2,
        progress="2 scrape intervals (needs 3)",
    )  # fmt: skip
    view = _with(measuring)
    status = unescape(render_status([view], primary_window="1m", ready=True))
    page = unescape(render_target(view, primary_window="1m", series=(), events=(), now=0.0))
    terminal = "\n".join(render_rows([view], window="1m", color=False))
    for surface, text in (("status", status), ("target", page), ("terminal", terminal)):
        assert "measuring" in text and "n ~ 16.2 not measured yet" in text, surface
        assert "FINE" not in text and "1.23" not in text, surface
    assert "MEASURING" in status
    names = {s.family.name for s in target_samples(view)}
    assert "specmon_verdict_speedup_ratio" not in names
    assert "specmon_best_chain_length" not in names
    assert "specmon_crossover_concurrency" in names  # what was measured stays
