"""specmon.sources.deadlines: asyncio.timeout's behaviour without a timer per block."""

from __future__ import annotations

import asyncio

import pytest

from specmon.sources.deadlines import TICK, deadline, pending


def test_a_block_past_its_deadline_raises_timeout_error_late_by_at_most_a_tick() -> None:
    async def main() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with deadline(0.2):
                await asyncio.sleep(5)
        return loop.time() - started, pending()

    took, left = asyncio.run(main())
    # Never early; cut long before the 5 s sleep. Late by a tick plus the loop's scheduling,
    # which a loaded machine stretches (the fast tier runs beside the real engines in CI).
    assert 0.2 <= took < 0.2 + TICK + 1.0
    assert left == 0


def test_a_block_that_ends_in_time_is_untouched_and_leaves_nothing_behind() -> None:
    async def main() -> tuple[str, int, bool]:
        async with deadline(0.1):
            await asyncio.sleep(0.01)
            result = "done"
        wheel_idle = pending() == 0
        # The task goes on past the finished block's deadline, uncancelled.
        await asyncio.sleep(0.1 + 2 * TICK)
        return result, pending(), wheel_idle

    assert asyncio.run(main()) == ("done", 0, True)


def test_many_blocks_expire_each_at_its_own_deadline() -> None:
    async def one(delay: float, work: float) -> str:
        try:
            async with deadline(delay):
                await asyncio.sleep(work)
        except TimeoutError:
            return "timeout"
        return "ok"

    async def main() -> list[str]:
        return list(
            await asyncio.gather(
                one(0.1, 0.3), one(0.5, 0.05), one(0.3, 0.6), one(1.0, 0.2), one(0.0, 0.2)
            )
        )

    assert asyncio.run(main()) == ["timeout", "ok", "timeout", "ok", "timeout"]


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def main() -> tuple[bool, int]:
        async def guarded() -> None:
            async with deadline(5):
                await asyncio.sleep(5)

        task = asyncio.create_task(guarded())
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True, pending()
        return False, pending()

    assert asyncio.run(main()) == (True, 0)


def test_an_error_inside_the_block_passes_through() -> None:
    async def main() -> int:
        with pytest.raises(ValueError, match="boom"):
            async with deadline(5):
                raise ValueError("boom")
        return pending()

    assert asyncio.run(main()) == 0


def test_an_extended_deadline_expires_only_when_nothing_more_is_owed() -> None:
    """``extend`` is asked at the deadline (with how late the wheel woke); the block runs on
    while it answers more time, and expires at the first answer of none."""
    asked: list[float] = []

    def extend(late: float) -> float:
        asked.append(late)
        return 0.2 if len(asked) < 3 else 0.0

    async def main() -> tuple[float, str, int]:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with deadline(0.1, extend=extend):
                await asyncio.sleep(5)
        except TimeoutError:
            return loop.time() - started, "timeout", pending()
        return loop.time() - started, "ended", pending()

    took, how, left = asyncio.run(main())
    assert how == "timeout" and left == 0
    assert len(asked) == 3 and all(late >= 0 for late in asked)
    assert took >= 0.1 + 0.2 + 0.2  # never early


def test_an_extended_block_that_ends_in_time_is_untouched() -> None:
    async def main() -> tuple[str, int]:
        async with deadline(0.05, extend=lambda _late: 0.5):
            await asyncio.sleep(0.2)  # past the deadline, within the extension
        return "done", pending()

    assert asyncio.run(main()) == ("done", 0)
