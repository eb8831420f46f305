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
import pytest

from specmon.answer import Evidence
from specmon.daemon.app import Daemon
from specmon.daemon.collector import target_samples
from specmon.daemon.config import ConfigError, FileSDConfig, GlobalConfig, parse_config
from specmon.daemon.file_sd import load_file_sd
from specmon.daemon.persist import GroupPasts, StateKeeper, carry_past, copy_past, url_hash
from specmon.daemon.target import TargetState
from specmon.engines import PageReading, read_page
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.sources import Reading
from specmon.sources.prometheus_config import check_sources
from specmon.state.changelog import ChangeLog
from specmon.state.epoch_book import EpochBook
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


GROUP = "namespace=llm,service=llama"


def _pod(fleet: DemoFleet, name: str, state: TargetState | None = None) -> TargetState:
    """A pod of the group under the fleet's engine: ``state`` (the old pod) given its group,
    or a new state named ``name`` on a new engine process at a new address."""
    config = fleet.config
    assert config is not None
    if state is not None:
        state.config = replace(state.config, name=name, group=GROUP)
        return state
    fleet.targets[NAME].engine.restart(now=fleet.now, wall=fleet.now)
    cfg = replace(fleet.states[NAME].config, name=name, url=NEW_URL, group=GROUP)
    new = TargetState(cfg, windows=config.global_.windows, retention=config.retention)
    fleet.states[NAME] = new
    return new


def _first_page(fleet: DemoFleet, state: TargetState, pasts: GroupPasts) -> PageReading:
    """One scrape as the daemon's Ingest delivers it: the group's hook, then the state."""
    fleet.now += 1
    target = fleet.targets[NAME]
    target.tick(fleet.now)
    reading = read_page(target.page(), engine=state.config.engine, model=state.config.model)
    pasts.first_page(state, reading)
    state.observe(reading, mono=fleet.now, wall=fleet.now, duration=0.001)
    return reading


def test_a_pod_replaced_in_its_group_carries_the_past() -> None:
    """A rollout: the old pod (no speculation, then speculating) goes, a new pod of the same
    group (another name, another address) comes: it takes a copy of the group's past, and
    its verdict reads the history basis within 5 % of the load model's truth."""
    fleet = _fleet(240)
    pasts = GroupPasts()
    old = _pod(fleet, "llama-7d9f-abcde", fleet.states[NAME])
    pasts.join(old)
    before = [e.number for e in old.view.epochs[0].epochs]
    pasts.leave("llama-7d9f-abcde")
    new = _pod(fleet, "llama-55c4-vwxyz")
    pasts.join(new)
    assert not new.view.epochs  # its past is taken at its first page
    reading = _first_page(fleet, new, pasts)
    assert [e.number for e in new.view.epochs[0].epochs] == before
    assert new.epochs is not old.epochs  # a copy: each member counts its own readings
    fleet.advance(fleet.now + 40)
    basis, speedup, _, detail = _verdict(new)
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert basis is Evidence.HISTORY, detail
    assert abs(speedup / truth - 1) < 0.05, (speedup, truth)
    joined = [t for e in new.view.epochs for _, t in e.events if "joined group" in t]
    assert joined == [f"joined group {GROUP}: its past taken from llama-7d9f-abcde"]
    # A member of another group starts afresh; a past of another model is not taken.
    other = TargetState(replace(new.config, name="x", group="namespace=llm,service=other"),
                        windows=(30.0,), retention=60.0)  # fmt: skip
    pasts.join(other)
    pasts.first_page(other, reading)
    assert other.view.epochs == ()
    foreign = EpochBook()
    (saved,) = old.epochs.to_json().values()
    foreign.restore({"another-model": saved}, now=fleet.now)
    assert not copy_past(other, foreign, old.curves, reading=reading, wall=fleet.now,
                         source="y")  # fmt: skip
    assert other.view.epochs == ()


def test_a_pod_replaced_while_specmon_was_stopped_takes_the_groups_saved_past(
    tmp_path: Path,
) -> None:
    """specmon stops during a rollout; when it starts the old pod is gone and a new one is
    there: the new pod takes a copy of the group's newest saved record, and the departed
    pod's record is let go at the next write (the live member carries the past)."""
    fleet = _fleet(240)
    old = _pod(fleet, "llama-7d9f-abcde", fleet.states[NAME])
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    asyncio.run(keeper.save(lambda: [old]))
    keeper.close()
    (record,) = read_state(keeper.path)["targets"]  # type: ignore[index]
    assert record["group"] == GROUP
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    new = _pod(fleet, "llama-55c4-vwxyz")
    assert again.open([new.config])
    again.restore(new)  # nothing under its own name
    assert not new.view.epochs
    pasts = GroupPasts()
    pasts.keeper = again
    pasts.join(new)
    _first_page(fleet, new, pasts)
    assert [e.number for e in new.view.epochs[0].epochs] == [1, 2]
    assert new.curves.to_json() == old.curves.to_json()
    fleet.advance(fleet.now + 40)
    basis, speedup, _, detail = _verdict(new)
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert basis is Evidence.HISTORY and abs(speedup / truth - 1) < 0.05, (speedup, detail)
    asyncio.run(again.save(lambda: [new]))
    names = [t["name"] for t in read_state(again.path)["targets"]]  # type: ignore[index]
    assert names == ["llama-55c4-vwxyz"]
    again.close()


