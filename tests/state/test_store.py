"""The state file and its keeper: refusals (one log line, a fresh start, nothing half read),
atomic writes, the lock, the shard, identity, and the size per target at 1,000 targets."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
import structlog

from specmon.daemon.config import TargetConfig
from specmon.daemon.persist import StateKeeper, mark_targets
from specmon.daemon.target import TargetState
from specmon.engines import read_page
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.sim.engine import SimEngine, SimSettings
from specmon.sim.pages import PageKind, load_template
from specmon.state.store import (
    MAX_FILE_BYTES,
    DirLock,
    StateRefused,
    decode,
    encode,
    read_state,
    state_file_name,
    write_atomic,
)

START = 1_780_000_000.0


def _state(name: str, url: str | None = None) -> TargetState:
    return TargetState(
        TargetConfig(name=name, url=url or f"http://127.0.0.1:1/{name}"),
        windows=(60.0,),
        retention=70.0,
    )


def _feed(
    state: TargetState, *, scrapes: int = 4, k: int = 4, seed: int = 1, offset: float = 0.0
) -> None:
    template = load_template(PageKind.VLLM)
    settings = SimSettings(survival=(0.9, 0.7, 0.5, 0.3)[:k])
    engine = SimEngine(settings=settings, seed=seed, now=0.0, wall=START)
    for i in range(1, scrapes + 1):
        engine.advance(5.0 * i)
        page = template.render(engine, model="m")
        at = offset + 5.0 * i
        state.observe(read_page(page), mono=at, wall=START + at, duration=0.001)


def _keeper(path: Path, **kwargs: Any) -> StateKeeper:
    return StateKeeper(directory=path, shard=Shard(), log=get_logger(), max_age=30 * 86400.0,
                       **kwargs)  # fmt: skip


def _save(keeper: StateKeeper, states: list[TargetState]) -> None:
    asyncio.run(keeper.save(lambda: states))


def _written(path: Path, states: list[TargetState]) -> StateKeeper:
    """A keeper that wrote ``states`` (each fed) to ``path`` and closed: what a clean stop
    leaves behind."""
    for s in states:
        _feed(s)
    keeper = _keeper(path)
    assert keeper.open()
    _save(keeper, states)
    keeper.close()
    return keeper


def test_a_round_trip_restores_every_epoch(tmp_path: Path) -> None:
    states = [_state(f"t{i}") for i in range(3)]
    keeper = _written(tmp_path, states)
    mode = stat.S_IMODE(os.stat(keeper.path).st_mode)
    assert mode == 0o600
    again = _keeper(tmp_path)
    assert again.open()
    fresh = [_state(f"t{i}") for i in range(3)]
    for s in fresh:
        again.restore(s)
    assert [s.epochs.view() for s in fresh] == [s.epochs.view() for s in states]
    assert all(s.epochs.view() for s in fresh)


def test_a_changed_url_keeps_the_past_under_the_name(tmp_path: Path) -> None:
    """Issue 64: the state is keyed by the target's name; the move is an event."""
    _written(tmp_path, [_state("t")])
    again = _keeper(tmp_path)
    again.open()
    moved = _state("t", url="http://127.0.0.1:2/other")
    again.restore(moved)
    (model,) = moved.epochs.view()
    assert model.epochs and any("address changed" in text for _, text in model.events)


def test_the_file_holds_no_url_or_secret(tmp_path: Path) -> None:
    state = _state("t", url="http://127.0.0.1:1/metrics?token=s3cr3t")
    _feed(state)
    keeper = _keeper(tmp_path)
    keeper.open()
    _save(keeper, [state])
    data = keeper.path.read_bytes()
    assert b"s3cr3t" not in data and b"127.0.0.1" not in data


def _refused(tmp_path: Path, data: bytes | None = None) -> list[MutableMapping[str, Any]]:
    """Open a keeper on a file holding ``data``; its log lines."""
    keeper = _keeper(tmp_path)
    if data is not None:
        keeper.path.write_bytes(data)
    with structlog.testing.capture_logs() as logs:
        assert keeper.open()
    state = _state("t")
    keeper.restore(state)
    assert state.epochs.view() == ()  # a fresh start
    keeper.close()
    return logs


