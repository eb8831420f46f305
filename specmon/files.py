"""Every file specmon reads from the operator's disk (config, file_sd, web config, TLS files,
token and password files, profiles, saved pages) is read here: a regular file, at most a
given size, or an :class:`OSError` that says why not.

A FIFO among the files a glob matches, or a token file pointed at ``/dev/zero``, must not freeze
the daemon or exhaust its memory: a path that is not a regular file is refused from its
``stat`` without being opened for reading (and checked again on the open descriptor, opened
non-blocking, in case it was swapped in between), and no read takes more than the cap.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["MAX_SECRET_BYTES", "read_capped", "read_text_capped", "refused"]

#: Token and password files: a secret is a line, never megabytes.
MAX_SECRET_BYTES = 64 * 1024

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _not_regular(mode: int, path: str) -> OSError | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return OSError(errno.EINVAL, f"not a regular file ({kind})", path)


def read_capped(path: str | os.PathLike[str], *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Raises :class:`OSError` with a readable ``strerror`` when the file cannot be read, is not
    a regular file (a FIFO, a device, a socket, a directory: refused before it is opened for
    reading) or is larger than ``max_bytes``."""
    name = os.fspath(path)
    refused = _not_regular(os.stat(name).st_mode, name)
    if refused is not None:
        raise refused
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        refused = _not_regular(os.fstat(fd).st_mode, name)
        if refused is not None:
            raise refused
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than the {max_bytes}-byte limit", name)
    return data


def refused(error: OSError) -> bool:
    """Whether :func:`read_capped` refused the file itself (too large, not a regular file),
    as opposed to failing to read it."""
    text = error.strerror or ""
    return error.errno in (errno.EFBIG, errno.EINVAL) and text.startswith(
        ("larger than", "not a regular file")
    )


def read_text_capped(path: str | os.PathLike[str], *, max_bytes: int) -> str:
    """:func:`read_capped`, decoded as UTF-8 (:class:`UnicodeDecodeError` when it is not)."""
    return read_capped(path, max_bytes=max_bytes).decode("utf-8")
