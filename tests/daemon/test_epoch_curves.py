"""Issue 55's history basis and "did the change help?" on the demo's simulated engines (a
virtual clock: tests/support/demo_fleet.py), against the constructed truth of their load
model (specmon.sim.load_model): the epochs' accumulators, the verdict's ``history`` basis,
the per-bucket change speed-ups and their survival through the state file."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from specmon.answer import Evidence, ReadState, read_concurrency, words
from specmon.cli.demo import FAST_LOAD_MODEL, render_rows
from specmon.daemon.collector import target_samples
from specmon.daemon.epoch_curves import EpochCurves
from specmon.daemon.persist import StateKeeper
from specmon.daemon.target import TargetState
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.surfaces.api import views_json
from specmon.surfaces.status import target_rows
from specmon.surfaces.target import render_target
from tests.support.demo_fleet import DemoFleet

NAME = "vllm-switched"
#: The demo fleet's wall clock is its virtual one (seconds since 1970): epochs that ended
#: then are kept by a state_max_age that reaches back that far.
AGE = 2e9
#: vllm-switched runs 4 requests (bucket "4"), without speculation until 60 s.
N = 4


def _truth(survival: tuple[float, ...]) -> float:
    """Time per output token without speculation over with it (LoadModel's construction)."""
    return FAST_LOAD_MODEL.speedup(N, len(survival), 1 + sum(survival))


def _fleet(until: float) -> DemoFleet:
    fleet = DemoFleet(names=(NAME,))
    fleet.advance(until)
    return fleet


def _reconfigure(fleet: DemoFleet, **changes: object) -> tuple[float, ...]:
    engine = fleet.targets[NAME].engine
    before = engine.settings.survival
    engine.configure(replace(engine.settings, **changes), now=fleet.now, wall=fleet.now)  # type: ignore[arg-type]
    return before


def _verdict(state: TargetState) -> tuple[Evidence, float, tuple[float, float] | None, str]:
    window = next(w for w in state.view.models[0].windows if w.window == "30s")
    a = window.answer
    assert a is not None and a.speedup is not None, a
    return a.basis, a.speedup, a.interval, words.detail(a)


def test_the_switched_target_reaches_the_history_basis_within_5_percent() -> None:
    fleet = _fleet(240)
    state = fleet.states[NAME]
    basis, speedup, interval, detail = _verdict(state)
    survival = fleet.targets[NAME].engine.settings.survival
    truth = _truth(survival)
    assert basis is Evidence.HISTORY, detail
    assert (
        "against this server without speculation" in detail and "at this load (bucket 4)" in detail
    )
    assert abs(speedup / truth - 1) < 0.05, (speedup, truth)
    assert interval is not None and interval[0] < truth < interval[1]
    (change,) = state.view.changes
    (bucket,) = change.buckets
    assert bucket.label == "4" and abs(bucket.speedup / truth - 1) < 0.05
    assert bucket.acceptance_change is None  # no drafts before
    api = fleet.api(NAME)["targets"][0]["changes"][0]
    assert api["buckets"][0]["concurrency"] == "4" and api["epoch_after"] == 2
    samples = {(s.family.name, s.values[-1]) for s in target_samples(state.view)}
    assert ("specmon_change_speedup_ratio", "4") in samples
    assert ("specmon_change_speedup_upper_ratio", "4") in samples


def test_k_changed_from_4_to_2_by_a_restart_is_compared_per_bucket() -> None:
    fleet = _fleet(90)
    k4 = _reconfigure(fleet, survival=(0.9, 0.7, 0.5, 0.3))  # restarted: k 4
    assert len(k4) == 4
    fleet.advance(250)
    k2 = (0.9, 0.7)
    _reconfigure(fleet, survival=k2)  # restarted with k = 2: counters reset
    fleet.advance(420)
    state = fleet.states[NAME]
    (epochs,) = state.view.epochs
    assert [e.chain_length for e in epochs.epochs][-2:] == [4, 2]
    *_, change = state.view.changes  # the newest (every change is kept: issue 64)
    (bucket,) = change.buckets
    truth = _truth(k2) / _truth(k4)
    assert abs(bucket.speedup / truth - 1) < 0.05, (bucket.speedup, truth)
    assert bucket.acceptance_change is not None and bucket.acceptance_interval is not None
    # Curves kept: the current, the previous and the newest without speculation (epoch 1).
    numbers = [e.number for e in epochs.epochs]
    kept = state.curves.to_json()[epochs.model]
    assert sorted(map(int, kept)) == sorted({numbers[0], numbers[-2], numbers[-1]})
    # The verdict still reads the epoch without speculation (epoch 1), not the k = 4 one.
    basis, speedup, _, detail = _verdict(state)
    assert basis is Evidence.HISTORY and abs(speedup / _truth(k2) - 1) < 0.05, (speedup, detail)


def test_drafts_stopping_for_good_are_a_change_that_made_it_slower() -> None:
    fleet = _fleet(200)
    survival = _reconfigure(fleet, speculation=False)  # no restart: drafts just stop
    fleet.advance(360)
    state = fleet.states[NAME]
    (epochs,) = state.view.epochs
    assert [e.speculation for e in epochs.epochs] == [False, True, False]
    kept, change = state.view.changes  # switched on (kept), then off (the newest)
    assert (kept.before.number, kept.after.number) == (1, 2)
    (bucket,) = change.buckets
    truth = 1 / _truth(survival)
    assert abs(bucket.speedup / truth - 1) < 0.05, (bucket.speedup, truth)
    assert bucket.interval is not None and bucket.interval[1] < 1  # slower, with certainty


def test_the_state_file_keeps_the_basis_and_the_speedup(tmp_path: Path) -> None:
    fleet = _fleet(240)
    state = fleet.states[NAME]
    basis, speedup, _, _ = _verdict(state)
    before = state.view.changes[0].buckets[0].speedup
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    asyncio.run(keeper.save(lambda: [state]))
    keeper.close()
    # specmon restarted: a new state for the same target, restored from the file, scraping on.
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    assert again.open()
    config = fleet.config
    assert config is not None
    fresh = TargetState(state.config, windows=config.global_.windows, retention=config.retention)
    again.restore(fresh)
    fleet.states[NAME] = fresh
    fleet.advance(fleet.now + 40)  # the new state's windows fill (30 s window, 1 s scrapes)
    after_basis, after_speedup, _, _ = _verdict(fresh)
    assert after_basis is basis is Evidence.HISTORY
    assert abs(after_speedup / speedup - 1) < 0.01, (speedup, after_speedup)
    assert abs(fresh.view.changes[0].buckets[0].speedup / before - 1) < 0.01
    again.close()


def test_a_saved_curve_out_of_bounds_is_refused() -> None:
    """Restored sums go through the bounds a live interval obeys: more accepted than drafted
    tokens, or a time per output token past specmon.bounds, refuse the whole state."""
    state = _fleet(120).states[NAME]
    saved = state.curves.to_json()
    model, curves = next(iter(saved.items()))
    number, curve = next(iter(curves.items()))
    columns = curve["columns"]
    for column, value in (("accepted", 1e12), ("decode_seconds", 1e15)):
        bad = copy.deepcopy(saved)
        bad[model][number]["slots"][0]["values"][columns.index(column)] = value
        fresh = EpochCurves()
        with pytest.raises(ValueError, match="curves"):
            fresh.restore(bad, state.epochs)
    EpochCurves().restore(saved, state.epochs)  # the unharmed state is taken


def test_a_state_too_large_keeps_its_epochs_without_the_curves(tmp_path: Path) -> None:
    """Past the file's cap with the curves' sums, the epochs are written without them (one
    warning), not nothing at all."""
    state = _fleet(120).states[NAME]
    body = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    full = len(orjson.dumps(body.snapshot([state])))  # its saved forms hold orjson fragments
    lean = len(orjson.dumps({**state.epochs.to_json()}))
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE,
                         max_bytes=(full + lean) // 2)  # fmt: skip
    assert keeper.open()
    asyncio.run(keeper.save(lambda: [state]))
    assert keeper.writes == 1 and keeper.failures == 0
    keeper.close()
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    assert again.open()
    fresh = TargetState(state.config, windows=(30.0,), retention=60.0)
    again.restore(fresh)
    assert [e.number for e in fresh.view.epochs[0].epochs] == [1, 2]
    assert fresh.curves.to_json() == {}
    again.close()


def test_an_idle_server_keeps_the_history_basis_at_the_windows_load() -> None:
    """The server stops serving (no request running): its latest interval has no load, but
    the 30 s window still holds the minute it served; the verdict reads the past at the
    window's load, as a twin's does, instead of falling back to the configured draft cost."""
    fleet = _fleet(240)
    _reconfigure(fleet, requests_running=0)
    fleet.advance(250)
    state = fleet.states[NAME]
    basis, speedup, _, detail = _verdict(state)
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert basis is Evidence.HISTORY, detail
    assert abs(speedup / truth - 1) < 0.05, (speedup, truth)


def test_the_history_basis_reads_at_the_load_every_basis_reads_at() -> None:
    """One place decides "at this load" (specmon.answer.read_concurrency): the history basis
    reads the past at the latest interval's concurrency, as a twin's or a profile's
    comparison reads, not at a load it keeps on its own."""
    fleet = _fleet(240)
    state = fleet.states[NAME]
    (epochs,) = state.view.epochs
    latest = state._loads[epochs.model].latest_concurrency
    assert latest is not None
    window = next(w for w in state.view.models[0].windows if w.window == "30s")
    answer = window.answer
    assert answer is not None and answer.basis is Evidence.HISTORY and answer.against == "history"
    assert answer.concurrency == pytest.approx(latest)
    # The latest interval decoded nothing: the window's load, for every basis.
    assert read_concurrency(latest=None, window=3.5) == 3.5
    assert read_concurrency(latest=4.2, window=3.5) == 4.2


def test_a_history_read_at_a_bucket_both_epochs_measured_is_called_measured() -> None:
    """vllm-switched runs at 4 requests before and after its switch: the load the answer is
    read at lies in bucket "4", which both epochs measured. The read is this window's bucket
    against the past epoch's (issue 63: the current side from the window, not the epoch's
    whole life), within the change's interval there, and every surface calls it measured:
    the API's verdict, the status page, the target page and the terminal view."""
    fleet = _fleet(240)
    state = fleet.states[NAME]
    view = state.view
    window = next(w for w in view.models[0].windows if w.window == "30s")
    answer = window.answer
    assert answer is not None and answer.basis is Evidence.HISTORY
    assert answer.bucket == "4" and answer.state is ReadState.MEASURED
    assert "bucket 4" in words.detail(answer) and "without speculation" in words.detail(answer)
    (change,) = view.changes
    (bucket,) = change.buckets
    assert bucket.label == "4" and bucket.interval is not None and answer.speedup is not None
    assert bucket.interval[0] <= answer.speedup <= bucket.interval[1]
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert answer.speedup == pytest.approx(truth, rel=0.05)
    assert answer.draft_cost is not None and answer.draft_cost > 0
    (api,) = views_json([view])
    documents = [w for m in api["models"] for w in m["windows"] if w["window"] == "30s"]
    assert [d["verdict"]["state"] for d in documents] == ["measured"]
    surfaces = {
        "api": json.dumps(api),
        "status page": target_rows(view, primary_window="30s"),
        "target page": render_target(
            view, primary_window="30s", series=(), events=(), now=fleet.now
        ),
        "terminal": "\n".join(render_rows([view], window="30s", color=False)),
    }
    for surface, text in surfaces.items():
        assert "interpolated" not in text and "off the cost curve" not in text, surface


def test_an_interval_outside_the_bounds_is_counted_in_no_epochs_sums() -> None:
    """Issue 61: every value goes through specmon.bounds when it is counted, not only when it
    is read back. An interval whose time per output token is below 1 us (a billion tokens in
    a millisecond) went into the epoch's sums, which the next start then refused."""
    from specmon.engines import read_page
    from specmon.load.counters import LoadCounters
    from specmon.load.rows import interval_row
    from specmon.state.epoch_book import EpochBook
    from tests.support.hostile import vllm

    book = EpochBook()
    book.observe(read_page(vllm("m", 100, 50, 20)), 1_780_000_000.0)
    zero = LoadCounters(request_steps=0, decode_seconds=0, decode_tokens=0, engine_steps=0,
                        slot_steps=0)  # fmt: skip
    good = LoadCounters(request_steps=400, decode_seconds=8.0, decode_tokens=400,
                        engine_steps=100, slot_steps=400)  # fmt: skip
    bad = LoadCounters(request_steps=800, decode_seconds=8.001, decode_tokens=1e9,
                       engine_steps=200, slot_steps=800)  # fmt: skip
    curves = EpochCurves()
    curves.feed(book, "m", interval_row(zero, good, 10.0, 10.0))
    curves.feed(book, "m", interval_row(good, bad, 10.0, 20.0))
    (bucket,) = curves.curve("m", 1).buckets()  # type: ignore[union-attr]
    assert bucket.totals.decode_tokens == 400  # the good interval only
    EpochCurves().restore(curves.to_json(), book)  # read back without a refusal