def _good(tmp_path: Path) -> bytes:
    return _written(tmp_path / "good", [_state("t")]).path.read_bytes()


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda d: d[: len(d) // 2], "truncated"),
        (lambda d: d[:-1] + (b"]" if d[-1:] != b"]" else b"}"), "corrupted"),
        (lambda d: d.replace(b'"version":3', b'"version":1', 1), "version 1"),  # an old file
        (lambda d: b"\x00" * 100, "no header line"),
        (lambda d: b'{"format":"other"}\n{}', "not a specmon state file"),
        (lambda d: b"", "no header line"),
    ],
)
def test_a_damaged_file_is_refused_with_one_line_and_a_fresh_start(
    tmp_path: Path, damage: Any, says: str
) -> None:
    logs = _refused(tmp_path, damage(_good(tmp_path)))
    refusals = [line for line in logs if line["event"] == "state_refused"]
    assert len(refusals) == 1
    assert says in refusals[0]["reason"]
    assert [line["event"] for line in logs] == ["state_refused"]


def test_a_restored_value_out_of_bounds_costs_that_target_only(tmp_path: Path) -> None:
    """A k of 1,000 in one target's record refused the whole file (issue 61: every target's
    history gone for one bad record): now that target alone, one line naming it."""
    states = [_state(f"t{i}") for i in range(3)]
    good = decode(_written(tmp_path / "good", states).path.read_bytes())
    good["targets"][1]["models"]["m"]["epochs"][0]["k"] = 1000
    keeper = _keeper(tmp_path)
    keeper.path.write_bytes(encode(good))
    with structlog.testing.capture_logs() as logs:
        assert keeper.open()
    assert [line["event"] for line in logs] == ["state_target_refused", "state_read"]
    assert logs[0]["target"] == "t1" and "chain length" in logs[0]["reason"]
    assert (logs[1]["targets"], logs[1]["refused"]) == (2, 1)
    fresh = [_state(f"t{i}") for i in range(3)]
    for s in fresh:
        keeper.restore(s)
    assert [bool(s.epochs.view()) for s in fresh] == [True, False, True]
    assert fresh[0].epochs.view() == states[0].epochs.view()


def test_a_1_gb_sparse_file_is_refused_from_its_size(tmp_path: Path) -> None:
    keeper = _keeper(tmp_path)
    with open(keeper.path, "wb") as f:
        f.truncate(2**30)  # sparse: no gigabyte is written, none may be read
    with structlog.testing.capture_logs() as logs:
        assert keeper.open()
    assert [line["event"] for line in logs] == ["state_refused"]
    assert "oversized" in logs[0]["reason"]


def test_a_symlink_or_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(_good(tmp_path))
    path = tmp_path / state_file_name()
    path.symlink_to(target)
    with pytest.raises(StateRefused, match="symbolic link"):
        read_state(path)
    path.unlink()
    path.mkdir()
    with pytest.raises(StateRefused):
        read_state(path)


def test_no_file_is_a_fresh_start_without_an_error(tmp_path: Path) -> None:
    logs = _refused(tmp_path)
    assert [line["event"] for line in logs] == ["state_fresh"]


def test_a_second_daemon_waits_for_the_lock(tmp_path: Path) -> None:
    first, second = _keeper(tmp_path), _keeper(tmp_path)
    assert first.open()
    state = _state("t")
    _feed(state)
    _save(first, [state])
    with structlog.testing.capture_logs() as logs:
        assert not second.open()
        _save(second, [_state("other")])  # waits: neither reads nor writes
    assert [line["event"] for line in logs] == ["state_dir_locked"]
    assert logs[0]["holder"] == str(os.getpid())
    assert second.writes == 0
    first.close()
    late = _state("t")
    _feed(late, scrapes=2, seed=3)  # seen live before the lock came
    _save(second, [late])
    assert second.writes == 1
    (view,) = late.epochs.view()
    assert view.epochs[0].start == START + 5.0  # the file's epoch first
    assert DirLock(second.lock.path).acquire() is False


