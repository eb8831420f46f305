"""Load figures obey the page's own laws (issue 53): an interval whose sums or counts fall
without a restart, whose steps took no time, or with more engine time than wall time is left
out with a reason (``specmon_rejected_readings_total{reason}``), the acceptance figures stand,
and no division can take a target down."""

from __future__ import annotations

import math

import pytest

from specmon.daemon.target import TargetState, Twins
from specmon.engines import Context, PageReading, read_page
from specmon.load import LoadCounters, LoadHistory, load_counters
from specmon.load.laws import interval_refusal
from tests.support.views import counters, state
from tests.test_load_tgi import page as tgi_page


def _tgi(i: int, *, step_seconds: float | None = None, entered: int | None = None,
         twin: bool = False) -> PageReading:  # fmt: skip
    """The i-th TGI page, 5 s apart: a speculating target (+1,000 decode steps in 2.5 s a
    scrape) or its twin (+2,000 in 3 s)."""
    if twin:
        return read_page(
            tgi_page(steps=2000 * i, step_seconds=3.0 * i if step_seconds is None else step_seconds,
                     observations=8020 * i, accepted=0, entered=20 * i, speculate=False)
        )  # fmt: skip
    return read_page(
        tgi_page(steps=1 + 1000 * i,
                 step_seconds=2.5 * i if step_seconds is None else step_seconds,
                 observations=1 + 4020 * i, accepted=1 + 6000 * i,
                 entered=20 * i if entered is None else entered)
    )  # fmt: skip


def _pair() -> tuple[TargetState, TargetState]:
    fleet = Twins()
    twin = state("twin", fleet=fleet)
    target = state("spec", fleet=fleet, baseline="twin")
    return target, twin


def _feed(target: TargetState, twin: TargetState, scrapes: range, **hostile: float) -> None:
    for i in scrapes:
        twin.observe(_tgi(i, twin=True), mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01)
        page = _tgi(i, **hostile) if hostile and i == scrapes[-1] else _tgi(i)  # type: ignore[arg-type]
        target.observe(page, mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01)


def _reasons(target: TargetState) -> set[str]:
    return {r.reason.value for r in target.view.rejected}


@pytest.mark.parametrize("step_seconds", [0.0, 2.5 * 9, 2.5 * 9 - 1.0])
def test_a_tgi_step_sum_that_falls_or_stays_never_takes_the_target_down(
    step_seconds: float,
) -> None:
    """The critical case: with a twin, a decode-time _sum that goes down (or stays) while its
    _count rises divided by a time per output token of 0.0 on every scrape."""
    target, twin = _pair()
    _feed(target, twin, range(1, 10))
    before = target.view.models[0].windows[0]
    assert before.answer is not None and before.answer.compared and before.answer.speedup
    _feed(target, twin, range(10, 11), step_seconds=step_seconds)
    view = target.view
    assert view.up
    expected = "zero_step_time" if step_seconds == 2.5 * 9 else "load_counter_decrease"
    assert expected in _reasons(target)
    window = view.models[0].windows[0]
    assert window.report is not None  # the acceptance figures stand
    load = window.load
    assert load is not None
    speedup = window.answer.speedup if window.answer is not None else None
    for value in (load.step_seconds, load.time_per_output_token_seconds, speedup):
        assert value is None or (math.isfinite(value) and value > 0)
    # The next good scrape counts from the hostile reading: the figures heal.
    _feed(target, twin, range(11, 14))
    assert not _reasons(target)


def test_a_step_sum_frozen_for_a_while_never_divides_by_zero() -> None:
    """The hostile page of the round: the _sum stays while _count rises, scrape after scrape
    (on main: ZeroDivisionError in the comparison, up=0, the acceptance figures lost)."""
    target, twin = _pair()
    _feed(target, twin, range(1, 4))
    for i in range(4, 30):
        twin.observe(_tgi(i, twin=True), mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01)
        target.observe(_tgi(i, step_seconds=7.5), mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01)
        assert target.view.up, target.view.error
        for window in target.view.models[0].windows:
            assert window.report is not None
            load = window.load
            if load is not None:
                assert load.time_per_output_token_seconds != 0.0
                assert load.step_seconds != 0.0
    assert "zero_step_time" in _reasons(target)


def test_a_step_sum_jump_is_more_engine_time_than_wall_time() -> None:
    """A decode-time _sum that jumps by 1e9 s once gave a step time of 208,333 s and a verdict
    of 0.28x (a false "not paying")."""
    target, twin = _pair()
    _feed(target, twin, range(1, 10))
    _feed(target, twin, range(10, 11), step_seconds=2.5 * 10 + 1e9)
    assert "engine_time_above_wall" in _reasons(target)
    window = target.view.models[0].windows[0]
    assert window.load is not None and window.load.step_seconds is not None
    assert window.load.step_seconds < 0.01
    assert window.answer is not None and window.answer.speedup is not None
    assert window.answer.speedup > 1.0


