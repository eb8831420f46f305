"""The load levels of a measurement, and whether a level's load was real. Pure.

A level is either closed-loop, ``concurrency`` requests kept in flight (a semaphore), or
open-loop, ``rate`` requests per second arriving as a Poisson process whatever the server
does (:func:`poisson_arrivals`, the same schedule on both servers). Two ways a level can
measure less load than it names, both refused or flagged here:

- before anything runs, a concurrency level above the requests a workload sends at it
  (prompts times repeats) can never hold that many in flight: :func:`too_few_requests`;
- after the run, a concurrency level whose measured concurrency stayed below
  :data:`HELD_SHARE` of the level (the servers' own counters, else the client's requests in
  flight) was not held: :func:`held_level`; the table flags it, and the crossover and the
  profile leave it out.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "AUTO_PER_LEVEL",
    "AUTO_SECONDS",
    "HELD_SHARE",
    "Held",
    "LoadLevel",
    "held_level",
    "poisson_arrivals",
    "repeats_at",
    "too_few_requests",
]

#: A level held when its measured concurrency is at least this share of it.
HELD_SHARE = 0.8
#: ``--repeats auto`` at a concurrency level: at least this many times the level's requests
#: per workload (requests end one by one and the last ones run with fewer neighbours: four
#: waves keep the mean near the level).
AUTO_PER_LEVEL = 8
#: ``--repeats auto`` at a rate: at least this many seconds of arrivals per workload.
AUTO_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class LoadLevel:
    """One level of the sweep: ``concurrency`` requests in flight, or ``rate`` per second."""

    concurrency: int | None = None
    rate: float | None = None

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a level is a concurrency or a rate, not both")

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    def label(self) -> str:
        """``concurrency 4`` or ``rate 2 req/s``."""
        if self.rate is not None:
            return f"rate {self.rate:g} req/s"
        return f"concurrency {self.concurrency}"

    def short(self) -> str:
        """``c=4`` or ``r=2/s`` (the progress bar)."""
        return f"r={self.rate:g}/s" if self.rate is not None else f"c={self.concurrency}"

    def as_dict(self) -> dict[str, object]:
        return {
            "mode": "rate" if self.open_loop else "concurrency",
            "concurrency": self.concurrency,
            "rate_per_second": self.rate,
        }


def repeats_at(level: LoadLevel, *, prompts: int, repeats: int | None) -> int:
    """How many times each prompt of a workload is sent at ``level``: ``repeats`` as given,
    or for ``--repeats auto`` (None) enough for :data:`AUTO_PER_LEVEL` times the concurrency
    (at a rate: :data:`AUTO_SECONDS` of arrivals), and at least once."""
    if repeats is not None:
        return repeats
    if level.rate is not None:
        wanted = math.ceil(AUTO_SECONDS * level.rate)
    else:
        wanted = AUTO_PER_LEVEL * (level.concurrency or 1)
    return max(1, math.ceil(wanted / max(prompts, 1)))


def too_few_requests(
    levels: Sequence[LoadLevel], workloads: Sequence[tuple[str, int]], *, repeats: int | None
) -> list[str]:
    """Why a concurrency level could not be held, per (workload name, prompts): it asks for
    more requests in flight than the workload sends at it. Each message names the fix."""
    problems: list[str] = []
    for level in levels:
        c = level.concurrency
        if c is None:
            continue
        for name, prompts in workloads:
            sent = prompts * repeats_at(level, prompts=prompts, repeats=repeats)
            if c > sent:
                need = math.ceil(c / max(prompts, 1))
                problems.append(
                    f"--concurrency {c}: workload {name!r} sends {sent} request(s) at that level "
                    f"({prompts} prompt(s) x {sent // max(prompts, 1)} repeat(s)), so at most "
                    f"{sent} could be in flight; pass --repeats {need} or more (or --repeats "
                    f"auto: at least {AUTO_PER_LEVEL} x the level, the prompts repeated with "
                    f"distinct seeds), or a prompts or dataset file with at least {c} prompts"
                )
    return problems


@dataclass(frozen=True, slots=True)
class Held:
    """Whether a concurrency level's load was the level's."""

    level: int
    #: Measured concurrency of each server over the level (None: not measured).
    baseline: float | None
    speculative: float | None
    #: "engine counters" or "client" (requests in flight, from the client's own timing).
    source: str

    @property
    def lowest(self) -> float | None:
        values = [v for v in (self.baseline, self.speculative) if v is not None]
        return min(values) if values else None

    @property
    def ok(self) -> bool:
        """Held unless a measured concurrency is below HELD_SHARE of the level."""
        low = self.lowest
        return low is None or low >= HELD_SHARE * self.level

    def reason(self) -> str | None:
        if self.ok:
            return None
        parts = [
            f"{label} {value:.2f}"
            for label, value in (("baseline", self.baseline), ("with draft", self.speculative))
            if value is not None
        ]
        return (
            f"not held: measured concurrency {' / '.join(parts)} ({self.source}) is below "
            f"{HELD_SHARE:.0%} of {self.level}; left out of the crossover and the profile "
            "(send more requests: --repeats, or a server that can hold the level)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "held": self.ok,
            "threshold_share": HELD_SHARE,
            "measured_concurrency": {
                "baseline": self.baseline,
                "speculative": self.speculative,
                "source": self.source,
            },
            "reason": self.reason(),
        }


def held_level(
    level: int,
    *,
    engine: tuple[float | None, float | None],
    client: tuple[float | None, float | None],
) -> Held:
    """The level's measured concurrency per server: the engines' counters where both servers
    have them, else the client's mean requests in flight (Little's law: request seconds over
    wall seconds)."""
    if engine[0] is not None and engine[1] is not None:
        return Held(level, engine[0], engine[1], "engine counters")
    return Held(level, client[0], client[1], "client")


def poisson_arrivals(rate: float, count: int, *, seed: int) -> list[float]:
    """Send times (seconds from the start) of ``count`` requests arriving as a Poisson process
    of ``rate`` per second: exponential gaps, the first request at 0. Deterministic for a
    seed, so both servers get the same schedule."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError("rate must be finite and > 0")
    rng = random.Random(seed)  # noqa: S311 - a load schedule, not security
    times: list[float] = []
    now = 0.0
    for index in range(count):
        if index:
            now += rng.expovariate(rate)
        times.append(now)
    return times
