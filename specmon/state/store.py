"""The state file: versioned, checksummed, written atomically, read whole or not at all.

Layout: one header line of JSON (``format``, ``version``, ``bytes``, ``sha256``) and the body,
``bytes`` bytes of JSON whose SHA-256 is ``sha256``. A reader checks the size before reading
anything (a 1 GB file, sparse or not, is refused from its ``stat``), then the header, the
length and the checksum, then the body's shape: a truncated, corrupted, foreign-version or
oversized file raises :class:`StateRefused` with one sentence, and nothing of it is used.

A writer writes a temporary file in the same directory (mode 0600), fsyncs it, renames it over
the state file and fsyncs the directory: a reader sees the old file or the new one, never a
half-written one, whatever moment the writer is killed at (tests/state/test_kill.py kills it
50 times). :class:`DirLock` keeps two daemons (a rolling update) off one file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "FORMAT",
    "MAX_FILE_BYTES",
    "VERSION",
    "DirLock",
    "StateRefused",
    "decode",
    "encode",
    "read_state",
    "remove_temporaries",
    "state_file_name",
    "write_atomic",
]

FORMAT = "specmon-state"
#: 2: each epoch's cost-curve sums (issue 55's history basis) beside the epochs.
VERSION = 2
#: Largest state file read or written (about 3 KB a target: 10,000 targets in 30 MB).
MAX_FILE_BYTES = 64 * 2**20
#: Longest header line.
_MAX_HEADER = 512


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
    """The file's bytes for ``body`` (a JSON-able mapping)."""
    data = orjson.dumps(body)
    header = orjson.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    )
    return header + b"\n" + data


def decode(data: bytes) -> dict[str, Any]:
    """The body of a state file's bytes; raises :class:`StateRefused`."""
    end = data.find(b"\n", 0, _MAX_HEADER)
    if end < 0:
        raise StateRefused("no header line: not a specmon state file, or truncated")
    try:
        header = orjson.loads(data[:end])
    except orjson.JSONDecodeError:
        raise StateRefused("the header line is not JSON: not a specmon state file") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise StateRefused("not a specmon state file (no format: specmon-state header)")
    version = header.get("version")
    if version != VERSION:
        raise StateRefused(f"format version {version!r}, this specmon reads version {VERSION}")
    size, digest = header.get("bytes"), header.get("sha256")
    if not isinstance(size, int) or not isinstance(digest, str):
        raise StateRefused("the header has no body size or checksum")
    body = data[end + 1 :]
    if len(body) != size:
        raise StateRefused(f"truncated or padded: {len(body)} body bytes, the header says {size}")
    if hashlib.sha256(body).hexdigest() != digest:
        raise StateRefused("corrupted: the body's SHA-256 is not the header's")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StateRefused(f"the body is not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise StateRefused("the body is not a JSON object")
    return parsed


def read_state(path: Path, *, max_bytes: int = MAX_FILE_BYTES) -> dict[str, Any] | None:
    """The body of the state file at ``path``; None when there is none. Raises
    :class:`StateRefused` for anything else than a whole, valid file of at most
    ``max_bytes`` (checked before reading: an oversized file is never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateRefused("a symbolic link, not a file") from None
        raise StateRefused(f"cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateRefused("not a regular file")
        if info.st_size > max_bytes:
            raise StateRefused(f"oversized: {info.st_size} bytes, at most {max_bytes} are read")
        chunks: list[bytes] = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise StateRefused(f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise StateRefused(f"oversized: more than {max_bytes} bytes")
    return decode(data)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a temporary file beside it (mode 0600), fsynced,
    renamed over it, then the directory fsynced. Raises OSError (the old file is intact)."""
    directory = path.parent
    temporary = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(
        temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
    )
    try:
        os.fchmod(fd, 0o600)  # an existing temporary keeps its mode through O_CREAT
        view = memoryview(data)
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
        the directory cannot be written."""
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """The pid written by whoever holds (or last held) the lock, or "unknown"."""
        try:
            text = self.path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return "unknown"
        return text if text.isdigit() else "unknown"

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock
