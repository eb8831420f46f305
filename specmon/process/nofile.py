"""Open files at fleet size: the soft limit raised to the hard one at start, as Go programs
(Prometheus, its exporters) do since Go 1.19, and a warning when the limit is too low for the
configuration.

specmon keeps each target's connection open between scrapes (HTTP keep-alive: a scrape every
few seconds, aiohttp keeps an idle connection 15 s), so it holds about one socket per target
scraped directly, besides its listening socket and its own clients' connections (up to
``--web.max-connections``). systemd starts services with a soft limit of 1,024 open files (the
hard limit is 524,288 since systemd 240), and Python, unlike Go, never raises it: with about
a thousand targets every new connection would fail with "Too many open files", seen as
``connection_error`` on whichever targets reconnect.
"""

from __future__ import annotations

import resource
from collections.abc import Callable

__all__ = [
    "MAX_OPEN_FILES",
    "SPARE_FILES",
    "files_needed",
    "files_short",
    "raise_open_files_limit",
]

#: The highest soft limit asked for when the hard limit is unlimited.
MAX_OPEN_FILES = 1 << 20
#: Open files besides the targets' and clients' sockets: the listening sockets, a Prometheus
#: source's connections, file_sd files, log and standard streams, imports.
SPARE_FILES = 64

_Get = Callable[[int], tuple[int, int]]
_Set = Callable[[int, tuple[int, int]], None]


def raise_open_files_limit(
    *,
    cap: int = MAX_OPEN_FILES,
    getrlimit: _Get = resource.getrlimit,
    setrlimit: _Set = resource.setrlimit,
) -> tuple[int, int]:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit (at most ``cap``); never lowers it.
    The (soft, hard) limits in force afterwards; unchanged when the system refuses."""
    soft, hard = getrlimit(resource.RLIMIT_NOFILE)
    want = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            return soft, hard
    return getrlimit(resource.RLIMIT_NOFILE)


def files_needed(*, targets: int, web_connections: int) -> int:
    """Open files a configuration needs at most: a socket per target scraped directly, one
    per client connection allowed, and :data:`SPARE_FILES`."""
    return targets + web_connections + SPARE_FILES


def files_short(
    *, targets: int, web_connections: int, getrlimit: _Get = resource.getrlimit
) -> tuple[int, int] | None:
    """(needed, soft limit) when the soft ``RLIMIT_NOFILE`` is below :func:`files_needed`;
    None when it is enough (or unlimited)."""
    soft, _ = getrlimit(resource.RLIMIT_NOFILE)
    needed = files_needed(targets=targets, web_connections=web_connections)
    if soft == resource.RLIM_INFINITY or needed <= soft:
        return None
    return needed, soft