def test_a_shard_keeps_only_its_targets(tmp_path: Path) -> None:
    shard = Shard(0, 2)
    states = [_state(f"t{i}") for i in range(20)]
    for s in states:
        _feed(s, scrapes=2)
    keeper = StateKeeper(directory=tmp_path, shard=shard, log=get_logger(), max_age=86400.0)
    keeper.open()
    _save(keeper, states)
    assert keeper.path.name == "specmon-state-0-of-2.json"
    body = read_state(keeper.path)
    assert body is not None
    names = {t["name"] for t in body["targets"]}
    assert names == {s.config.name for s in states if shard.keeps(s.config.name)}
    assert 0 < len(names) < 20


def test_a_target_not_running_is_kept_until_it_expires(tmp_path: Path) -> None:
    _written(tmp_path, [_state("gone")])
    again = _keeper(tmp_path)
    again.open()
    _save(again, [])  # the target is not configured now: its epochs stay in the file
    body = read_state(again.path)
    assert body is not None and [t["name"] for t in body["targets"]] == ["gone"]
    again.close()
    body["targets"][0]["seen"] = time.time() - 7200  # last running two hours ago
    write_atomic(again.path, encode(body))
    short = _keeper(tmp_path)
    short.max_age = 3600.0  # ... kept until state_max_age after that
    short.open()
    _save(short, [])
    body = read_state(short.path)
    assert body is not None and body["targets"] == []


def test_a_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, encode({"a": 1}))
    write_atomic(path, encode({"a": 2}))
    assert read_state(path) == {"a": 2, "targets": []}
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temporary left


def test_mark_answers(tmp_path: Path) -> None:
    state = _state("t")
    log = get_logger()
    assert mark_targets({"target": "t"}, [state], log=log)[0] == 400
    assert mark_targets({"target": "x", "note": "n"}, [state], log=log)[0] == 404
    assert mark_targets({"target": "t", "note": "n"}, [state], log=log)[0] == 409
    assert mark_targets({"target": "t", "note": "n" * 201}, [state], log=log)[0] == 400
    _feed(state)
    status, text = mark_targets({"target": "t", "note": "draft 1B"}, [state], log=log)
    assert (status, text) == (200, "marked: epoch 2")
    assert state.view.epochs[0].current.note == "draft 1B"


def test_size_per_target_at_1000_targets(tmp_path: Path) -> None:
    """The file's size at 1,000 targets, each with MAX_EPOCHS epochs (the most kept): the
    figure docs/deploying.md states (bounded by the per-target cap, not measured as time)."""
    from specmon.state.epoch_book import EpochBook
    from specmon.state.epochs import MAX_EPOCHS

    one = _state("t")
    _feed(one)
    for i in range(MAX_EPOCHS + 3):
        one.mark(wall=START + 100.0 + i, note=f"draft model variant {i:03d} " + "x" * 40)
    model = one.epochs.to_json()
    assert len(model["m"]["epochs"]) == MAX_EPOCHS
    states = []
    for i in range(1000):
        s = _state(f"target-{i:04d}")
        s.epochs = EpochBook()
        s.epochs.engine = "vllm"
        s.epochs.restore(model, now=START + 1000.0)
        states.append(s)
    keeper = _keeper(tmp_path)
    keeper.open()
    _save(keeper, states)
    size = keeper.path.stat().st_size
    per_target = size / 1000
    print(
        f"state file at 1,000 targets x {MAX_EPOCHS} epochs: {size} bytes, {per_target:.0f} a target"
    )
    assert per_target < 4096  # the stated bound: under 4 KB a target
    assert size < MAX_FILE_BYTES


def test_the_write_runs_off_the_event_loop(tmp_path: Path) -> None:
    """The snapshot is taken on the loop; the encoding, the write and the fsyncs in a thread."""
    state = _state("t")
    _feed(state)
    keeper = _keeper(tmp_path)
    keeper.open()
    writers: list[int] = []
    write = keeper.write_now

    def spy(body: dict[str, Any]) -> int:
        writers.append(threading.get_ident())
        return write(body)

    keeper.write_now = spy  # type: ignore[method-assign]

    async def save() -> int:
        await keeper.save(lambda: [state])
        return threading.get_ident()

    loop_thread = asyncio.run(save())
    assert len(writers) == 1 and writers[0] != loop_thread
    assert keeper.writes == 1 and read_state(keeper.path) is not None


def test_a_failed_write_is_logged_and_the_old_file_kept(tmp_path: Path) -> None:
    state = _state("t")
    _feed(state)
    keeper = _keeper(tmp_path, max_bytes=200)  # smaller than any state: the write is refused
    keeper.open()
    with structlog.testing.capture_logs() as logs:
        _save(keeper, [state])
    assert [line["event"] for line in logs] == ["state_write_failed"]
    assert keeper.failures == 1 and not keeper.path.exists()


def test_the_target_page_and_the_api_list_the_epochs() -> None:
    from specmon.surfaces.status import views_json
    from specmon.surfaces.target import render_target

    state = _state("t")
    _feed(state, scrapes=4, k=4)
    _feed(state, scrapes=5, k=2, seed=2, offset=100.0)  # restarted with k = 2: counters fall
    html = render_target(state.view, primary_window="1m", series=(), events=())
    assert "Configuration epochs" in html
    assert html.index("speculating, k = 2") < html.index("speculating, k = 4")  # newest first
    assert "chain_length" in html and "engine restarted" in html
    (doc,) = views_json([state.view])
    (model,) = doc["epochs"]
    assert [(e["epoch"], e["chain_length"], e["reason"]) for e in model["epochs"]] == [
        (1, 4, "first_seen"),
        (2, 2, "chain_length"),
    ]


def test_a_target_removed_while_running_keeps_its_epochs_and_gets_them_back(
    tmp_path: Path,
) -> None:
    state = _state("t")
    _feed(state)
    keeper = _keeper(tmp_path)
    keeper.open()
    state.mark(wall=START + 50.0, note="draft 1B")
    keeper.retire(state)  # removed from the config
    _save(keeper, [])
    body = read_state(keeper.path)
    assert body is not None and [t["name"] for t in body["targets"]] == ["t"]
    back = _state("t")  # configured again, same URL
    keeper.restore(back)
    assert [e.note for e in back.epochs.view()[0].epochs] == ["", "draft 1B"]


# --------------------------------------------------------------------------- issue 61


def test_a_clock_behind_the_writer_keeps_every_target(tmp_path: Path) -> None:
    """A clock 1.5 days behind the last writer refused the whole file (1,000 targets): now
    every target is kept, its later times taken as now (in order), with one line."""
    from specmon.state.epoch_book import EpochBook

    one = _state("t")
    _feed(one)
    ahead = START + 1.5 * 86400
    one.mark(wall=ahead - 600.0, note="marked on the writer's clock")
    model = one.epochs.to_json()
    states = []
    for i in range(1000):
        s = _state(f"target-{i:04d}")
        s.epochs = EpochBook()
        s.epochs.engine = "vllm"
        s.epochs.restore(model, now=ahead)
        states.append(s)
    writer = _keeper(tmp_path, clock=lambda: ahead)
    assert writer.open()
    _save(writer, states)
    writer.close()
    behind = START + 100.0
    reader = _keeper(tmp_path, clock=lambda: behind)
    with structlog.testing.capture_logs() as logs:
        assert reader.open()
    events = [line["event"] for line in logs]
    assert events == ["state_clock_behind", "state_read"], events
    assert logs[1]["targets"] == 1000 and logs[1]["refused"] == 0
    fresh = _state("target-0999")
    reader.restore(fresh)
    (view,) = fresh.epochs.view()
    assert [e.note for e in view.epochs] == ["", "marked on the writer's clock"]
    assert view.current.start == behind  # after this clock's now: taken as now
    assert view.epochs[0].start == START + 5.0  # before it: as written


