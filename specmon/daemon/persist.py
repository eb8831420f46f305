"""The daemon's side of the state file (specmon/state/store.py): what is kept, when it is read
and written, and by whom.

With ``state_dir`` set (``global.state_dir`` or ``--state.dir``), each target's configuration
epochs are restored when its state is made, and written every ``WRITE_INTERVAL`` seconds and at
a clean stop: the snapshot is taken on the event loop (small records), the encoding, the write
and the fsyncs run in a thread. A SIGKILL loses at most one interval. State is keyed by the
target's name (issue 64): a server that answers at another address under the same name (its
URL changed in the config, then a reload or a restart) keeps its epochs and curves, the move an
event in its epochs (each record keeps a hash of the URL it was written under, never the URL
itself: it may carry a token). A file written by an older specmon, keyed by name and URL hash,
is read the same way: a record is carried over to the target of its name (the newest when
several share a name). Under ``--shard`` a daemon keeps its own file and only its shard's
targets.

Each target's record is read and checked alone (:func:`_record`): one out of bounds, or not
even JSON, costs that target only (one ``state_target_refused`` line naming it), never the
others. A file that cannot be used at all (truncated, corrupted, another format) is refused
with one line and the daemon starts fresh. A directory others may write in, or a lock file
that is not one specmon may write, leaves the state off (``state_dir_unusable``, logged
once a reason); another daemon holding the lock (a rolling update) is waited for, without
reading or writing, and the state read when it lets go. Every write's outcome is kept for
``specmon_state_last_write_success_timestamp_seconds`` and its alert.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prometheus_client import Gauge

from specmon.daemon.config import TargetConfig
from specmon.daemon.epoch_curves import ChangeView, EpochCurves
from specmon.daemon.target import TargetState
from specmon.engines import PageReading
from specmon.load.matched import bucket_from_row, bucket_row
from specmon.logs import Logger
from specmon.sharding import Shard
from specmon.state.changelog import MAX_CHANGES, ChangeLog
from specmon.state.epoch_book import EpochBook
from specmon.state.epoch_laws import clean_text
from specmon.state.epochs import MAX_AHEAD, MAX_NOTE, epoch_from, epoch_json
from specmon.state.groups import Groups
from specmon.state.store import (
    MAX_FILE_BYTES,
    DirLock,
    StateRefused,
    directory_problem,
    encode_parts,
    open_state,
    parse_record,
    remove_temporaries,
    saved_json,
    state_file_name,
    write_atomic,
)

__all__ = [
    "WRITE_INTERVAL",
    "GroupPasts",
    "StateKeeper",
    "StateMetrics",
    "carry_past",
    "copy_past",
    "mark_targets",
    "state_key",
]

#: Seconds between two writes (the most a SIGKILL loses).
WRITE_INTERVAL = 30.0
#: Targets snapshotted between two turns of the event loop.
SLICE = 500
#: Most targets kept in one file (at about 2.6 KB a target, well under MAX_FILE_BYTES).
MAX_TARGETS = 20_000
#: Refused records logged one by one at a read (the rest counted in ``state_read``).
LOGGED_REFUSALS = 20
#: How far the file's write time may lie after this clock's now before it is said
#: (``state_clock_behind``): its later times are then taken as now.
CLOCK_SLACK = 60.0

#: The event an address change leaves in a target's epochs (kept in the state file, which
#: holds no URL: it may carry a token).
MOVED = "address changed: the server answers at another URL under this name; its past kept"

#: What a saved record belongs to: the target's name (its URL may change under it).
Key = str


def state_key(state: TargetState) -> Key:
    return config_key(state.config)


def config_key(cfg: TargetConfig) -> Key:
    return cfg.name


def url_hash(url: str) -> str:
    """What a record keeps of its target's URL (never the URL: it may carry a token)."""
    return hashlib.sha256(url.encode()).hexdigest()[:32]


def _configured(cfg: TargetConfig) -> tuple[str, str]:
    return (cfg.engine.value if cfg.engine is not None else "", cfg.model or "")


