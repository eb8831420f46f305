"""llama.cpp ``llama-server`` (builds since about August 2026): the vLLM counters, no labels.

- Needs ``--metrics`` (HTTP 501 without it). No model label: the model is "default" unless
  the caller overrides it.
- Counters move only when a request finishes; the per-position series are absent until the
  first speculative request completes, and there are ``--spec-draft-n-max`` of them.
- Names are accepted with and without the ``_total`` suffix.
- Scalar counters are printed with 6 significant digits (``1.23457e+06``): above a million
  they are rounded. Per-position values are exact integers, and their sum is exactly the
  accepted-token count, so that sum is preferred when present.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.engines._common import (
    context_count,
    count,
    first_present,
    labels_by_name,
    per_model,
    positions_tuple,
    sum_positions,
)
from specmon.engines.model import Context, Engine, ModelReading, Rejection, SpecCounters
from specmon.parser import Page, Sample

__all__ = ["LlamacppAdapter"]

_P = "llamacpp:"


def _both(base: str) -> tuple[str, str]:
    return (_P + base + "_total", _P + base)


_DRAFTS = _both("spec_decode_num_drafts")
_DRAFT_TOKENS = _both("spec_decode_num_draft_tokens")
_ACCEPTED = _both("spec_decode_num_accepted_tokens")
_PER_POS = _both("spec_decode_num_accepted_tokens_per_pos")
_PREDICTED = _both("tokens_predicted")
_PREDICTED_SECONDS = _both("tokens_predicted_seconds")
_DECODES = _both("n_decode")
_PROCESSING = (_P + "requests_processing",)
_DEFERRED = (_P + "requests_deferred",)
_BUSY = (_P + "n_busy_slots_per_decode",)
#: llama-server prints every number through a stringstream with the default precision.
SIGNIFICANT_DIGITS = 6


def _is_rounded(sample: Sample) -> bool:
    """True when the value may carry fewer digits than the integer it stands for: from a
    million on, whatever its form (read back through Prometheus, ``1.23457e+06`` is
    ``1234570``)."""
    return abs(sample.value) >= 1e6


class LlamacppAdapter:
    engine = Engine.LLAMACPP
    wanted: tuple[str, ...] = (
        _DRAFTS
        + _DRAFT_TOKENS
        + _ACCEPTED
        + _PER_POS
        + _PREDICTED
        + _PROCESSING
        + _PREDICTED_SECONDS
        + _DECODES
        + _DEFERRED
        + _BUSY
    )
    markers: tuple[str, ...] = (_P + "spec_decode_num_drafts",)
    series_labels: Mapping[str, tuple[str, ...]] = labels_by_name(
        wanted, by_name=dict.fromkeys(_PER_POS, ("position",))
    )

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        drafts_name = first_present(page, _DRAFTS)
        if drafts_name is None:
            # Builds without the speculative counters: the load series alone.
            dropped: list[Rejection] = []
            context = _context(page, dropped)
            if context == Context(significant_digits=SIGNIFICANT_DIGITS):
                return [], []
            return [ModelReading(model="default", context=context), *dropped], []
        notes: list[str] = []
        dropped = []

        def build(_model: str) -> ModelReading:
            rounded: list[str] = []

            def scalar(names: tuple[str, str], label: str) -> int:
                name = first_present(page, names)
                if name is None:
                    return 0
                samples = page.get(name)
                if any(_is_rounded(s) for s in samples):
                    rounded.append(label)
                return count(sum(s.value for s in samples), label)

            drafts = scalar(_DRAFTS, "drafts")
            draft_tokens = scalar(_DRAFT_TOKENS, "draft_tokens")
            printed_accepted = scalar(_ACCEPTED, "accepted_tokens")
            per_pos_name = first_present(page, _PER_POS)
            per_pos: tuple[int, ...] = ()
            if per_pos_name is not None:
                per_pos = positions_tuple(
                    sum_positions(page.get(per_pos_name), None).get("", {}), "per_pos"
                )
            accepted = printed_accepted
            if per_pos:
                exact = sum(per_pos)
                if "accepted_tokens" in rounded:
                    rounded.remove("accepted_tokens")
                    notes.append(
                        "accepted tokens taken from the exact per-position sum "
                        f"({exact}); the scalar counter was printed rounded ({printed_accepted})"
                    )
                accepted = exact
            if rounded:
                notes.append(
                    "llama.cpp prints " + " and ".join(rounded) + " with 6 significant digits; "
                    "above a million these counters are rounded"
                )
            context = _context(page, dropped)
            return ModelReading(
                model="default",
                counters=SpecCounters(
                    drafts=drafts,
                    draft_tokens=draft_tokens,
                    accepted_tokens=accepted,
                    accepted_per_position=per_pos,
                    rounded=tuple(rounded),
                ),
                context=context,
            )

        return [*per_model(["default"], build), *dropped], notes


def _value(page: Page, names: tuple[str, ...]) -> float | None:
    """The (summed) value of the first present name, as printed (validation checks it)."""
    name = first_present(page, names)
    if name is None:
        return None
    return sum(sample.value for sample in page.get(name))


def _context(page: Page, dropped: list[Rejection]) -> Context:
    """The load series. A broken one is dropped alone (a Rejection in ``dropped``) rather than
    hiding the acceptance data; gauges and seconds are checked by validation."""

    def counter(names: tuple[str, ...], label: str) -> int | None:
        value = _value(page, names)
        return None if value is None else context_count({"": value}, "", label, dropped)

    return Context(
        requests_running=_value(page, _PROCESSING),
        requests_waiting=_value(page, _DEFERRED),
        generation_tokens=counter(_PREDICTED, "tokens_predicted"),
        engine_steps=counter(_DECODES, "n_decode"),
        busy_slots_per_decode=_value(page, _BUSY),
        generation_seconds=_value(page, _PREDICTED_SECONDS),
        significant_digits=SIGNIFICANT_DIGITS,
    )
