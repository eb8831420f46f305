"""Static checks of the engine recording rules (no promtool): what they read, one window per
group, the minimum-traffic guard on every figure, and the position table behind the
conditional acceptance. Their values are checked by ``promtool test rules``
(tests/rules/test_promtool.py) and against specmon in a real Prometheus (tests/e2e/)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.rules.alert_rules import alert_rules, recording_rules
from tests.rules.common import DOCS_DIR, PROM_DIR
from tests.rules.engine_rules import (
    COST_GROUP,
    COST_RECORD,
    ENGINE_GROUPS,
    ENGINE_SERIES,
    SHIPPED_WINDOW,
    engine_groups,
    load_engine_rules,
    selected_names,
    with_window,
)

MIN_DRAFTS = 400
#: The figures the issue asks for, per engine (record name fragments).
FIGURES = {
    "vllm": (
        "instance_model_name:vllm_spec_decode_num_drafts:increase5m",
        "instance_model_name:vllm_spec_decode_draft_acceptance:ratio_rate5m",
        "instance_model_name:vllm_spec_decode_acceptance_length:mean5m",
        "instance_model_name_position:vllm_spec_decode_position_survival:ratio_rate5m",
        "instance_model_name_position:vllm_spec_decode_position_conditional:ratio_rate5m",
        "instance_model_name:vllm_spec_decode_expected_speedup:ratio_rate5m",
    ),
    "llamacpp": (
        "instance:llamacpp_spec_decode_num_drafts:increase5m",
        "instance:llamacpp_spec_decode_draft_acceptance:ratio_rate5m",
        "instance:llamacpp_spec_decode_acceptance_length:mean5m",
        "instance_position:llamacpp_spec_decode_position_survival:ratio_rate5m",
        "instance_position:llamacpp_spec_decode_position_conditional:ratio_rate5m",
        "instance:llamacpp_spec_decode_expected_speedup:ratio_rate5m",
    ),
    "sglang": (
        "instance_model_name:sglang_spec_verify_calls:increase5m",
        "instance_model_name:sglang_spec_accept_rate:avg5m",
        "instance_model_name:sglang_spec_accept_length:avg5m",
        "instance_model_name:sglang_spec_decode_expected_speedup:ratio_avg5m",
        # from the counters (newer releases)
        "instance_model_name:sglang_spec_decode_num_accepted_tokens:increase5m",
        "instance_model_name:sglang_spec_decode_acceptance_length:mean5m",
        "instance_model_name:sglang_spec_decode_draft_acceptance:ratio_rate5m",
        "instance_model_name:sglang_spec_decode_expected_speedup:ratio_rate5m",
    ),
    "trtllm": (
        "instance_model_name:trtllm_spec_decode_num_drafts:increase5m",
        "instance_model_name:trtllm_spec_decode_chain_length:max5m",
        "instance_model_name:trtllm_spec_decode_draft_acceptance:ratio_rate5m",
        "instance_model_name:trtllm_spec_decode_acceptance_length:mean5m",
        "instance_model_name_position:trtllm_spec_decode_position_survival:ratio_rate5m",
        "instance_model_name_position:trtllm_spec_decode_position_conditional:ratio_rate5m",
        "instance_model_name:trtllm_spec_decode_expected_speedup:ratio_rate5m",
    ),
    "tgi": (
        "instance:tgi_spec_decode_num_drafts:increase5m",
        "instance:tgi_spec_decode_chain_length:count5m",
        "instance:tgi_spec_decode_draft_acceptance:ratio_rate5m",
        "instance:tgi_spec_decode_acceptance_length:mean5m",
        "instance_position:tgi_spec_decode_position_survival:ratio_rate5m",
        "instance_position:tgi_spec_decode_position_conditional:ratio_rate5m",
        "instance:tgi_spec_decode_expected_speedup:ratio_rate5m",
    ),
}
#: Engine -> the guard every figure carries: the window's drafts (SGLang: verification calls,
#: TGI: steps) against the 400 the alerts require.
GUARDS = {
    "vllm": "instance_model_name:vllm_spec_decode_num_drafts:increase5m >= 400",
    "llamacpp": "instance:llamacpp_spec_decode_num_drafts:increase5m >= 400",
    "sglang": "instance_model_name:sglang_spec_verify_calls:increase5m >= 400",
    "trtllm": "instance_model_name:trtllm_spec_decode_num_drafts:increase5m >= 400",
    "tgi": "instance:tgi_spec_decode_num_drafts:increase5m >= 400",
}
#: TensorRT-LLM without per-position counters: drafts estimated as draft tokens / k.
TRTLLM_ESTIMATED_GUARD = (
    "instance_model_name:trtllm_spec_decode_num_draft_tokens:increase5m "
    ">= 400 * instance_model_name:trtllm_spec_decode_chain_length:max5m"
)
_RANGE = re.compile(r"\[([^\]]*)\]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _ranges(expr: str) -> set[str]:
    """Range selectors of ``expr`` (not brackets inside string literals, e.g. regexes)."""
    return set(_RANGE.findall(_STRING.sub('""', expr)))


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return load_engine_rules()


@pytest.fixture(scope="module")
def groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return engine_groups(doc)


def _records(group: dict[str, Any]) -> dict[str, str]:
    return {r["record"]: r["expr"] for r in group["rules"]}


def test_one_group_per_engine_and_the_draft_cost(doc: dict[str, Any]) -> None:
    assert not alert_rules(doc)
    assert [g["name"] for g in doc["groups"]] == [COST_GROUP, *ENGINE_GROUPS.values()]
    (cost,) = [g for g in doc["groups"] if g["name"] == COST_GROUP]
    (rule,) = cost["rules"]
    assert rule == {"record": COST_RECORD, "expr": "vector(0.1)"}


def test_every_figure_is_recorded(groups: dict[str, dict[str, Any]]) -> None:
    for engine, figures in FIGURES.items():
        recorded = _records(groups[engine])
        missing = set(figures) - set(recorded)
        assert not missing, (engine, missing)


def test_rules_read_only_their_engine_and_what_the_file_records(
    doc: dict[str, Any], groups: dict[str, dict[str, Any]]
) -> None:
    recorded = {r["record"] for r in recording_rules(doc)}
    for engine, group in groups.items():
        read: set[str] = set()
        for rule in group["rules"]:
            names = selected_names(rule["expr"])
            assert names <= ENGINE_SERIES[engine] | recorded, (rule["record"], names)
            read |= names
        # Every spelling of every series the engine publishes is read.
        assert ENGINE_SERIES[engine] <= read, ENGINE_SERIES[engine] - read


def test_one_window_per_group(groups: dict[str, dict[str, Any]]) -> None:
    for engine, group in groups.items():
        assert group["name"].endswith(f"-{SHIPPED_WINDOW}")
        for rule in group["rules"]:
            ranges = _ranges(rule["expr"])
            assert ranges <= {SHIPPED_WINDOW}, (engine, rule["record"], ranges)
            assert rule["record"].endswith(SHIPPED_WINDOW), rule["record"]
            # The group reads only its own window's records.
            for name in selected_names(rule["expr"]):
                if name.count(":") == 2 and name != COST_RECORD:
                    assert name.endswith(SHIPPED_WINDOW), (rule["record"], name)


def test_with_window_rewrites_every_occurrence(doc: dict[str, Any]) -> None:
    short = with_window(doc, "20s")
    for engine, group in engine_groups(short).items():
        assert group["name"] == ENGINE_GROUPS[engine].replace("5m", "20s")
        for rule in group["rules"]:
            assert "5m" not in rule["record"] + rule["expr"], rule["record"]
            assert _ranges(rule["expr"]) <= {"20s"}
    # Same rules otherwise: undoing the rewrite gives the shipped file back.
    for before, after in zip(doc["groups"], short["groups"], strict=True):
        for b, a in zip(before["rules"], after["rules"], strict=True):
            assert a["expr"].replace("20s", "5m") == b["expr"]
            assert a.get("labels") == b.get("labels")


def test_every_figure_has_the_minimum_traffic_guard(groups: dict[str, dict[str, Any]]) -> None:
    """Counts (``:increase5m``) and the chain length are always recorded; every figure needs
    400 drafts in the window, directly or through a figure that does."""
    for engine, group in groups.items():
        for record, expr in _records(group).items():
            flat = " ".join(expr.split())
            if record.endswith((":increase5m", ":max5m", ":count5m")):
                assert f">= {MIN_DRAFTS}" not in flat, record
                continue
            if record.endswith((":avg5m", ":ratio_avg5m")):  # SGLang's gauges: below
                continue
            # A speed-up built on the guarded mean acceptance length.
            mean = record.replace("expected_speedup:ratio_rate5m", "acceptance_length:mean5m")
            if engine in ("sglang", "tgi") and "expected_speedup" in record:
                assert flat.startswith(mean), record
                continue
            assert GUARDS[engine] in flat, record
            if engine == "trtllm" and not record.startswith("instance_model_name_position:"):
                # The iteration-counter branch: the estimated drafts, or the guarded mean.
                branch = flat.split(" or ", 1)[1]
                if "expected_speedup" in record:
                    assert mean in branch, record
                else:
                    assert TRTLLM_ESTIMATED_GUARD in branch, record
                assert "unless instance_model_name:trtllm_spec_decode_num_drafts" in branch
    sglang = _records(groups["sglang"])
    guard = f"instance_model_name:sglang_spec_verify_calls:increase5m < {MIN_DRAFTS}"
    for record in (
        "instance_model_name:sglang_spec_accept_length:avg5m",
        "instance_model_name:sglang_spec_accept_rate:avg5m",
    ):
        assert f"unless\n{guard}" in sglang[record], record
    speedup = sglang["instance_model_name:sglang_spec_decode_expected_speedup:ratio_avg5m"]
    assert speedup.startswith("instance_model_name:sglang_spec_accept_length:avg5m")


def test_every_division_has_a_divisor_that_cannot_be_zero(doc: dict[str, Any]) -> None:
    """A ratio is absent, never NaN or Inf, when its divisor would be 0."""
    for rule in recording_rules(doc):
        expr = " ".join(rule["expr"].split())
        if "/" not in expr:
            continue
        divisor = expr.split("/", 1)[1]
        # drafts >= 400, a count > 0, or 1 + c k with c k >= 0.
        assert (
            f">= {MIN_DRAFTS}" in divisor or "> 0" in divisor or divisor.strip().startswith("( 1 +")
        ), rule["record"]


def test_engines_and_ranks_are_aggregated_away(
    groups: dict[str, dict[str, Any]],
) -> None:
    for rule in groups["vllm"]["rules"]:
        if "__name__" in rule["expr"]:
            assert rule["expr"].startswith("sum without (engine) ("), rule["record"]
    ranks = "without (engine_type, dp_rank, tp_rank, pp_rank, moe_ep_rank)"
    for rule in groups["sglang"]["rules"]:
        if "__name__" in rule["expr"]:
            # Gauges are replicas across ranks (averaged); counters are added up.
            op = "sum" if rule["record"].endswith(":increase5m") else "avg"
            assert rule["expr"].startswith(f"{op} {ranks} ("), rule["record"]
    for rule in groups["trtllm"]["rules"]:
        if "__name__" in rule["expr"] and "speculative_config_info" not in rule["expr"]:
            # engine_type is the backend, one per server; token_position becomes position.
            assert rule["expr"].startswith("sum without (engine_type"), rule["record"]


def _shift_branches(expr: str) -> list[tuple[str, str, str, str]]:
    """(selector operator, selector value, replacement, regex) of each position branch."""
    branch = re.compile(
        r'label_replace\([a-z_:0-9]+\{position(=~|=)"([^"]*)"\}, "position", "([^"]*)", '
        r'"position", "([^"]*)"\)'
    )
    return branch.findall(expr)


def _label_replace(value: str, replacement: str, regex: str) -> str:
    # Prometheus anchors the regex and expands $1 / ${1} as Go's regexp does.
    match = re.fullmatch(regex, value)
    assert match is not None
    return re.sub(r"\$\{?(\d+)\}?", lambda m: match.group(int(m.group(1))), replacement)


@pytest.mark.parametrize("engine", ["vllm", "llamacpp", "trtllm", "tgi"])
def test_position_table_moves_every_position_one_deeper(
    groups: dict[str, dict[str, Any]], engine: str
) -> None:
    """The conditional acceptance's divisor at position p must be per_pos[p - 1]: each branch
    relabels some positions, together they send every p in 0..99 to exactly p + 1."""
    (expr,) = [e for r, e in _records(groups[engine]).items() if "position_conditional" in r]
    branches = _shift_branches(expr)
    assert len(branches) == 19
    for p in range(100):
        value = str(p)
        targets = []
        for op, selector, replacement, regex in branches:
            selected = value == selector if op == "=" else re.fullmatch(selector, value)
            if selected:
                targets.append(_label_replace(value, replacement, regex))
        assert targets == [str(p + 1)], (p, targets)


def test_tgi_bucket_table_moves_every_bucket_one_shallower(
    groups: dict[str, dict[str, Any]],
) -> None:
    """TGI's per-position counts keep position p only where the bucket le = p + 1 exists
    (which drops the largest bucket, k): the table sends every bucket q in 1..100 to exactly
    q - 1, and bucket 0 nowhere."""
    (expr,) = [
        e
        for r, e in _records(groups["tgi"]).items()
        if r.endswith("num_accepted_tokens_per_pos:increase5m")
    ]
    branches = _shift_branches(expr)
    assert len(branches) == 19
    for q in range(101):
        value = str(q)
        targets = []
        for op, selector, replacement, regex in branches:
            selected = value == selector if op == "=" else re.fullmatch(selector, value)
            if selected:
                targets.append(_label_replace(value, replacement, regex))
        assert targets == ([str(q - 1)] if q else []), (q, targets)


def test_tgi_buckets_become_positions(groups: dict[str, dict[str, Any]]) -> None:
    """le="3" (Prometheus 2, as TGI prints it) and le="3.0" (Prometheus 3 normalises le) are
    position 3; +Inf and non-integer bounds are not read."""
    (expr,) = [e for r, e in _records(groups["tgi"]).items() if "skipped_tokens_bucket" in r]
    (selector,) = re.findall(r'le=~"([^"]*)"', expr)
    (regex,) = re.findall(r'"position", "\$1", "le", "([^"]*)"', expr)
    selector, regex = selector.replace("\\\\", "\\"), regex.replace("\\\\", "\\")
    for le, position in (("0", "0"), ("3", "3"), ("3.0", "3"), ("12.0", "12"), ("100", "100")):
        assert re.fullmatch(selector, le), le
        assert _label_replace(le, "$1", regex) == position, le
    for le in ("+Inf", "0.5", "1e3", "-1", ""):
        assert not re.fullmatch(selector, le), le


def test_trtllm_chain_length_reads_every_k_up_to_99(groups: dict[str, dict[str, Any]]) -> None:
    """k is the label spec_num_tokens: one last-digit branch and one tens branch select each
    value, and their factors add up to it."""
    (expr,) = [e for r, e in _records(groups["trtllm"]).items() if r.endswith("chain_length:max5m")]
    branches = [
        (pattern, int(factor))
        for pattern, factor in re.findall(r'spec_num_tokens=~"([^"]*)"\}\[5m\]\) \* (\d+)', expr)
    ]
    assert len(branches) == 20
    for k in range(1, 100):
        factors = [f for pattern, f in branches if re.fullmatch(pattern, str(k))]
        assert len(factors) == 2 and sum(factors) == k, (k, factors)
    assert not [f for pattern, f in branches if re.fullmatch(pattern, "100")][1:]


def test_docs_list_every_recorded_series(doc: dict[str, Any]) -> None:
    text = (DOCS_DIR / "recording-rules.md").read_text("utf-8")
    for rule in recording_rules(doc):
        assert f"`{rule['record']}`" in text, rule["record"]
    assert "engine-recording.rules.yml" in (DOCS_DIR / "alerting.md").read_text("utf-8")
    assert (PROM_DIR / "tests" / "draft-cost-override.rules.yml").exists()
