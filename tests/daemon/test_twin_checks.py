"""Twins are checked before they are believed (issue 53): a twin that speculates itself, or
serves another model, is not compared with; the verdict falls to the next basis, its note says
why, ``specmon_baseline_usable`` says so, and check-config does when it can know."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specmon.answer import Evidence, ReadState, words
from specmon.config_values import ConfigError
from specmon.daemon import metrics
from specmon.daemon.collector import target_samples
from specmon.daemon.config import parse_config
from specmon.daemon.target import TargetState, Twins
from specmon.engines import Context, Engine, ModelReading, PageReading
from specmon.surfaces.status import views_json
from tests.support.views import counters, feed_one, load_pair, state

PHASES = ((12, 4.0, 0.010, 0.0125),)


def _usable(target: TargetState) -> list[tuple[tuple[str, ...], float | None]]:
    return [(tuple(s.labels.values()), s.value) for s in target_samples(target.view)
            if s.family is metrics.BASELINE_USABLE]  # fmt: skip


def _pair(twin_pages: list[PageReading], **config: object) -> TargetState:
    spec_pages, _ = load_pair(PHASES)
    fleet = Twins()
    twin = state("twin", fleet=fleet, **config.pop("twin_config", {}))  # type: ignore[arg-type]
    target = state("spec", fleet=fleet, baseline="twin", **config)
    for i, (spec_page, twin_page) in enumerate(zip(spec_pages, twin_pages, strict=True)):
        feed_one(twin, twin_page, i)
        feed_one(target, spec_page, i)
    return target


def _verdict_basis(target: TargetState) -> Evidence | None:
    window = target.view.models[0].windows[0]
    return window.answer.basis if window.answer is not None else None


def test_a_true_twin_is_used_and_says_so() -> None:
    _, base_pages = load_pair(PHASES)
    target = _pair(base_pages)
    assert _verdict_basis(target) is Evidence.TWIN
    assert _usable(target) == [(("spec", "twin", "same_model"), 1.0)]


def test_a_twin_that_speculates_is_refused() -> None:
    """17.7x realized against a speculating 70B twin; 0.735x against a speculating twin of
    the same model (a false "speculation costs time")."""
    spec_pages, _ = load_pair(PHASES)
    target = _pair(spec_pages)
    assert _verdict_basis(target) is Evidence.DEFAULT
    window = target.view.models[0].windows[0]
    assert window.answer is not None and "speculates itself" in words.detail(window.answer)
    assert not window.answer.compared
    assert _usable(target) == [(("spec", "twin", "speculates"), 0.0)]
    (document,) = views_json([target.view])
    assert document["baseline_check"]["reason"] == "speculates"
    (refused,) = document["models"][0]["windows"][0]["verdict"]["refused"]
    assert refused["basis"] == "twin" and refused["reason"].startswith("the twin")


def _renamed(pages: list[PageReading], model: str) -> list[PageReading]:
    return [replace(p, plain_models=tuple(replace(m, model=model) for m in p.plain_models))
            for p in pages]  # fmt: skip


def test_a_twin_of_another_model_is_refused() -> None:
    _, base_pages = load_pair(PHASES)
    target = _pair(_renamed(base_pages, "llama-70b"))
    assert _verdict_basis(target) is Evidence.DEFAULT
    window = target.view.models[0].windows[0]
    assert window.answer is not None and "'llama-70b'" in words.detail(window.answer)
    assert _usable(target) == [(("spec", "twin", "other_model"), 0.0)]


def _llama(i: int, *, drafts: bool) -> PageReading:
    """A llama.cpp page: no model name ("default"); without a draft model spec_decode_* stay 0."""
    n = 400 * i
    spec = counters(n, 3 * n, (n * 3 // 4, n // 2, n // 4)) if drafts else counters(0, 0, ())
    context = Context(generation_seconds=0.6 * i + 0.001, generation_tokens=n * 2 + 1,
                      engine_steps=100 * i, busy_slots_per_decode=4.0, significant_digits=6)  # fmt: skip
    return PageReading(
        engine=Engine.LLAMACPP, models=(ModelReading("default", spec, context=context),)
    )


@pytest.mark.parametrize(
    ("models", "reason", "usable"),
    [((None, None), "model_not_checked", 1.0), (("qwen", "qwen"), "same_model", 1.0),
     (("qwen", "llama"), "other_model", 0.0)],
)  # fmt: skip
def test_llama_cpp_twins_are_checked_by_their_configured_model(
    models: tuple[str | None, str | None], reason: str, usable: float
) -> None:
    fleet = Twins()
    twin = state("twin", fleet=fleet, model=models[1])
    target = state("spec", fleet=fleet, baseline="twin", model=models[0])
    for i in range(1, 8):
        feed_one(twin, _llama(i, drafts=False), i)
        feed_one(target, _llama(i, drafts=True), i)
    assert _usable(target) == [(("spec", "twin", reason), usable)]
    if reason == "model_not_checked":
        notes = [n for w in target.view.models[0].windows if w.answer for n in w.answer.notes]
        assert any("model not checked" in n for n in notes), notes


def test_check_config_names_a_twin_of_another_configured_model(tmp_path: Path) -> None:
    text = (
        "targets:\n"
        "  - {name: bad, url: 'ftp://x'}\n"  # an invalid target before: the indices stay right
        "  - {name: twin, url: 'http://127.0.0.1:1/metrics', model: llama-70b}\n"
        "  - {name: spec, url: 'http://127.0.0.1:2/metrics', model: qwen, baseline: twin}\n"
        "  - {name: lost, url: 'http://127.0.0.1:3/metrics', baseline: nobody}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, base_dir=tmp_path)
    problems = "\n".join(caught.value.problems)
    assert "targets[2].baseline: the twin 'twin' serves model 'llama-70b'" in problems, problems
    assert "targets[3].baseline: no target named 'nobody'" in problems, problems


def test_a_realized_speedup_above_the_bound_is_withheld_and_counted() -> None:
    """The twin's step is 28 ms (7 s of engine time in 5 s: within the laws), the target's
    12.5 ms at 2.5 tokens a step: 5.6x realized, above (k + 1) x 1.1 = 4.4 at k = 3."""
    spec_pages, base_pages = load_pair(((12, 4.0, 0.028, 0.0125),))
    fleet = Twins()
    twin = state("twin", fleet=fleet)
    target = state("spec", fleet=fleet, baseline="twin")
    for i, (spec_page, twin_page) in enumerate(zip(spec_pages, base_pages, strict=True)):
        feed_one(twin, twin_page, i)
        feed_one(target, spec_page, i)
    assert "speedup_above_bound" in {r.reason.value for r in target.view.rejected}
    for window in target.view.models[0].windows:
        answer = window.answer
        assert answer is not None and answer.speedup is None
        assert all(b.speedup is None for b in answer.per_load)
        # No figure from a comparison the bounds refuse, and no guess in its place.
        assert answer.basis is Evidence.TWIN and answer.state is ReadState.MEASURING
        assert answer.progress is not None and answer.progress.startswith("withheld"), answer
