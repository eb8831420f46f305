"""Hostile or buggy engine pages, in-process: each hostile case through the same path the
daemon takes (page text -> read_page -> TargetState -> collector -> prometheus_client's
parser). A bad page must never break another target's series, never export an impossible
figure, and never cost work proportional to what the page claims."""

from __future__ import annotations

import math

from specmon.engines import read_page
from tests.support.inprocess import Fleet, assert_sane

VLLM = (
    'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{m}"}} {d}\n'
    'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{m}"}} {t}\n'
    'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{m}"}} {a}\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{m}",position="0"}} {p0}\n'
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{m}",position="1"}} {p1}\n'
)


def vllm(m: str = "good", d: float = 100, p0: float = 70, p1: float = 40, **kw: float) -> str:
    t = kw.get("t", 2 * d)
    a = kw.get("a", p0 + p1)
    return VLLM.format(m=m, d=d, t=t, a=a, p0=p0, p1=p1)


def healthy_steps(fleet: Fleet, start: float, steps: int) -> None:
    for i in range(steps):
        n = 100 * (i + 1)
        fleet.feed("healthy", vllm("h", d=n, p0=0.7 * n, p1=0.4 * n), start + 5 * i)


def test_counters_at_1e308_and_back_never_break_metrics_for_anyone() -> None:
    """Counters jumping 1e308, 0, 1e308, 0, 1e308, then steady made /metrics answer
    HTTP 500 for every target, permanently (OverflowError converting exact integer sums)."""
    fleet = Fleet("bad", "healthy")
    values = [1e308, 0, 1e308, 0, 1e308, 200, 300, 400]
    for i, v in enumerate(values):
        fleet.feed("bad", vllm("b", d=v, p0=0.5 * v, p1=0.2 * v, t=v), 5.0 * i)
    healthy_steps(fleet, 0.0, len(values))
    m = fleet.export()  # raised OverflowError before
    assert_sane(m)
    assert m.value("specmon_window_drafts", target="healthy", window="1m") == 700
    assert m.value("specmon_up", target="bad") == 1.0


def test_a_huge_position_costs_nothing_and_exports_nothing() -> None:
    """Position="999999" made per-scrape work and memory grow with the position
    number (2.45 GB, 30-65 s stalls)."""
    text = vllm("b") + (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="b",'
        'position="999999"} 1\n'
    )
    reading = read_page(text)
    assert reading.models == ()
    [rejection] = reading.rejected
    assert rejection.reason == "position_limit"
    fleet = Fleet("bad")
    fleet.feed("bad", text, 0.0)
    fleet.feed("bad", text, 5.0)
    m = fleet.export()
    assert m.series("specmon_position_survival_ratio") == {}
    # 65 positions (one more than the default limit of 64) is refused too, 64 is accepted.
    per_pos = "".join(
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="k",'
        f'position="{i}"}} 0\n'
        for i in range(65)
    )
    head = vllm("k").split("vllm:spec_decode_num_accepted_tokens_per_pos_total")[0]
    assert read_page(head + per_pos).rejected[0].reason == "position_limit"
    assert read_page(head + per_pos.rsplit("vllm:", 1)[0]).models[0].counters is not None


def test_per_position_counts_above_drafts_or_accepted_above_drafted_are_refused() -> None:
    """Survival 5.0, acceptance ratio 100, mean length 301, expected speed-up 231.5
    were exported as valid."""
    fleet = Fleet("bad", "healthy")
    fleet.feed("bad", vllm("b", d=10, p0=5, p1=2, t=20), 0.0)
    fleet.feed("bad", vllm("b", d=20, p0=105, p1=52, t=22), 5.0)  # p0 above drafts
    fleet.feed("bad", vllm("b", d=30, p0=110, p1=55, a=3010, t=30), 10.0)  # accepted >> drafted
    healthy_steps(fleet, 0.0, 3)
    m = fleet.export()
    assert_sane(m)
    assert m.series("specmon_draft_acceptance_ratio", target="bad") == {}
    reasons = {r["reason"] for r in fleet.api("bad")["rejected"]}
    assert reasons == {"position_above_drafts"}
    assert "reading_rejected" in fleet.events["bad"]


