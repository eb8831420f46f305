"""What an answer is: the records every surface renders. Pure: no I/O, no clock.

One :class:`Answer` per target, model and window holds everything an operator reads about
"is speculation paying now, at this load?": the basis it rests on and why each better basis
was refused, the speed-up with its 95 % interval and how it was read (:class:`ReadState`),
the draft cost c and where it came from, the break-even alpha and the margin at that same
c, the crossover with its range, the best chain length overall and per load at that same c,
the load it was read at, and, while a new load is being measured, the last answer that had a
number. :func:`specmon.answer.decide` makes it; nothing else computes any of these figures.
"""

from __future__ import annotations

from enum import StrEnum

from specmon.answer.crossover import Crossover
from specmon.records import record

__all__ = [
    "COMPARED",
    "MEASURED_C",
    "Answer",
    "Earlier",
    "Evidence",
    "PerLoad",
    "ReadState",
    "Refusal",
    "Standing",
]


class Evidence(StrEnum):
    """What an answer rests on, best first: the ``basis`` label of ``specmon_verdict_info``.

    ``twin``: the speed-up realized against the baseline twin at the current load;
    ``canary``: the same against the members of its group still on the old configuration
    without speculation (a rollout in progress, a canary), their sums pooled: a live twin
    that needs no ``baseline:`` (an explicit twin, configured on purpose, ranks above it);
    ``profile``: the same against a cost profile (``specmon measure --profile-out``);
    ``history``: against this server's own epoch without speculation at the same load;
    ``engine``: the draft cost the engine measures itself (TensorRT-LLM), applied to the
    window's acceptance by the cost model; ``configured``: the configured ``draft_cost``,
    likewise; ``default``: no draft cost configured anywhere: a guess."""

    TWIN = "twin"
    CANARY = "canary"
    PROFILE = "profile"
    HISTORY = "history"
    ENGINE = "engine"
    CONFIGURED = "configured"
    DEFAULT = "default"


#: The bases that compare step times with a baseline (a realized speed-up, a measured c).
COMPARED = (Evidence.TWIN, Evidence.CANARY, Evidence.PROFILE, Evidence.HISTORY)
#: The bases whose draft cost was measured, not configured or guessed.
MEASURED_C = (*COMPARED, Evidence.ENGINE)


class ReadState(StrEnum):
    """How the answer's speed-up was read: the ``state`` label of ``specmon_verdict_info``.

    ``measured``: this window's own load bucket against the baseline's; ``interpolated``:
    off the cost curve, in a bucket the curve's last hour measured on both sides (this
    window's bucket is still short of data); ``measuring``: the load moved to a bucket no
    evidence has measured yet: no number (never a guess in its place), the last answer that
    had one named with its own load; ``modelled``: the cost model applied to the window's
    acceptance at a draft cost the engine measured; ``guess``: the cost model at a
    configured or default draft cost, for a target where nothing was ever measured."""

    MEASURED = "measured"
    INTERPOLATED = "interpolated"
    MEASURING = "measuring"
    MODELLED = "modelled"
    GUESS = "guess"


class Standing(StrEnum):
    """The answer's judgement, worst first (the status page's order within a target's state):
    ``slower``: the speed-up is below 1 (on the comparison bases, the realized speed-up of
    the window's bucket too); ``below``: a negative margin at the answer's c; ``near``:
    within 0.05 of break-even or below 1.05x; ``measuring``: a new load, no number yet;
    ``unjudged``: nothing to judge; ``fine``: it pays."""

    SLOWER = "slower"
    BELOW = "below"
    NEAR = "near"
    MEASURING = "measuring"
    UNJUDGED = "unjudged"
    FINE = "fine"


@record
class Refusal:
    """A better basis that could not be used, and why."""

    basis: Evidence
    reason: str


@record
class PerLoad:
    """One load bucket of the window against the basis, at that bucket's own measured c:
    the realized speed-up, the draft cost, and the best chain length and its speed-up there
    (None: not measured; ``reason`` says why)."""

    label: str
    low: float
    high: float
    #: The target's mean concurrency in the bucket.
    concurrency: float | None
    speedup: float | None
    draft_cost: float | None
    best_chain_length: int | None
    best_speedup: float | None
    reason: str | None = None


@record
class Earlier:
    """The last answer with a number, named with its own load (shown while ``measuring``)."""

    concurrency: float | None
    bucket: str | None
    speedup: float
    interval: tuple[float, float] | None
    #: Unix time it was given.
    at: float


@record
class Answer:
    """Everything an operator reads about one window of one model of one target."""

    basis: Evidence
    state: ReadState
    #: The speed-up believed now (tokens/s with speculation over without); None while
    #: ``measuring``, or when the evidence gives none (no drafts, k unknown).
    speedup: float | None
    #: Its 95 % interval (None: no drafts counted, or an end broke a physical bound).
    interval: tuple[float, float] | None
    #: The draft cost c every figure below is at (None: measured none usable).
    draft_cost: float | None
    breakeven_alpha: float | None
    alpha_margin: float | None
    #: The best chain length at ``draft_cost`` (0: speculation does not pay) and its speed-up.
    best_chain_length: int | None
    best_speedup: float | None
    standing: Standing
    #: Where speculation stops paying, with its 95 % range (on the comparison bases only).
    crossover: Crossover | None = None
    #: Per load bucket of the window, at each bucket's own c (the comparison bases only).
    per_load: tuple[PerLoad, ...] = ()
    #: The baseline's name: the twin's, "canary", "profile" or "history" (None off the
    #: comparisons).
    against: str | None = None
    #: The compared epoch in words, for ``history`` ("this server without speculation, ...");
    #: the group's members in words, for ``canary`` ("canary: 1 of 4 pods on k = 4, compared
    #: with the 3 on k = 0").
    against_detail: str | None = None
    #: The load the answer was read at (the latest interval's concurrency), its bucket, and
    #: the time per output token there.
    concurrency: float | None = None
    bucket: str | None = None
    time_per_output_token_seconds: float | None = None
    #: The window's time-averaged concurrency (requests running, averaged over its readings).
    mean_concurrency: float | None = None
    #: Better bases refused, best first, and why.
    refused: tuple[Refusal, ...] = ()
    #: While ``measuring``: the last answer with a number, and what the new bucket still
    #: lacks ("2 scrape intervals (needs 3)").
    earlier: Earlier | None = None
    progress: str | None = None
    #: Notes about the evidence (a variable draft length, a negative c measured, ...).
    notes: tuple[str, ...] = ()
    #: Cut at a configuration change: "read from the 10 s since ..." (specmon.daemon).
    cut: str | None = None

    @property
    def measured_cost(self) -> bool:
        """Whether ``draft_cost`` was measured (twin, canary, profile, history, the
        engine's)."""
        return self.basis in MEASURED_C

    @property
    def compared(self) -> bool:
        """Whether the answer compares step times with a baseline (twin, canary, profile,
        history)."""
        return self.basis in COMPARED
