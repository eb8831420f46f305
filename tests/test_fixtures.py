"""Pages captured from real servers (tests/fixtures/pages, see its README): the counters our
parser extracts equal what prometheus_client's parser extracts, and ``specmon inspect`` equals a
hand computation from those raw counters."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.cli.main import main
from specmon.engines import Engine, read_page
from tests.support.strict_json import strict_loads

PAGES = Path(__file__).parent / "fixtures" / "pages"

SPEC = {
    "spec_decode_num_drafts": "drafts",
    "spec_decode_num_draft_tokens": "draft_tokens",
    "spec_decode_num_accepted_tokens": "accepted",
}


def reference_counters(text: str) -> dict[str, dict[str, Any]]:
    """Per model: raw spec counters, read with prometheus_client's text parser.

    (Its OpenMetrics parser rejects vLLM's OpenMetrics page, whose HELP/TYPE lines keep
    ``vllm:`` while the samples say ``vllm_``: "Clashing name". The text parser reads it.)
    """
    out: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = re.sub(r"^(vllm:|vllm_|llamacpp:)", "", s.name)
            name = name.removesuffix("_total")
            model = s.labels.get("model_name", "default")
            entry = out.setdefault(
                model, {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": {}}
            )
            if name in SPEC:
                entry[SPEC[name]] += int(s.value)
            elif name == "spec_decode_num_accepted_tokens_per_pos":
                p = int(s.labels["position"])
                entry["per_pos"][p] = entry["per_pos"].get(p, 0) + int(s.value)
    return {m: e for m, e in out.items() if e["drafts"] or e["per_pos"] or m != "default"}


def hand(counters: dict[str, Any], *, k: int | None, c: float) -> dict[str, Any]:
    drafts = counters["drafts"]
    per_pos = [counters["per_pos"][i] for i in sorted(counters["per_pos"])]
    accepted = sum(per_pos) if per_pos else counters["accepted"]
    k = k if k is not None else (len(per_pos) or None)
    out: dict[str, Any] = {"drafts": drafts, "accepted_tokens": accepted, "chain_length": k}
    if drafts == 0:
        return out
    m = accepted / drafts
    out["mean_acceptance_length"] = 1 + m
    out["draft_acceptance_ratio"] = accepted / counters["draft_tokens"]
    out["expected_speedup"] = (1 + m) / (1 + c * counters["draft_tokens"] / drafts)
    out["survival"] = [p / drafts for p in per_pos]
    out["conditional"] = [
        p / (drafts if i == 0 else per_pos[i - 1])
        if (drafts if i == 0 else per_pos[i - 1])
        else None
        for i, p in enumerate(per_pos)
    ]
    if k:
        lo, hi = 0.0, 1.0
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if sum(mid**i for i in range(1, k + 1)) < m else (lo, mid)
        out["alpha"] = lo
        # A chain of j drafts j x (drafted / k) tokens (the proportion measured at k, 1 for a
        # draft model), so that at j = k the best speed-up is the expected one.
        per_token = c * counters["draft_tokens"] / drafts / k
        candidates = [(1 + sum(out["survival"][:j])) / (1 + j * per_token) for j in range(k + 1)]
        best = max(range(k + 1), key=lambda j: (candidates[j], -j))
        out["best_chain_length"] = best
        out["best_speedup"] = candidates[best]
    return out


def inspect_json(*args: str) -> tuple[int, dict[str, Any]]:
    import contextlib

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["inspect", *args, "--json"])
    return code, strict_loads(buffer.getvalue())


SINGLE_PAGES = [
    ("vllm-single.txt", Engine.VLLM),
    ("vllm-single-later.txt", Engine.VLLM),
    ("vllm-multiproc.txt", Engine.VLLM),
    ("vllm-openmetrics.txt", Engine.VLLM),
    ("vllm-multiproc-openmetrics.txt", Engine.VLLM),
    ("llamacpp-after.txt", Engine.LLAMACPP),
    ("llamacpp-synth.txt", Engine.LLAMACPP),
]


@pytest.mark.parametrize(("page", "engine"), SINGLE_PAGES)
def test_our_counters_equal_prometheus_client(page: str, engine: Engine) -> None:
    text = (PAGES / page).read_text()
    reference = reference_counters(text)
    reading = read_page(text)
    assert reading.engine is engine
    assert reading.malformed == 0
    assert reading.is_exposition
    ours = {m.model: m.counters for m in reading.models}
    assert set(ours) == set(reference)
    for model, ref in reference.items():
        c = ours[model]
        assert c is not None
        assert c.drafts == ref["drafts"]
        assert c.draft_tokens == ref["draft_tokens"]
        assert c.accepted_tokens == ref["accepted"]
        assert list(c.accepted_per_position) == [ref["per_pos"][i] for i in sorted(ref["per_pos"])]


@pytest.mark.parametrize(("page", "engine"), SINGLE_PAGES)
@pytest.mark.parametrize("cost", [0.1, 0.3])
def test_inspect_equals_hand_computation(page: str, engine: Engine, cost: float) -> None:
    code, doc = inspect_json(str(PAGES / page), "--draft-cost", str(cost))
    assert code == 0
    reference = reference_counters((PAGES / page).read_text())
    assert doc["scope"] == "lifetime"
    assert len(doc["models"]) == len(reference)
    for model in doc["models"]:
        expected = hand(reference[model["model"]], k=None, c=cost)
        _compare(model, expected, engine, cost)


def _compare(model: dict[str, Any], expected: dict[str, Any], engine: Engine, cost: float) -> None:
    assert model["engine"] == engine.value
    assert model["draft_cost"] == cost
    assert model["drafts"] == expected["drafts"]
    assert model["accepted_tokens"] == expected["accepted_tokens"]
    assert model["chain_length"] == expected["chain_length"]
    for key in ("mean_acceptance_length", "draft_acceptance_ratio", "expected_speedup",
                "alpha", "best_speedup"):  # fmt: skip
        assert model[key] == pytest.approx(expected[key], abs=1e-9), key
    assert model["best_chain_length"] == expected["best_chain_length"]
    assert [p["position"] for p in model["positions"]] == list(
        range(1, len(expected["survival"]) + 1)
    )
    assert [p["survival"] for p in model["positions"]] == pytest.approx(expected["survival"])
    assert [p["conditional"] for p in model["positions"]] == pytest.approx(expected["conditional"])
    k, be = model["chain_length"], model["breakeven_alpha"]
    assert (1 - be ** (k + 1)) / ((1 - be) * (1 + k * cost)) == pytest.approx(1.0, abs=1e-9)
    assert model["alpha_margin"] == pytest.approx(model["alpha"] - be)


@pytest.mark.parametrize(
    ("before", "after", "engine"),
    [
        ("vllm-single.txt", "vllm-single-later.txt", Engine.VLLM),
        ("llamacpp-before.txt", "llamacpp-after.txt", Engine.LLAMACPP),
    ],
)
def test_inspect_before_is_the_interval(before: str, after: str, engine: Engine) -> None:
    code, doc = inspect_json(str(PAGES / after), "--before", str(PAGES / before))
    assert code == 0
    assert doc["scope"] == "interval"
    ref_before = reference_counters((PAGES / before).read_text())
    ref_after = reference_counters((PAGES / after).read_text())
    for model in doc["models"]:
        a = ref_after[model["model"]]
        b = ref_before.get(
            model["model"], {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": {}}
        )
        delta = {
            "drafts": a["drafts"] - b["drafts"],
            "draft_tokens": a["draft_tokens"] - b["draft_tokens"],
            "accepted": a["accepted"] - b["accepted"],
            "per_pos": {p: v - b["per_pos"].get(p, 0) for p, v in a["per_pos"].items()},
        }
        _compare(model, hand(delta, k=None, c=0.1), engine, 0.1)


def test_vllm_interval_agrees_with_vllms_own_log_line() -> None:
    """vLLM printed one SpecDecoding line between the two captures (see fixtures README)."""
    _, doc = inspect_json(
        str(PAGES / "vllm-single-later.txt"), "--before", str(PAGES / "vllm-single.txt")
    )
    (model,) = doc["models"]
    line = (PAGES / "vllm-single-log.txt").read_text()
    m = re.search(
        r"Mean acceptance length: ([\d.]+).*Accepted: (\d+) tokens, Drafted: (\d+) tokens, "
        r"Per-position acceptance rate: ([\d., ]+), Avg Draft acceptance rate: ([\d.]+)%",
        line,
    )
    assert m is not None
    assert model["accepted_tokens"] == int(m.group(2))
    assert model["draft_tokens"] == int(m.group(3))
    assert round(model["mean_acceptance_length"], 2) == float(m.group(1))
    rates = [float(x) for x in m.group(4).split(",")]
    assert [round(p["survival"], 3) for p in model["positions"]] == rates
    assert round(100 * model["draft_acceptance_ratio"], 1) == float(m.group(5))


def test_llamacpp_before_first_speculative_request() -> None:
    code, doc = inspect_json(str(PAGES / "llamacpp-before.txt"))
    assert code == 0  # the engine publishes spec counters (at 0) even before any request
    (model,) = doc["models"]
    assert model["drafts"] == 0
    assert model["positions"] == []
    assert model["chain_length"] is None
    assert model["alpha"] is None and model["expected_speedup"] is None
    assert any("no drafts counted" in n for n in model["notes"])


def test_llamacpp_501_page_is_not_exposition() -> None:
    raw = (PAGES / "llamacpp-501.txt").read_bytes().decode()
    body = raw.split("\r\n\r\n", 1)[1]
    reading = read_page(body)
    assert not reading.is_exposition


def test_inspect_human_output_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(PAGES / "vllm-single.txt")]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "break-even" in out and "draft cost c 0.1 (default)" in out
    off = tmp_path / "off.txt"
    off.write_text('vllm:num_requests_running{engine="0",model_name="m"} 0.0\n')
    assert main(["inspect", str(off)]) == 3
    assert "speculation is off, or this build is too old" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "missing.txt")]) == 1
    assert "No such file" in capsys.readouterr().err


def test_llamacpp_before_counters_equal_prometheus_client() -> None:
    text = (PAGES / "llamacpp-before.txt").read_text()
    spec = {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if "spec_decode" in s.name
    }
    assert spec == {
        "llamacpp:spec_decode_num_draft_tokens_total": 0.0,
        "llamacpp:spec_decode_num_accepted_tokens_total": 0.0,
        "llamacpp:spec_decode_num_drafts_total": 0.0,
    }
    (model,) = read_page(text).models
    assert model.counters is not None
    assert (model.counters.drafts, model.counters.draft_tokens, model.counters.accepted_tokens) == (
        0,
        0,
        0,
    )
    assert model.counters.accepted_per_position == ()