def test_one_position_series_going_backwards_is_not_a_restart() -> None:
    """One per-position series going backwards counted as an engine restart and
    exported survival 2.35-2.65."""
    fleet = Fleet("bad")
    fleet.feed("bad", vllm("b", d=1000, p0=700, p1=400), 0.0)
    fleet.feed("bad", vllm("b", d=1100, p0=770, p1=440), 5.0)
    fleet.feed("bad", vllm("b", d=1200, p0=840, p1=10), 10.0)  # p1 went backwards alone
    fleet.feed("bad", vllm("b", d=1300, p0=910, p1=520), 15.0)
    m = fleet.export()
    assert_sane(m)
    assert m.value("specmon_engine_resets_total", target="bad") == 0
    assert "counter_reset" not in fleet.events["bad"]
    # The window spans the good readings: 300 drafts, survival at 1 = 210 / 300.
    assert m.value("specmon_window_drafts", target="bad", window="1m") == 300
    assert (
        m.value("specmon_position_survival_ratio", target="bad", window="1m", position="1") == 0.7
    )


def test_exact_duplicate_series_are_refused_not_summed() -> None:
    """Exact duplicate series were summed (survival 0.233 instead of 0.7) with 0
    malformed lines."""
    text = vllm("b") + vllm("b")
    reading = read_page(text)
    assert reading.models == ()
    assert [r.reason for r in reading.rejected] == ["duplicate_series"]
    assert reading.malformed > 0
    # A duplicate of one model leaves the page's other model standing.
    mixed = read_page(vllm("b") + vllm("b") + vllm("good"))
    assert [m.model for m in mixed.models] == ["good"]


def test_gauges_at_1e308_and_bad_requests_running_are_refused() -> None:
    """SGLang spec_accept_length or vLLM V0 efficiency at 1e308 exported a +Inf
    speed-up; requests_running NaN, -Inf or -5 was exported as is."""
    sglang = read_page('sglang:spec_accept_length{model_name="s"} 1e308\n')
    assert sglang.models == () and sglang.rejected[0].reason == "gauge_out_of_range"
    v0 = read_page(
        'vllm:spec_decode_draft_acceptance_rate{model_name="o"} 0.5\n'
        'vllm:spec_decode_efficiency{model_name="o"} 1e308\n'
    )
    assert v0.models == () and v0.rejected[0].reason == "gauge_out_of_range"
    for bad in ("NaN", "-Inf", "-5"):
        text = vllm("b") + f'vllm:num_requests_running{{engine="0",model_name="b"}} {bad}\n'
        reading = read_page(text)
        [model] = reading.models
        assert model.context.requests_running is None
        assert reading.rejected[0].whole_model is False
        fleet = Fleet("t")
        fleet.feed("t", text, 0.0)
        assert fleet.export().series("specmon_requests_running") == {}


def test_nan_or_negative_counters_say_why_and_keep_the_good_model() -> None:
    """NaN or negative spec counters showed "speculation is off, or this build is
    too old", the real reason was never logged, and one bad model dropped the good one."""
    fleet = Fleet("t")
    for i, bad in enumerate((math.nan, -3.0)):
        text = vllm("good", d=100 * (i + 1), p0=70 * (i + 1), p1=40 * (i + 1)) + vllm("b", d=bad)
        fleet.feed("t", text, 5.0 * i)
    m = fleet.export()
    assert m.value("specmon_window_drafts", target="t", model="good", window="1m") == 100
    api = fleet.api("t")
    assert api["message"] is None  # speculation is on: the good model shows it
    assert {r["reason"] for r in api["rejected"]} == {"negative"}
    only_bad = read_page(vllm("b", d=float("nan")))
    assert only_bad.message is not None
    assert "rejected" in only_bad.message and "speculation is off" not in only_bad.message


def test_a_huge_line_is_refused_before_any_regular_expression() -> None:
    """A 10 MB label on an unrelated first line blocked the event loop 1.5-1.8 s
    per scrape and took 1.2 GB transiently (a regex over the whole line before any length
    check). The line is now refused by its length alone."""
    text = 'unrelated{x="' + "a" * 10_000_000 + '"} 1\n' + vllm("good")
    reading = read_page(text)
    assert [m.model for m in reading.models] == ["good"]
    assert reading.problems[0].reason == "line longer than 65536 characters"
    assert len(reading.problems[0].line) < 200  # the echo is cut too


def test_label_length_and_model_count_are_capped() -> None:
    """A 2.4 MB model name made /metrics 81.6 MB; 20,000 models made it 31.6 MB."""
    long_name = "m" * 20_000
    reading = read_page(vllm(long_name))
    assert reading.models == () and reading.rejected[0].reason == "label_too_long"
    assert len(reading.rejected[0].model) < 100
    many = "".join(vllm(f"m{i:05d}") for i in range(150))
    reading = read_page(many)
    assert len(reading.models) == 100
    assert {r.reason for r in reading.rejected} == {"model_limit"}
    assert len(reading.rejected) == 50
