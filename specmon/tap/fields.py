"""One response's per-request speculation fields, read from the JSON documents the engine sent.

Pure: no I/O. :mod:`specmon.tap.body` finds the documents (the final body, or the last events
of a stream, within a bounded tail); this module reads what each engine puts in them
(docs/tap.md, "What each engine gives"):

- vLLM (0.28 and later, ``--per-request-spec-decode-metrics summary``):
  ``metrics.speculative_decoding`` at the document's root (streaming: the trailing
  ``include_usage`` chunk): ``num_draft_tokens``, ``num_accepted_draft_tokens``,
  ``num_spec_steps``; ``speculative_decoding_stats`` is an early draft's name, read too;
- llama.cpp ``llama-server``: ``timings.draft_n`` and ``timings.draft_n_accepted`` (absent
  when nothing was drafted); accepted is clamped to ``timings.predicted_n`` (copies of the
  scheme over-count when a stop cuts a round); no steps;
- TensorRT-LLM (PyTorch backend, ``per_request_spec_decode_stats``): per choice
  ``speculative_decoding`` with ``total_draft_tokens``, ``total_accepted_draft_tokens``,
  ``num_spec_steps``; the choices of one response are summed;
- SGLang: ``meta_info`` (root, native ``/generate``, or per choice) or
  ``sglext.spec_tokens_details``: ``spec_num_proposed_drafts``, ``spec_num_correct_drafts``,
  ``spec_verify_ct``.

A document whose fields are present but impossible (negative, not integers, more accepted
than drafted) is ``malformed``; one without any is ``no_fields``. Nothing here raises on
input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from specmon.records import record

__all__ = ["MAX_COUNT", "Figures", "Unparsed", "figures_from"]

#: No request drafts more tokens than this (2^53: the last integer a double holds exactly).
MAX_COUNT = 2**53


class Unparsed(StrEnum):
    """Why a generation response gave no figures: the ``reason`` label of
    ``specmon_tap_unparsed_responses_total`` (a closed set)."""

    #: A complete response without per-request speculation fields (vLLM without
    #: ``--per-request-spec-decode-metrics``, a stream without ``include_usage``, ``n > 1``).
    NO_FIELDS = "no_fields"
    #: Fields present but impossible (negative, not integers, more accepted than drafted), or
    #: the final document is not JSON.
    MALFORMED = "malformed"
    #: The response ended early: the client went away, the upstream reset or timed out.
    INCOMPLETE = "incomplete"
    #: The final document did not fit in the bytes the tap keeps (``max_parse_bytes``).
    TOO_LARGE = "too_large"
    #: A compressed body (``Content-Encoding``): passed through, not read.
    ENCODED = "encoded"


@record
class Figures:
    """One response's speculation figures."""

    #: Which engine's fields they came from: vllm, llamacpp, trtllm, sglang.
    engine: str
    draft_tokens: int
    accepted_tokens: int
    #: Verification steps that carried a draft; None when the engine gives none (llama.cpp).
    steps: int | None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    #: The served model (or LoRA adapter) the response names.
    model: str | None = None

    @property
    def acceptance(self) -> float | None:
        """Accepted over drafted tokens for this response; None when nothing was drafted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None


class _Bad(ValueError):
    """A field that cannot be used: the document is malformed."""


def _count(value: Any) -> int:
    """A count: a non-negative integer (a float with an integral value is accepted)."""
    if isinstance(value, bool):
        raise _Bad("a count is not a boolean")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        raise _Bad(f"a count must be an integer, not {type(value).__name__}")
    if not 0 <= number <= MAX_COUNT:
        raise _Bad("a count out of range")
    return number


def _optional_count(mapping: Mapping[str, Any], key: str) -> int | None:
    value = mapping.get(key)
    return None if value is None else _count(value)


def _checked(
    engine: str, drafted: int, accepted: int, steps: int | None
) -> tuple[str, int, int, int | None]:
    if accepted > drafted:
        raise _Bad("more accepted than drafted tokens")
    if steps is not None and drafted > 0 and steps == 0:
        raise _Bad("drafted tokens without a verification step")
    return engine, drafted, accepted, steps


def _vllm(spec: Any) -> tuple[str, int, int, int | None] | None:
    if not isinstance(spec, Mapping):
        return None  # null: n > 1, or the flag is off
    drafted = _count(spec.get("num_draft_tokens"))
    accepted = _count(spec.get("num_accepted_draft_tokens"))
    return _checked("vllm", drafted, accepted, _optional_count(spec, "num_spec_steps"))


def _llamacpp(timings: Any) -> tuple[str, int, int, int | None] | None:
    if not isinstance(timings, Mapping):
        return None
    if "draft_n" not in timings:
        # llama-server prints draft_n only when it drafted: a response that drafted nothing
        # (speculation off, or every draft empty) still says so by its timings.
        if "predicted_n" not in timings:
            return None
        return "llamacpp", 0, 0, None
    drafted = _count(timings.get("draft_n"))
    accepted = _count(timings.get("draft_n_accepted", 0))
    predicted = _optional_count(timings, "predicted_n")
    if predicted is not None:
        accepted = min(accepted, predicted)
    accepted = min(accepted, drafted)
    return "llamacpp", drafted, accepted, None


def _trtllm(choices: Any) -> tuple[str, int, int, int | None] | None:
    if not isinstance(choices, list):
        return None
    found = False
    drafted = accepted = steps = 0
    for choice in choices[:64]:
        spec = choice.get("speculative_decoding") if isinstance(choice, Mapping) else None
        if not isinstance(spec, Mapping) or "total_draft_tokens" not in spec:
            continue
        found = True
        drafted += _count(spec.get("total_draft_tokens"))
        accepted += _count(spec.get("total_accepted_draft_tokens"))
        steps += _count(spec.get("num_spec_steps", 0))
    if not found:
        return None
    return _checked("trtllm", drafted, accepted, steps if steps or not drafted else None)


def _sglang(meta: Any) -> tuple[str, int, int, int | None] | None:
    if not isinstance(meta, Mapping) or "spec_verify_ct" not in meta:
        return None
    steps = _count(meta.get("spec_verify_ct"))
    if "spec_num_proposed_drafts" not in meta:
        if steps:
            raise _Bad("verify steps without proposed drafts")
        return None
    drafted = _count(meta.get("spec_num_proposed_drafts"))
    accepted = _count(meta.get("spec_num_correct_drafts", 0))
    return _checked("sglang", drafted, accepted, steps)


def _sglang_meta(document: Mapping[str, Any]) -> Iterable[Any]:
    yield document.get("meta_info")
    ext = document.get("sglext")
    if isinstance(ext, Mapping):
        yield ext.get("spec_tokens_details")
    choices = document.get("choices")
    if isinstance(choices, list):
        for choice in choices[:64]:
            if isinstance(choice, Mapping):
                yield choice.get("meta_info")


def _speculation(document: Mapping[str, Any]) -> tuple[str, int, int, int | None] | None:
    """The engine's fields in one document (the first engine whose fields are present)."""
    metrics = document.get("metrics")
    if isinstance(metrics, Mapping):
        for key in ("speculative_decoding", "speculative_decoding_stats"):
            if key in metrics:
                return _vllm(metrics[key])
    for key in ("speculative_decoding", "speculative_decoding_stats"):
        if key in document:  # a build that puts it at the root
            return _vllm(document[key])
    if "timings" in document:
        found = _llamacpp(document["timings"])
        if found is not None:
            return found
    found = _trtllm(document.get("choices"))
    if found is not None:
        return found
    for meta in _sglang_meta(document):
        found = _sglang(meta)
        if found is not None:
            return found
    return None


