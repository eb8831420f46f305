"""The engine recording rules (``deploy/prometheus/engine-recording.rules.yml``): the engine
series they may read, and the rules with their window rewritten.

Each engine group computes over one window, written ``5m`` in its name, its range selectors
and its record names (``...:increase5m``, ``...:ratio_rate5m``, ``...:mean5m``,
``...:avg5m``). :func:`with_window` replaces all of them, as docs/recording-rules.md tells an
operator to do for another window; the end-to-end test uses it to run the rules over seconds::

    doc = with_window(load_rules(RECORDING_FILE), "20s")
    (tmp / "engine-recording.rules.yml").write_text(dump_rules(doc))
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from tests.rules.alert_rules import RECORDING_FILE, load_rules
from tests.rules.common import promql_metric_names

__all__ = [
    "COST_GROUP",
    "COST_RECORD",
    "ENGINE_GROUPS",
    "ENGINE_SERIES",
    "RECORDING_FILE",
    "SHIPPED_WINDOW",
    "engine_groups",
    "load_engine_rules",
    "selected_names",
    "with_window",
]

SHIPPED_WINDOW = "5m"
COST_GROUP = "specmon-engine-draft-cost"
COST_RECORD = "job:spec_decode_draft_cost:ratio"
#: Engine -> the group that computes its figures.
ENGINE_GROUPS = {
    "vllm": f"specmon-engine-vllm-{SHIPPED_WINDOW}",
    "llamacpp": f"specmon-engine-llamacpp-{SHIPPED_WINDOW}",
    "sglang": f"specmon-engine-sglang-{SHIPPED_WINDOW}",
    "trtllm": f"specmon-engine-trtllm-{SHIPPED_WINDOW}",
    "tgi": f"specmon-engine-tgi-{SHIPPED_WINDOW}",
}

_VLLM_COUNTERS = (
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "spec_decode_num_accepted_tokens_per_pos_total",
)
_SGLANG_SERIES = (
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_steps",
    "spec_verify_calls_total",
    "generation_tokens_total",
    "num_requests_total",
)
_TRTLLM_SERIES = (
    "spec_decode_drafted_tokens_total",
    "spec_decode_accepted_tokens_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "speculative_config_info",
)
#: Engine -> every sample name its rules may read (all spellings the engines publish).
ENGINE_SERIES: dict[str, frozenset[str]] = {
    # GET /metrics prints `vllm:`; the OpenMetrics path `vllm_`.
    "vllm": frozenset(p + c for p in ("vllm:", "vllm_") for c in _VLLM_COUNTERS),
    # llama-server builds differ in whether the counters carry `_total`.
    "llamacpp": frozenset(
        "llamacpp:" + c.removesuffix("_total") + suffix
        for c in _VLLM_COUNTERS
        for suffix in ("_total", "")
    ),
    # The server prints `sglang:`; sgl-router's /engine_metrics `sglang_`.
    "sglang": frozenset(p + s for p in ("sglang:", "sglang_") for s in _SGLANG_SERIES),
    # trtllm-serve and today's Dynamo print `trtllm_`; older Dynamo docs say `trtllm:`.
    "trtllm": frozenset(p + s for p in ("trtllm_", "trtllm:") for s in _TRTLLM_SERIES),
    # TGI's router: a histogram (or, in the newest releases, a summary).
    "tgi": frozenset(
        "tgi_request_skipped_tokens" + suffix for suffix in ("_count", "_sum", "_bucket")
    ),
}

_NAME_REGEX = re.compile(r'__name__\s*=~\s*"([^"]*)"')


def selected_names(expr: str) -> set[str]:
    """Metric names an expression selects, including ``{__name__=~"a|b"}`` alternatives."""
    names = promql_metric_names(expr)
    for pattern in _NAME_REGEX.findall(expr):
        for alternative in pattern.split("|"):
            if not re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", alternative):
                raise ValueError(f"not a plain alternation of names: {pattern!r}")
            names.add(alternative)
    return names


def engine_groups(doc: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Engine -> its group in ``doc`` (by the group's name, whatever its window)."""
    out = {}
    for group in doc["groups"]:
        for engine in ENGINE_GROUPS:
            if group["name"].startswith(f"specmon-engine-{engine}-"):
                out[engine] = group
    return out


def _window_pattern(window: str) -> re.Pattern[str]:
    # A range selector "[5m]", a recorded name's operations ending in the window
    # ("...:increase5m", "...:ratio_rate5m") or a group name ("...-vllm-5m").
    w = re.escape(window)
    return re.compile(rf"\[{w}\]|(?<=[a-z_-]){w}\b")


def with_window(doc: Mapping[str, Any], window: str) -> dict[str, Any]:
    """A copy of ``doc`` whose engine groups compute over ``window`` instead of 5m.

    Group names, record names and every reference to them, and range selectors change;
    nothing else. Raises if a group still mentions the shipped window afterwards.
    """
    out = copy.deepcopy(dict(doc))
    pattern = _window_pattern(SHIPPED_WINDOW)

    def swap(text: str) -> str:
        return pattern.sub(
            lambda m: f"[{window}]" if m.group().startswith("[") else window,
            text,
        )

    for group in out["groups"]:
        group["name"] = swap(group["name"])
        for rule in group["rules"]:
            if "record" in rule:
                rule["record"] = swap(rule["record"])
            rule["expr"] = swap(rule["expr"])
    for engine, group in engine_groups(out).items():
        text = repr(group)
        if pattern.search(text):
            raise AssertionError(f"{engine}: the group still mentions {SHIPPED_WINDOW}")
    return out


def load_engine_rules() -> dict[str, Any]:
    return load_rules(RECORDING_FILE)
