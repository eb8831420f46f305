"""The daemon's side of the state file (specmon/state/store.py): what is kept, when it is read
and written, and by whom.

With ``state_dir`` set (``global.state_dir`` or ``--state.dir``), each target's configuration
epochs are restored when its state is made, and written every ``WRITE_INTERVAL`` seconds and at
a clean stop: the snapshot is taken on the event loop (small records), the encoding, the write
and the fsyncs run in a thread. A SIGKILL loses at most one interval. State is keyed by the
target's name, a hash of its URL (never the URL itself: it may carry a token), its configured
engine and model: a changed URL starts afresh, as the windows do. Under ``--shard`` a daemon
keeps its own file and only its shard's targets. A file that cannot be used is refused with
one log line and the daemon starts fresh; another daemon holding the lock (a rolling update)
is waited for, without reading or writing, and the state read when it lets go.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from specmon.daemon.epoch_curves import EpochCurves
from specmon.daemon.target import TargetState
from specmon.logs import Logger
from specmon.sharding import Shard
from specmon.state.epochs import MAX_NOTE, EpochBook
from specmon.state.store import (
    MAX_FILE_BYTES,
    DirLock,
    StateRefused,
    encode,
    read_state,
    remove_temporaries,
    state_file_name,
    write_atomic,
)

__all__ = ["WRITE_INTERVAL", "StateKeeper", "mark_targets", "state_key"]

#: Seconds between two writes (the most a SIGKILL loses).
WRITE_INTERVAL = 30.0
#: Targets snapshotted between two turns of the event loop.
SLICE = 500
#: Most targets kept in one file (at about 2.6 KB a target, well under MAX_FILE_BYTES).
MAX_TARGETS = 20_000

Key = tuple[str, str, str, str]


def state_key(state: TargetState) -> Key:
    cfg = state.config
    url = hashlib.sha256(cfg.url.encode()).hexdigest()[:32]
    engine = cfg.engine.value if cfg.engine is not None else ""
    return (cfg.name, url, engine, cfg.model or "")


class StateKeeper:
    """Reads the state file once, restores targets from it, writes it on a schedule."""

    def __init__(
        self, *, directory: Path, shard: Shard, log: Logger, max_age: float,
        interval: float = WRITE_INTERVAL, max_bytes: int = MAX_FILE_BYTES,
        clock: Callable[[], float] = time.time,
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
        self._saved: dict[Key, dict[str, Any]] = {}
        self._waiting_logged = False
        self.writes = 0
        self.failures = 0
        #: One write at a time (the stop's last write may meet a scheduled one's thread).
        self._write_lock = threading.Lock()

    # -- reading ----------------------------------------------------------------------------

    def open(self) -> bool:
        """Take the lock and read the file; False while another daemon holds the lock."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not self.lock.acquire():
                if not self._waiting_logged:
                    self.log.warning(
                        "state_dir_locked", file=str(self.path), holder=self.lock.holder(),
                        effect="another specmon keeps this state; nothing is read or written "
                        "until it stops (a rolling update)",
                    )  # fmt: skip
                    self._waiting_logged = True
                return False
        except OSError as exc:
            self.log.error("state_dir_unusable", dir=str(self.directory), error=str(exc))
            return False
        remove_temporaries(self.path)  # a writer killed mid-write (the lock is ours now)
        self._saved = self._read()
        return True

    def _read(self) -> dict[Key, dict[str, Any]]:
        now = self.clock()
        try:
            body = read_state(self.path, max_bytes=self.max_bytes)
            if body is None:
                self.log.info("state_fresh", file=str(self.path), reason="no state file yet")
                return {}
            saved = _targets(body, now=now, shard=self.shard)
        except StateRefused as exc:
            self.log.error(
                "state_refused", file=str(self.path), reason=str(exc),
                effect="starting fresh; the file is replaced at the next write",
            )  # fmt: skip
            return {}
        self.log.info("state_read", file=str(self.path), targets=len(saved))
        return saved

    def restore(self, state: TargetState) -> None:
        """Give a new target's state its saved epochs (once)."""
        saved = self._saved.pop(state_key(state), None)
        if saved is None:
            return
        if state.epochs.view():  # seen live before the lock came: merged, checked again
            # (the epochs are numbered on: their saved curves are let go, not misfiled)
            state.epochs.restore(saved["models"], now=self.clock())
        else:  # checked when the file was read
            state.epochs = saved["book"]
            state.curves = saved["curves"]
        state.epochs.engine = saved["engine"] or None
        state.view = replace(state.view, epochs=state.epochs.view())  # listed before a scrape

    def retire(self, state: TargetState) -> None:
        """A target leaves (removed from the config, or its URL changed): its epochs stay in
        the file under its key until they expire, and come back if it does."""
        models = state.epochs.to_json()
        if models:
            self._saved[state_key(state)] = {"engine": state.epochs.engine, "models": models,
                                             "seen": self.clock(), "book": state.epochs,
                                             "curves": state.curves,
                                             "curves_json": state.curves.to_json()}  # fmt: skip

    # -- writing ----------------------------------------------------------------------------

    def _entry(self, state: TargetState, now: float, seen: set[Key]) -> dict[str, Any] | None:
        key = state_key(state)
        if key in seen or not self.shard.keeps(key[0]):
            return None
        seen.add(key)
        state.epochs.expire(now=now, max_age=self.max_age)
        models = state.epochs.to_json()
        if not models:
            return None
        return _target_json(key, state.epochs.engine, models, seen=now,
                            curves=state.curves.to_json())  # fmt: skip

    def snapshot(self, states: Iterable[TargetState]) -> dict[str, Any]:
        """The body to write, taken at once (the epochs' saved forms, a few per target)."""
        now = self.clock()
        seen: set[Key] = set()
        entries = (self._entry(state, now, seen) for state in states)
        return self._body([e for e in entries if e is not None], seen, now)

    async def snapshot_sliced(self, states: Iterable[TargetState]) -> dict[str, Any]:
        """:meth:`snapshot` on the event loop, letting it turn every SLICE targets (each
        target's entry is taken whole between two of its scrapes)."""
        now = self.clock()
        seen: set[Key] = set()
        targets: list[dict[str, Any]] = []
        for index, state in enumerate(list(states)):
            if index and index % SLICE == 0:
                await asyncio.sleep(0)
            entry = self._entry(state, now, seen)
            if entry is not None:
                targets.append(entry)
        return self._body(targets, seen, now)

    def _body(self, targets: list[dict[str, Any]], seen: set[Key], now: float) -> dict[str, Any]:
        """With the saved targets not running now (kept until they expire)."""
        for key, saved in list(self._saved.items()):
            if key in seen or saved["seen"] < now - self.max_age:
                del self._saved[key]  # a target that came back, or expired
                continue
            targets.append(_target_json(key, saved["engine"], saved["models"], seen=saved["seen"],
                                        curves=saved["curves_json"]))  # fmt: skip
        return {"written": now, "shard": str(self.shard), "targets": targets[:MAX_TARGETS]}

    def write_now(self, body: dict[str, Any]) -> int:
        """Encode and write ``body`` (in a thread); its size in bytes. Raises OSError."""
        data = encode(body)
        if len(data) > self.max_bytes and any(t.get("curves") for t in body["targets"]):
            # The epochs first: without the curves' sums (the history basis starts again).
            lean = encode({**body, "targets": [{**t, "curves": {}} for t in body["targets"]]})
            if len(lean) <= self.max_bytes:
                self.log.warning("state_curves_dropped", bytes=len(data), max_bytes=self.max_bytes)
                data = lean
        if len(data) > self.max_bytes:
            raise OSError(f"the state would take {len(data)} bytes, more than {self.max_bytes}")
        with self._write_lock:
            write_atomic(self.path, data)
        return len(data)

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
            self.log.error("state_write_failed", file=str(self.path), error=str(exc))
            return
        self.writes += 1

    async def run(self, states: Callable[[], Iterable[TargetState]]) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.save(states)

    def close(self) -> None:
        self.lock.release()