def _usage(document: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(completion, prompt) tokens from ``usage``, ``timings`` (llama.cpp: the prompt is
    ``prompt_n`` processed plus ``cache_n`` reused) or ``meta_info``; None where the document
    says nothing usable."""
    for key, completion, prompt in (
        ("usage", "completion_tokens", "prompt_tokens"),
        ("timings", "predicted_n", "prompt_n"),
        ("meta_info", "completion_tokens", "prompt_tokens"),
    ):
        part = document.get(key)
        if isinstance(part, Mapping) and completion in part:
            try:
                tokens = _optional_count(part, prompt)
                if key == "timings" and tokens is not None:
                    tokens += _optional_count(part, "cache_n") or 0
                return _optional_count(part, completion), tokens
            except _Bad:
                return None, None
    return None, None


def _model(document: Mapping[str, Any]) -> str | None:
    model = document.get("model")
    return model[:256] if isinstance(model, str) and model else None


def figures_from(documents: Iterable[Any]) -> Figures | Unparsed:
    """The figures of one response from its documents, newest first (a whole body is one
    document; a stream's last events, the last first). The first document with an engine's
    fields gives them; usage and the model come from it or, when it lacks them, from the
    newest document that has them (a stream's usage chunk may follow its last choice)."""
    usage: tuple[int | None, int | None] = (None, None)
    model: str | None = None
    found: tuple[str, int, int, int | None] | None = None
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        if usage == (None, None):
            usage = _usage(document)
        if model is None:
            model = _model(document)
        if found is None:
            try:
                found = _speculation(document)
            except _Bad:
                return Unparsed.MALFORMED
        if found is not None and usage != (None, None) and model is not None:
            break
    if found is None:
        return Unparsed.NO_FIELDS
    engine, drafted, accepted, steps = found
    return Figures(
        engine=engine,
        draft_tokens=drafted,
        accepted_tokens=accepted,
        steps=steps,
        completion_tokens=usage[0],
        prompt_tokens=usage[1],
        model=model,
    )
