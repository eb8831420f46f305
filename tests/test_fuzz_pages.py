"""Fuzzing the page reader with mutated real captures: whatever a page says, read_page never
raises, never accepts a non-finite or impossible reading, and a target state fed a sequence of
such pages never exports an impossible figure.

Mutations work on the spec-decoding lines of real pages (tests/fixtures/pages/), where the
numbers matter: values replaced by extremes (NaN, +-Inf, 1e308, negatives, 2^53 + 1), lines
duplicated or dropped, positions made huge, labels stretched, bytes inserted. Hypothesis runs a
fixed, derandomised set of examples, so the fast tier stays fast and reproducible.
"""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState
from specmon.engines import PageLimits, read_page
from specmon.engines.model import ModelReading
from tests.support.inprocess import Fleet, assert_sane

PAGES = Path(__file__).parent / "fixtures" / "pages"
CAPTURES = [
    (PAGES / name).read_text(encoding="utf-8")
    for name in (
        "vllm-single.txt",
        "vllm-multiproc.txt",
        "vllm-openmetrics.txt",
        "llamacpp-after.txt",
        "llamacpp-synth.txt",
    )
]
EXTREMES = ["NaN", "+Inf", "-Inf", "1e308", "-1", "-0.5", "9007199254740993", "0", "1e-300", "x"]
LIMITS = PageLimits()


def spec_lines(page: str) -> list[int]:
    return [
        i for i, line in enumerate(page.split("\n")) if "spec_decode" in line and line[:1] != "#"
    ]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    page = draw(st.sampled_from(CAPTURES))
    lines = page.split("\n")
    targets = spec_lines(page) or [0]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.sampled_from(targets))
        line = lines[i]
        op = draw(st.integers(0, 7))
        head = line.rpartition(" ")[0]
        if op == 0 and head:
            lines[i] = f"{head} {draw(st.sampled_from(EXTREMES))}"
        elif op == 1 and head:
            lines[i] = f"{head} {draw(st.floats(allow_nan=True, allow_infinity=True))!r}"
        elif op == 2:
            lines.insert(i, line)  # an exact duplicate
        elif op == 3:
            lines[i] = ""  # a series vanishes
        elif op == 4:
            lines[i] = line.replace('position="', f'position="{draw(st.integers(0, 10**7))}')
        elif op == 5:
            lines[i] = line.replace(
                'model_name="', 'model_name="' + "m" * draw(st.integers(0, 600))
            )
        elif op == 6:
            cut = draw(st.integers(0, len(line)))
            junk = draw(st.text(max_size=20))
            lines[i] = line[:cut] + junk + line[cut:]
        else:
            lines[i] = line.replace('engine="0"', 'engine="1"')  # a second engine process
    return "\n".join(lines)


def assert_possible(model: ModelReading) -> None:
    c = model.counters
    if c is not None:
        values = (c.drafts, c.draft_tokens, c.accepted_tokens, *c.accepted_per_position)
        assert all(isinstance(v, int) and 0 <= v <= 2**53 for v in values), c
        per = c.accepted_per_position
        assert len(per) <= LIMITS.max_position
        assert all(per[i] <= per[i - 1] for i in range(1, len(per))), c
        if per:
            assert per[0] <= c.drafts * (1 + 1e-5), c
        assert c.accepted_tokens <= c.draft_tokens * (1 + 1e-5), c
    g = model.gauges
    if g is not None:
        for value in (g.acceptance_rate, g.efficiency):
            assert value is None or 0.0 <= value <= 1.0, g
        length = g.mean_acceptance_length
        assert length is None or 1.0 <= length <= LIMITS.max_position + 1, g
    running = model.context.requests_running
    assert running is None or (math.isfinite(running) and running >= 0)
    assert len(model.model) <= LIMITS.max_label_length


@settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated())
def test_read_page_never_raises_and_accepts_only_possible_readings(page: str) -> None:
    reading = read_page(page)
    assert len(reading.models) <= LIMITS.max_models
    for model in reading.models:
        assert_possible(model)


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutated(), min_size=2, max_size=6))
def test_a_sequence_of_mutated_pages_never_exports_an_impossible_figure(pages: list[str]) -> None:
    fleet = Fleet("t")
    for i, page in enumerate(pages):
        fleet.feed("t", page, 5.0 * i)
    assert_sane(fleet.export())


def test_the_mutations_reach_the_validation() -> None:
    """The fuzzer is worth running only if its pages get refused for the reasons it aims at."""
    seen: set[str] = set()

    @settings(max_examples=300, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
    @given(mutated())
    def collect(page: str) -> None:
        seen.update(r.reason.value for r in read_page(page).rejected)

    collect()
    assert {"non_finite", "negative", "duplicate_series", "position_limit"} <= seen, seen


def test_target_state_survives_a_clean_page_after_garbage() -> None:
    state = TargetState(TargetConfig(name="t", url="http://h:1/m"), windows=(60.0,), retention=70.0)
    state.observe(read_page("\x00\xff garbage {{{"), mono=0, wall=0, duration=0)
    state.observe(read_page(CAPTURES[0]), mono=5, wall=5, duration=0)
    assert state.view.up and state.view.speculation
