"""What the tap keeps of a response (bounded) and the documents it finds in it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from specmon.tap.body import MAX_EVENTS, Keeper, documents
from specmon.tap.fields import Figures, Unparsed, figures_from

SPEC = {"num_draft_tokens": 12, "num_accepted_draft_tokens": 7, "num_spec_steps": 4}


def _feed(keeper: Keeper, data: bytes, size: int) -> None:
    for i in range(0, len(data), size):
        keeper.feed(data[i : i + size])


def _sse(*docs: Any) -> bytes:
    return (
        b"".join(b"data: " + json.dumps(d).encode() + b"\n\n" for d in docs) + b"data: [DONE]\n\n"
    )


@given(st.binary(max_size=5000), st.integers(1, 700), st.booleans())
def test_whole_when_small_and_bounded_when_large(data: bytes, chunk: int, stream: bool) -> None:
    limit = 1024
    keeper = Keeper(limit=limit, stream=stream)
    _feed(keeper, data, chunk)
    assert keeper.total == len(data)
    kept = keeper.head() + keeper.tail()
    # Never more than the head's limit plus the tail's limit and one chunk.
    assert len(kept) <= (0 if stream else limit) + limit + chunk
    if keeper.whole:
        assert kept == data
    else:
        assert data.endswith(keeper.tail()) and data.startswith(keeper.head())
    if len(data) <= limit:
        assert keeper.whole


def test_a_stream_gives_its_last_events_newest_first() -> None:
    chunks = [{"choices": [{"delta": {"content": str(i)}}]} for i in range(50)]
    usage = {"choices": [], "usage": {"completion_tokens": 50, "prompt_tokens": 2},
             "metrics": {"speculative_decoding": SPEC}}  # fmt: skip
    keeper = Keeper(limit=4096, stream=True)
    _feed(keeper, _sse(*chunks, usage), 37)
    found = documents(keeper, stream=True)
    assert not isinstance(found, Unparsed)
    docs = list(found)
    assert docs[0] == usage and docs[1:] == chunks[::-1][: MAX_EVENTS - 1]
    got = figures_from(docs)
    assert isinstance(got, Figures) and (got.draft_tokens, got.accepted_tokens) == (12, 7)


def test_a_stream_whose_last_event_is_larger_than_what_is_kept_is_too_large() -> None:
    big = {"choices": [], "metrics": {"speculative_decoding": {**SPEC, "pad": "x" * 10_000}}}
    keeper = Keeper(limit=4096, stream=True)
    _feed(keeper, _sse({"choices": []}, big), 512)
    assert documents(keeper, stream=True) is Unparsed.TOO_LARGE


def test_a_malformed_final_chunk_is_malformed() -> None:
    keeper = Keeper(limit=4096, stream=True)
    keeper.feed(b'data: {"choices": [], "metrics": {"speculative_decoding": {"num_dr\n\n')
    assert documents(keeper, stream=True) is Unparsed.MALFORMED


def test_a_body_that_is_not_json_is_malformed() -> None:
    keeper = Keeper(limit=4096, stream=False)
    keeper.feed(b"<html>oops</html>")
    assert documents(keeper, stream=False) is Unparsed.MALFORMED


def test_a_large_body_is_read_by_its_root_keys() -> None:
    """A 3 MB completion: the fields after the content (vLLM's metrics, llama.cpp's timings)
    and the model before it are found in the kept head and tail."""
    content = 'x \\"timings\\": {\\"draft_n\\": 999} ' * 70_000  # content quoting the key
    body = (
        '{"id":"a","model":"tiny","choices":[{"message":{"content":"' + content + '"}}],'
        '"usage":{"completion_tokens":3000,"prompt_tokens":5},'
        '"timings":{"predicted_n":3000,"draft_n":4000,"draft_n_accepted":2500}}'
    ).encode()
    assert len(body) > 2_000_000
    keeper = Keeper(limit=65536, stream=False)
    _feed(keeper, body, 65536)
    assert not keeper.whole
    docs = documents(keeper, stream=False)
    assert figures_from(docs) == Figures("llamacpp", 4000, 2500, None, 3000, 5, "tiny")


def test_a_large_body_without_fields_in_what_was_kept_is_too_large() -> None:
    body = b'{"choices":[{"message":{"content":"' + b"y" * 300_000 + b'"}}]}'
    keeper = Keeper(limit=65536, stream=False)
    _feed(keeper, body, 10_000)
    assert documents(keeper, stream=False) is Unparsed.TOO_LARGE