def test_group_labels_in_file_sd_and_prometheus_sources(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_text(
        "- targets: ['10.0.0.7:8080']\n  labels: {namespace: llm, deployment: llama, zone: a}\n"
    )
    sd = FileSDConfig(files=(str(tmp_path / "*.yaml"),), group_labels=("namespace", "deployment"))
    (target,), problems = load_file_sd(tmp_path / "pods.yaml", sd, GlobalConfig())
    assert problems == [] and target.group == "namespace=llm,deployment=llama"
    (target,), _ = load_file_sd(tmp_path / "pods.yaml", FileSDConfig(files=()), GlobalConfig())
    assert target.group == "namespace=llm,deployment=llama"  # the default rule
    config = parse_config(
        f"file_sd_configs:\n  - files: ['{tmp_path}/*.yaml']\n    group_labels: [namespace]\n"
    )
    assert config.file_sd[0].group_labels == ("namespace",)
    for bad, problem in (
        ("[namespace, pod]", "names one pod"),
        ("namespace", "must be a list"),
    ):
        with pytest.raises(ConfigError, match=problem):
            parse_config(f"file_sd_configs:\n  - files: ['x']\n    group_labels: {bad}\n")
    sources, problems = check_sources(
        [{"prometheus": {"url": "http://p:9090", "instance_labels": ["namespace", "pod"],
                         "group_labels": ["namespace", "service"]}}]
    )  # fmt: skip
    assert problems == [] and sources[0].group_labels == ("namespace", "service")
    _, problems = check_sources(
        [{"prometheus": {"url": "http://p:9090", "instance_labels": ["namespace", "pod"],
                         "group_labels": ["namespace"]}}]
    )  # fmt: skip
    assert problems == []
    _, problems = check_sources(
        [{"prometheus": {"url": "http://p:9090", "instance_labels": ["job"],
                         "group_labels": ["job"]}}]
    )  # fmt: skip
    assert len(problems) == 1 and "every one of instance_labels" in problems[0]


def test_a_mark_after_a_change_keeps_that_changes_answer_listed_and_exported() -> None:
    """Speculation switched on (epoch 1 -> 2, measured), then ``specmon mark`` (a draft model
    swap, 2 -> 3): the first change's answer stays in ``changes`` (API, page) and in
    specmon_change_kept_speedup_ratio, frozen at its last answer; the newest-change families
    hold the mark's change only."""
    fleet = _fleet(240)
    state = fleet.states[NAME]
    (first,) = state.view.changes
    truth = _truth(fleet.targets[NAME].engine.settings.survival)
    assert abs(first.buckets[0].speedup / truth - 1) < 0.05
    state.mark(wall=fleet.now, note="draft model swap")
    fleet.advance(fleet.now + 60)
    kept, newest = state.view.changes
    assert (kept.before.number, kept.after.number) == (1, 2)
    assert (newest.before.number, newest.after.number) == (2, 3)
    assert kept.buckets == first.buckets  # frozen at its last answer
    api = fleet.api(NAME)["targets"][0]["changes"]
    assert [(c["epoch_before"], c["epoch_after"]) for c in api] == [(1, 2), (2, 3)]
    assert api[0]["buckets"][0]["speedup_ratio"] == first.buckets[0].speedup
    samples = [(s.family.name, s.values) for s in target_samples(state.view)]
    kept_series = {v[3] for n, v in samples if n == "specmon_change_kept_speedup_ratio"}
    assert "1->2" in kept_series
    newest_series = [v for n, v in samples if n == "specmon_change_speedup_ratio"]
    assert len(newest_series) == len({tuple(v) for v in newest_series})  # one per bucket
    # Carried over a URL change, with the epochs.
    moved = _replaced(fleet)
    fleet.advance(fleet.now + 5)
    assert next((c.before.number, c.after.number) for c in moved.view.changes) == (1, 2)


def test_the_change_log_is_bounded_and_frozen() -> None:
    log: ChangeLog[str] = ChangeLog(max_changes=3)
    assert log.update([(("m", 1, 2), "a")]) == ("a",)
    assert log.update([(("m", 1, 2), "a2")]) == ("a2",)  # the newest's answer replaced
    assert log.update([(("m", 2, 3), "b")]) == ("a2", "b")  # the older one frozen
    log.update([(("n", 1, 2), "c")])
    assert log.update([(("m", 3, 4), "d")]) == ("b", "c", "d")  # the oldest let go
    assert log.copy().items() == log.items()


def test_kept_changes_survive_a_restart_of_specmon(tmp_path: Path) -> None:
    fleet = _fleet(240)
    state = fleet.states[NAME]
    state.mark(wall=fleet.now, note="draft model swap")
    fleet.advance(fleet.now + 60)
    kept = state.view.changes
    assert len(kept) == 2
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    asyncio.run(keeper.save(lambda: [state]))
    keeper.close()
    again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    assert again.open([state.config])
    fresh = TargetState(state.config, windows=(30.0,), retention=60.0)
    again.restore(fresh)
    restored = [c for _, c in fresh.changes.items()]
    assert [(c.before.number, c.after.number) for c in restored] == [(1, 2), (2, 3)]
    assert restored[0].buckets == kept[0].buckets  # each figure as it was answered
    assert restored[0].before == kept[0].before and restored[0].after == kept[0].after
    fleet.states[NAME] = fresh
    fleet.advance(fleet.now + 5)
    assert fresh.view.changes[0].buckets == kept[0].buckets
    again.close()


def test_the_daemon_carries_a_file_sd_pods_past_to_its_replacement(tmp_path: Path) -> None:
    """file_sd, in-process through the daemon's own wiring: the old pod's address leaves the
    file and a new one (another name: host:port) arrives with the same group label; the
    daemon's Ingest hands the new member's first page to its group, which copies the past."""
    fleet = _fleet(240)
    past = fleet.states[NAME]
    sd = tmp_path / "pods.yaml"

    model = f", __specmon_model__: {past.config.model}" if past.config.model else ""

    def pods(host: str) -> None:
        sd.write_text(
            f"- targets: ['{host}']\n  labels: {{namespace: llm, deployment: llama{model}}}\n"
        )

    config = parse_config(
        f"file_sd_configs:\n  - files: ['{sd}']\n    group_labels: [namespace, deployment]\n"
    )

    async def run() -> None:
        daemon = Daemon(config_path=None)
        pods("10.0.0.1:8000")
        daemon._file_sd.refresh(config)
        daemon._sync_targets(config, initial=True)
        old = daemon._running["10.0.0.1:8000"].state
        assert old.config.group == "namespace=llm,deployment=llama"
        old.epochs, old.curves = past.epochs, past.curves  # what its scrapes counted
        pods("10.0.0.2:8000")
        await asyncio.sleep(0.01)  # a new mtime for the file's stamp
        daemon._file_sd.refresh(config)
        daemon._sync_targets(config, initial=False)
        assert list(daemon._running) == ["10.0.0.2:8000"]
        new = daemon._running["10.0.0.2:8000"].state
        assert not new.view.epochs  # its past comes with its first page
        gone = daemon.groups.groups.donor(old.config.group, name="10.0.0.2:8000")
        assert gone is not None and gone.state is None  # its past kept, not its windows
        fleet.targets[NAME].engine.restart(now=fleet.now, wall=fleet.now)
        fleet.now += 1
        fleet.targets[NAME].tick(fleet.now)
        page = read_page(fleet.targets[NAME].page(), engine=new.config.engine,
                         model=new.config.model)  # fmt: skip
        daemon.ingest.deliver(new, Reading(page, 1, 0.001), mono=fleet.now, wall=fleet.now,
                              lag=0.001)  # fmt: skip
        assert [e.number for e in new.view.epochs[0].epochs] == [1, 2]
        assert new.epochs is not past.epochs
        events = [t for e in new.view.epochs for _, t in e.events]
        assert any("its past taken from 10.0.0.1:8000" in t for t in events), events
        for name in list(daemon._running):
            daemon._stop_target(name)
        await asyncio.sleep(0)

    asyncio.run(run())


def test_a_kept_change_out_of_bounds_refuses_its_record_only(tmp_path: Path) -> None:
    """A kept change read back goes through the bounds a live answer obeys: a speed-up not
    above 0, or epochs out of order, refuse that target's record (one line), not the file."""
    fleet = _fleet(240)
    state = fleet.states[NAME]
    state.mark(wall=fleet.now, note="draft model swap")
    fleet.advance(fleet.now + 60)
    keeper = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
    body = keeper.snapshot([state])
    (record,) = (orjson.loads(orjson.dumps(t)) for t in body["targets"])
    assert len(record["changes"]) == 2
    other = {**record, "name": "other"}
    for harm in ("speedup", "order"):
        bad = orjson.loads(orjson.dumps(record))
        if harm == "speedup":
            bad["changes"][0]["buckets"][0][4] = -1.0
        else:
            bad["changes"][0]["before"], bad["changes"][0]["after"] = (
                bad["changes"][0]["after"], bad["changes"][0]["before"])  # fmt: skip
        write_atomic(keeper.path, encode({**body, "targets": [bad, other]}))
        again = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=AGE)
        assert again.open([state.config])
        assert again.refused == 1, harm
        fresh = TargetState(replace(state.config, name="other"), windows=(30.0,),
                            retention=60.0)  # fmt: skip
        again.restore(fresh)
        assert len(fresh.changes) == 2  # the other target keeps its changes
        again.close()
