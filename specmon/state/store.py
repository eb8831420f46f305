"""The state file: versioned, checksummed, written atomically, read one record at a time.

Layout (version 3): one header line of JSON (``format``, ``version``, ``bytes``, ``sha256``)
and the body, ``bytes`` bytes whose SHA-256 is ``sha256``: a line of JSON with the file's own
facts (``written``, ``shard``), then one line per target, each a JSON object. A reader checks
the size before reading anything (a 1 GB file, sparse or not, is refused from its ``stat``),
then the header, the length and the checksum: a truncated, corrupted, foreign-version or
oversized file raises :class:`StateRefused` with one sentence, and nothing of it is used.
The records are then handed out one by one (:class:`StateFile`), each parsed alone within
:data:`MAX_RECORD_BYTES` and :data:`MAX_RECORD_CONTAINERS`: one bad record costs that target
only (specmon/daemon/persist.py), and the memory a read takes is the file's bytes plus one
record's parse, whatever the file holds (a 60 MiB body of empty lists used to decode to
2 GB). Version 2 (the body one JSON object: ``{"written", "shard", "targets": [...]}``) is
read the same way, its records found where specmon's writer put them, for an upgrade.

Files are opened as data, never waited on: ``O_NONBLOCK`` (a FIFO planted as the state file
used to hang the daemon in ``open()`` before it listened), ``O_NOFOLLOW``, and ``fstat``
before anything is read (a regular file only). The lock file is created exclusively, or
checked before it is written (a regular file with one link, owned by specmon's user: a lock
file hard-linked to another file used to truncate that file). :func:`directory_problem` says
why a state directory cannot be trusted (writable by others, owned by another user).

A writer writes a temporary file in the same directory (mode 0600, created exclusively),
fsyncs it, renames it over the state file and fsyncs the directory: a reader sees the old
file or the new one, never a half-written one, whatever moment the writer is killed at
(tests/state/test_kill.py kills it 50 times). :class:`DirLock` keeps two daemons (a rolling
update) off one file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
    "MAX_RECORD_BYTES",
    "READ_COST_FACTOR",
    "READ_MEMORY_CEILING",
    "VERSION",
    "DirLock",
    "StateFile",
    "StateRefused",
    "decode",
    "directory_problem",
    "encode",
    "encode_parts",
    "open_state",
    "parse_record",
    "read_state",
    "remove_temporaries",
    "saved_json",
    "state_dir_problem",
    "state_file_name",
    "write_atomic",
]

FORMAT = "specmon-state"
#: 2: each epoch's cost-curve sums (issue 55's history basis) beside the epochs; 3: the same
#: records, one line each (read one at a time: issue 61). Version 2 is still read.
VERSION = 3
_READ_VERSIONS = (2, 3)
#: The most memory reading a state file may take beyond the live state of the targets it
#: restores (those configured at the start: their epochs and curves, what they would hold
#: anyway): the file's bytes (the read), the records of targets not running kept as their
#: bytes, one record's parse at a time. What a byte of the file costs there: 2.04 times at
#: the cap, measured as a real daemon's peak RSS over the same daemon without the file
#: (bench/state_memory.py: 64 MiB of legitimate or of the densest valid records, 130 MiB;
#: 60 MiB of empty lists, 59 MiB, 2 GB before; records of junk at the record caps, 1.25).
#: The largest file read is their quotient, 64 MiB (docs/history.md, "Memory").
READ_MEMORY_CEILING = 160 * 2**20
READ_COST_FACTOR = 2.5
MAX_FILE_BYTES = int(READ_MEMORY_CEILING / READ_COST_FACTOR)
#: Longest record (one target: a target at every cap, 8 models with 12 epochs and 3 curves
#: of 14 buckets and 64 positions each, writes about 450 KB) and the most JSON objects and
#: arrays one may hold (that target: about 900): a record past either is refused unparsed,
#: so no record's parse takes more than about 30 MB whatever it holds.
MAX_RECORD_BYTES = 2**20
MAX_RECORD_CONTAINERS = 4096
#: Longest header line, and longest line of the file's own facts.
_MAX_HEADER = 512
#: Where version 2's writer put the records (orjson, keys in the order written).
_V2_TARGETS = b'"targets":['
_V2_BETWEEN = b'},{"name":'


class StateRefused(Exception):
    """The state file cannot be used; ``str()`` says why in one sentence."""


def state_file_name(shard: str = "0/1") -> str:
    """The file a daemon keeps: one per shard, so the replicas of a sharded fleet can share
    one directory (``--shard 1/3``: ``specmon-state-1-of-3.json``)."""
    index, _, count = shard.partition("/")
    if count in ("", "1"):
        return "specmon-state.json"
    return f"specmon-state-{int(index)}-of-{int(count)}.json"


def encode(body: dict[str, Any]) -> bytes:
    """The file's bytes for ``body``: its ``targets`` (JSON-able mappings, or the bytes of a
    record already encoded) one a line after a line of its other keys."""
    return b"".join(encode_parts(body))


def encode_parts(body: dict[str, Any]) -> list[bytes]:
    """:func:`encode`'s bytes in pieces, never joined (a record kept as its bytes is written
    as it is, not copied: a write costs the targets' new records, not the file twice)."""
    facts = {key: value for key, value in body.items() if key != "targets"}
    pieces = [orjson.dumps(facts)]
    for target in body.get("targets", ()):
        pieces.append(b"\n")
        pieces.append(target if isinstance(target, bytes) else orjson.dumps(target))
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    header = orjson.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "bytes": sum(len(piece) for piece in pieces),
            "sha256": digest.hexdigest(),
        }
    )
    return [header, b"\n", *pieces]


