"""The simulator's statistics, scenarios and HTTP behaviour."""

from __future__ import annotations

import json
import math
import random
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from specmon.arithmetic import effective_alpha
from specmon.config_values import ConfigError
from specmon.engines import read_page
from specmon.report import report_from_counters
from specmon.sim.engine import Mode, SimEngine, SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.sampling import binomial, draw_positions, poisson
from specmon.sim.scenario import parse_scenario
from specmon.sim.server import VirtualTarget, make_target
from tests.support.fake_engines import running


def mode_of(target: VirtualTarget) -> Mode:
    """Read afresh (a plain attribute access would stay narrowed by an earlier assert)."""
    return target.mode


Z = 5.0  # standard errors: a false failure has probability < 1e-6 per check


def test_binomial_and_poisson_moments() -> None:
    rng = random.Random(1)
    n, p, draws = 1000, 0.3, 4000
    values = [binomial(rng, n, p) for _ in range(draws)]
    mean = sum(values) / draws
    assert abs(mean - n * p) < Z * math.sqrt(n * p * (1 - p) / draws)
    assert binomial(rng, 10, 0.0) == 0 and binomial(rng, 10, 1.0) == 10
    lam = 12.5
    values = [poisson(rng, lam) for _ in range(draws)]
    assert abs(sum(values) / draws - lam) < Z * math.sqrt(lam / draws)
    big = [poisson(rng, 500.0) for _ in range(400)]
    assert abs(sum(big) / 400 - 500.0) < Z * math.sqrt(500.0 / 400)


@pytest.mark.parametrize("kind", [PageKind.VLLM, PageKind.LLAMACPP])
@pytest.mark.parametrize(
    "survival", [(0.9, 0.7, 0.5, 0.3), (0.6, 0.2), (0.95, 0.9, 0.85, 0.8, 0.75, 0.7)]
)
def test_estimated_survival_converges_within_the_sampling_bound(
    kind: PageKind, survival: tuple[float, ...]
) -> None:
    """Through the whole path: simulated page -> parser -> adapter -> report."""
    target = make_target(
        name="t", kind=kind, seed=11,
        settings=SimSettings(survival=survival, drafts_per_second=2000, drafts_per_request=50),
    )  # fmt: skip
    target.tick(time.monotonic() + 100.0)  # ~200,000 drafts
    counters = read_page(target.page()).models[0].counters
    assert counters is not None
    n = counters.drafts
    assert n > 150_000
    report = report_from_counters(counters, draft_cost=0.1)
    for pos, rate in zip(report.positions, survival, strict=True):
        assert pos.survival is not None
        bound = Z * math.sqrt(rate * (1 - rate) / n)
        assert abs(pos.survival - rate) <= bound, (pos.position, pos.survival, rate, bound)


@pytest.mark.parametrize(("alpha", "k"), [(0.3, 2), (0.7, 4), (0.9, 8)])
def test_effective_alpha_converges(alpha: float, k: int) -> None:
    engine = SimEngine(settings=SimSettings.from_alpha(alpha, k), seed=5)
    n = 100_000
    engine.add_drafts(n)
    c = engine.counters
    survival = [alpha**i for i in range(1, k + 1)]
    mean = sum(survival)
    # accepted length L: P(L >= i) = s_i; E[L^2] = sum (2i - 1) s_i
    variance = sum((2 * i - 1) * s for i, s in enumerate(survival, start=1)) - mean**2
    half = Z * math.sqrt(variance / n)
    measured = effective_alpha(c.accepted / n, k)
    assert measured is not None
    lo = effective_alpha(max(mean - half, 0.0), k)
    hi = effective_alpha(min(mean + half, float(k)), k)
    assert lo is not None and hi is not None
    assert lo <= measured <= hi
    assert lo <= alpha <= hi


def test_draw_positions_is_prefix_consistent() -> None:
    rng = random.Random(3)
    counts = draw_positions(rng, 10_000, (0.9, 0.5, 0.5, 0.1))
    assert counts == sorted(counts, reverse=True)


def test_llamacpp_counters_move_only_when_a_request_ends() -> None:
    engine = SimEngine(
        settings=SimSettings(survival=(0.8, 0.5), drafts_per_request=10_000), seed=1, lumpy=True
    )
    engine.add_drafts(4999)  # requests are 5,000 to 15,000 drafts long
    assert engine.counters.drafts == 0
    assert not engine.counters.positions_published
    engine.add_drafts(20_000)
    assert engine.counters.drafts >= 4999
    assert engine.counters.positions_published


