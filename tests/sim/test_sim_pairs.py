"""Simulated pairs on other engines than vLLM: a speculating target and its twin without
speculation, on the same load model, read back through specmon's adapters and specmon.load
only (the pages, nothing else), give the realized speed-up the simulator was built to have:
K T(n, 0) / T(n, k) (``LoadModel.speedup``), at a load where speculation pays and at one where
it does not.

TGI's pages carry the router's load series as the real router records them
(``backends/v3/src/backend.rs``, ``queue.rs`` at huggingface/text-generation-inference
db931fcf): ``tgi_batch_inference_duration{method="decode"}`` once per decode call with its
wall time, ``tgi_request_skipped_tokens`` once per request per generation step (a prefill
step observes 0), ``tgi_batch_next_size`` once per new batch with its size.
"""

from __future__ import annotations

import asyncio

import pytest

from specmon.engines import read_page
from specmon.load import LoadCounters, LoadInterval, interval, load_counters
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
K = len(SURVIVAL)
#: The constructed truth's tokens per step: 1 + the survival's sum.
TOKENS = 1 + sum(SURVIVAL)
MODEL = DEMO_LOAD_MODEL
#: Speculation pays 2.68x at 2 requests and costs time at 24 (0.70x): the crossover is 10.88.
PAYS, COSTS = 2, 24
TGI_KINDS = [PageKind.TGI, PageKind.TGI_HISTOGRAM]


def reading(target: VirtualTarget) -> LoadCounters:
    page = read_page(target.page(), model=target.model)
    context = page.context_of(target.model)
    assert context is not None
    model = next(iter(page.models), None)
    got = load_counters(context, model.counters if model is not None else None)
    assert got is not None, page.notes
    return got


def pair(kind: PageKind, n: int) -> tuple[VirtualTarget, VirtualTarget]:
    def one(speculation: bool) -> VirtualTarget:
        settings = SimSettings(
            survival=SURVIVAL, requests_running=n, speculation=speculation, load_model=MODEL
        )
        return make_target(name="t", kind=kind, settings=settings, seed=3 if speculation else 4)

    return one(True), one(False)


def measured(target: VirtualTarget, seconds: float) -> LoadInterval:
    """The load interval between two scrapes ``seconds`` apart (the first after one second,
    so that a speculating TGI page has accepted a token and reads as speculating)."""
    target.tick(target.started + 1.0)
    before = reading(target)
    target.tick(target.started + 1.0 + seconds)
    return interval(before, reading(target))


@pytest.mark.parametrize("kind", TGI_KINDS)
@pytest.mark.parametrize("n", [PAYS, COSTS])
def test_tgi_pair_realizes_the_constructed_speedup(kind: PageKind, n: int) -> None:
    spec_target, twin_target = pair(kind, n)
    spec, twin = measured(spec_target, 60.0), measured(twin_target, 60.0)
    # The twin's page is read for its load series alone (no speculation).
    assert not read_page(twin_target.page()).models
    assert spec.concurrency == pytest.approx(n) and twin.concurrency == pytest.approx(n)
    assert spec.step_seconds == pytest.approx(MODEL.step_seconds(n, K))
    assert twin.step_seconds == pytest.approx(MODEL.step_seconds(n, 0))
    assert twin.tokens_per_step == pytest.approx(1.0)
    # Tokens per step: the drawn acceptance (60 s hold thousands of request-steps).
    assert spec.tokens_per_step == pytest.approx(TOKENS, rel=0.02)
    spec_tpot, twin_tpot = spec.time_per_output_token_seconds, twin.time_per_output_token_seconds
    assert spec_tpot is not None and twin_tpot is not None
    realized = twin_tpot / spec_tpot
    truth = MODEL.speedup(n, K, TOKENS)
    assert realized == pytest.approx(truth, rel=0.05)
    assert (realized > 1) is (truth > 1) is (n == PAYS)
    # Exactly the model's speed-up at the acceptance the simulator drew.
    assert realized == pytest.approx(MODEL.speedup(n, K, spec.tokens_per_step or 0.0))


async def _chat(target: VirtualTarget, requests: int, tokens: int) -> None:
    await asyncio.gather(*(target.batcher.submit(tokens) for _ in range(requests)))
    await target.batcher.close()


@pytest.mark.parametrize("speculation", [True, False])
def test_tgi_chat_requests_prefill_and_decode_like_the_router(speculation: bool) -> None:
    """Chat completions through the batcher: each request's first step is its prefill (a
    new batch of its size, a skipped-token observation of 0, a prefill call), the rest decode
    calls; specmon subtracts the prefills and finds the batch and the step time."""
    settings = SimSettings(
        survival=SURVIVAL, requests_running=0, speculation=speculation, load_model=MODEL
    )
    target = make_target(name="t", kind=PageKind.TGI_HISTOGRAM, settings=settings, seed=5,
                         time_scale=0.0)  # fmt: skip
    before = reading(target) if not speculation else None
    asyncio.run(_chat(target, 8, 40 if not speculation else 400))
    c = target.engine.counters
    assert (c.new_batches.count, c.new_batches.sum) == (1, 8.0)  # one batch of eight
    assert c.prefill_calls.count == 1
    page = target.page()
    assert 'tgi_batch_next_size_bucket{le="7"} 0\n' in page
    assert 'tgi_batch_next_size_bucket{le="8"} 1\n' in page
    assert "tgi_batch_next_size_sum 8\n" in page
    decode_steps = c.decode_calls.count
    assert f'tgi_batch_inference_duration_count{{method="decode"}} {decode_steps}\n' in page
    if speculation:
        # From zero: the first reading is the whole history.
        (model,) = read_page(page).models
        assert model.counters is not None
        assert model.counters.drafts == c.drafts + 8  # the eight prefill observations
        got = load_counters(model.context, model.counters)
        assert got is not None
        assert got.request_steps == c.drafts
        assert got.engine_steps == decode_steps
        return
    assert before is not None
    got_interval = interval(before, reading(target))
    # Eight requests decoded together for 39 steps after their prefill.
    assert decode_steps == 39
    assert got_interval.concurrency == pytest.approx(8.0)
    assert got_interval.step_seconds == pytest.approx(MODEL.step_seconds(8, 0))
    assert got_interval.time_per_output_token_seconds == pytest.approx(MODEL.step_seconds(8, 0))