def test_a_twin_whose_decode_time_is_multiplied_is_refused_on_the_twin() -> None:
    """A twin whose decode time is multiplied by 1e6 gave a realized speed-up of 2.95e7x."""
    target, twin = _pair()
    for i in range(1, 12):
        hostile = i >= 6
        twin.observe(
            _tgi(i, twin=True, step_seconds=3.0 * i * (1e6 if hostile else 1.0)),
            mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01,
        )  # fmt: skip
        target.observe(_tgi(i), mono=5.0 * i, wall=1e9 + 5 * i, duration=0.01)
    assert "engine_time_above_wall" in _reasons(twin)
    for window in target.view.models[0].windows:
        if window.answer is not None and window.answer.speedup is not None:
            assert window.answer.speedup < 5.0
        for per in window.answer.per_load if window.answer is not None else ():
            assert per.speedup is None or per.speedup < 5.0


def test_a_tgi_page_without_a_twin_exports_no_zero_step_time() -> None:
    fleet = Twins()
    alone = state("alone", fleet=fleet)
    for i in range(1, 6):
        alone.observe(_tgi(i, step_seconds=0.0), mono=5.0 * i, wall=1e9, duration=0.01)
    load = alone.view.models[0].windows[0].load
    assert load is None or (
        load.step_seconds is None and load.time_per_output_token_seconds is None
    )
    assert "zero_step_time" in _reasons(alone)


def test_prefills_above_observations_give_no_concurrency_of_zero() -> None:
    """tgi_batch_next_size_sum above the observations gave concurrency 0 while the batch
    gauge said 4."""
    reading = _tgi(3, entered=10**6)
    assert {r.reason.value for r in reading.rejected} == {"prefills_above_observations"}
    assert reading.models[0].counters is not None  # the acceptance counters stand
    assert reading.models[0].context.engine_step_seconds is None
    target, twin = _pair()
    _feed(target, twin, range(1, 6))
    _feed(target, twin, range(6, 7), entered=20 * 6 + 5000)  # prefills rose more than observations
    assert "prefills_above_observations" in _reasons(target)
    load = target.view.models[0].windows[0].load
    assert load is not None and load.concurrency is not None and load.concurrency > 3.5


def _vllm(itl: float, steps: int, engines: int = 1) -> LoadCounters:
    context = Context(
        inter_token_latency_sum_seconds=itl,
        inter_token_latency_count=steps * 4,
        first_token_count=10,
        generation_tokens=steps * 4 + 10,
        engine_steps=steps,
        engine_replicas=engines,
    )
    got = load_counters(context, counters(0, 0, ()))
    assert got is not None
    return got


def test_engine_time_is_bounded_per_replica() -> None:
    # 1,000 engine steps with a mean step of 20 ms: 20 s of engine time.
    before, after = _vllm(0.0, 0), _vllm(4000 * 0.02, 1000)
    refusal = interval_refusal(before, after, 10.0)
    assert refusal is not None and refusal[0].value == "engine_time_above_wall"
    assert interval_refusal(before, after, 16.0) is None  # 16 x 1.25 + 1 = 21 s
    # Two data-parallel replicas: twice the engine time in the same wall time.
    before2, after2 = _vllm(0.0, 0, engines=2), _vllm(4000 * 0.02, 1000, engines=2)
    assert interval_refusal(before2, after2, 10.0) is None


def test_a_slow_scrape_gives_the_next_interval_its_own_duration() -> None:
    """A scrape stamped when its answer arrived shows counters from as early as its start: a
    2 s scrape of a starved server, then a quick one 1 s later, can show 3 s of engine time
    (seen in CI on two CPU vLLM servers). Its duration is the next interval's allowance."""
    first, second, third = _vllm(0.0, 0), _vllm(4 * 50 * 0.02, 50), _vllm(4 * 200 * 0.02, 200)
    # 150 steps of 20 ms: 3 s of engine time in 1 s between the stamps.
    quick = LoadHistory(retention=100.0)
    quick.add(0.0, first)
    quick.add(10.0, second, lag=0.01)
    assert not quick.add(11.0, third)
    assert quick.refusal is not None and quick.refusal[0].value == "engine_time_above_wall"
    slow = LoadHistory(retention=100.0)
    slow.add(0.0, first)
    slow.add(10.0, second, lag=2.0)  # (1 + 2) x 1.25 + 1 s > 3 s
    assert slow.add(11.0, third) and slow.refusal is None
    # The allowance is the previous reading's, not the current one's.
    late = LoadHistory(retention=100.0)
    late.add(0.0, first)
    late.add(10.0, second, lag=0.01)
    assert not late.add(11.0, third, lag=2.0)


def test_a_restart_is_still_a_restart() -> None:
    before, after = _vllm(500.0, 10_000), _vllm(2.0, 100)
    assert interval_refusal(before, after, 5.0) is None
    history = LoadHistory(retention=100.0)
    assert not history.add(0.0, before)
    assert history.add(5.0, after) and history.refusal is None
    assert history.latest is not None and history.latest.resets == 1


def test_vllm_data_parallel_replicas_come_from_the_engine_label() -> None:
    lines = []
    for engine in ("0", "1", "2"):
        lines += [
            f'vllm:iteration_tokens_total_count{{engine="{engine}",model_name="m"}} 10',
            f'vllm:inter_token_latency_seconds_sum{{engine="{engine}",model_name="m"}} 1',
            f'vllm:inter_token_latency_seconds_count{{engine="{engine}",model_name="m"}} 10',
            f'vllm:generation_tokens_total{{engine="{engine}",model_name="m"}} 20',
        ]
    reading = read_page("\n".join(lines) + "\n")
    assert reading.plain_models[0].context.engine_replicas == 3
