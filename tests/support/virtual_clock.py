"""An asyncio event loop on a clock the test controls: time moves only when the loop would
wait, straight to its next timer, so a test of minutes of scheduling runs in a moment and
asserts the same things on any machine. Callbacks take no time on this clock.

``stopped(t)``: the process is stopped at loop time ``t`` (SIGSTOP) until the time it
returns (None: running). The loop never runs inside a stop: a wait that would end there ends
at the resume instead, and whatever fell due meanwhile runs then, late, as after SIGCONT.
Only in-process sources work on it (nothing may wait on a real socket).
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

__all__ = ["VirtualLoop", "run_for", "stopped_every_second"]


def stopped_every_second(stop: float) -> Callable[[float], float | None]:
    """The process stopped for the first ``stop`` seconds of every second."""

    def stopped(t: float) -> float | None:
        second = math.floor(t)
        return second + stop if t - second < stop else None

    return stopped


class _Selector:
    """The loop's own selector, never blocking: the wait becomes a step of the clock."""

    def __init__(self, loop: VirtualLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("the virtual loop has nothing scheduled: it would wait forever")
        self._loop.advance(timeout)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class VirtualLoop(asyncio.SelectorEventLoop):
    """See the module docstring."""

    _now = 0.0

    def __init__(self, *, stopped: Callable[[float], float | None] | None = None) -> None:
        super().__init__()
        self._now = 0.0
        self._stopped = stopped
        real: Any = self._selector  # type: ignore[has-type]
        self._selector = _Selector(self, real)

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, to the end of a stop it would land in."""
        now = self._now + max(0.0, seconds)
        if self._stopped is not None:
            resume = self._stopped(now)
            if resume is not None:
                now = max(now, resume)
        self._now = now


def run_for(
    loop: VirtualLoop,
    coroutines: Callable[[], Iterable[Coroutine[Any, Any, object]]],
    seconds: float,
) -> None:
    """Run ``coroutines()`` (made inside the loop) as tasks for ``seconds`` of ``loop``'s
    time, then cancel them, wait for them to end, and close the loop."""

    async def main() -> None:
        tasks = [asyncio.create_task(c) for c in coroutines()]
        await asyncio.sleep(seconds)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
