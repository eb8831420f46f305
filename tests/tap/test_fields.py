"""Each engine's per-request speculation fields, read from responses captured from real
servers (vLLM 0.32.0, llama.cpp b11434: tests/fixtures/pages) or written from the engines'
source (TensorRT-LLM, SGLang), and what a broken response gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmon.tap.fields import Figures, Unparsed, figures_from

PAGES = Path(__file__).parent.parent / "fixtures" / "pages"


def _load(name: str) -> Any:
    return json.loads((PAGES / name).read_text("utf-8"))


def test_vllm_captured_response() -> None:
    """vLLM 0.32.0 with --per-request-spec-decode-metrics summary (captured)."""
    got = figures_from([_load("vllm-chat-completion-spec-metrics.json")])
    assert got == Figures(
        engine="vllm",
        draft_tokens=3,
        accepted_tokens=0,
        steps=1,
        completion_tokens=64,
        prompt_tokens=36,
        model="tiny-llama",
    )


def test_vllm_without_the_flag_has_no_fields() -> None:
    assert figures_from([_load("vllm-chat-completion.json")]) is Unparsed.NO_FIELDS


def test_llamacpp_captured_response() -> None:
    got = figures_from([_load("llamacpp-chat-completion.json")])
    assert isinstance(got, Figures)
    assert (got.engine, got.draft_tokens, got.accepted_tokens, got.steps) == (
        "llamacpp", 170, 18, None,
    )  # fmt: skip
    assert (got.completion_tokens, got.prompt_tokens, got.model) == (64, 105, "tiny-llama")


def test_llamacpp_accepted_is_clamped_to_predicted() -> None:
    """Copies of the scheme over-count when a stop cuts a round: accepted <= predicted_n."""
    doc = {"timings": {"predicted_n": 5, "draft_n": 12, "draft_n_accepted": 9}}
    got = figures_from([doc])
    assert isinstance(got, Figures) and got.accepted_tokens == 5 and got.draft_tokens == 12


def test_llamacpp_without_drafts_counts_a_request_with_none() -> None:
    got = figures_from([{"timings": {"predicted_n": 40, "prompt_n": 7}}])
    assert isinstance(got, Figures)
    assert (got.draft_tokens, got.accepted_tokens, got.acceptance) == (0, 0, None)


def test_trtllm_choices_are_summed() -> None:
    spec = {"total_draft_tokens": 30, "total_accepted_draft_tokens": 12, "num_spec_steps": 10,
            "acceptance_rate": 0.4, "acceptance_histogram": [2, 4, 2, 2]}  # fmt: skip
    doc = {
        "model": "Qwen3-8B",
        "choices": [
            {"index": 0, "message": {"content": "a"}, "speculative_decoding": spec},
            {"index": 1, "message": {"content": "b"}, "speculative_decoding": spec},
        ],
        "usage": {"completion_tokens": 44, "prompt_tokens": 9},
    }
    got = figures_from([doc])
    assert got == Figures("trtllm", 60, 24, 20, 44, 9, "Qwen3-8B")


@pytest.mark.parametrize(
    "doc",
    [
        {"text": "x", "meta_info": {"completion_tokens": 12, "prompt_tokens": 3,
                                    "spec_verify_ct": 3, "spec_num_correct_drafts": 9,
                                    "spec_num_proposed_drafts": 24}},
        {"choices": [{"message": {}, "meta_info": {"spec_verify_ct": 3,
                                                   "spec_num_correct_drafts": 9,
                                                   "spec_num_proposed_drafts": 24}}]},
        {"choices": [], "sglext": {"spec_tokens_details": {"spec_verify_ct": 3,
                                                            "spec_num_correct_drafts": 9,
                                                            "spec_num_proposed_drafts": 24}}},
    ],
)  # fmt: skip
def test_sglang_meta_info_wherever_it_is(doc: dict[str, Any]) -> None:
    got = figures_from([doc])
    assert isinstance(got, Figures)
    assert (got.engine, got.draft_tokens, got.accepted_tokens, got.steps) == ("sglang", 24, 9, 3)


@pytest.mark.parametrize(
    "spec",
    [
        {"num_draft_tokens": 3, "num_accepted_draft_tokens": 4, "num_spec_steps": 1},
        {"num_draft_tokens": -1, "num_accepted_draft_tokens": 0, "num_spec_steps": 1},
        {"num_draft_tokens": "3", "num_accepted_draft_tokens": 0, "num_spec_steps": 1},
        {"num_draft_tokens": 3.5, "num_accepted_draft_tokens": 0, "num_spec_steps": 1},
        {"num_draft_tokens": True, "num_accepted_draft_tokens": 0, "num_spec_steps": 1},
        {"num_draft_tokens": 2**60, "num_accepted_draft_tokens": 0, "num_spec_steps": 1},
        {"num_draft_tokens": 6, "num_accepted_draft_tokens": 1, "num_spec_steps": 0},
        {"num_accepted_draft_tokens": 0},
    ],
)
def test_impossible_fields_are_malformed(spec: dict[str, Any]) -> None:
    assert figures_from([{"metrics": {"speculative_decoding": spec}}]) is Unparsed.MALFORMED


def test_null_object_is_no_fields() -> None:
    """vLLM gives null for n > 1."""
    assert figures_from([{"metrics": {"speculative_decoding": None}}]) is Unparsed.NO_FIELDS


def test_a_stream_usage_chunk_follows_the_last_choice() -> None:
    """Newest first: the usage chunk (no choices) carries the fields and the usage; the
    model comes from it too."""
    usage_chunk = {
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 20},
        "metrics": {"speculative_decoding": {"num_draft_tokens": 9,
                                             "num_accepted_draft_tokens": 6,
                                             "num_spec_steps": 3}},
    }  # fmt: skip
    last_choice = {
        "model": "m",
        "choices": [{"delta": {"content": "x"}, "finish_reason": "length"}],
    }
    got = figures_from([usage_chunk, last_choice])
    assert got == Figures("vllm", 9, 6, 3, 20, 5, "m")


def test_usage_from_an_older_document_when_the_newest_lacks_it() -> None:
    """llama.cpp's last chunk has timings; a later usage-only chunk comes first."""
    got = figures_from(
        [
            {"choices": [], "usage": {"completion_tokens": 30, "prompt_tokens": 4}},
            {"model": "tiny", "timings": {"predicted_n": 30, "draft_n": 40,
                                          "draft_n_accepted": 10}},
        ]
    )  # fmt: skip
    assert got == Figures("llamacpp", 40, 10, None, 30, 4, "tiny")


def test_non_mapping_documents_are_skipped() -> None:
    assert figures_from([None, 3, "x", []]) is Unparsed.NO_FIELDS


def test_llamacpp_prompt_tokens_count_the_cached_ones() -> None:
    """Captured from llama-server b11434: a repeated prompt processes 1 token and reuses 68."""
    doc = {"timings": {"cache_n": 68, "prompt_n": 1, "predicted_n": 20, "draft_n": 38,
                       "draft_n_accepted": 8}}  # fmt: skip
    got = figures_from([doc])
    assert isinstance(got, Figures) and got.prompt_tokens == 69
