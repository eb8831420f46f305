"""Issue 64: a server's past outlives its address. A direct target keeps its epochs and curves
under its name when its URL changes (a reload, or a restart of specmon with the new URL), the
move an event in its epochs; a state file keyed the old way (name and URL hash) is carried
over by name. On the demo's simulated engines (tests/support/demo_fleet.py), against the
load model's truth."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import orjson

from specmon.answer import Evidence
from specmon.daemon.app import Daemon
from specmon.daemon.config import parse_config
from specmon.daemon.persist import StateKeeper, carry_past, url_hash
from specmon.daemon.target import TargetState
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.state.store import encode, read_state, write_atomic
from tests.daemon.test_epoch_curves import AGE, NAME, _fleet, _truth, _verdict
from tests.support.demo_fleet import DemoFleet

NEW_URL = "http://127.0.0.1:19/metrics"


def _replaced(fleet: DemoFleet) -> TargetState:
    """The engine replaced by a new process (counters from zero) at another address, watched
    by a new state under the same name, the old state's past carried over."""
    old = fleet.states[NAME]
    fleet.targets[NAME].engine.restart(now=fleet.now, wall=fleet.now)
    config = fleet.config
    assert config is not None
    new = TargetState(
        replace(old.config, url=NEW_URL), windows=config.global_.windows,
        retention=config.retention,
    )  # fmt: skip
    carry_past(new, old, wall=fleet.now)
    fleet.states[NAME] = new
    return new


def _moves(state: TargetState) -> list[str]:
    return [text for e in state.view.epochs for _, text in e.events if "address" in text]


def test_a_url_changed_under_one_name_keeps_the_epochs_and_the_history_basis() -> None:
    fleet = _fleet(240)
    before = [e.number for e in fleet.states[NAME].view.epochs[0].epochs]
    basis, *_ = _verdict(fleet.states[NAME])
    assert basis is Evidence.HISTORY
    new = _replaced(fleet)
    fleet.advance(fleet.now + 40)  # the new state's windows fill (30 s window, 1 s scrapes)
    after_basis, after_speedup, _, detail = _verdict(new)
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert after_basis is Evidence.HISTORY, detail
    assert abs(after_speedup / truth - 1) < 0.05, (after_speedup, truth)
    assert [e.number for e in new.view.epochs[0].epochs] == before  # an event, not an epoch
    (move,) = _moves(new)
    assert "another URL" in move
    # The new server's counters were not counted against the old one's: no restart seen.
    assert not any("restarted" in t for e in new.view.epochs for _, t in e.events[-1:])


def test_a_state_written_under_another_url_is_restored_by_name(tmp_path: Path) -> None:
    """specmon stopped, the target's URL changed in its config, specmon started: the saved
    epochs and curves are the target's, the move an event."""
    fleet = _fleet(240)
    old = fleet.states[NAME]
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    asyncio.run(keeper.save(lambda: [old]))
    keeper.close()
    (record,) = read_state(keeper.path)["targets"]  # type: ignore[index]
    assert record["name"] == NAME and record["url_sha256"] == url_hash(old.config.url)
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    moved = replace(old.config, url=NEW_URL)
    assert again.open([moved])
    fresh = TargetState(moved, windows=(30.0,), retention=60.0)
    again.restore(fresh)
    assert [e.number for e in fresh.view.epochs[0].epochs] == [1, 2]
    assert fresh.curves.to_json() == old.curves.to_json()
    assert any("while specmon was stopped" in t for t in _moves(fresh))
    again.close()


def test_an_older_file_keyed_by_name_and_url_is_carried_over_by_name(tmp_path: Path) -> None:
    """A file written before issue 64 holds, for one name, a record per URL it was seen at:
    the newest is the target's, the others are let go."""
    fleet = _fleet(240)
    state = fleet.states[NAME]
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    body = keeper.snapshot([state])
    (record,) = (orjson.loads(orjson.dumps(t)) for t in body["targets"])
    stale = {**record, "url_sha256": "0" * 32, "seen": record["seen"] - 100,
             "models": {m: {"epochs": v["epochs"][:1], "events": []}
                        for m, v in record["models"].items()}, "curves": {}}  # fmt: skip
    tmp_path.mkdir(exist_ok=True)
    write_atomic(keeper.path, encode({**body, "targets": [record, stale]}))
    assert keeper.open([state.config])
    fresh = TargetState(state.config, windows=(30.0,), retention=60.0)
    keeper.restore(fresh)
    assert [e.number for e in fresh.view.epochs[0].epochs] == [1, 2]
    assert fresh.curves.to_json() == state.curves.to_json()
    assert _moves(fresh) == []  # the newest record was written under this URL
    keeper.close()


def test_the_daemon_carries_the_past_over_a_reload_that_changes_the_url() -> None:
    """``_sync_targets`` at a reload: the same name at another URL is restarted (new windows)
    with the old state's epochs and curves, the move an event; another name starts afresh."""
    fleet = _fleet(120)
    past = fleet.states[NAME]

    def config(url: str) -> str:
        return (
            f"targets:\n  - name: {NAME}\n    url: {url}\n"
            "  - name: other\n    url: http://127.0.0.1:9/other\n"
        )

    async def run() -> None:
        daemon = Daemon(config_path=None)
        daemon._sync_targets(parse_config(config(past.config.url)), initial=True)
        running = daemon._running[NAME].state
        running.epochs, running.curves = past.epochs, past.curves
        daemon._sync_targets(parse_config(config(NEW_URL)), initial=False)
        state = daemon._running[NAME].state
        assert state is not running and state.config.url == NEW_URL
        assert state.epochs is past.epochs and state.curves is past.curves
        assert [e.number for e in state.view.epochs[0].epochs] == [1, 2]
        assert len(_moves(state)) == 1
        assert daemon._running["other"].state.view.epochs == ()
        for name in list(daemon._running):
            daemon._stop_target(name)
        await asyncio.sleep(0)

    asyncio.run(run())
