"""Speculation counted per request class: what a tap's page (``specmon tap``) or SGLang's
custom-label counters give, in one typed form (:class:`ClassReading`).

Every engine's own spec counters are global; these are the two ways specmon splits acceptance
by class (docs/tap.md). Lifetime counts, summed per class; the daemon's windows
(:mod:`specmon.classes`) take their increases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from specmon.records import record

__all__ = [
    "CLASS_NAME",
    "MAX_CLASSES",
    "OTHER",
    "ClassCounts",
    "ClassReading",
    "class_label",
]

#: Most classes read from one page (the tap's allowlist is shorter); the rest are summed into
#: :data:`OTHER`. The cardinality bound of every ``class`` label specmon exports.
MAX_CLASSES = 32
#: The class of requests outside the allowlist.
OTHER = "other"
#: What a class name may be: a label value that is safe to show and short.
CLASS_NAME = re.compile(r"[A-Za-z0-9_.:/@+-]{1,64}")


@record
class ClassCounts:
    """One class's lifetime counts."""

    #: Finished requests counted (the tap: responses whose fields were read; SGLang: requests).
    requests: int
    #: Accepted draft tokens (SGLang: derived, generated - verify calls - requests).
    accepted_tokens: int
    #: Drafted tokens; None when the source counts none (SGLang).
    draft_tokens: int | None
    #: Verification steps that carried a draft; None when the source counts none (llama.cpp
    #: behind a tap: its responses give no steps).
    steps: int | None


@record
class ClassReading:
    """Per class, the counts one page gives."""

    #: "tap" (a ``specmon tap`` page) or "sglang" (the engine's custom-label counters).
    source: str
    #: (class, counts), sorted by class; at most :data:`MAX_CLASSES`.
    classes: tuple[tuple[str, ClassCounts], ...]
    #: The engine the tap read its fields from ("vllm", "llamacpp", ...), when it says.
    engine: str | None = None
    #: True when the accepted tokens are derived rather than counted (SGLang).
    derived: bool = False
    notes: tuple[str, ...] = ()
    #: Why the counts could not be read this time (the tap did not answer), or None.
    error: str | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.classes)


def class_label(value: str) -> str:
    """A class name as specmon exports it: the value when it is a short, plain name, else
    :data:`OTHER` (a label value from a client must not carry anything else)."""
    return value if CLASS_NAME.fullmatch(value) else OTHER


def capped(
    items: Iterable[tuple[str, ClassCounts]],
) -> tuple[tuple[tuple[str, ClassCounts], ...], bool]:
    """At most :data:`MAX_CLASSES` classes, sorted: names that are not plain and classes past
    the bound are summed into :data:`OTHER`; True when any was."""
    merged: dict[str, ClassCounts] = {}
    for name, counts in items:
        key = class_label(name)
        merged[key] = _sum(merged[key], counts) if key in merged else counts
    folded = False
    names = sorted(k for k in merged if k != OTHER)
    if len(names) + (OTHER in merged) > MAX_CLASSES:
        folded = True
        keep = set(names[: MAX_CLASSES - 1])
        for name in names:
            if name not in keep:
                counts = merged.pop(name)
                merged[OTHER] = _sum(merged[OTHER], counts) if OTHER in merged else counts
    return tuple(sorted(merged.items())), folded


def _sum(a: ClassCounts, b: ClassCounts) -> ClassCounts:
    def add(x: int | None, y: int | None) -> int | None:
        return None if x is None or y is None else x + y

    return ClassCounts(
        requests=a.requests + b.requests,
        accepted_tokens=a.accepted_tokens + b.accepted_tokens,
        draft_tokens=add(a.draft_tokens, b.draft_tokens),
        steps=add(a.steps, b.steps),
    )
