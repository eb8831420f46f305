"""TGI's load figures: concurrency, step time and time per output token from the router's
step timing (``tgi_batch_inference_duration{method="decode"}``), its per-step skipped-token
observations and the prefill batch sizes, and the realized speed-up against a twin.

Pages in metrics-exporter-prometheus's text (TGI ``router/src/server.rs`` sets the
``*duration`` buckets 0.0001 x 1.5^i, i = 1..35, and ``tgi_batch_next_size`` buckets 1..1024;
the bucket lines are abbreviated to the ``+Inf`` one here: specmon reads ``_sum`` and
``_count``). Series and labels from ``backends/v3/src/backend.rs`` and ``queue.rs``
(huggingface/text-generation-inference @ db931fcf42da018a3657580c64bf2720f167f9ab).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.engines import read_page
from specmon.load import LoadCounters, interval, load_counters


def page(*, steps: int, step_seconds: float, observations: int, accepted: int, entered: int,
         speculate: bool = True) -> str:  # fmt: skip
    skipped = (
        "# HELP tgi_request_skipped_tokens Speculated tokens per request\n"
        "# TYPE tgi_request_skipped_tokens summary\n"
        f'tgi_request_skipped_tokens{{quantile="0.5"}} {1 if speculate else 0}\n'
        f"tgi_request_skipped_tokens_sum {accepted}\n"
        f"tgi_request_skipped_tokens_count {observations}\n"
    )
    return (
        "# HELP tgi_batch_current_size Current batch size\n"
        "# TYPE tgi_batch_current_size gauge\n"
        "tgi_batch_current_size 4\n\n"
        "# TYPE tgi_batch_inference_duration histogram\n"
        f'tgi_batch_inference_duration_bucket{{method="decode",le="+Inf"}} {steps}\n'
        f'tgi_batch_inference_duration_sum{{method="decode"}} {step_seconds}\n'
        f'tgi_batch_inference_duration_count{{method="decode"}} {steps}\n'
        f'tgi_batch_inference_duration_bucket{{method="prefill",le="+Inf"}} {entered}\n'
        f'tgi_batch_inference_duration_sum{{method="prefill"}} {entered * 0.5}\n'
        f'tgi_batch_inference_duration_count{{method="prefill"}} {entered}\n\n'
        "# TYPE tgi_batch_next_size histogram\n"
        f'tgi_batch_next_size_bucket{{le="+Inf"}} {entered}\n'
        f"tgi_batch_next_size_sum {entered}\n"
        f"tgi_batch_next_size_count {entered}\n\n" + skipped
    )


def counters_of(text: str, *, plain: bool = False) -> LoadCounters:
    reading = read_page(text)
    models = reading.plain_models if plain else reading.models
    assert len(models) == 1, reading
    model = models[0]
    got = load_counters(model.context, model.counters)
    assert got is not None
    return got


def test_speculating_tgi_interval_by_hand() -> None:
    before = counters_of(page(steps=100, step_seconds=2.5, observations=420, accepted=600,
                              entered=20))  # fmt: skip
    # +1000 decode steps taking 25 s; +4020 observations of which 20 prefills: 4000
    # request-steps; +6000 accepted draft tokens.
    after = counters_of(page(steps=1100, step_seconds=27.5, observations=4440, accepted=6600,
                             entered=40))  # fmt: skip
    got = interval(before, after, seconds=30.0)
    assert got.concurrency == pytest.approx(4.0)
    assert got.step_seconds == pytest.approx(0.025)
    assert got.tokens_per_step == pytest.approx(2.5)
    assert got.time_per_output_token_seconds == pytest.approx(0.010)


def test_tgi_twin_without_speculation_and_the_realized_speedup() -> None:
    # A page that never accepted a token reads as speculation off: start from one.
    spec_before = counters_of(page(steps=0, step_seconds=0.0, observations=1, accepted=1,
                                   entered=0))  # fmt: skip
    spec_after = counters_of(page(steps=1000, step_seconds=25.0, observations=4021,
                                  accepted=6001, entered=20))  # fmt: skip
    base_text = page(steps=2000, step_seconds=30.0, observations=8020, accepted=0, entered=20,
                     speculate=False)  # fmt: skip
    reading = read_page(base_text)
    assert not reading.models and len(reading.plain_models) == 1  # a twin: load series alone
    base_before = counters_of(page(steps=0, step_seconds=0.0, observations=0, accepted=0,
                                   entered=0, speculate=False), plain=True)  # fmt: skip
    base_after = counters_of(base_text, plain=True)
    spec = interval(spec_before, spec_after)
    base = interval(base_before, base_after)
    assert base.concurrency == pytest.approx(4.0) and spec.concurrency == pytest.approx(4.0)
    assert base.time_per_output_token_seconds == pytest.approx(0.015)
    assert spec.time_per_output_token_seconds == pytest.approx(0.010)
    base_tpot, spec_tpot = base.time_per_output_token_seconds, spec.time_per_output_token_seconds
    assert base_tpot is not None and spec_tpot is not None
    realized = base_tpot / spec_tpot
    assert realized == pytest.approx(1.5)


def test_tgi_page_without_step_timing_has_no_load_figures() -> None:
    text = (
        "# TYPE tgi_request_skipped_tokens summary\n"
        "tgi_request_skipped_tokens_sum 1780\ntgi_request_skipped_tokens_count 1000\n"
    )
    reading = read_page(text)
    assert reading.models[0].context.engine_step_seconds is None
    assert load_counters(reading.models[0].context, reading.models[0].counters) is None


def test_written_tgi_pages_carry_the_load_series() -> None:
    """The pages written from TGI's source (tests/fixtures/pages/written/README.md): 244
    decode calls taking 6.1 s, 1000 skipped-token observations of which 24 prefills."""
    written = Path(__file__).resolve().parent / "fixtures" / "pages" / "written"
    for name in ("tgi-summary.txt", "tgi-histogram.txt"):
        (model,) = read_page((written / name).read_text()).models
        c = model.context
        assert (c.engine_steps, c.request_steps) == (244, 976)
        assert c.engine_step_seconds == pytest.approx(6.1)
        got = load_counters(c, model.counters)
        assert got is not None and got.source == "engine_step_seconds"
