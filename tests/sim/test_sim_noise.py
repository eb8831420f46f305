"""The simulator's realistic noise (issue 63, specmon.sim.noise): the step-time drift's spread
and persistence and the request classes' mix, measured from generated pages the way specmon
reads them, against the parameters they were generated from."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest

from specmon.cli.demo import NOISE_CLASSES, NOISE_SURVIVAL, demo_fleet
from specmon.engines import read_page
from specmon.engines.model import SpecCounters
from specmon.load import LoadCounters, interval, load_counters
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import LoadModel
from specmon.sim.noise import Classes, Drift, drift_step, mean_survival, share_for_tokens
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target

MODEL = LoadModel(weights_seconds=0.002, token_seconds=0.000125, fixed_seconds=0.00025)
SURVIVAL = tuple(0.9**i for i in range(1, 5))
OTHER = tuple(0.5**i for i in range(1, 5))


def _read(target: VirtualTarget) -> tuple[LoadCounters, SpecCounters]:
    page = read_page(target.page(), model=target.model)
    context = page.context_of(target.model)
    model = next(iter(page.models), None)
    assert context is not None and model is not None
    counters = load_counters(context, model.counters)
    assert counters is not None and model.counters is not None
    return counters, model.counters


def _autocorrelation(xs: list[float], lag: int) -> float:
    m = statistics.fmean(xs)
    var = sum((x - m) ** 2 for x in xs)
    return sum((a - m) * (b - m) for a, b in zip(xs, xs[lag:], strict=False)) / var


def test_drift_spread_and_persistence_from_the_pages() -> None:
    drift = Drift(sd=0.05, seconds=10.0)
    settings = SimSettings(survival=SURVIVAL, requests_running=4, load_model=MODEL, drift=drift)
    target = make_target(name="d", kind=PageKind.VLLM, settings=settings, seed=11)
    start = target.started
    target.tick(start)
    before, _ = _read(target)
    logs: list[float] = []
    truth = MODEL.step_seconds(4, 4)
    for second in range(1, 2001):
        target.tick(start + second)
        after, _ = _read(target)
        step = interval(before, after).step_seconds
        assert step is not None
        logs.append(math.log(step / truth))
        before = after
    # The per-second step time's log: sd 0.05 (the process sampled once a second, the
    # interval's mean over its steps), persistence exp(-1/10) a second and exp(-1) at 10 s.
    assert statistics.pstdev(logs) == pytest.approx(0.05, rel=0.2)
    assert _autocorrelation(logs, 1) == pytest.approx(math.exp(-0.1), abs=0.04)
    assert _autocorrelation(logs, 10) == pytest.approx(math.exp(-1.0), abs=0.15)
    assert _autocorrelation(logs, 60) < 0.15
    # The factor's mean is 1: the expected step time, the truth, is the load model's.
    factors = [math.exp(x) for x in logs]
    assert statistics.fmean(factors) == pytest.approx(1.0, abs=0.015)


def test_without_drift_the_step_time_is_the_models() -> None:
    settings = SimSettings(survival=SURVIVAL, requests_running=4, load_model=MODEL)
    target = make_target(name="d", kind=PageKind.VLLM, settings=settings, seed=11)
    start = target.started
    target.tick(start)
    before, _ = _read(target)
    target.tick(start + 50.0)
    got = interval(before, _read(target)[0]).step_seconds
    assert got == pytest.approx(MODEL.step_seconds(4, 4), rel=1e-6)


def test_drift_step_is_an_exact_ar1() -> None:
    import random

    drift = Drift(sd=0.03, seconds=60.0)
    rng = random.Random(3)
    x, xs = 0.0, []
    for _ in range(60_000):
        x = drift_step(rng, x, drift=drift, elapsed=1.0)
        xs.append(x)
    assert statistics.pstdev(xs) == pytest.approx(0.03, rel=0.1)
    assert _autocorrelation(xs, 1) == pytest.approx(math.exp(-1 / 60), abs=0.01)
    # Two half steps are one step in distribution: the same persistence.
    rng, x, halves = random.Random(4), 0.0, []
    for _ in range(60_000):
        x = drift_step(rng, x, drift=drift, elapsed=0.5)
        halves.append(x)
    assert _autocorrelation(halves[::2], 1) == pytest.approx(math.exp(-1 / 60), abs=0.01)


def test_class_mix_from_the_pages() -> None:
    classes = Classes(survival=OTHER, share=0.3, swing=0.2, period=100.0)
    settings = SimSettings(survival=SURVIVAL, requests_running=8, load_model=MODEL, classes=classes)
    target = make_target(name="c", kind=PageKind.VLLM, settings=settings, seed=5)
    start = target.started
    target.tick(start)
    _, first = _read(target)
    previous = first
    peaks: list[float] = []
    troughs: list[float] = []
    for second in range(5, 1001, 5):
        target.tick(start + second)
        _, now = _read(target)
        drafts = now.drafts - previous.drafts
        per_draft = 1 + (now.accepted_tokens - previous.accepted_tokens) / drafts
        # The share is highest (0.5) at 25 s into each 100 s period, lowest (0.1) at 75 s.
        phase = (second - 2.5) % 100
        if 20 <= phase <= 30:
            peaks.append(per_draft)
        elif 70 <= phase <= 80:
            troughs.append(per_draft)
        previous = now
    k_a, k_b = 1 + sum(SURVIVAL), 1 + sum(OTHER)
    # Near the peak the second class drafts about half, near the trough a tenth.
    assert statistics.fmean(peaks) == pytest.approx(0.5 * k_a + 0.5 * k_b, rel=0.03)
    assert statistics.fmean(troughs) == pytest.approx(0.9 * k_a + 0.1 * k_b, rel=0.03)
    # Over whole periods: the mean survival's tokens per step, position by position.
    _, last = _read(target)
    drafts = last.drafts - first.drafts
    want = mean_survival(SURVIVAL, classes)
    for i, rate in enumerate(want):
        got = (last.accepted_per_position[i] - first.accepted_per_position[i]) / drafts
        assert got == pytest.approx(rate, rel=0.02)


def test_the_demos_noise_keeps_its_truth() -> None:
    # The demo's mix keeps 3.4 tokens per step (so the crossover's truth stays 10.88).
    assert 1 + sum(mean_survival(NOISE_SURVIVAL, NOISE_CLASSES)) == pytest.approx(3.4)
    assert NOISE_CLASSES.share - NOISE_CLASSES.swing > 0
    loaded = {t.name: t for t in demo_fleet(noise="both")}
    plain = {t.name: t for t in demo_fleet()}
    spec, twin = loaded["vllm-loaded"].engine, loaded["vllm-baseline"].engine
    assert spec.settings.drift is not None and spec.settings.classes == NOISE_CLASSES
    # The twins drift independently (their own processes).
    assert spec.drift_state != twin.drift_state
    # Off by default (the crossover strays past its band with it: bench/RESULTS.md).
    assert plain["vllm-loaded"].engine.settings.drift is None
    assert plain["vllm-loaded"].engine.settings.classes is None
    drift_only = {t.name: t for t in demo_fleet(noise="drift")}["vllm-loaded"].engine.settings
    assert drift_only.drift is not None and drift_only.classes is None
    with pytest.raises(ValueError, match="noise must be one of"):
        demo_fleet(noise="loud")


def test_noise_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="drift sd"):
        SimSettings(drift=Drift(sd=-0.1)).validate()
    with pytest.raises(ValueError, match="drift seconds"):
        SimSettings(drift=Drift(sd=0.1, seconds=0.0)).validate()
    with pytest.raises(ValueError, match="needs a load model"):
        SimSettings(drift=Drift(sd=0.03)).validate()
    with pytest.raises(ValueError, match="survival rates, the chain"):
        SimSettings(survival=(0.8, 0.6), classes=Classes(survival=OTHER, share=0.3)).validate()
    with pytest.raises(ValueError, match="within"):
        replace(
            SimSettings(survival=SURVIVAL), classes=Classes(survival=OTHER, share=0.3, swing=0.4)
        ).validate()
    with pytest.raises(ValueError, match="outside"):
        share_for_tokens(SURVIVAL, OTHER, tokens_per_step=5.0)


def test_simulate_command_line_noise() -> None:
    from specmon.cli.main import build_parser
    from specmon.cli.simulate import build_targets

    argv = ["simulate", "--engine", "vllm", "--alpha", "0.9", "--chain-length", "4",
            "--load-model", "demo", "--requests-running", "4", "--drift-sd", "0.03",
            "--drift-seconds", "30", "--class-alpha", "0.5", "--class-share", "0.3",
            "--class-swing", "0.1", "--class-period", "120"]  # fmt: skip
    [t] = build_targets(build_parser().parse_args(argv), None)
    s = t.engine.settings
    assert s.drift == Drift(sd=0.03, seconds=30.0)
    assert s.classes == Classes(survival=OTHER, share=0.3, swing=0.1, period=120.0)
    [plain] = build_targets(build_parser().parse_args(argv[:11]), None)
    assert plain.engine.settings.drift is None and plain.engine.settings.classes is None
    with pytest.raises(ValueError, match="needs a load model"):
        build_targets(build_parser().parse_args([*argv[:7], "--drift-sd", "0.03"]), None)
    bad = [*argv[:11], "--class-alpha", "0.5", "--class-share", "0.9", "--class-swing", "0.2"]
    with pytest.raises(ValueError, match="within"):
        build_targets(build_parser().parse_args(bad), None)