def saved_json(value: Any) -> bytes:
    """``orjson.dumps(value)`` copied to its exact size, for JSON kept in memory: orjson's own
    result keeps its whole buffer (4 KB or more, whatever it holds: a past epoch's 300 bytes
    took 3.7 KB, 43 MB at 1,000 targets with 12 epochs each)."""
    return bytes(memoryview(orjson.dumps(value)))


def parse_record(raw: bytes | memoryview) -> dict[str, Any]:
    """One record's JSON object; ValueError when it is larger than :data:`MAX_RECORD_BYTES`,
    holds more than :data:`MAX_RECORD_CONTAINERS` objects and arrays (counted from its bytes
    before it is parsed), or is not a JSON object."""
    if len(raw) > MAX_RECORD_BYTES:
        raise ValueError(f"a record of {len(raw)} bytes, more than {MAX_RECORD_BYTES}")
    data = bytes(raw)
    # A bracket inside a string counts too: an upper bound, and what bounds the parse.
    containers = data.count(b"[") + data.count(b"{")
    if containers > MAX_RECORD_CONTAINERS:
        raise ValueError(
            f"{containers} JSON objects and arrays, more than the {MAX_RECORD_CONTAINERS} a "
            "target's record can hold"
        )
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise ValueError("not a JSON object")
    return parsed


class StateFile:
    """A state file checked whole (size, header, checksum): its own facts and its records,
    handed out one at a time (:meth:`records`), each to be parsed with :func:`parse_record`.
    Holds the file's bytes until it is let go."""

    __slots__ = ("_body", "_data", "_version", "facts")

    def __init__(self, data: bytearray, body: memoryview, version: int) -> None:
        self._data = data
        self._body = body
        self._version = version
        #: The file's own facts (``written``, ``shard``); checked by the caller.
        self.facts: dict[str, Any] = {}
        if version == 2:
            self.facts = _v2_facts(body)
            return
        end = _find(body, b"\n", 0)
        first = body[: end if end >= 0 else len(body)]
        if len(first) > _MAX_HEADER:
            raise StateRefused("the first line of the body is not the file's facts")
        try:
            facts = orjson.loads(bytes(first))
        except orjson.JSONDecodeError:
            raise StateRefused("the first line of the body is not JSON") from None
        if not isinstance(facts, dict):
            raise StateRefused("the first line of the body is not a JSON object")
        self.facts = facts

    @property
    def size(self) -> int:
        return len(self._data)

    def records(self) -> Iterator[memoryview]:
        """Each target's record, in the file's order (a view of the file's bytes)."""
        body = self._body
        if self._version == 2:
            yield from _v2_records(body)
            return
        start = _find(body, b"\n", 0)
        while start >= 0:
            start += 1
            end = _find(body, b"\n", start)
            piece = body[start : end if end >= 0 else len(body)]
            if len(piece):
                yield piece
            start = end

    def count(self) -> int:
        """How many records the file holds (counted from its bytes, none parsed)."""
        body = self._body
        if self._version == 2:
            start = _find(body, _V2_TARGETS, 0) + len(_V2_TARGETS)
            if start >= len(body) - 2:
                return 0
            return self._data.count(_V2_BETWEEN, len(self._data) - len(body) + start) + 1
        return self._data.count(b"\n", len(self._data) - len(body))

    def close(self) -> None:
        """Let go of the file's bytes."""
        self._body = memoryview(b"")
        self._data = bytearray()


def _find(view: memoryview, needle: bytes, start: int) -> int:
    """``bytes.find`` on a memoryview of a bytearray, without copying it."""
    obj = view.obj
    assert isinstance(obj, bytearray)
    offset = len(obj) - len(view)  # the view is a suffix of its bytearray
    found = obj.find(needle, offset + start)
    return -1 if found < 0 else found - offset


