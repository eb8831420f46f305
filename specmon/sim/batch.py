"""Continuous batching for simulated chat completions: requests decoded together, one engine
step at a time, each step lasting the load model's T(n, k) (I/O: asyncio sleeps).

A request joins at the next step (its first step is its prefill and yields its first token),
then every step gives it 1 + accepted tokens (1 without speculation) until ``max_tokens``.
The counters move as each engine's do (docs/load-signals.md): vLLM per step (ITL per request
per step, tokens, drafts), llama.cpp per decode call for n_decode and busy slots and at the
request's end for its tokens, decode seconds and drafts. Times recorded in the counters are
the model's step times, so a measurement finds the model's numbers exactly; the answers wait
for those times scaled by ``time_scale`` on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from specmon.sim.engine import SimEngine

__all__ = ["Batcher", "RequestResult"]


@dataclass(frozen=True, slots=True)
class RequestResult:
    tokens: int
    #: Decoding steps after the first token, and the drafts among them.
    steps: int
    drafts: int
    draft_tokens: int
    accepted: int
    #: Simulated seconds from the first token to the last.
    decode_seconds: float


@dataclass(slots=True)
class _Request:
    max_tokens: int
    future: asyncio.Future[RequestResult]
    #: Streamed requests: the running token count after every step that emitted some.
    progress: asyncio.Queue[int] | None = None
    tokens: int = 0
    steps: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    decode_seconds: float = 0.0

    def result(self) -> RequestResult:
        return RequestResult(
            self.tokens, self.steps, self.drafts, self.draft_tokens, self.accepted,
            self.decode_seconds,
        )  # fmt: skip


class Batcher:
    """One simulated engine's batch loop; runs while it has requests."""

    def __init__(self, engine: SimEngine, *, time_scale: float = 1.0, max_batch: int = 256) -> None:
        if time_scale < 0:
            raise ValueError("time_scale must be >= 0")
        self.engine = engine
        self.time_scale = time_scale
        self.max_batch = max_batch
        self._waiting: list[_Request] = []
        self._active: list[_Request] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._waiting) + len(self._active)

    async def submit(
        self, max_tokens: int, *, progress: asyncio.Queue[int] | None = None
    ) -> RequestResult:
        """Generate ``max_tokens`` tokens as one request; returns when the last is out. With
        ``progress``, the request's token count is put on it after each step that emitted
        tokens (a streamed answer sends them as they come)."""
        loop = asyncio.get_running_loop()
        request = _Request(max(1, max_tokens), loop.create_future(), progress)
        self._waiting.append(request)
        self.engine.active_requests = self.in_flight
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        try:
            return await request.future
        finally:
            self.engine.active_requests = self.in_flight

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for request in (*self._waiting, *self._active):
            if not request.future.done():
                request.future.cancel()
        self._waiting.clear()
        self._active.clear()

    async def _run(self) -> None:
        while self._waiting or self._active:
            room = self.max_batch - len(self._active)
            if room > 0 and self._waiting:
                self._active += self._waiting[:room]
                del self._waiting[:room]
            background = self.engine.settings.requests_running
            step = self.engine.step_seconds(len(self._active) + background)
            await asyncio.sleep(step * self.time_scale)
            self._step(step)
            self.engine.active_requests = self.in_flight

    def _step(self, step: float) -> None:
        engine = self.engine
        settings = engine.settings
        c = engine.counters
        live = not engine.lumpy  # vLLM: counters per step; llama.cpp: at the request's end
        c.engine_steps += 1
        c.busy_slots += len(self._active)
        emitted_total = 0
        prefills = 0
        finished: list[_Request] = []
        for request in self._active:
            if request.tokens == 0:
                # The prefill step: the first token comes from the prompt's logits.
                request.tokens = 1
                prefills += 1
                emitted_total += 1
                if live:
                    c.generation_tokens += 1
                    c.ttft.observe(step)
            else:
                emitted = 1
                if settings.speculation:
                    drafted, accepted, positions = engine.draw_step()
                    emitted = min(1 + accepted, request.max_tokens - request.tokens)
                    request.drafts += 1
                    request.draft_tokens += drafted
                    request.accepted += accepted
                    _add_positions(request.per_pos, positions)
                    if live:
                        self._add_spec(drafted, accepted, positions)
                request.tokens += emitted
                request.steps += 1
                request.decode_seconds += step
                emitted_total += emitted
                if live:
                    c.generation_tokens += emitted
                    c.itl.observe(step)
                    c.decode_seconds += step
            if request.progress is not None:
                request.progress.put_nowait(request.tokens)
            if request.tokens >= request.max_tokens:
                finished.append(request)
        c.iteration.observe(emitted_total)
        # TGI's router times a prefill call for the new requests and a decode call for the
        # running ones; the simulated step serves both at once, and each call is timed with it.
        if prefills:
            c.prefill_calls.observe(step)
            c.new_batches.observe(prefills)
        if len(self._active) > prefills:
            c.decode_calls.observe(step)
        for request in finished:
            self._active.remove(request)
            if live:
                if request.tokens > 1:
                    c.tpot.observe(request.decode_seconds / (request.tokens - 1))
            else:
                c.generation_tokens += request.tokens
                c.decode_seconds += request.decode_seconds
                if request.drafts:
                    self._add_spec(request.draft_tokens, request.accepted, request.per_pos,
                                   drafts=request.drafts)  # fmt: skip
            c.requests_finished += 1
            if not request.future.done():
                request.future.set_result(request.result())

    def _add_spec(
        self, draft_tokens: int, accepted: int, positions: list[int], *, drafts: int = 1
    ) -> None:
        c = self.engine.counters
        c.drafts += drafts
        c.draft_tokens += draft_tokens
        c.accepted += accepted
        _add_positions(c.per_pos, positions)
        c.positions_published = True


def _add_positions(per_pos: list[int], positions: Sequence[int]) -> None:
    """Add a step's per-position acceptances to a running per-position count, growing it to
    the step's length."""
    if len(per_pos) < len(positions):
        per_pos += [0] * (len(positions) - len(per_pos))
    for i, count in enumerate(positions):
        per_pos[i] += count
