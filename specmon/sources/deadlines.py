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

A deadline may be **extended** (``deadline(d, extend=f)``): when it comes, ``f(late)`` is
asked how many more seconds the block is owed (``late``: how late the wheel itself woke, a
stall of the whole process it may not have heard of yet), and the block expires only when the
answer is 0 or less. The overload governor uses it to give a scrape its timeout in the
process's own running time rather than on the clock (specmon/daemon/governor.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import weakref
from collections.abc import Callable
from types import TracebackType

__all__ = ["TICK", "deadline", "pending"]

#: Bucket width, seconds: how late a deadline may fire.
TICK = 0.05
#: Less than this owed to an extended deadline is nothing (rounding, not time).
_OWED_AT_LEAST = 1e-6


class _Wheel:
    """Pending deadlines of one event loop, by tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buckets: dict[int, set[deadline]] = {}
        self._handle: asyncio.TimerHandle | None = None

    def add(self, block: deadline, when: float) -> int:
        slot = math.ceil(when / TICK)
        self._buckets.setdefault(slot, set()).add(block)
        if self._handle is None:
            self._handle = self._loop.call_at(min(self._buckets) * TICK, self._fire)
        return slot

    def discard(self, block: deadline, slot: int) -> None:
        bucket = self._buckets.get(slot)
        if bucket is None or block not in bucket:
            return
        bucket.discard(block)
        if not bucket:
            del self._buckets[slot]
        if not self._buckets and self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _fire(self) -> None:
        self._handle = None
        now = self._loop.time()
        due = [slot for slot in self._buckets if slot * TICK <= now]
        owed: list[tuple[deadline, float]] = []
        for slot in due:
            for block in self._buckets.pop(slot):
                extend = block._extend
                if extend is not None:
                    more = extend(max(0.0, now - slot * TICK))
                    if more > _OWED_AT_LEAST:  # owed more: back into the wheel, not expired
                        owed.append((block, now + more))
                        continue
                # Still inside its block (it leaves the bucket on the way out): expire it now,
                # through asyncio.Timeout's own path (cancel the task, raise TimeoutError).
                with contextlib.suppress(RuntimeError):  # not in its block (defensive)
                    block._timeout.reschedule(now)
        for block, when in owed:  # a later slot than now's, whatever the rounding
            block._slot = max(math.ceil(when / TICK), math.floor(now / TICK) + 1)
            self._buckets.setdefault(block._slot, set()).add(block)
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
    seconds late; ``extend``: asked at the deadline for more time (module docstring). One
    use per object."""

    __slots__ = ("_delay", "_extend", "_slot", "_timeout", "_wheel")

    def __init__(self, delay: float, *, extend: Callable[[float], float] | None = None) -> None:
        self._delay = delay
        self._extend = extend
        self._timeout = asyncio.Timeout(None)
        self._wheel: _Wheel | None = None
        self._slot = 0

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()
        wheel = self._wheel = _wheel()
        self._slot = wheel.add(self, wheel.time() + max(0.0, self._delay))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._wheel is not None:
            self._wheel.discard(self, self._slot)
        await self._timeout.__aexit__(exc_type, exc, tb)


def pending() -> int:
    """Deadlines waiting in the running loop (for tests: none may be left behind)."""
    return len(_wheel())