def _v2_facts(body: memoryview) -> dict[str, Any]:
    """Version 2's facts: the body's keys before ``targets``."""
    at = _find(body, _V2_TARGETS, 0)
    if at < 0 or at > _MAX_HEADER or bytes(body[-2:]) != b"]}":
        raise StateRefused("a version 2 body not laid out as specmon writes it")
    try:
        facts = orjson.loads(bytes(body[:at]) + b'"targets":[]}')
    except orjson.JSONDecodeError:
        raise StateRefused("a version 2 body not laid out as specmon writes it") from None
    if not isinstance(facts, dict):
        raise StateRefused("a version 2 body is not a JSON object")
    facts.pop("targets", None)
    return facts


def _v2_records(body: memoryview) -> Iterator[memoryview]:
    """Version 2's records: orjson wrote ``{"name":`` first in each (a ``"`` inside a string
    is escaped, so the boundary's bytes occur between records only); each piece is checked
    as a record anyway."""
    start = _find(body, _V2_TARGETS, 0) + len(_V2_TARGETS)
    stop = len(body) - 2
    if start >= stop:
        return
    while True:
        end = _find(body, _V2_BETWEEN, start)
        if end < 0 or end >= stop:
            yield body[start:stop]
            return
        yield body[start : end + 1]
        start = end + 2


def _open_data(path: Path, flags: int) -> int:
    """A descriptor of the regular file at ``path``, opened without waiting (a FIFO opens at
    once and is refused) nor following a symbolic link; raises StateRefused, or
    FileNotFoundError when there is none."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateRefused("a symbolic link, not a file") from None
        raise StateRefused(f"cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateRefused(f"not a regular file ({_kind(info.st_mode)})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a file"


def open_state(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> StateFile | None:
    """The state file at ``path`` checked whole; None when there is none. Raises
    :class:`StateRefused` for anything else than a whole, valid file of at most
    ``max_bytes`` (checked before reading: an oversized file is never read)."""
    try:
        fd = _open_data(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise StateRefused(f"oversized: {size} bytes, at most {max_bytes} are read")
        data = bytearray(size)
        view = memoryview(data)
        got = 0
        while got < size:
            read = os.readv(fd, [view[got:]])
            if not read:
                break
            got += read
        view.release()
        if os.read(fd, 1):
            raise StateRefused("the file grew while it was read")
    except OSError as exc:
        raise StateRefused(f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if got < size:
        raise StateRefused(f"the file shrank while it was read ({got} of {size} bytes)")
    return _checked(data)


def _checked(data: bytearray) -> StateFile:
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise StateRefused("no header line: not a specmon state file, or truncated")
    try:
        header = orjson.loads(bytes(data[:end]))
    except orjson.JSONDecodeError:
        raise StateRefused("the header line is not JSON: not a specmon state file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateRefused("not a specmon state file (no format: specmon-state header)")
    version = header.get("version")
    if version not in _READ_VERSIONS:
        raise StateRefused(
            f"format version {version!r}, this specmon reads versions 2 and {VERSION}"
        )
    size, digest = header.get("bytes"), header.get("sha256")
    if not isinstance(size, int) or not isinstance(digest, str):
        raise StateRefused("the header has no body size or checksum")
    body = memoryview(data)[end + 1 :]
    if len(body) != size:
        raise StateRefused(f"truncated or padded: {len(body)} body bytes, the header says {size}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise StateRefused("corrupted: the body's SHA-256 is not the header's")
    assert isinstance(version, int)
    return StateFile(data, body, version)


def read_state(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any] | None:
    """The whole body as one mapping (its facts and ``targets``, every record parsed): for
    tools and tests. The daemon reads record by record (:func:`open_state`)."""
    found = open_state(path, max_bytes=max_bytes)
    return None if found is None else _whole(found)


def decode(data: bytes) -> dict[str, Any]:
    """:func:`read_state` of a file's bytes."""
    return _whole(_checked(bytearray(data)))


def _whole(found: StateFile) -> dict[str, Any]:
    try:
        targets = []
        for index, raw in enumerate(found.records()):
            try:
                targets.append(parse_record(raw))
            except ValueError as exc:
                raise StateRefused(f"record {index}: {exc}") from None
        return {**found.facts, "targets": targets}
    finally:
        found.close()