def test_a_lock_file_linked_to_another_file_leaves_that_file_alone(tmp_path: Path) -> None:
    """A lock file hard-linked to another file: that file was truncated and overwritten with
    the pid. Now the lock file is refused (the state off, one line) and the file untouched."""
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    keeper = _keeper(tmp_path / "state")
    keeper.directory.mkdir(mode=0o700)
    os.link(victim, keeper.lock.path)
    with structlog.testing.capture_logs() as logs:
        assert not keeper.open()
        assert not keeper.open()  # tried again each interval, logged once
    assert victim.read_text() == "precious\n"
    assert [line["event"] for line in logs] == ["state_dir_unusable"]
    assert "2 links" in logs[0]["error"]
    assert not keeper.lock.held


def test_a_temporary_planted_as_a_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    keeper = _keeper(tmp_path / "state")
    assert keeper.open()
    os.link(victim, keeper.path.with_name(f".{keeper.path.name}.{os.getpid()}.tmp"))
    state = _state("t")
    _feed(state)
    _save(keeper, [state])
    assert keeper.writes == 1 and victim.read_text() == "precious\n"
    assert read_state(keeper.path) is not None


def _group_writable(directory: Path) -> None:
    directory.chmod(0o770)
    os.chown(directory, os.geteuid(), 54321)


def _world_writable(directory: Path) -> None:
    directory.chmod(0o777)


_WORLD_WRITABLE = _world_writable


@pytest.mark.parametrize(
    ("setup", "says"),
    [
        (_world_writable, "writable by every user"),
        (lambda d: os.chown(d, 12345, 12345), "owned by uid 12345"),
        (_group_writable, "writable by group"),
    ],
)
def test_a_directory_others_can_write_in_is_not_used(tmp_path: Path, setup: Any, says: str) -> None:
    """A state directory writable by others or owned by another user was used without a
    word: anyone there could plant a FIFO, hold the lock or forge a history."""
    if os.geteuid() != 0 and setup is not _WORLD_WRITABLE:
        pytest.skip("chown to another user or group needs root")
    directory = tmp_path / "state"
    directory.mkdir(mode=0o700)
    _written(directory, [_state("t")])
    setup(directory)
    keeper = _keeper(directory)
    with structlog.testing.capture_logs() as logs:
        assert not keeper.open()
    assert [line["event"] for line in logs] == ["state_dir_unusable"]
    assert says in logs[0]["error"]
    state = _state("t")
    keeper.restore(state)
    assert state.epochs.view() == ()  # nothing read
    _save(keeper, [state])
    assert keeper.writes == 0 and keeper.last_ok is False


def test_mark_notes_lose_control_and_invisible_characters(tmp_path: Path) -> None:
    """Notes kept newlines and terminal escapes, and the API returned them raw."""
    from specmon.surfaces.status import views_json

    state = _state("t")
    _feed(state)
    note = "draft\n1B\x1b[2J\u202eevil\r\x00"
    status, _ = mark_targets({"target": "t", "note": note}, [state], log=get_logger())
    assert status == 200
    (doc,) = views_json([state.view])
    api = doc["epochs"][0]["epochs"][-1]["note"]
    assert api == "draft 1B [2J evil"
    assert (
        mark_targets({"target": "t", "note": "\n\x1b\u200b"}, [state], log=get_logger())[0] == 400
    )
    # A note written raw by an older specmon is cleaned when read back.
    keeper = _keeper(tmp_path)
    assert keeper.open()
    _save(keeper, [state])
    keeper.close()
    body = read_state(keeper.path)
    assert body is not None
    body["targets"][0]["models"]["m"]["epochs"][-1]["note"] = "old\nnote\x1b[0m"
    write_atomic(keeper.path, encode(body))
    again = _keeper(tmp_path)
    assert again.open()
    fresh = _state("t")
    again.restore(fresh)
    assert fresh.epochs.view()[0].epochs[-1].note == "old note [0m"


def test_the_lifecycle_flag_names_both_endpoints_it_allows() -> None:
    import argparse

    from specmon.cli import web as web_cli

    parser = argparse.ArgumentParser()
    web_cli.add_run_arguments(parser)
    text = " ".join(parser.format_help().split())
    flag = text[text.rindex("--web.enable-lifecycle") :][:200]
    assert "/-/reload" in flag and "/-/mark" in flag
