"""A simulated engine's counters and the stochastic model that advances them. No I/O.

Drafts arrive as a Poisson process at ``drafts_per_second``; each draft's accepted length is
drawn from the per-position survival rates s_1 >= s_2 >= ... (P(accepted length >= i) = s_i).
vLLM's counters move continuously; llama.cpp's only when a simulated request finishes, the
way the real server updates them, so its per-position series appear after the first request.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from enum import StrEnum

from specmon.sim.load_model import LoadModel
from specmon.sim.noise import Classes, Drift, drift_step
from specmon.sim.sampling import binomial, draw_positions, poisson

__all__ = ["Counters", "Histogram", "Mode", "SimEngine", "SimSettings"]


class Mode(StrEnum):
    NORMAL = "normal"
    ERROR = "error"  # HTTP 500
    HANG = "hang"  # accept the connection, never answer
    GARBAGE = "garbage"  # HTTP 200 with a body that is not an exposition page
    NO_METRICS = "no_metrics"  # llama-server without --metrics: HTTP 501


@dataclass(frozen=True, slots=True)
class SimSettings:
    survival: tuple[float, ...] = (0.8, 0.6, 0.4)
    drafts_per_second: float = 20.0
    requests_running: int = 4
    speculation: bool = True
    mode: Mode = Mode.NORMAL
    #: Mean drafted tokens per draft; None = the full chain (n-gram proposers draft fewer).
    draft_tokens_per_draft: float | None = None
    #: llama.cpp: drafts per simulated request (counters move when a request ends).
    drafts_per_request: int = 40
    #: Step time as a function of concurrency and chain length. With it, background traffic
    #: runs ``requests_running`` sequences at the model's speed (``drafts_per_second`` is
    #: then derived) and chat completions are answered at the simulated speed; without it,
    #: the step time is requests_running / drafts_per_second.
    load_model: LoadModel | None = None
    #: The coefficient of variation of one simulated step's time (with a load model): real
    #: steps vary (batch composition, sampling, the allocator), and a step time measured
    #: without spread would leave an interval's timing part unexercised. 0: every step the
    #: model's time exactly.
    step_noise: float = 0.0
    #: A persistent multiplicative drift of the step time (with a load model; mean 1), each
    #: engine its own process (specmon.sim.noise). None: no drift.
    drift: Drift | None = None
    #: A second request class with its own acceptance and a share of the drafts that moves
    #: with time (specmon.sim.noise). None: one class.
    classes: Classes | None = None

    @property
    def chain_length(self) -> int:
        return len(self.survival)

    @staticmethod
    def from_alpha(alpha: float, chain_length: int, **kwargs: object) -> SimSettings:
        survival = tuple(alpha**i for i in range(1, chain_length + 1))
        return replace(SimSettings(), survival=survival, **kwargs)  # type: ignore[arg-type]

    def validate(self) -> None:
        if not self.survival:
            raise ValueError("survival needs at least one position")
        previous = 1.0
        for i, rate in enumerate(self.survival, start=1):
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"survival[{i}] = {rate} is outside [0, 1]")
            if rate > previous + 1e-12:
                raise ValueError(
                    f"survival must not rise along the chain (position {i}: {rate} > {previous})"
                )
            previous = rate
        if self.drafts_per_second < 0:
            raise ValueError("drafts_per_second must be >= 0")
        if self.drafts_per_request < 1:
            raise ValueError("drafts_per_request must be >= 1")
        if self.requests_running < 0:
            raise ValueError("requests_running must be >= 0")
        if self.load_model is not None:
            self.load_model.validate()
        if not 0.0 <= self.step_noise <= 1.0:
            raise ValueError("step_noise must be within [0, 1]")
        if self.drift is not None:
            self.drift.validate()
            if self.load_model is None:
                raise ValueError("a step-time drift needs a load model (the step time it moves)")
        if self.classes is not None:
            self.classes.validate(self.chain_length)


@dataclass(slots=True)
class Histogram:
    """Observations of a Prometheus histogram, kept by value (the simulator observes few
    distinct values: step times per concurrency), so any bucket layout can be rendered."""

    count: int = 0
    sum: float = 0.0
    values: dict[float, int] = field(default_factory=dict)

    def observe(self, value: float, times: int = 1) -> None:
        if times <= 0:
            return
        key = float(f"{value:.6g}")
        if key not in self.values and len(self.values) >= 4096:
            key = min(self.values, key=lambda v: abs(v - key))
        self.values[key] = self.values.get(key, 0) + times
        self.count += times
        self.sum += value * times

    def cumulative(self, le: float) -> int:
        """Observations <= ``le`` (a bucket's count)."""
        if math.isinf(le):
            return self.count
        return sum(n for v, n in self.values.items() if v <= le)


@dataclass(slots=True)
class Counters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    generation_tokens: int = 0
    requests_finished: int = 0
    #: llama.cpp: whether per-position series are published yet.
    positions_published: bool = False
    #: Engine steps (vLLM iterations, llama.cpp n_decode) and busy slots summed over them.
    engine_steps: int = 0
    busy_slots: int = 0
    #: Decode time of the requests (llama.cpp tokens_predicted_seconds: at request end).
    decode_seconds: float = 0.0
    #: vLLM histograms: one ITL observation per request per step; TTFT per request; tokens
    #: per engine step; per finished request the mean time per output token.
    itl: Histogram = field(default_factory=Histogram)
    ttft: Histogram = field(default_factory=Histogram)
    iteration: Histogram = field(default_factory=Histogram)
    tpot: Histogram = field(default_factory=Histogram)
    #: TGI's router: the wall time of every decode call (one per engine step that decoded a
    #: running request) and of every prefill call, and the size of every new batch taken
    #: from the queue (its prefill), as ``tgi_batch_inference_duration{method}`` and
    #: ``tgi_batch_next_size``.
    decode_calls: Histogram = field(default_factory=Histogram)
    prefill_calls: Histogram = field(default_factory=Histogram)
    new_batches: Histogram = field(default_factory=Histogram)


class SimEngine:
    """Counters of one simulated model on one engine."""

    def __init__(
        self,
        *,
        settings: SimSettings,
        seed: int | None = None,
        now: float = 0.0,
        wall: float = 0.0,
        lumpy: bool = False,
    ) -> None:
        settings.validate()
        self.settings = settings
        self.rng = random.Random(seed)  # noqa: S311 - simulation, not security
        self.lumpy = lumpy
        self.counters = Counters(per_pos=[0] * settings.chain_length)
        self._pending = Counters(per_pos=[0] * settings.chain_length)
        self._pending_drafts_target = self._next_request_size()
        self._last = now
        #: When the engine was made: the class mix's clock starts here.
        self._born = now
        self._carry = 0.0
        self._step_carry = 0.0
        #: The drift process's state (its log factor is this less sd^2 / 2).
        self.drift_state = 0.0
        if settings.drift is not None and settings.drift.sd > 0:
            self.drift_state = self.rng.gauss(0.0, settings.drift.sd)  # stationary from t = 0
        #: Chat requests in flight (the batcher's), counted into the concurrency.
        self.active_requests = 0
        #: Wall-clock time of the (simulated) process start, for ``_created`` samples.
        self.started_wall = wall
        self.restarts = 0

    def _next_request_size(self) -> int:
        mean = self.settings.drafts_per_request
        return max(1, round(self.rng.uniform(0.5 * mean, 1.5 * mean)))

    def configure(self, settings: SimSettings, *, now: float, wall: float) -> None:
        """New settings from now on; a different chain length means a restart (as in real
        engines, where k is a start-up flag)."""
        settings.validate()
        self.advance(now)
        restart = settings.chain_length != self.settings.chain_length
        self.settings = settings
        if restart:
            self.restart(now=now, wall=wall)

    def restart(self, *, now: float, wall: float) -> None:
        """The server restarted: every counter starts again from zero."""
        k = self.settings.chain_length
        self.counters = Counters(per_pos=[0] * k)
        self._pending = Counters(per_pos=[0] * k)
        self._pending_drafts_target = self._next_request_size()
        self._last = now
        self._carry = 0.0
        self._step_carry = 0.0
        self.started_wall = wall
        self.restarts += 1

    @property
    def step_chain_length(self) -> int:
        """Tokens drafted per step: the chain length, 0 without speculation."""
        return self.settings.chain_length if self.settings.speculation else 0

    def step_seconds(self, concurrency: float) -> float:
        """The simulated time of one engine step at ``concurrency`` sequences."""
        s = self.settings
        if s.load_model is not None:
            step = s.load_model.step_seconds(concurrency, self.step_chain_length)
            return step * self.drift_factor
        rate = s.drafts_per_second * (1.0 if s.speculation else 1.0 + sum(s.survival))
        return max(concurrency, 1.0) / rate if rate > 0 else 0.0

    @property
    def drift_factor(self) -> float:
        """The step-time drift's factor now (1 without drift)."""
        drift = self.settings.drift
        return 1.0 if drift is None else drift.factor(self.drift_state)

    def advance(self, now: float) -> None:
        """Let simulated time pass up to ``now`` (monotonic seconds)."""
        elapsed = now - self._last
        if elapsed <= 0:
            return
        self._last = now
        s = self.settings
        if s.drift is not None:
            self.drift_state = drift_step(
                self.rng, self.drift_state, drift=s.drift, elapsed=elapsed
            )
        if s.load_model is not None:
            self._advance_modelled(elapsed)
            return
        if s.drafts_per_second <= 0:
            return
        n = max(s.requests_running, 1)
        if not s.speculation:
            # Traffic goes on without drafts: the same token throughput, one token per step.
            steps = poisson(self.rng, s.drafts_per_second * (1.0 + sum(s.survival)) * elapsed)
            self.counters.generation_tokens += steps
            self._add_seconds(steps, self.step_seconds(n))
            self._account(steps, n, self.step_seconds(n), steps)
            return
        drafts = poisson(self.rng, s.drafts_per_second * elapsed)
        # The decode time goes in first: on llama.cpp it lands with the same request as the
        # tokens (add_drafts may end a request).
        self._add_seconds(drafts, self.step_seconds(n))
        _, accepted = self.add_drafts(drafts)
        self._account(drafts, n, self.step_seconds(n), drafts + accepted)

    def _advance_modelled(self, elapsed: float) -> None:
        """Background traffic of ``requests_running`` sequences at the load model's speed."""
        s = self.settings
        n = s.requests_running + self.active_requests
        if s.requests_running <= 0:
            return
        step = self.step_seconds(n)
        self._step_carry += elapsed / step
        steps = int(self._step_carry)
        self._step_carry -= steps
        if steps <= 0:
            return
        request_steps = s.requests_running * steps
        if s.step_noise > 0:
            # The mean of ``steps`` independent steps, each with this coefficient of variation.
            spread = s.step_noise / math.sqrt(steps)
            step = step * max(0.05, 1.0 + self.rng.gauss(0.0, spread))
        self._add_seconds(request_steps, step)
        if s.speculation:
            _, accepted = self.add_drafts(request_steps)
            tokens = request_steps + accepted
        else:
            tokens = request_steps
            self.counters.generation_tokens += tokens
        self._account(request_steps, n, step, tokens, engine_steps=steps)

    def _account(
        self,
        request_steps: int,
        concurrency: int,
        step_seconds: float,
        tokens: int,
        *,
        engine_steps: int | None = None,
    ) -> None:
        """The step series of ``request_steps`` background request-steps taken ``concurrency``
        at a time, each lasting ``step_seconds`` (the decode time: :meth:`_add_seconds`)."""
        if request_steps <= 0:
            return
        c = self.counters
        if engine_steps is None:
            self._step_carry += request_steps / max(concurrency, 1)
            engine_steps = int(self._step_carry)
            self._step_carry -= engine_steps
        c.engine_steps += engine_steps
        c.busy_slots += request_steps
        c.itl.observe(step_seconds, request_steps)
        if engine_steps:
            c.iteration.observe(tokens / engine_steps, engine_steps)
            c.decode_calls.observe(step_seconds, engine_steps)

    def _add_seconds(self, request_steps: int, step_seconds: float) -> None:
        """The requests' decode time of ``request_steps`` steps (llama.cpp: it lands with
        the request, like its tokens)."""
        seconds = request_steps * step_seconds
        if self.lumpy and self.settings.speculation:
            self._pending.decode_seconds += seconds
        else:
            self.counters.decode_seconds += seconds

    def draw_step(self) -> tuple[int, int, list[int]]:
        """One request's verification step for the batcher: (draft tokens, accepted,
        per-position counts), without touching the counters."""
        positions = self._draw(1)
        return self.settings.chain_length, sum(positions), positions

    def _draw(self, drafts: int) -> list[int]:
        """Per-position counts of ``drafts`` drafts, each from the second class with its
        share now, else from the first."""
        s = self.settings
        if s.classes is None or drafts <= 0:
            return draw_positions(self.rng, drafts, s.survival)
        other = binomial(self.rng, drafts, s.classes.share_at(self._last - self._born))
        first = draw_positions(self.rng, drafts - other, s.survival)
        second = draw_positions(self.rng, other, s.classes.survival)
        return [a + b for a, b in zip(first, second, strict=True)]

    def add_drafts(self, drafts: int, *, finish_request: bool = False) -> tuple[int, int]:
        """Draw ``drafts`` verification steps; returns (draft tokens, accepted tokens).

        ``finish_request`` ends a llama.cpp request now (an API request completed)."""
        s = self.settings
        if drafts <= 0 and not finish_request:
            return 0, 0
        positions = self._draw(drafts)
        accepted = sum(positions)
        if s.draft_tokens_per_draft is None:
            draft_tokens = drafts * s.chain_length
        else:
            exact = drafts * s.draft_tokens_per_draft + self._carry
            draft_tokens = int(exact)
            self._carry = exact - draft_tokens
            draft_tokens = min(max(draft_tokens, accepted), drafts * s.chain_length)
        target = self._pending if self.lumpy else self.counters
        target.drafts += drafts
        target.draft_tokens += draft_tokens
        target.accepted += accepted
        for i, count in enumerate(positions):
            target.per_pos[i] += count
        # Each verification step emits the accepted prefix plus one token of the target's.
        target.generation_tokens += drafts + accepted
        if self.lumpy:
            if finish_request or self._pending.drafts >= self._pending_drafts_target:
                self._flush()
        else:
            self.counters.positions_published = True
        return draft_tokens, accepted

    def run_request(self, tokens: int) -> tuple[int, int, int, int]:
        """Generate ``tokens`` tokens as one API request: verification steps until enough
        tokens exist. Returns (steps, drafts, draft tokens, accepted tokens); without
        speculation every step is one plain decode and drafts are 0.

        The counters move as the engine's would (llama.cpp: all at once, when it ends).
        """
        s = self.settings
        if tokens <= 0:
            return 0, 0, 0, 0
        if not s.speculation:
            self.counters.generation_tokens += tokens
            self.counters.requests_finished += 1
            return tokens, 0, 0, 0
        steps = draft_tokens = accepted = 0
        produced = 0
        while produced < tokens:
            made, acc = self.add_drafts(1)
            steps += 1
            draft_tokens += made
            accepted += acc
            produced += acc + 1
        if self.lumpy:
            self._flush()
        return steps, steps, draft_tokens, accepted

    def _flush(self) -> None:
        pending = self._pending
        c = self.counters
        c.drafts += pending.drafts
        c.draft_tokens += pending.draft_tokens
        c.accepted += pending.accepted
        for i, count in enumerate(pending.per_pos):
            c.per_pos[i] += count
        c.generation_tokens += pending.generation_tokens
        c.decode_seconds += pending.decode_seconds
        c.requests_finished += 1
        if pending.drafts > 0:
            c.positions_published = True
        self._pending = Counters(per_pos=[0] * self.settings.chain_length)
        self._pending_drafts_target = self._next_request_size()