def _target_json(
    key: Key, engine: str | None, models: dict[str, Any], *, seen: float,
    curves: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """One target's entry; ``seen``: when it was last running (a target no longer
    configured is kept until that is ``state_max_age`` ago)."""
    name, url, configured_engine, model = key
    return {"name": name, "url_sha256": url, "configured_engine": configured_engine,
            "configured_model": model, "engine": engine, "seen": seen, "models": models,
            "curves": curves}  # fmt: skip


def _targets(body: dict[str, Any], *, now: float, shard: Shard) -> dict[Key, dict[str, Any]]:
    """Every saved target of the body, each checked as a restore would (raises StateRefused:
    one target out of bounds refuses the file, so nothing is ever half read)."""
    raw = body.get("targets")
    if not isinstance(raw, list) or len(raw) > MAX_TARGETS:
        raise StateRefused(f"no list of at most {MAX_TARGETS} targets")
    out: dict[Key, dict[str, Any]] = {}
    for index, item in enumerate(raw):
        try:
            if not isinstance(item, dict):
                raise ValueError("not an object")
            fields = [item.get(k) for k in ("name", "url_sha256", "configured_engine",
                                           "configured_model")]  # fmt: skip
            if not all(isinstance(f, str) and len(f) <= 2048 for f in fields):
                raise ValueError("its name, URL hash, engine or model is not a string")
            engine = item.get("engine")
            if engine is not None and not isinstance(engine, str):
                raise ValueError("engine: not a string")
            models = item.get("models")
            if not isinstance(models, dict):
                raise ValueError("models: not an object")
            seen = item.get("seen")
            if isinstance(seen, bool) or not isinstance(seen, int | float):
                raise ValueError("seen: not a time")
            if not 0 < seen <= now + 86400:
                raise ValueError("seen: not a time up to a day ahead")
            book = EpochBook()
            book.restore(models, now=now)
            raw_curves = item.get("curves", {})
            if not isinstance(raw_curves, dict):
                raise ValueError("curves: not an object")
            curves = EpochCurves()
            curves.restore(raw_curves, book)
        except ValueError as exc:
            raise StateRefused(f"target {index}: {exc}") from None
        key: Key = (fields[0], fields[1], fields[2], fields[3])  # type: ignore[assignment]
        if not shard.keeps(key[0]):
            continue
        out[key] = {"engine": engine, "models": models, "seen": float(seen), "book": book,
                    "curves": curves, "curves_json": raw_curves}  # fmt: skip
    return out


def mark_targets(
    query: Mapping[str, str], states: Iterable[TargetState], *, log: Logger
) -> tuple[int, str]:
    """``POST /-/mark``'s answer (status, text): ``target`` (required), ``note`` (required,
    what changed: "draft model swapped to ..."), ``model`` (default: every model)."""
    name, note, model = query.get("target"), query.get("note", "").strip(), query.get("model")
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