def carry_past(state: TargetState, past: TargetState, *, wall: float) -> None:
    """A target restarted under its name (its URL, engine or model changed at a reload): the
    new state takes the old one's epochs and curves; an address change is an event in each
    model's epochs (counting starts again at the next reading: another server's counters)."""
    state.epochs, state.curves, state.changes = past.epochs, past.curves, past.changes
    if past.config.url != state.config.url:  # the text is kept in the file: no URL in it
        state.epochs.moved(wall=wall, text=MOVED)
    state.view = replace(state.view, epochs=state.epochs.view())


def copy_past(
    state: TargetState, book: EpochBook, curves: EpochCurves, *, reading: PageReading,
    wall: float, source: str, changes: ChangeLog[ChangeView] | None = None,
) -> bool:  # fmt: skip
    """A new member of a group with no past of its own takes a copy of its group's
    (specmon.state.groups): of ``book`` and ``curves`` (a live or departed member's, or a
    saved record's), the models its first page (``reading``) names, when that page is from
    the engine the past was seen on; the copy is an event in its epochs. False when nothing
    is copied."""
    engine = reading.engine.value if reading.engine is not None else None
    served = {m.model for m in (*reading.models, *reading.plain_models)}
    epochs = {m: v for m, v in book.to_json().items() if m in served}
    if not epochs or book.engine not in (None, engine):
        return False
    try:
        mine = EpochBook()
        mine.restore(epochs, now=wall)
        mine.engine = book.engine
        theirs = EpochCurves()
        theirs.restore({m: v for m, v in curves.to_json().items() if m in served}, mine)
    except ValueError:  # checked as a restore is: not expected
        return False
    mine.moved(wall=wall, text=f"joined group {state.config.group}: its past taken from "
               f"{source}")  # fmt: skip
    state.epochs, state.curves = mine, theirs
    if changes is not None:  # the group's change log: its models' changes
        state.changes = ChangeLog(kv for kv in changes.items() if kv[0][0] in served)
    state.view = replace(state.view, epochs=state.epochs.view())
    return True


@dataclass(slots=True)
class _Past:
    """A group member's past: a live member's state (read as it is now), or what a departed
    member left (its epochs, curves and changes only: not its windows)."""

    name: str
    state: TargetState | None
    kept: tuple[EpochBook, EpochCurves, ChangeLog[ChangeView]] | None = None

    def parts(self) -> tuple[EpochBook, EpochCurves, ChangeLog[ChangeView]]:
        if self.state is not None:
            return self.state.epochs, self.state.curves, self.state.changes
        assert self.kept is not None
        return self.kept

    def departed(self) -> _Past:
        return _Past(self.name, None, self.parts())


class GroupPasts:
    """The daemon's groups (specmon.state.groups): each group's members, and the members
    that joined without a past of their own, waiting for their first page to take a copy of
    their group's (:meth:`first_page`): a live member's, else the last departed member's,
    else the newest saved record of the group's."""

    def __init__(self) -> None:
        self.groups: Groups[_Past] = Groups()
        self._waiting: set[str] = set()
        #: The state file's keeper, when there is one (its saved records of departed members).
        self.keeper: StateKeeper | None = None

    def join(self, state: TargetState) -> None:
        group, name = state.config.group, state.config.name
        if not group:
            self.leave(name)
            return
        if not state.epochs.models():
            self._waiting.add(name)
        self.groups.join(group, name, _Past(name, state))

    def leave(self, name: str) -> None:
        self._waiting.discard(name)
        self.groups.leave(name, keep=_Past.departed)

    def first_page(self, state: TargetState, reading: PageReading) -> None:
        """Before ``state`` counts ``reading``: a waiting member's copy of the past."""
        name = state.config.name
        if name not in self._waiting:
            return
        self._waiting.discard(name)
        if state.epochs.models():
            return
        wall = time.time()
        donor = self.groups.donor(state.config.group, name=name)
        epochs, curves, changes = donor.parts() if donor is not None else (None, None, None)
        if donor is not None and epochs is not None and curves is not None and epochs.models():
            copy_past(state, epochs, curves, reading=reading, wall=wall, source=donor.name,
                      changes=changes)  # fmt: skip
        elif self.keeper is not None and self.keeper.lock.held:
            self.keeper.restore_group(state, reading=reading)


@dataclass(frozen=True, slots=True)
class StateMetrics:
    """The state file's two gauges (labelled by the file): the last write's outcome and the
    last success's time."""

    ok: Gauge
    time: Gauge


@dataclass(slots=True)
class _Saved:
    """A target's saved state, checked, not (yet) running: restored when it starts, written
    on until it expires. A target configured when the file is read keeps its epochs and
    curves made (restored at once); any other keeps its record's bytes only (made again when
    it starts): what the file's read leaves in memory is at most the file's size."""

    engine: str | None
    #: When it was last running (Unix time).
    seen: float
    #: The record as read (checked), or None when it is kept made (``book``, ``curves``).
    raw: bytes | None
    book: EpochBook | None = None
    curves: EpochCurves | None = None
    #: The latest time the record may hold (the file's write time + MAX_AHEAD).
    ceiling: float = math.inf
    #: The hash of the URL it was written under (:func:`url_hash`).
    url: str = ""
    #: The engine and model configured when it was written.
    configured: tuple[str, str] = ("", "")
    #: The group it was a member of ("": none; specmon.state.groups).
    group: str = ""
    #: Its kept changes, each with its last answer (specmon.state.changelog).
    changes: tuple[ChangeView, ...] = ()


class StateKeeper:
    """Reads the state file once, restores targets from it, writes it on a schedule."""

    def __init__(
        self, *, directory: Path, shard: Shard, log: Logger, max_age: float,
        interval: float = WRITE_INTERVAL, max_bytes: int = MAX_FILE_BYTES,
        clock: Callable[[], float] = time.time, metrics: StateMetrics | None = None,
    ) -> None:  # fmt: skip
        self.directory = directory
        self.path = directory / state_file_name(str(shard))
        self.shard = shard
        self.log = log
        self.max_age = max_age
        self.interval = interval
        self.max_bytes = max_bytes
        #: Unix time now (the bounds restored times are checked against).
        self.clock = clock
        self.lock = DirLock(self.path.with_name(self.path.name + ".lock"))
        #: Saved targets not (yet) restored: kept in the next writes until they expire.
        self._saved: dict[Key, _Saved] = {}
        self._waiting_logged = False
        #: Why the directory was last found unusable (logged once a reason).
        self._unusable: str | None = None
        self.writes = 0
        self.failures = 0
        #: The last write's outcome (None before the first) and when one last succeeded
        #: (Unix time; 0: never): specmon_state_last_write_* and SpecmonStateNotWritten.
        self.last_ok: bool | None = None
        self.last_success = 0.0
        #: Targets whose saved record was refused at the last read.
        self.refused = 0
        #: One write at a time (the stop's last write may meet a scheduled one's thread).
        self._write_lock = threading.Lock()
        self._gauges = None
        if metrics is not None:
            self._gauges = (metrics.ok.labels(file=str(self.path)),
                            metrics.time.labels(file=str(self.path)))  # fmt: skip
            self._gauges[0].set(1)
            self._gauges[1].set(0)

    def _outcome(self, ok: bool) -> None:
        """A write (or the directory's check) succeeded or failed: kept, and exported."""
        self.last_ok = ok
        if ok:
            self.last_success = time.time()
        if self._gauges is not None:
            self._gauges[0].set(1 if ok else 0)
            if ok:
                self._gauges[1].set(self.last_success)

    # -- reading ----------------------------------------------------------------------------

    def open(self, targets: Iterable[TargetConfig] = ()) -> bool:
        """Take the lock and read the file; False while another daemon holds the lock, or
        the directory cannot be used (its owner or mode, the lock file: logged once). The
        records of ``targets`` (configured now) are kept made, ready to restore; the others
        as bytes."""
        try:
            problem = directory_problem(self.directory)
            if problem is None:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                problem = directory_problem(self.directory)  # as made
            if problem is not None:
                raise StateRefused(f"{self.directory}: {problem}")
            if not self.lock.acquire():
                if not self._waiting_logged:
                    self.log.warning(
                        "state_dir_locked", file=str(self.path), holder=self.lock.holder(),
                        effect="another specmon keeps this state; nothing is read or written "
                        "until it stops (a rolling update)",
                    )  # fmt: skip
                    self._waiting_logged = True
                return False
        except (OSError, StateRefused) as exc:
            reason = str(exc)
            if reason != self._unusable:
                self._unusable = reason
                self.log.error(
                    "state_dir_unusable", dir=str(self.directory), error=reason,
                    effect="nothing is read or written; tried again every write interval",
                )  # fmt: skip
            self._outcome(False)
            return False
        self._unusable = None
        remove_temporaries(self.path)  # a writer killed mid-write (the lock is ours now)
        self._saved = self._read({config_key(t) for t in targets})
        return True

    def _read(self, expected: set[Key]) -> dict[Key, _Saved]:
        now = self.clock()
        try:
            found = open_state(self.path, max_bytes=self.max_bytes)
        except StateRefused as exc:
            self.log.error(
                "state_refused", file=str(self.path), reason=str(exc),
                effect="starting fresh; the file is replaced at the next write",
            )  # fmt: skip
            return {}
        if found is None:
            self.log.info("state_fresh", file=str(self.path), reason="no state file yet")
            return {}
        try:
            return self._records(
                found.facts, found.records(), now=now, total=found.count(), expected=expected
            )
        finally:
            found.close()

    def _records(
        self, facts: Mapping[str, Any], records: Iterable[memoryview], *, now: float,
        total: int | None = None, expected: set[Key] | None = None,
    ) -> dict[Key, _Saved]:  # fmt: skip
        """Every saved target of the file, each checked alone: a record out of bounds costs
        its target only (one line naming it)."""
        written = facts.get("written")
        if not _is_time(written):
            written = None
        ceiling = max(now, written if written is not None else now) + MAX_AHEAD
        if written is not None and written > now + CLOCK_SLACK:
            self.log.warning(
                "state_clock_behind", file=str(self.path), seconds=round(written - now, 1),
                effect="this clock is behind the one that wrote the state: its later times "
                "are taken as now, every epoch kept",
            )  # fmt: skip
        saved: dict[Key, _Saved] = {}
        self.refused = 0
        for index, raw in enumerate(records):
            if index >= MAX_TARGETS:
                self.log.warning(
                    "state_targets_dropped", file=str(self.path), max_targets=MAX_TARGETS,
                    dropped=(total - MAX_TARGETS) if total is not None else None,
                )  # fmt: skip
                break
            try:
                key, entry = _record(raw, now=now, ceiling=ceiling)
                if key not in (expected or ()):  # checked; kept as its bytes until it starts
                    entry = _Saved(entry.engine, entry.seen, bytes(raw), ceiling=ceiling,
                                   url=entry.url, group=entry.group)  # fmt: skip
            except ValueError as exc:
                self.refused += 1
                if self.refused <= LOGGED_REFUSALS:  # the rest are counted in state_read
                    self.log.error(
                        "state_target_refused", file=str(self.path), record=index,
                        target=_name_of(raw), reason=str(exc),
                        effect="this target starts afresh; every other target keeps its state",
                    )  # fmt: skip
                continue
            other = saved.get(key)
            if other is not None and other.seen >= entry.seen:
                continue  # an older file's records of one name at two URLs: the newest kept
            if self.shard.keeps(key):
                saved[key] = entry
        self.log.info("state_read", file=str(self.path), targets=len(saved),
                      refused=self.refused)  # fmt: skip
        return saved

    def restore(self, state: TargetState) -> None:
        """Give a new target's state its saved epochs (once)."""
        saved = self._saved.pop(state_key(state), None)
        if saved is None:
            return
        book, curves, changes = saved.book, saved.curves, saved.changes
        if book is None or curves is None:  # kept as bytes: made now (checked again)
            assert saved.raw is not None
            try:
                _, made = _record(memoryview(saved.raw), now=self.clock(), ceiling=saved.ceiling)
            except ValueError as exc:  # checked when read: not expected
                self.log.error("state_target_refused", target=state.config.name,
                               reason=str(exc))  # fmt: skip
                return
            book, curves, changes = made.book, made.curves, made.changes
            assert book is not None and curves is not None
        if not len(state.changes):
            state.changes = _change_log(changes)
        if saved.url and saved.url != url_hash(state.config.url):  # moved while specmon was off
            book.moved(wall=self.clock(), text=MOVED + " (while specmon was stopped)")
        if state.epochs.view():  # seen live before the lock came: merged, checked again
            # (the epochs are numbered on: their saved curves are let go, not misfiled)
            try:
                state.epochs.restore(book.to_json(), now=self.clock())
            except ValueError as exc:  # checked when read: not expected
                self.log.error("state_target_refused", target=state.config.name,
                               reason=str(exc))  # fmt: skip
                return
        else:  # checked when the file was read
            state.epochs = book
            state.curves = curves
        state.epochs.engine = saved.engine or None
        state.view = replace(state.view, epochs=state.epochs.view())  # listed before a scrape

    def restore_group(self, state: TargetState, *, reading: PageReading) -> bool:
        """A new member of a group, with no record of its own: a copy of the newest saved
        record of its group (kept for the others); False when there is none."""
        group = state.config.group
        found = [(s.seen, name) for name, s in self._saved.items() if group and s.group == group]
        if not found:
            return False
        _, name = max(found)
        saved = self._saved[name]
        made = saved
        if saved.book is None or saved.curves is None:
            assert saved.raw is not None
            try:
                _, made = _record(memoryview(saved.raw), now=self.clock(), ceiling=saved.ceiling)
            except ValueError:  # checked when read: not expected
                return False
        assert made.book is not None and made.curves is not None
        return copy_past(state, made.book, made.curves, reading=reading, wall=self.clock(),
                         source=name, changes=_change_log(made.changes))  # fmt: skip

    def retire(self, state: TargetState) -> None:
        """A target leaves (removed from the config, or its URL changed): its epochs stay in
        the file under its key until they expire, and come back if it does (kept as their
        record's bytes)."""
        models = state.epochs.saved_form()
        if models:
            key, now = state_key(state), self.clock()
            entry = _target_json(state.config, state.epochs.engine, models, seen=now,
                                 curves=state.curves.saved_form(),
                                 changes=state.changes)  # fmt: skip
            self._saved[key] = _Saved(state.epochs.engine, now, saved_json(entry),
                                      ceiling=now + MAX_AHEAD, url=url_hash(state.config.url),
                                      group=state.config.group)  # fmt: skip

    # -- writing ----------------------------------------------------------------------------

    def _entry(self, state: TargetState, now: float, seen: set[Key]) -> dict[str, Any] | None:
        key = state_key(state)
        if key in seen or not self.shard.keeps(key):
            return None
        seen.add(key)
        state.epochs.expire(now=now, max_age=self.max_age)
        models = state.epochs.saved_form()
        if not models:
            return None
        return _target_json(state.config, state.epochs.engine, models, seen=now,
                            curves=state.curves.saved_form(), changes=state.changes)  # fmt: skip

    def snapshot(self, states: Iterable[TargetState]) -> dict[str, Any]:
        """The body to write, taken at once (the epochs' saved forms, a few per target)."""
        now, states = self.clock(), list(states)
        seen: set[Key] = set()
        entries = (self._entry(state, now, seen) for state in states)
        return self._body([e for e in entries if e is not None], seen, now, _groups(states))

    async def snapshot_sliced(self, states: Iterable[TargetState]) -> dict[str, Any]:
        """:meth:`snapshot` on the event loop, letting it turn every SLICE targets (each
        target's entry is taken whole between two of its scrapes)."""
        now, states = self.clock(), list(states)
        seen: set[Key] = set()
        targets: list[dict[str, Any] | bytes] = []
        for index, state in enumerate(states):
            if index and index % SLICE == 0:
                await asyncio.sleep(0)
            entry = self._entry(state, now, seen)
            if entry is not None:
                targets.append(entry)
        return self._body(targets, seen, now, _groups(states))

    def _body(
        self, targets: list[dict[str, Any] | bytes], seen: set[Key], now: float,
        groups: set[str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """With the saved targets not running now (kept until they expire; a departed
        member of a group with a running member is let go: that member carries the past)."""
        for key, saved in list(self._saved.items()):
            if key in seen or saved.seen < now - self.max_age or saved.group in (groups or ()):
                del self._saved[key]  # a target that came back, or expired
                continue
            if saved.raw is not None:
                targets.append(saved.raw)  # its record's bytes, as read
            else:
                assert saved.book is not None and saved.curves is not None
                targets.append(_saved_json(key, saved))
        return {"written": now, "shard": str(self.shard), "targets": targets[:MAX_TARGETS]}

    def write_now(self, body: dict[str, Any]) -> int:
        """Encode and write ``body`` (in a thread); its size in bytes. Raises OSError."""
        parts = encode_parts(body)
        size = sum(len(part) for part in parts)
        if size > self.max_bytes:
            # The epochs first: without the curves' sums (the history basis starts again) and
            # the kept changes' answers.
            targets = [parse_record(t) if isinstance(t, bytes) else t for t in body["targets"]]
            lean_targets = [{**t, "curves": {}, "changes": []} for t in targets]
            parts = encode_parts({**body, "targets": lean_targets})
            lean = sum(len(part) for part in parts)
            if lean <= self.max_bytes:
                self.log.warning("state_curves_dropped", bytes=size, max_bytes=self.max_bytes)
                size = lean
        if size > self.max_bytes:
            raise OSError(f"the state would take {size} bytes, more than {self.max_bytes}")
        with self._write_lock:
            write_atomic(self.path, parts)
        return size

    async def save(self, states: Callable[[], Iterable[TargetState]]) -> None:
        """One write: the snapshot here, the rest in a thread. Failures are logged."""
        if not self.lock.held:
            if not await asyncio.to_thread(self.open):  # the read and its checks: a thread
                return
            for state in states():  # the lock came late: the file's epochs come first
                self.restore(state)
        body = await self.snapshot_sliced(states())
        try:
            await asyncio.to_thread(self.write_now, body)
        except OSError as exc:
            self.failures += 1
            self._outcome(False)
            self.log.error("state_write_failed", file=str(self.path), error=str(exc))
            return
        self.writes += 1
        self._outcome(True)

    async def run(self, states: Callable[[], Iterable[TargetState]]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.save(states)

    def close(self) -> None:
        self.lock.release()


def _change_json(c: ChangeView) -> dict[str, Any]:
    """A kept change as the state file keeps it: its epochs and its last answer."""
    return {"model": c.model, "before": epoch_json(c.before), "after": epoch_json(c.after),
            "buckets": [bucket_row(b) for b in c.buckets],
            "loads_before": list(c.loads_before), "loads_after": list(c.loads_after)}  # fmt: skip


def _change_from(raw: object, *, limit: float) -> ChangeView:
    """:func:`_change_json` read back within the bounds a live one obeys (ValueError)."""
    if not isinstance(raw, dict):
        raise ValueError("changes: a change is not an object")
    model, buckets = raw.get("model"), raw.get("buckets")
    if not isinstance(model, str) or len(model) > 1024:
        raise ValueError("changes: a change's model is not a name")
    before, after = (epoch_from(raw.get(k), limit=limit) for k in ("before", "after"))
    if not before.number < after.number:
        raise ValueError("changes: a change's epochs out of order")
    loads = [raw.get(k) for k in ("loads_before", "loads_after")]
    if not isinstance(buckets, list) or len(buckets) > 64 or not all(
        isinstance(x, list) and len(x) <= 64 and all(isinstance(v, str) and len(v) <= 32
                                                    for v in x) for x in loads
    ):  # fmt: skip
        raise ValueError("changes: a change's buckets or loads are not lists")
    return ChangeView(
        model, before, after,
        tuple(bucket_from_row(b, chain_length=after.chain_length) for b in buckets),
        tuple(loads[0]), tuple(loads[1]),  # type: ignore[arg-type]
    )  # fmt: skip


def _change_log(changes: tuple[ChangeView, ...]) -> ChangeLog[ChangeView]:
    return ChangeLog(((c.model, c.before.number, c.after.number), c) for c in changes)


def _groups(states: list[TargetState]) -> set[str]:
    """The groups with a running member whose past is written."""
    return {s.config.group for s in states if s.config.group and s.epochs.models()}


def _target_json(
    cfg: TargetConfig, engine: str | None, models: dict[str, Any], *, seen: float,
    curves: dict[str, Any], changes: ChangeLog[ChangeView],
) -> dict[str, Any]:  # fmt: skip
    """One target's entry; ``seen``: when it was last running (a target no longer
    configured is kept until that is ``state_max_age`` ago)."""
    configured_engine, model = _configured(cfg)
    return {"name": cfg.name, "url_sha256": url_hash(cfg.url),
            "configured_engine": configured_engine, "configured_model": model,
            "engine": engine, "seen": seen, "models": models, "curves": curves,
            "group": cfg.group, "changes": [_change_json(c) for _, c in changes.items()]}  # fmt: skip


def _saved_json(key: Key, saved: _Saved) -> dict[str, Any]:
    """A saved target kept made (configured at the read, never started): as read."""
    assert saved.book is not None and saved.curves is not None
    return {"name": key, "url_sha256": saved.url, "configured_engine": saved.configured[0],
            "configured_model": saved.configured[1], "engine": saved.engine,
            "seen": saved.seen, "models": saved.book.saved_form(),
            "curves": saved.curves.saved_form(), "group": saved.group,
            "changes": [_change_json(c) for c in saved.changes]}  # fmt: skip


def _is_time(value: object) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value > 0
    )


def _name_of(raw: memoryview) -> str | None:
    """The target a refused record names, if its first key says (for the log line)."""
    head = bytes(raw[:400])
    if not head.startswith(b'{"name":"'):
        return None
    end = head.find(b'"', 9)
    while end > 0 and head[end - 1 : end] == b"\\":
        end = head.find(b'"', end + 1)
    return clean_text(head[9:end].decode("utf-8", "replace"))[:256] if end > 0 else None


def _record(raw: memoryview, *, now: float, ceiling: float) -> tuple[Key, _Saved]:
    """One saved target, parsed and checked as a restore would (raises ValueError naming
    the problem); times after ``now`` are taken as now (a clock behind the writer's)."""
    item = parse_record(raw)
    fields = [item.get(k) for k in ("name", "url_sha256", "configured_engine",
                                   "configured_model")]  # fmt: skip
    if not all(isinstance(f, str) and len(f) <= 2048 for f in fields):
        raise ValueError("its name, URL hash, engine or model is not a string")
    engine = item.get("engine")
    if engine is not None and (not isinstance(engine, str) or len(engine) > 64):
        raise ValueError("engine: not a string")
    models = item.get("models")
    if not isinstance(models, dict):
        raise ValueError("models: not an object")
    seen = item.get("seen")
    if not _is_time(seen) or seen > ceiling:  # type: ignore[operator]
        raise ValueError("seen: not a time up to a day after the file was written")
    book = EpochBook()
    book.restore(models, now=now, ceiling=ceiling)
    group = item.get("group", "")  # written since issue 64
    if not isinstance(group, str) or len(group) > 2048:
        raise ValueError("group: not a string")
    raw_changes = item.get("changes", [])  # written since issue 64
    if not isinstance(raw_changes, list) or len(raw_changes) > MAX_CHANGES:
        raise ValueError(f"changes: not a list of at most {MAX_CHANGES}")
    changes = tuple(_change_from(c, limit=ceiling) for c in raw_changes)
    raw_curves = item.get("curves", {})
    if not isinstance(raw_curves, dict):
        raise ValueError("curves: not an object")
    curves = EpochCurves()
    curves.restore(raw_curves, book)
    name, url, configured_engine, configured_model = (str(f) for f in fields)  # checked above
    saved = _Saved(engine, min(float(seen), now), None, book, curves, ceiling,  # type: ignore[arg-type]
                   url=url, configured=(configured_engine, configured_model),
                   group=group, changes=changes)  # fmt: skip
    return name, saved


def mark_targets(
    query: Mapping[str, str], states: Iterable[TargetState], *, log: Logger
) -> tuple[int, str]:
    """``POST /-/mark``'s answer (status, text): ``target`` (required), ``note`` (required,
    what changed: "draft model swapped to ..."; control and invisible formatting characters
    are taken out), ``model`` (default: every model)."""
    name, model = query.get("target"), query.get("model")
    note = clean_text(query.get("note", ""))
    if not name or not note:
        return 400, "target and note are required (POST /-/mark?target=NAME&note=TEXT)"
    if len(note) > MAX_NOTE:
        return 400, f"note: at most {MAX_NOTE} characters"
    state = next((s for s in states if s.config.name == name), None)
    if state is None:
        return 404, "no such target"
    marked = state.mark(wall=time.time(), note=note, model=model)
    if not marked:
        return 409, "nothing to mark: the target has no epoch yet (not scraped, or no such model)"
    log.info("config_epoch_marked", target=name, note=note, epochs=[e.number for e in marked])
    return 200, "marked: " + ", ".join(f"epoch {e.number}" for e in marked)
