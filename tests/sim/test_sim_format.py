"""Simulated pages against the pages captured from real servers: same families, HELP/TYPE
lines, label sets, ``_created`` siblings and number formatting, for every engine."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.engines import read_page
from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import make_target

PAGES = Path(__file__).resolve().parent.parent / "fixtures" / "pages"

CAPTURES = {
    PageKind.VLLM: "vllm-single.txt",
    PageKind.VLLM_MULTIPROC: "vllm-multiproc.txt",
    PageKind.VLLM_OPENMETRICS: "vllm-openmetrics.txt",
    PageKind.LLAMACPP: "llamacpp-after.txt",
}


def shape(text: str) -> dict[str, tuple[str, str, frozenset[tuple[str, ...]]]]:
    """family name -> (type, help, set of label-name tuples of its samples, by sample name)."""
    out = {}
    for family in text_string_to_metric_families(text):
        labelsets = frozenset(
            (s.name, *sorted(k for k in s.labels if k != "position")) for s in family.samples
        )
        out[family.name] = (family.type, family.documentation, labelsets)
    return out


def header_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("# ")]


def simulated(kind: PageKind, *, k: int = 4, run: float = 30.0) -> str:
    target = make_target(
        name="t", kind=kind, model="tiny-llama",
        settings=SimSettings(survival=(0.9, 0.7, 0.5, 0.3)[:k], drafts_per_second=200,
                             drafts_per_request=30),
        seed=3,
    )  # fmt: skip
    target.tick(time.monotonic() + run)
    return target.page()


@pytest.mark.parametrize("kind", list(CAPTURES))
def test_same_families_help_type_and_label_sets(kind: PageKind) -> None:
    real = (PAGES / CAPTURES[kind]).read_text()
    sim = simulated(kind)
    assert shape(sim) == shape(real)
    assert header_lines(sim) == header_lines(real)


@pytest.mark.parametrize("kind", list(CAPTURES))
def test_position_series_follow_the_chain_length(kind: PageKind) -> None:
    for k in (1, 4):
        text = simulated(kind, k=k)
        positions = sorted(
            {int(p) for p in re.findall(r'per_pos_total\{[^}]*position="(\d+)"', text)}
        )
        assert positions == list(range(k))


def test_vllm_created_siblings_only_where_the_real_page_has_them() -> None:
    single = simulated(PageKind.VLLM)
    multi = simulated(PageKind.VLLM_MULTIPROC)
    assert re.search(r"^vllm:spec_decode_num_drafts_created\{", single, re.M)
    assert (
        len(re.findall(r"^vllm:spec_decode_num_accepted_tokens_per_pos_created\{", single, re.M))
        == 4
    )
    assert "_created" not in multi
    assert "_created" not in (PAGES / "vllm-multiproc.txt").read_text()


def _spec_values(text: str) -> list[str]:
    return re.findall(r"^\S*spec_decode_num_\w+_total(?:\{[^}]*\})? (\S+)$", text, re.M)


def test_number_formatting_matches_the_engines() -> None:
    vllm_real = _spec_values((PAGES / "vllm-single.txt").read_text())
    vllm_sim = _spec_values(simulated(PageKind.VLLM))
    # vLLM (Python prometheus_client) prints floats: "389.0"; four counters plus positions.
    assert len(vllm_real) >= 4 and len(vllm_sim) >= 4
    assert [v for v in vllm_real + vllm_sim if not re.fullmatch(r"\d+\.\d+", v)] == []
    llama_real = _spec_values((PAGES / "llamacpp-after.txt").read_text())
    llama_sim = _spec_values(simulated(PageKind.LLAMACPP))
    # llama.cpp prints integers below a million
    assert len(llama_real) >= 4 and len(llama_sim) >= 4
    assert [v for v in llama_real + llama_sim if not re.fullmatch(r"\d+", v)] == []


def test_large_values_are_formatted_like_each_engine() -> None:
    v = make_target(name="v", kind=PageKind.VLLM, settings=SimSettings(drafts_per_second=0))
    v.engine.counters.drafts = 1_843_200
    assert (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny-llama"} 1.8432e+06'
        in v.page()
    )
    ll = make_target(name="l", kind=PageKind.LLAMACPP, settings=SimSettings(drafts_per_second=0))
    ll.engine.counters.drafts = 1_234_567
    ll.engine.counters.draft_tokens = 3 * 1_234_567
    ll.engine.counters.per_pos = [1_111_111, 2, 1]
    ll.engine.counters.positions_published = True
    page = ll.page()
    assert "llamacpp:spec_decode_num_drafts_total 1.23457e+06" in page  # 6 significant digits
    assert 'position="0"} 1111111' in page  # per-position counters exact
    reading = read_page(page)
    assert reading.models[0].counters is not None
    assert "drafts" in reading.models[0].counters.rounded


def test_llamacpp_positions_absent_until_the_first_request_finishes() -> None:
    target = make_target(
        name="l", kind=PageKind.LLAMACPP,
        settings=SimSettings(survival=(0.9, 0.7, 0.5, 0.3), drafts_per_second=0),
    )  # fmt: skip
    before = target.page()
    real_before = (PAGES / "llamacpp-before.txt").read_text()
    assert shape(before) == shape(real_before)
    assert "per_pos" not in before
    target.engine.run_request(64)
    after = target.page()
    assert "per_pos" in after
    assert shape(after) == shape((PAGES / "llamacpp-after.txt").read_text())


def test_speculation_off_removes_the_spec_families_only() -> None:
    target = make_target(
        name="v", kind=PageKind.VLLM, settings=SimSettings(speculation=False, drafts_per_second=5)
    )
    page = target.page()
    assert "spec_decode" not in page
    assert "vllm:num_requests_running" in page
    reading = read_page(page)
    assert reading.engine is not None and not reading.speculation
    assert "speculation is off, or this build is too old" in (reading.message or "")


def test_llamacpp_without_a_draft_prints_zero_counters_like_the_real_server() -> None:
    """A real llama-server without -md publishes its speculative counters at 0 (checked against
    build b11434); so does the simulator, while generated tokens keep growing."""
    target = make_target(
        name="l",
        kind=PageKind.LLAMACPP,
        settings=SimSettings(speculation=False, drafts_per_second=50),
    )
    target.tick(target.started + 10)
    page = target.page()
    assert "llamacpp:spec_decode_num_drafts_total 0" in page
    assert "per_pos" not in page
    assert shape(page) == shape((PAGES / "llamacpp-before.txt").read_text())
    reading = read_page(page)
    (model,) = reading.models
    assert model.counters is not None and model.counters.drafts == 0
    assert (model.context.generation_tokens or 0) > 0