def test_scenario_changes_restarts_and_errors() -> None:
    scenario = parse_scenario(
        """
phases:
  - at: 0s
    alpha: 0.9
    chain_length: 3
    drafts_per_second: 100
  - at: 10s
    survival: [0.2, 0.05, 0.01]
  - at: 20s
    restart: true
  - at: 30s
    mode: error
  - at: 40s
    chain_length: 5
    mode: normal
"""
    )
    target = make_target(
        name="t", kind=PageKind.VLLM, settings=SimSettings(), scenario=scenario, seed=2
    )
    start = target.started
    assert target.engine.settings.survival == pytest.approx((0.9, 0.81, 0.729))
    target.tick(start + 9.9)
    before_drop = target.engine.counters.drafts
    assert before_drop > 800
    target.tick(start + 15)
    assert target.engine.settings.survival == (0.2, 0.05, 0.01)
    target.tick(start + 25)
    assert target.engine.restarts == 1
    assert target.engine.counters.drafts < before_drop
    target.tick(start + 35)
    assert mode_of(target) is Mode.ERROR
    target.tick(start + 45)
    assert mode_of(target) is Mode.NORMAL
    assert target.engine.settings.chain_length == 5
    assert target.engine.restarts == 2  # a new chain length is a restart
    assert len(target.engine.counters.per_pos) == 5


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("phases: []", ["phases: must be a non-empty list"]),
        (
            "phases:\n  - at: 10s\n    alpha: 2\n  - at: 5s\n    mode: sideways\n    colour: 1\nrepeat: true\n",
            [
                "phases[0].alpha: must be between 0 and 1",
                "phases[1].colour: unknown key",
                "phases[1].at: phases must be in time order",
                "phases[1].mode: 'sideways' is not a valid Mode",
                "period: required when repeat is true",
            ],
        ),
        (
            "phases:\n  - survival: [0.5, 0.7]\n",
            ["phases[0]: survival must not rise along the chain (position 2: 0.7 > 0.5)"],
        ),
    ],
)
def test_bad_scenarios_name_every_problem(text: str, problems: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(text)
    assert info.value.problems == problems


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=3) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def _post(url: str, payload: dict[str, object]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_modes_and_openai_endpoints() -> None:
    vllm = make_target(
        name="v", kind=PageKind.VLLM, settings=SimSettings(drafts_per_second=50), seed=1
    )
    llama = make_target(
        name="l", kind=PageKind.LLAMACPP, settings=SimSettings(drafts_per_second=0), seed=1
    )
    baseline = make_target(
        name="b", kind=PageKind.LLAMACPP, settings=SimSettings(speculation=False), seed=1
    )
    with running([vllm, llama, baseline], shared=True) as engines:
        base = engines.server.addresses
        status, body, headers = _get(base["v"] + "/metrics")
        assert (
            status == 200 and headers["Content-Type"] == "text/plain; version=1.0.0; charset=utf-8"
        )
        assert read_page(body).models[0].counters is not None
        status, body, headers = _get(
            base["v"] + "/metrics/", {"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert headers["Content-Type"].startswith("application/openmetrics-text")
        assert body.rstrip().endswith("# EOF") and "vllm_spec_decode_num_drafts_total" in body
        for mode, expected in ((Mode.ERROR, 500), (Mode.NO_METRICS, 501)):
            vllm.engine.settings = SimSettings(mode=mode)
            status, body, _ = _get(base["v"] + "/metrics")
            assert status == expected
        assert "Start it with `--metrics`" in body
        vllm.engine.settings = SimSettings(mode=Mode.GARBAGE)
        status, body, _ = _get(base["v"] + "/metrics")
        assert status == 200 and not read_page(body).is_exposition
        # chat: llama.cpp shape with timings; counters move at the end of the request
        payload = {"model": "tiny-llama", "messages": [{"role": "user", "content": "copy this: a b c"}],
                   "max_tokens": 50, "temperature": 0, "seed": 3}  # fmt: skip
        status, spec = _post(base["l"] + "/v1/chat/completions", payload)
        assert status == 200
        timings = spec["timings"]
        assert isinstance(timings, dict) and timings["draft_n"] >= timings["draft_n_accepted"] > 0
        assert spec["usage"] == {"completion_tokens": 50, "prompt_tokens": 5, "total_tokens": 55}
        counters = read_page(_get(base["l"] + "/metrics")[1]).models[0].counters
        assert counters is not None and counters.draft_tokens == timings["draft_n"]
        assert counters.accepted_tokens == timings["draft_n_accepted"]
        # the same greedy text with and without speculation
        status, plain = _post(base["b"] + "/v1/chat/completions", payload)
        assert plain["choices"] == spec["choices"]
        assert "draft_n" not in plain["timings"]
        status, models = _get(base["l"] + "/v1/models")[:2]
        assert json.loads(models)["data"][0]["id"] == "tiny-llama"
