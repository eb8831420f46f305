"""Which asyncio event loop the long-running commands use: uvloop where it is installed (the
default, ``auto``), else the standard library's.

uvloop (libuv, MagicStack) runs the same asyncio programs with a faster loop and faster
sockets: aiohttp's client and server are unchanged, and the per-scrape cost that is the
loop's own (selector, transports, timers, callbacks) shrinks. ``./dev.sh bench sidebyside``
measures it against ``+asyncio`` (bench/RESULTS.md). Nothing in specmon depends on it:
``--event-loop asyncio`` runs without it, and ``auto`` falls back when it is not installed
(it has no Windows build).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["CHOICES", "loop_factory", "loop_name", "run"]

CHOICES = ("auto", "uvloop", "asyncio")

T = TypeVar("T")


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for ``choice`` (None: the standard library's loop). Raises
    ValueError for ``uvloop`` when it is not installed, or an unknown choice."""
    if choice not in CHOICES:
        raise ValueError(f"unknown event loop {choice!r} (choose {', '.join(CHOICES)})")
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise ValueError("uvloop is not installed (pip install uvloop)") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``, for the start-up log line."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], *, choice: str = "auto") -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)