def write_atomic(path: Path, data: bytes | Sequence[bytes]) -> None:
    """Replace ``path`` with ``data`` (bytes, or pieces written one after the other): a
    temporary file beside it (mode 0600, created
    exclusively: a name planted there beforehand, a link to another file, is removed, never
    written through), fsynced, renamed over it, then the directory fsynced. Raises OSError
    (the old file is intact)."""
    directory = path.parent
    temporary = directory / f".{path.name}.{os.getpid()}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temporary, flags, 0o600)
    except FileExistsError:
        os.unlink(temporary)  # the name only: a link's other file is untouched
        fd = os.open(temporary, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        for piece in (data,) if isinstance(data, bytes) else data:
            view = memoryview(piece)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_temporaries(path: Path) -> int:
    """Delete what writers of ``path`` killed mid-write left (call with the lock held: no
    other writer is running); how many."""
    removed = 0
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
            removed += 1
    return removed


def directory_problem(directory: Path) -> str | None:
    """Why ``directory`` cannot keep specmon's state, or None (also None when it does not
    exist yet but can be made: its nearest existing parent is a directory specmon can write
    in). Refused: not a directory; owned by a user other than specmon's or root; writable by
    every user; writable by a group other than specmon's own (Kubernetes' ``fsGroup`` volume,
    root's and group-writable by specmon's group, is fine); not writable by specmon. Anyone
    who can write in the directory can plant a FIFO, hold the lock or forge a history."""
    try:
        info = os.stat(directory)
    except FileNotFoundError:
        parent = directory.parent
        while parent != parent.parent and not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            return f"does not exist, and {parent} is not a directory to make it in"
        if not os.access(parent, os.W_OK | os.X_OK):
            return f"does not exist, and specmon's user cannot make it in {parent}"
        return None
    except NotADirectoryError:
        return "cannot be made: a parent of it is a file, not a directory"
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if not stat.S_ISDIR(info.st_mode):
        return f"not a directory ({_kind(info.st_mode)})"
    uid = os.geteuid()
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid not in (uid, 0):
        return f"owned by uid {info.st_uid}, not by specmon's user (uid {uid}) or root"
    if mode & stat.S_IWOTH:
        return f"writable by every user (mode {mode:04o})"
    if mode & stat.S_IWGRP and info.st_gid != os.getegid():
        return f"writable by group {info.st_gid}, not specmon's own (mode {mode:04o})"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"not writable by specmon's user (uid {uid}, mode {mode:04o})"
    return None


def state_dir_problem(directory: Path) -> str | None:
    """:func:`directory_problem`, and the state and lock files already there (any shard's):
    each a regular file, a lock file with one link and specmon's own (what ``check-config``
    checks of ``state_dir``)."""
    problem = directory_problem(directory)
    if problem is not None or not directory.is_dir():
        return problem
    for entry in sorted(directory.glob("specmon-state*.json*")):
        try:
            info = os.lstat(entry)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else _kind(info.st_mode)
            return f"{entry.name} is {kind}, not a regular file"
        if entry.name.endswith(".lock") and info.st_nlink != 1:
            return f"{entry.name} has {info.st_nlink} links: another file shares it"
        if entry.name.endswith(".lock") and info.st_uid != os.geteuid():
            return f"{entry.name} is owned by uid {info.st_uid}, not specmon's"
    return None


def _open_lock(path: Path) -> int:
    """The lock file's descriptor: created exclusively, or an existing one checked before
    anything is written to it. Raises StateRefused naming what is wrong."""
    try:
        return os.open(
            path,
            os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
            0o600,
        )
    except FileExistsError:
        pass
    try:
        fd = _open_data(path, os.O_RDWR)
    except FileNotFoundError:
        raise StateRefused("the lock file vanished while it was opened") from None
    try:
        info = os.fstat(fd)
        if info.st_nlink != 1:
            raise StateRefused(
                f"the lock file has {info.st_nlink} links: another file shares it, and "
                "would be overwritten"
            )
        if info.st_uid != os.geteuid():
            raise StateRefused(f"the lock file is owned by uid {info.st_uid}, not specmon's")
    except BaseException:
        os.close(fd)
        raise
    return fd


class DirLock:
    """An exclusive ``flock`` on ``<state file>.lock``, held for the daemon's life: a second
    daemon on the same file (a rolling update) neither reads nor writes it until the first
    lets go. The lock file holds the holder's pid, for the log line."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if free; False when another process holds it. Raises OSError when
        the directory cannot be written, :class:`StateRefused` when the lock file is not one
        specmon may write (a FIFO, a link to another file, another user's): no descriptor
        is kept then."""
        if self._fd is not None:
            return True
        fd = _open_lock(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except BaseException:
            os.close(fd)  # the lock goes with it
            raise
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid written by whoever holds (or last held) the lock, or "unknown"."""
        try:
            fd = _open_data(self.path, os.O_RDONLY)
        except (OSError, StateRefused):
            return "unknown"
        try:
            text = os.read(fd, 32).decode("ascii", errors="replace").strip()
        except OSError:
            return "unknown"
        finally:
            os.close(fd)
        return text if text.isdigit() else "unknown"

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock
