"""The simulator's load model: step times by hand, the batcher's counters read back through
specmon's adapters and specmon.load, background load, scenarios."""

from __future__ import annotations

import asyncio

import pytest

from specmon.daemon.config import ConfigError
from specmon.engines import read_page
from specmon.load import LoadCounters, interval, load_counters
from specmon.sim.engine import SimEngine, SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL, LoadModel, load_model_from
from specmon.sim.pages import PageKind
from specmon.sim.scenario import parse_scenario
from specmon.sim.server import VirtualTarget, make_target

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
MODEL = LoadModel(
    weights_seconds=0.008,
    token_seconds=0.0005,
    fixed_seconds=0.001,
    draft_fixed_seconds=0.0006,
    draft_weights_seconds=0.0001,
    draft_token_seconds=0.00002,
)


def test_step_time_by_hand() -> None:
    # n = 1, k = 4: 1 + max(8, 1 * 5 * 0.5) + 4 * (0.6 + max(0.1, 0.02)) = 11.8 ms.
    assert MODEL.step_seconds(1, 4) == pytest.approx(0.0118)
    # n = 16, k = 4: 1 + max(8, 16 * 5 * 0.5 = 40) + 4 * (0.6 + max(0.1, 0.32)) = 44.68 ms.
    assert MODEL.step_seconds(16, 4) == pytest.approx(0.04468)
    # Without speculation the arithmetic hides under the weights until n = 16.
    assert MODEL.step_seconds(16, 0) == pytest.approx(0.009)
    assert MODEL.step_seconds(32, 0) == pytest.approx(0.001 + 0.016)
    assert MODEL.draft_cost(1, 4) == pytest.approx((0.0118 / 0.009 - 1) / 4)
    assert MODEL.speedup(1, 4, 3.4) == pytest.approx(3.4 * 0.009 / 0.0118)


def test_crossover_by_construction() -> None:
    # DEMO: pays while 3.4 * 9 ms > 1 + n * 5 * 0.5 + 4 * 0.6 ms (n <= 16): n < 10.88.
    assert DEMO_LOAD_MODEL.crossover(4, 3.4) == pytest.approx((3.4 * 9 - 1 - 2.4) / 2.5)
    assert DEMO_LOAD_MODEL.speedup(10.87, 4, 3.4) > 1 > DEMO_LOAD_MODEL.speedup(10.89, 4, 3.4)
    # A draft as slow as the target never pays; a free one always pays (in the range asked).
    slow = LoadModel(weights_seconds=0.008, token_seconds=0.0005, draft_fixed_seconds=0.008)
    assert slow.crossover(4, 3.4) == 1.0
    assert LoadModel(weights_seconds=1.0, token_seconds=0.0).crossover(4, 3.4) is None


def test_load_model_parsing_names_every_problem() -> None:
    assert load_model_from("demo") == DEMO_LOAD_MODEL
    assert load_model_from("none") is None and load_model_from(None) is None
    assert load_model_from("weights_seconds=0.002,token_seconds=1e-4") == LoadModel(0.002, 1e-4)
    assert load_model_from({"weights_seconds": 1, "token_seconds": 0}) == LoadModel(1.0, 0.0)
    with pytest.raises(ValueError, match="unknown field") as exc:
        load_model_from({"weights_seconds": "x", "speed": 1})
    text = str(exc.value)
    assert "speed: unknown field" in text
    assert "weights_seconds: must be a number" in text
    assert "token_seconds: required" in text
    with pytest.raises(ValueError, match="must be finite and >= 0"):
        load_model_from("weights_seconds=-1,token_seconds=0")


def batch_target(kind: PageKind, *, speculation: bool) -> VirtualTarget:
    settings = SimSettings(
        survival=SURVIVAL,
        drafts_per_second=0.0,
        requests_running=0,
        speculation=speculation,
        load_model=MODEL,
    )
    # time_scale 0: the batch loop does not wait; the counters hold the model's times.
    return make_target(name="t", kind=kind, settings=settings, seed=5, time_scale=0.0)


def reading(target: VirtualTarget) -> LoadCounters:
    page = read_page(target.page(), model=target.model)  # llama.cpp names no model
    context = page.context_of(target.model)
    assert context is not None
    model = next(iter(page.models), None)
    counters = load_counters(context, model.counters if model is not None else None)
    assert counters is not None
    return counters


async def _submit(target: VirtualTarget, n: int, tokens: int) -> list[int]:
    results = await asyncio.gather(*(target.batcher.submit(tokens) for _ in range(n)))
    await target.batcher.close()
    return [r.tokens for r in results]


@pytest.mark.parametrize("kind", [PageKind.VLLM, PageKind.LLAMACPP])
def test_batched_requests_without_speculation_read_back_exactly(kind: PageKind) -> None:
    target = batch_target(kind, speculation=False)
    before = reading(target)
    assert asyncio.run(_submit(target, 8, 40)) == [40] * 8
    got = interval(before, reading(target))
    # Eight requests joined at the first step (their prefill) and finished together 39 decode
    # steps later. llama.cpp's window formula counts each request's first token too (no
    # finished-request counter on its page): 39 steps' time over 40 tokens.
    step = MODEL.step_seconds(8, 0)
    bias = 1.0 if kind is PageKind.VLLM else 39 / 40
    assert got.concurrency == pytest.approx(8.0)
    assert got.step_seconds == pytest.approx(step * bias)
    assert got.time_per_output_token_seconds == pytest.approx(step * bias)
    assert got.engine_steps == 40


def test_batched_speculative_requests_follow_the_model() -> None:
    target = batch_target(PageKind.VLLM, speculation=True)
    before = reading(target)
    asyncio.run(_submit(target, 4, 200))
    got = interval(before, reading(target))
    c = target.engine.counters
    assert got.request_steps == c.drafts  # every decode step carries a draft of k = 4
    assert got.drafted_per_step == pytest.approx(4.0)
    # Steps with 4 requests take T(4, 4); the tail, as requests finish, T(3..1, 4).
    assert MODEL.step_seconds(1, 4) <= (got.step_seconds or 0) <= MODEL.step_seconds(4, 4)
    assert got.concurrency is not None and 3.5 < got.concurrency <= 4.0
    # Tokens per step: 1 + accepted per draft, less what max_tokens cut off.
    assert got.tokens_per_step == pytest.approx(1 + sum(SURVIVAL), abs=0.12)
    page = target.page()
    assert 'vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0' in page


def test_llamacpp_counters_land_when_each_request_ends() -> None:
    target = batch_target(PageKind.LLAMACPP, speculation=True)

    async def scenario() -> tuple[int, int, int]:
        short = asyncio.ensure_future(target.batcher.submit(5))
        long = asyncio.ensure_future(target.batcher.submit(2000))
        await short
        mid = target.engine.counters
        snapshot = (mid.generation_tokens, mid.engine_steps, mid.drafts)
        await long
        await target.batcher.close()
        return snapshot

    tokens, steps, drafts = asyncio.run(scenario())
    assert tokens == 5  # only the finished request's tokens
    assert steps > 0  # n_decode moves with every decode call
    c = target.engine.counters
    assert c.generation_tokens == 2005 and c.requests_finished == 2
    assert c.drafts > drafts


def test_background_load_runs_at_the_model_speed() -> None:
    settings = SimSettings(survival=SURVIVAL, requests_running=6, load_model=MODEL)
    engine = SimEngine(settings=settings, seed=3, now=0.0)
    engine.advance(10.0)
    step = MODEL.step_seconds(6, 4)
    c = engine.counters
    assert c.engine_steps == int(10.0 / step)
    assert c.busy_slots == 6 * c.engine_steps
    assert c.drafts == 6 * c.engine_steps
    assert c.itl.count == c.drafts and c.itl.sum == pytest.approx(c.drafts * step)
    # requests_running can change over time (scenarios): more load, longer steps.
    engine.configure(
        SimSettings(survival=SURVIVAL, requests_running=24, load_model=MODEL), now=10.0, wall=0.0
    )
    before = c.engine_steps
    engine.advance(20.0)
    assert engine.counters.engine_steps - before == int(10.0 / MODEL.step_seconds(24, 4)) or (
        engine.counters.engine_steps - before == int(10.0 / MODEL.step_seconds(24, 4)) + 1
    )


@pytest.mark.parametrize("kind", [PageKind.VLLM, PageKind.LLAMACPP, PageKind.VLLM_MULTIPROC])
def test_background_load_reads_back_through_the_adapters(kind: PageKind) -> None:
    settings = SimSettings(survival=SURVIVAL, requests_running=6, load_model=MODEL)
    target = make_target(name="bg", kind=kind, settings=settings, seed=2)
    start = target.started
    target.tick(start)
    before = reading(target)
    target.tick(start + 60.0)
    got = interval(before, reading(target))
    assert got.concurrency == pytest.approx(6.0)
    # llama.cpp's tokens and decode seconds land together when a simulated request ends; it
    # prints 6 significant digits.
    assert got.step_seconds == pytest.approx(MODEL.step_seconds(6, 4), rel=1e-5)


def test_legacy_background_publishes_consistent_load() -> None:
    settings = SimSettings(survival=SURVIVAL, requests_running=4, drafts_per_second=200.0)
    target = make_target(name="legacy", kind=PageKind.VLLM, settings=settings, seed=2)
    start = target.started
    target.tick(start)
    before = reading(target)
    target.tick(start + 100.0)
    got = interval(before, reading(target))
    # Four sequences sharing 200 drafts a second: a step every 20 ms, each 4 drafts.
    assert got.concurrency == pytest.approx(4.0, rel=0.01)
    assert got.step_seconds == pytest.approx(4 / 200.0)


def test_scenario_changes_the_load() -> None:
    scenario = parse_scenario(
        """
phases:
  - at: 0s
    load_model: demo
    requests_running: 2
  - at: 30s
    requests_running: 24
  - at: 60s
    load_model: {weights_seconds: 0.002, token_seconds: 0.0001}
"""
    )
    settings = SimSettings(survival=SURVIVAL)
    for phase in scenario.phases:
        settings = phase.apply(settings)
    assert settings.requests_running == 24
    assert settings.load_model == LoadModel(0.002, 0.0001)
    with pytest.raises(ConfigError) as exc:
        parse_scenario(
            "phases:\n  - at: 0s\n    load_model: {speed: 1}\n    requests_running: -1\n"
        )
    text = str(exc.value)
    assert "phases[0].load_model: speed: unknown field" in text
    assert "requests_running must be >= 0" in text
