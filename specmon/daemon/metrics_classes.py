"""The per-request-class families (specmon.classes), declared beside the metric table to keep
:mod:`specmon.daemon.metrics` small; that table lists them with every other family. Import
them through :mod:`specmon.daemon.metrics`, never from here first.

The ``class`` label is bounded: a tap's allowlist plus ``other`` (at most 32 values), or at
most 32 SGLang custom-label values (the rest summed into ``other``).
"""

from __future__ import annotations

from specmon.daemon.metric_def import Kind, MetricDef, Scope

__all__ = [
    "CLASS_ACCEPTANCE",
    "CLASS_ACCEPTED",
    "CLASS_ALPHA",
    "CLASS_DRAFTED",
    "CLASS_FAMILIES",
    "CLASS_LENGTH",
    "CLASS_MARGIN",
    "CLASS_REQUESTS",
    "COVERAGE",
    "SOURCE_UP",
]

_C = ("target", "class", "window")
_SRC = (
    "the window's increase of the class's counters on the target's tap "
    "(specmon_tap_*_total) or SGLang's custom-label tokenizer counters"
)
_BOUND = (
    " The class label's values are the tap's allowlist and `other` (or SGLang's custom-label "
    "values, at most 32): [tap](tap.md)."
)


def _g(name: str, help_: str, labels: tuple[str, ...], doc: str) -> MetricDef:
    bound = _BOUND if "class" in labels else ""
    return MetricDef(name, Kind.GAUGE, help_, labels, Scope.CLASS, doc + bound)


SOURCE_UP = _g(
    "specmon_class_source_up",
    "1 when the target's per-class counts were read at its last scrape (its tap answered, or "
    "its SGLang page carried custom labels), 0 when the tap did not answer; source: tap or "
    "sglang.",
    ("target", "source"),
    "1 when the per-class counts were read at the last scrape, 0 when the target's tap did "
    "not answer (the engine's own figures are unaffected); `source`: `tap` or `sglang`.",
)
CLASS_REQUESTS = _g(
    "specmon_class_requests",
    f"Requests of the class that finished in the window ({_SRC}).",
    _C,
    "requests of the class finished in the window (a tap: responses whose fields it read; "
    "SGLang: `num_requests_total`)",
)
CLASS_DRAFTED = _g(
    "specmon_class_draft_tokens",
    f"Draft tokens of the class in the window ({_SRC}); absent for SGLang (no such counter).",
    _C,
    "drafted tokens of the class in the window; absent for SGLang",
)
CLASS_ACCEPTED = _g(
    "specmon_class_accepted_tokens",
    f"Accepted draft tokens of the class in the window ({_SRC}; SGLang: generation tokens - "
    "verify calls - requests).",
    _C,
    "accepted draft tokens of the class in the window (SGLang: derived, generation tokens - "
    "verify calls - requests)",
)
CLASS_ACCEPTANCE = _g(
    "specmon_class_draft_acceptance_ratio",
    f"Accepted / drafted tokens of the class's sums in the window ({_SRC}); never an average "
    "of per-request rates.",
    _C,
    "accepted / drafted tokens of the class's sums in the window (never an average of "
    "per-request rates); SGLang: drafted assumed k per verify call",
)
CLASS_LENGTH = _g(
    "specmon_class_mean_acceptance_length",
    f"1 + accepted / verification steps of the class in the window ({_SRC}); llama.cpp gives "
    "no steps per request: steps assumed drafted / k.",
    _C,
    "1 + accepted / verification steps of the class (SGLang: (generation tokens - requests) / "
    "verify calls; llama.cpp behind a tap gives no steps: steps assumed drafted / k)",
)
CLASS_ALPHA = _g(
    "specmon_class_alpha_ratio",
    "Effective per-token alpha of the class in the window: solves alpha + ... + alpha^k = "
    f"accepted / steps ({_SRC}; k = the target's specmon_chain_length).",
    _C,
    "effective alpha of the class at the target's k: solves alpha + ... + alpha^k = accepted / "
    "steps",
)
CLASS_MARGIN = _g(
    "specmon_class_alpha_margin_ratio",
    "The class's effective alpha minus the target's break-even alpha (its k and configured c) "
    "in the window: negative means this class's traffic drafts below break-even.",
    _C,
    "the class's effective alpha minus the target's break-even alpha at its k and configured "
    "c: negative means the class drafts below break-even",
)
COVERAGE = _g(
    "specmon_class_coverage_ratio",
    "How much of the engine's drafting the classes saw in the window: the classes' drafted "
    "tokens over the engine's own counter (SGLang: verify calls with a class label over all).",
    ("target", "window"),
    "the classes' drafted tokens over the engine's own drafted-token counter in the same "
    "window (SGLang: verify calls of labelled requests over all): below 1 the tap or the "
    "labels miss traffic (requests sent around the tap, streams without usage); absent when "
    "the classes counted more than the engine (another engine's traffic behind the tap)",
)

#: In the order the metric table lists them.
CLASS_FAMILIES = (
    SOURCE_UP, CLASS_REQUESTS, CLASS_DRAFTED, CLASS_ACCEPTED, CLASS_ACCEPTANCE, CLASS_LENGTH,
    CLASS_ALPHA, CLASS_MARGIN, COVERAGE,
)  # fmt: skip
