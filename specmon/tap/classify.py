"""A request's class, by the configured rule. Pure: no I/O.

The class is bounded by construction: a header's value or a model's name counts only when it
is on the allowlist (anything else is ``other``); a prompt-length bucket is one of the
configured bounds. The ``class`` label therefore has at most ``len(allow) + 1`` values.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.engines.classes import OTHER
from specmon.tap.config import ClassRule, ClassSource
from specmon.tap.fields import Figures

__all__ = ["from_figures", "from_headers"]


def from_headers(rule: ClassRule, headers: Mapping[str, str]) -> str | None:
    """The class a request's headers decide (source ``header``), else None: decided later
    from the response (:func:`from_figures`)."""
    if rule.source is not ClassSource.HEADER or rule.header is None:
        return None
    value = headers.get(rule.header)
    if value is None:
        return OTHER
    value = value.strip()
    return value if value in rule.allow else OTHER


def from_figures(rule: ClassRule, figures: Figures) -> str:
    """The class a response decides (sources ``model``, ``prompt_tokens``, ``none``)."""
    if rule.source is ClassSource.MODEL:
        model = figures.model
        return model if model is not None and model in rule.allow else OTHER
    if rule.source is ClassSource.PROMPT_TOKENS:
        prompt = figures.prompt_tokens
        if prompt is None:
            return OTHER
        for bound in rule.buckets:
            if prompt <= bound:
                return f"le{bound}"
        return f"gt{rule.buckets[-1]}"
    if rule.source is ClassSource.NONE:
        return "all"
    return OTHER  # a header rule decides from the request: not reached
