"""Windows checked as a whole: for any sequence of pages, each valid alone, no window exports a
figure outside its physical range, through either ingest path (a page scraped directly, the
same numbers read through a Prometheus source); and llama.cpp's rounded counters past a million
drafts give position-1 survival within 2 % of the truth, or no figure.

The pages are written in each engine's own format (vLLM, llama.cpp with its 6 significant
digits, TensorRT-LLM's per-position drafted and accepted series) and read by the adapters."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import PageReading, read_page
from specmon.engines.model import RejectReason
from specmon.report import figure_out_of_range
from specmon.sim.pages import llamacpp_number
from specmon.sources.prometheus import build_instances
from tests.promsource.fake_prometheus import source_for

#: One page's counters: drafts, draft tokens, accepted per position (accepted = their sum).
Counts = tuple[int, int, tuple[int, ...]]
K = 3


def _vllm(c: Counts) -> list[tuple[str, dict[str, str], str]]:
    drafts, tokens, per_pos = c
    m = {"model_name": "m", "engine": "0"}
    out = [
        ("vllm:spec_decode_num_drafts_total", m, f"{drafts}.0"),
        ("vllm:spec_decode_num_draft_tokens_total", m, f"{tokens}.0"),
        ("vllm:spec_decode_num_accepted_tokens_total", m, f"{sum(per_pos)}.0"),
    ]
    out += [
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", {**m, "position": str(i)}, f"{a}.0")
        for i, a in enumerate(per_pos)
    ]
    return out


def _llamacpp(c: Counts) -> list[tuple[str, dict[str, str], str]]:
    drafts, tokens, per_pos = c
    out: list[tuple[str, dict[str, str], str]] = [
        ("llamacpp:spec_decode_num_drafts_total", {}, llamacpp_number(drafts)),
        ("llamacpp:spec_decode_num_draft_tokens_total", {}, llamacpp_number(tokens)),
        ("llamacpp:spec_decode_num_accepted_tokens_total", {}, llamacpp_number(sum(per_pos))),
    ]
    out += [
        ("llamacpp:spec_decode_num_accepted_tokens_per_pos_total", {"position": str(i)}, str(a))
        for i, a in enumerate(per_pos)
    ]
    return out


def _trtllm(c: Counts) -> list[tuple[str, dict[str, str], str]]:
    drafts, _, per_pos = c
    m = {"model_name": "m"}
    out = [
        ("trtllm_spec_decode_drafted_tokens_total", {**m, "token_position": str(i)}, str(drafts))
        for i in range(K)
    ]
    out += [
        ("trtllm_spec_decode_accepted_tokens_total", {**m, "token_position": str(i)}, str(a))
        for i, a in enumerate(per_pos)
    ]
    return out


def _tgi(c: Counts) -> list[tuple[str, dict[str, str], str]]:
    """TGI's histogram of tokens accepted a step: bucket le=i counts the steps that accepted
    at most i, so it is drafts less those that reached position i + 1."""
    drafts, _, per_pos = c
    deeper = (*per_pos, 0)
    name = "tgi_request_skipped_tokens"
    out = [(f"{name}_bucket", {"le": str(i)}, str(drafts - deeper[i])) for i in range(K + 1)]
    out += [
        (f"{name}_bucket", {"le": "+Inf"}, str(drafts)),
        (f"{name}_sum", {}, str(sum(per_pos))),
        (f"{name}_count", {}, str(drafts)),
    ]
    return out


def _sglang(c: Counts) -> list[tuple[str, dict[str, str], str]]:
    """SGLang's counters: verification steps (drafts), generated tokens and requests, from
    which the accepted tokens are derived (generated - steps - requests)."""
    drafts, _, per_pos = c
    requests = drafts // 10
    m = {"model_name": "q"}
    return [
        ("sglang:spec_verify_calls_total", m, str(drafts)),
        ("sglang:generation_tokens_total", m, str(sum(per_pos) + drafts + requests)),
        ("sglang:num_requests_total", m, str(requests)),
        ("sglang:spec_num_steps", {**m, "tp_rank": "0"}, str(K)),
    ]


ENGINES: dict[str, Callable[[Counts], list[tuple[str, dict[str, str], str]]]] = {
    "vllm": _vllm,
    "llamacpp": _llamacpp,
    "trtllm": _trtllm,
    "tgi": _tgi,
    "sglang": _sglang,
}


def _text(samples: list[tuple[str, dict[str, str], str]]) -> str:
    lines = []
    for name, labels, value in samples:
        body = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {value}" if body else f"{name} {value}")
    return "\n".join(lines) + "\n"


def _direct(engine: str, c: Counts, at: float) -> PageReading:
    return read_page(_text(ENGINES[engine](c)))


def _through_prometheus(engine: str, c: Counts, at: float) -> PageReading:
    """The same numbers as Prometheus's /api/v1/query would answer them, grouped into an
    instance by the Prometheus source and read by the same adapters."""
    result: list[dict[str, Any]] = [
        {"metric": {"__name__": name, "instance": "e:1", "job": engine} | labels,
         "value": [at, value]}
        for name, labels, value in ENGINES[engine](c)
    ]  # fmt: skip
    fresh = [
        {"metric": {"instance": "e:1", "specmon_freshness": which}, "value": [at, repr(at)]}
        for which in ("newest", "oldest")
    ]
    config = source_for(None, "http://prometheus.invalid", selector='{job=~".+"}')
    (instance,), _, _ = build_instances([json.loads(json.dumps(result))], fresh, config=config,
                                        at=at)  # fmt: skip
    reading = instance.reading()
    assert reading is not None, instance.error
    return reading


PATHS = {"direct": _direct, "prometheus": _through_prometheus}


@st.composite
def valid_page(draw: Any, *, big: bool) -> Counts:
    """Lifetime counters that one page may publish: drafts, 1..K tokens a draft, per-position
    counts not rising along the chain and none above the drafts."""
    drafts = draw(st.integers(0, 3_000_000 if big else 5_000))
    tokens = draw(st.integers(drafts, K * drafts))
    first = draw(st.integers(0, drafts))
    per_pos = [first]
    for _ in range(K - 1):
        per_pos.append(draw(st.integers(0, per_pos[-1])))
    # No more accepted than drafted tokens: trim the deepest positions if needed.
    while sum(per_pos) > tokens:
        deepest = max(i for i, v in enumerate(per_pos) if v > 0)
        per_pos[deepest] -= min(per_pos[deepest], sum(per_pos) - tokens)
    return drafts, tokens, tuple(per_pos)


def _check_every_window(state: TargetState) -> None:
    for model in state.view.models:
        for window in model.windows:
            report = window.report
            if report is None:
                continue
            assert figure_out_of_range(report) is None, (window.window, report)
            for pos in report.positions:
                assert pos.survival is None or 0.0 <= pos.survival <= 1.0
            k = max(report.chain_length or 0, len(report.positions))
            if report.mean_acceptance_length is not None and k:
                assert 1.0 <= report.mean_acceptance_length <= k + 1 + 1e-9
            for speedup in (report.expected_speedup, report.best_speedup):
                assert speedup is None or speedup <= k + 1 + 1e-9


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("engine", list(ENGINES))
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_window_leaves_the_physics_of_one_page(engine: str, path: str, data: Any) -> None:
    big = data.draw(st.booleans())
    pages = data.draw(st.lists(valid_page(big=big), min_size=2, max_size=8))
    state = TargetState(
        TargetConfig(name="t", url="http://127.0.0.1:1/metrics"),
        windows=(10.0, 30.0, 600.0),
        retention=610.0,
    )
    for index, counts in enumerate(pages):
        at = 1_000.0 + 5.0 * index
        state.observe(PATHS[path](engine, counts, at), mono=at, wall=at, duration=0.01)
        _check_every_window(state)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_jump_between_two_valid_pages_is_left_out_and_the_window_heals(path: str) -> None:
    """Accepted counts rising by 1,000 while drafts rise by 1: that interval is refused
    (counted), the readings stay, and the next intervals give true figures."""
    state = TargetState(
        TargetConfig(name="t", url="http://127.0.0.1:1/metrics"),
        windows=(10.0, 30.0),
        retention=40.0,
    )
    drafts, per_pos = 10_000, [2_000, 1_500, 1_000]  # every page valid alone, the jump too
    pages: list[Counts] = []
    for step in range(12):
        if step == 3:  # the jump: +1 draft, +1,000 accepted at every position
            drafts += 1
            per_pos = [p + 1_000 for p in per_pos]
        else:
            drafts += 100
            per_pos = [per_pos[0] + 90, per_pos[1] + 70, per_pos[2] + 50]
        pages.append((drafts, 3 * drafts, tuple(per_pos)))
    refused = []
    for index, counts in enumerate(pages):
        at = 1_000.0 + 5.0 * index
        state.observe(PATHS[path]("vllm", counts, at), mono=at, wall=at, duration=0.01)
        refused += [
            r for r in state.view.rejected if r.reason is RejectReason.INCONSISTENT_INTERVAL
        ]
        _check_every_window(state)
    assert len(refused) == 1
    (model,) = state.view.models
    window = model.window("10s")
    assert window is not None and window.report is not None
    assert [p.survival for p in window.report.positions] == pytest.approx([0.9, 0.7, 0.5])


def test_llamacpp_past_a_million_drafts_is_within_two_percent_or_withheld() -> None:
    """llama.cpp prints its scalar counters with 6 significant digits: past a million drafts
    the drafts counter moves in steps of 10 while the per-position counts are exact. Every
    window with enough drafts (500 at this magnitude) shows survival within 2 % of the truth;
    a window with fewer shows none, counted."""
    true_survival = 0.9
    windows = (10.0, 30.0, 120.0)
    state = TargetState(
        TargetConfig(name="t", url="http://127.0.0.1:1/metrics"),
        windows=windows,
        retention=130.0,
    )
    drafts, first = 1_234_567, int(1_234_567 * true_survival)
    withheld = shown = 0
    for step in range(40):
        at = 1_000.0 + 5.0 * step
        drafts += 37  # about 7 drafts a second: a 10 s window holds ~74 drafts
        first = int(drafts * true_survival)
        counts = (drafts, 2 * drafts, (first, first // 2))
        state.observe(_direct("llamacpp", counts, at), mono=at, wall=at, duration=0.01)
        (model,) = state.view.models
        for window in model.windows:
            if window.report is None or not window.report.positions:
                continue
            survival = window.report.positions[0].survival
            assert survival is not None
            assert abs(survival - true_survival) <= 0.02 * true_survival, (window.window, survival)
            shown += 1
        withheld += sum(1 for r in state.view.rejected if r.reason is RejectReason.IMPRECISE_WINDOW)
    assert shown > 0 and withheld > 0


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("engine", list(ENGINES))
def test_every_format_reaches_the_windows(engine: str, path: str) -> None:
    """The property above checks real windows: each engine's pages, on each path, give
    figures for a plain sequence (so the property is not vacuous)."""
    state = TargetState(
        TargetConfig(name="t", url="http://127.0.0.1:1/metrics"), windows=(60.0,), retention=70.0
    )
    for step in range(1, 4):
        counts = (1_000 * step, 3_000 * step, (800 * step, 500 * step, 200 * step))
        at = 1_000.0 + 5.0 * step
        state.observe(PATHS[path](engine, counts, at), mono=at, wall=at, duration=0.01)
    (model,) = state.view.models
    window = model.window("1m")
    assert window is not None and window.report is not None
    assert window.report.mean_acceptance_length == pytest.approx(1 + 1_500 / 1_000)
