"""Timeouts for many concurrent requests without a timer each.

``asyncio.timeout(d)`` puts one timer into the event loop's heap per request and takes it out
again when the request ends in time, which nearly every request does. At a thousand targets
that heap holds a thousand sleeping scrapes besides, and its pushes and pops (Python-level
comparisons) were about 5 % of the daemon's CPU (py-spy, bench/results/HISTORY.md). :func:`deadline`
gives the same semantics (the block's task is cancelled at the deadline and the block raises
:class:`TimeoutError`; a cancellation from elsewhere passes through unchanged), built on
:class:`asyncio.Timeout` itself, but keeps pending deadlines in buckets of :data:`TICK`
seconds checked by one timer per loop while any are pending: a deadline fires up to one tick
late, never early.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from types import TracebackType

__all__ = ["TICK", "deadline", "pending"]

#: Bucket width, seconds: how late a deadline may fire.
TICK = 0.05


class _Wheel:
    """Pending deadlines of one event loop, by tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buckets: dict[int, set[asyncio.Timeout]] = {}
        self._handle: asyncio.TimerHandle | None = None

    def add(self, timeout: asyncio.Timeout, when: float) -> int:
        slot = math.ceil(when / TICK)
        self._buckets.setdefault(slot, set()).add(timeout)
        if self._handle is None:
            self._handle = self._loop.call_at(min(self._buckets) * TICK, self._fire)
        return slot

    def discard(self, timeout: asyncio.Timeout, slot: int) -> None:
        bucket = self._buckets.get(slot)
        if bucket is None or timeout not in bucket:
            return
        bucket.discard(timeout)
        if not bucket:
            del self._buckets[slot]
        if not self._buckets and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        now = self._loop.time()
        due = [slot for slot in self._buckets if slot * TICK <= now]
        for slot in due:
            for timeout in self._buckets.pop(slot):
                # Still inside its block (it leaves the bucket on the way out): expire it now,
                # through asyncio.Timeout's own path (cancel the task, raise TimeoutError).
                with contextlib.suppress(RuntimeError):  # not in its block (defensive)
                    timeout.reschedule(now)
        if self._buckets:
            self._handle = self._loop.call_at(min(self._buckets) * TICK, self._fire)

    def time(self) -> float:
        return self._loop.time()

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets.values())


_WHEELS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Wheel] = weakref.WeakKeyDictionary()


def _wheel() -> _Wheel:
    loop = asyncio.get_running_loop()
    wheel = _WHEELS.get(loop)
    if wheel is None:
        wheel = _WHEELS[loop] = _Wheel(loop)
    return wheel


class deadline:
    """``async with deadline(seconds):`` like ``asyncio.timeout(seconds)``, up to :data:`TICK`
    seconds late. One use per object."""

    __slots__ = ("_delay", "_slot", "_timeout", "_wheel")

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._timeout = asyncio.Timeout(None)
        self._wheel: _Wheel | None = None
        self._slot = 0

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        wheel = self._wheel = _wheel()
        self._slot = wheel.add(self._timeout, wheel.time() + max(0.0, self._delay))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._wheel is not None:
            self._wheel.discard(self._timeout, self._slot)
        await self._timeout.__aexit__(exc_type, exc, tb)


def pending() -> int:
    """Deadlines waiting in the running loop (for tests: none may be left behind)."""
    return len(_wheel())
