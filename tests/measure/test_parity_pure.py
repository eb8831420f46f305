"""The pure parts of measure's load levels, streaming, datasets and synthetic prompts:
levels refused or flagged, Poisson schedules, a captured llama.cpp stream read back, chat
JSONL with its errors, the calibration fit, TTFT and ITL percentiles."""

from __future__ import annotations

import itertools
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from specmon.measure.analysis import busy_concurrency
from specmon.measure.dataset import DatasetError, parse_dataset
from specmon.measure.endpoints import ChatAnswer
from specmon.measure.levels import (
    AUTO_PER_LEVEL,
    HELD_SHARE,
    Held,
    LoadLevel,
    held_level,
    poisson_arrivals,
    repeats_at,
    too_few_requests,
)
from specmon.measure.results import Outcome
from specmon.measure.stream import MAX_LINE, StreamError, StreamReader
from specmon.measure.synthetic import fit, synthetic_text, words_for
from specmon.measure.timing import itl_of, timing_of, timing_ratio

PAGES = Path(__file__).parents[1] / "fixtures" / "pages"
STREAM = PAGES / "llamacpp-chat-stream.sse"


# --------------------------------------------------------------------------- levels


def test_a_level_above_the_requests_sent_is_refused_naming_the_fix() -> None:
    levels = [LoadLevel(concurrency=c) for c in (1, 4, 8, 16)] + [LoadLevel(rate=50.0)]
    builtins = [("copy", 4), ("closed", 4), ("open", 4)]
    problems = too_few_requests(levels, builtins, repeats=1)
    # 8 and 16 for each workload; 4 in flight of 4 requests is possible; rates are not refused.
    assert len(problems) == 6
    assert problems[-1].startswith("--concurrency 16: workload 'open' sends 4 request(s)")
    assert "--repeats 4" in problems[-1] and "--repeats auto" in problems[-1]
    assert "at least 16 prompts" in problems[-1]
    assert too_few_requests(levels, builtins, repeats=4) == []
    assert too_few_requests(levels, builtins, repeats=None) == []
    assert too_few_requests(levels, [("big", 16)], repeats=1) == []


def test_auto_repeats_scale_with_the_level() -> None:
    assert repeats_at(LoadLevel(concurrency=1), prompts=4, repeats=None) == 2
    assert repeats_at(LoadLevel(concurrency=16), prompts=4, repeats=None) == AUTO_PER_LEVEL * 4
    assert repeats_at(LoadLevel(concurrency=16), prompts=200, repeats=None) == 1
    assert repeats_at(LoadLevel(rate=2.0), prompts=4, repeats=None) == 5  # 10 s of arrivals
    assert repeats_at(LoadLevel(concurrency=16), prompts=4, repeats=3) == 3
    with pytest.raises(ValueError, match="not both"):
        LoadLevel(concurrency=1, rate=1.0)
    with pytest.raises(ValueError, match="not both"):
        LoadLevel()


def test_a_level_is_held_from_80_percent_of_it_on_either_side() -> None:
    assert held_level(16, engine=(15.5, 13.0), client=(1.0, 1.0)).ok  # 81 %: engine first
    low = held_level(16, engine=(15.5, 12.7), client=(16.0, 16.0))
    assert not low.ok and low.source == "engine counters"
    reason = low.reason()
    assert reason is not None and "12.70" in reason and f"{HELD_SHARE:.0%}" in reason
    client = held_level(8, engine=(7.9, None), client=(7.0, 5.0))
    assert client.source == "client" and not client.ok
    assert Held(4, None, None, "client").ok  # nothing measured: not flagged
    assert held_level(1, engine=(1.0, 1.0), client=(None, None)).as_dict()["held"] is True


def _outcome(sent: float, latency: float) -> Outcome:
    return Outcome("w", 0, 0, latency, sent_at=sent)


def test_busy_concurrency_counts_only_the_time_something_was_in_flight() -> None:
    # Two at once for 1 s, a 1 s gap, one for 1 s: 3 request-seconds over 2 busy seconds.
    outcomes = [_outcome(0.0, 1.0), _outcome(0.0, 1.0), _outcome(2.0, 1.0)]
    assert busy_concurrency(outcomes) == pytest.approx(1.5)
    # One after another with gaps: always 1, as an engine counts it.
    assert busy_concurrency([_outcome(i * 1.5, 1.0) for i in range(4)]) == pytest.approx(1.0)
    assert busy_concurrency([Outcome("w", 0, 0, 1.0)]) is None


def test_poisson_arrivals_are_deterministic_with_the_rate_s_mean_gap() -> None:
    times = poisson_arrivals(4.0, 4000, seed=7)
    assert times == poisson_arrivals(4.0, 4000, seed=7)
    assert times != poisson_arrivals(4.0, 4000, seed=8)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert times[0] == 0.0 and all(g >= 0 for g in gaps)
    # Exponential gaps: mean 1/rate and a standard deviation equal to it (within 5 %).
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.05)
    with pytest.raises(ValueError, match="finite and > 0"):
        poisson_arrivals(0.0, 3, seed=1)
    with pytest.raises(ValueError, match="finite and > 0"):
        poisson_arrivals(math.inf, 3, seed=1)


# --------------------------------------------------------------------------- streams


def _read(data: bytes, *, step: int) -> StreamReader:
    reader = StreamReader()
    for i in range(0, len(data), step):
        reader.feed(data[i : i + step], at=float(i))
        if reader.done:
            break
    return reader


@pytest.mark.parametrize("step", [1, 7, 100, 1 << 20])
def test_a_captured_llamacpp_stream_reads_back_whatever_the_chunking(step: int) -> None:
    """A real llama-server b11434's streamed answer (tests/fixtures/pages/README.md): the text
    is every delta joined, usage and timings from its last chunk, the first and last content
    chunks' arrival times, however the bytes were split in transit."""
    data = STREAM.read_bytes()
    events: list[dict[str, Any]] = []
    ends: list[int] = []  # where each content chunk's line ends
    at = 0
    for line in data.split(b"\n"):
        at += len(line) + 1
        if line.startswith(b"data: {"):
            events.append(json.loads(line[5:]))
            choices = events[-1].get("choices")
            if choices and choices[0]["delta"].get("content"):
                ends.append(at - 1)
    text = "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices")
    )
    (last,) = [e for e in events if "usage" in e]
    reader = _read(data, step=step)
    assert reader.done
    result = reader.result()
    answer = result.answer
    assert answer.text == text and text
    assert answer.completion_tokens == last["usage"]["completion_tokens"]
    assert answer.prompt_tokens == last["usage"]["prompt_tokens"]
    assert (answer.draft_tokens, answer.draft_accepted) == (
        last["timings"]["draft_n"], last["timings"]["draft_n_accepted"]
    )  # fmt: skip
    assert answer.finish_reason == "length" and answer.fingerprint
    assert result.content_chunks == len(ends) > 1
    if step == 1:  # a byte at a time, timed by its offset: a chunk counts once its line ends
        assert (result.first_token, result.last_token) == (ends[0], ends[-1])


def test_a_stream_that_breaks_the_rules_is_refused() -> None:
    with pytest.raises(StreamError, match="not JSON"):
        StreamReader().feed(b"data: {oops\n", at=0.0)
    with pytest.raises(StreamError, match="longer than"):
        StreamReader().feed(b"data: " + b"x" * (MAX_LINE + 1), at=0.0)
    with pytest.raises(StreamError, match="error: overloaded"):
        StreamReader().feed(b'data: {"error": {"message": "overloaded"}}\n', at=0.0)
    reader = StreamReader()
    reader.feed(b": keep-alive\n\ndata: [DONE]\n\n", at=0.0)
    with pytest.raises(StreamError, match="no chat completion chunk"):
        reader.result()
    with pytest.raises(StreamError, match="not a string"):
        StreamReader().feed(b'data: {"choices": [{"delta": {"content": 5}}]}\n', at=0.0)


# --------------------------------------------------------------------------- datasets


def test_a_chat_jsonl_dataset_drops_reference_answers_and_names_bad_lines() -> None:
    text = "\n".join(
        [
            json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                     {"role": "user", "content": "Hi"},
                                     {"role": "assistant", "content": "Hello!"}]}),
            "",
            json.dumps({"id": 7, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a "},
                                             {"type": "text", "text": "b"}]}]}),
        ]
    )  # fmt: skip
    dataset = parse_dataset(text, name="chat", source="chat.jsonl")
    assert dataset.conversations == (
        (("system", "Be brief."), ("user", "Hi")),
        (("user", "a b"),),
    )
    assert dataset.answers_dropped == 1
    bad = {
        "not valid JSON": "{",
        'needs a non-empty list "messages"': '{"messages": []}',
        "role 'tool'": '{"messages": [{"role": "tool", "content": "x"}]}',
        "must end with a user message": '{"messages": [{"role": "system", "content": "x"}]}',
        "only text content parts": (
            '{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}'
        ),
        "the last user message is empty": '{"messages": [{"role": "user", "content": " "}]}',
    }
    for message, line in bad.items():
        with pytest.raises(DatasetError, match=message) as caught:
            parse_dataset("\n" + line, name="d", source="d.jsonl")
        assert str(caught.value).startswith("d.jsonl:2: ")
    with pytest.raises(DatasetError, match="no conversations"):
        parse_dataset("\n\n", name="d")


def test_the_shipped_20_conversation_dataset_parses() -> None:
    path = Path(__file__).parents[1] / "fixtures" / "measure" / "chat-20.jsonl"
    dataset = parse_dataset(path.read_text(), name="chat-20")
    assert len(dataset.conversations) == 20
    assert any(len(c) > 2 for c in dataset.conversations), "some multi-turn"


# --------------------------------------------------------------------------- synthetic


def test_the_calibration_fit_and_word_counts() -> None:
    overhead, per_word = fit([(16, 30 + 16 * 2), (128, 30 + 128 * 2)])
    assert (overhead, per_word) == pytest.approx((30.0, 2.0))
    assert words_for(256, overhead=overhead, per_word=per_word) == 113
    assert words_for(10, overhead=overhead, per_word=per_word) == 1
    with pytest.raises(ValueError, match="does not count"):
        fit([(16, 40), (128, 40)])
    text = synthetic_text(50, seed=3)
    assert len(text.split()) == 50 and text == synthetic_text(50, seed=3)
    assert text != synthetic_text(50, seed=4)


# --------------------------------------------------------------------------- timing


def _timed(first: float | None, last: float | None, tokens: int | None) -> Outcome:
    answer = ChatAnswer("x", tokens, None, None, "length", None)
    return Outcome("w", 0, 0, (last or 0.0) + 0.01, answer, first_token=first, last_token=last)


def test_itl_is_the_time_after_the_first_token_per_token() -> None:
    assert itl_of(_timed(0.1, 1.1, 11)) == pytest.approx(0.1)
    assert itl_of(_timed(0.1, 0.1, 1)) is None  # one token
    assert itl_of(_timed(0.1, 1.1, None)) is None  # no usage: never estimated
    assert itl_of(_timed(None, None, 11)) is None  # not streamed
    outcomes = [_timed(0.01 * i, 0.01 * i + 0.5, 51) for i in range(1, 101)]
    timing = timing_of(outcomes)
    assert timing.streamed == timing.with_itl == 100
    assert timing.ttft[50] == pytest.approx(0.505) and timing.ttft[99] == pytest.approx(0.9901)
    assert timing.itl[90] == pytest.approx(0.01)
    faster = timing_of([_timed(0.02 * i, 0.02 * i + 0.25, 51) for i in range(1, 101)])
    ratios = timing_ratio(faster, timing)
    assert ratios["ttft"]["p50"] == pytest.approx(2.0) and ratios["itl"]["p50"] == pytest.approx(
        0.5
    )
