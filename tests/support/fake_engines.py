"""Fake engines for tests: specmon's simulator (pages rendered from real captures) running in a
background thread, with counters the test sets by hand."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from specmon.sim.engine import Counters, Mode, SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import SimServer, VirtualTarget, make_target


class EngineThread:
    """A SimServer on its own event loop in a daemon thread."""

    def __init__(self, targets: list[VirtualTarget], *, shared: bool = False) -> None:
        self.server = SimServer(targets)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._shared = shared

    def start(self) -> None:
        self._thread.start()
        coro = self.server.start_shared() if self._shared else self.server.start_each()
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def url(self, name: str) -> str:
        return self.server.addresses[name] + "/metrics"

    def target(self, name: str) -> VirtualTarget:
        return self.server.targets[name]


def manual_target(
    name: str, kind: PageKind, *, chain_length: int = 3, model: str | None = None
) -> VirtualTarget:
    """A target whose counters move only when the test sets them."""
    settings = SimSettings(survival=(0.5,) * chain_length, drafts_per_second=0.0)
    target = make_target(name=name, kind=kind, settings=settings, model=model, seed=0)
    target.engine.counters.positions_published = True
    return target


def set_counters(target: VirtualTarget, drafts: int, draft_tokens: int, per_pos: list[int]) -> None:
    """Replace the counters atomically (one attribute assignment)."""
    target.engine.counters = Counters(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted=sum(per_pos),
        per_pos=list(per_pos),
        generation_tokens=drafts + sum(per_pos),
        positions_published=True,
    )


def set_mode(target: VirtualTarget, mode: Mode) -> None:
    from dataclasses import replace

    target.engine.settings = replace(target.engine.settings, mode=mode)


@contextmanager
def running(targets: list[VirtualTarget], *, shared: bool = False) -> Iterator[EngineThread]:
    thread = EngineThread(targets, shared=shared)
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()
