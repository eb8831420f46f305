"""Two readings: the increases over an interval and the figures they give (concurrency, step
time, time per output token), each None when rounding makes it uncertain."""

from __future__ import annotations

import math

from specmon.engines.model import SpecCounters
from specmon.load.counters import MAX_ROUNDING_ERROR
from specmon.records import record

#: A window's live figures as :meth:`LoadHistory.speeds` reads them: (concurrency, step
#: seconds, time per output token), each None when the window cannot give it.
Speeds = tuple[float | None, float | None, float | None]


def checked_ratio(numerator: float, denominator: float, error: float) -> float | None:
    """numerator / denominator, or None when the denominator is 0 or the relative rounding
    error bound exceeds MAX_ROUNDING_ERROR."""
    if denominator <= 0 or numerator < 0:
        return None
    if error > MAX_ROUNDING_ERROR:
        return None
    return numerator / denominator


def relative_error(error: float, value: float) -> float:
    if error == 0.0:
        return 0.0
    return math.inf if value <= 0 else error / value


def bounded_ratio(
    numerator: float, denominator: float, numerator_error: float, denominator_error: float
) -> float | None:
    """numerator / denominator (see :func:`checked_ratio`) with the relative error bound of both;
    exact counters (vLLM's: both errors 0) skip the bound. Every figure made this way
    (concurrency, step time, time per output token, tokens per step) is above 0 when its
    denominator is: a numerator of 0 gives None (absent), never a 0 to divide by."""
    if numerator <= 0.0:
        return None
    if numerator_error == 0.0 and denominator_error == 0.0:
        return checked_ratio(numerator, denominator, 0.0)
    error = relative_error(numerator_error, numerator) + relative_error(
        denominator_error, denominator
    )
    return checked_ratio(numerator, denominator, error)


@record
class LoadInterval:
    """Increases over an interval (or a sum of intervals) and the figures they give."""

    request_steps: float
    decode_seconds: float
    decode_tokens: float
    engine_steps: float | None
    slot_steps: float | None
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = ()
    #: Wall seconds the interval covers (None when the readings carried no time).
    seconds: float | None = None
    #: Engine restarts detected (a counter that went down).
    resets: int = 0
    #: Worst-case absolute rounding of the five increases above (same order as LoadCounters).
    errors: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    intervals: int = 1

    @property
    def concurrency(self) -> float | None:
        """Requests per engine step (request-slots / engine steps)."""
        if self.engine_steps is None or self.slot_steps is None:
            return None
        return bounded_ratio(self.slot_steps, self.engine_steps, self.errors[4], self.errors[3])

    @property
    def step_seconds(self) -> float | None:
        """Mean decoding step as a request sees it."""
        e = self.errors
        return bounded_ratio(self.decode_seconds, self.request_steps, e[1], e[0])

    @property
    def time_per_output_token_seconds(self) -> float | None:
        e = self.errors
        return bounded_ratio(self.decode_seconds, self.decode_tokens, e[1], e[2])

    @property
    def tokens_per_step(self) -> float | None:
        """K: decode tokens per request-step (1 without speculation)."""
        e = self.errors
        return bounded_ratio(self.decode_tokens, self.request_steps, e[2], e[0])

    @property
    def drafted_per_step(self) -> float | None:
        """k̄: drafted tokens per request-step (all steps, with a draft or not)."""
        return checked_ratio(
            float(self.draft_tokens),
            self.request_steps,
            relative_error(self.errors[0], self.request_steps),
        )

    @property
    def counters(self) -> SpecCounters:
        return SpecCounters(
            drafts=self.drafts,
            draft_tokens=self.draft_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=self.accepted_per_position,
        )

    def __add__(self, other: LoadInterval) -> LoadInterval:
        def opt(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        width = max(len(self.accepted_per_position), len(other.accepted_per_position))
        a = self.accepted_per_position + (0,) * (width - len(self.accepted_per_position))
        b = other.accepted_per_position + (0,) * (width - len(other.accepted_per_position))
        e1, e2 = self.errors, other.errors
        return LoadInterval(
            request_steps=self.request_steps + other.request_steps,
            decode_seconds=self.decode_seconds + other.decode_seconds,
            decode_tokens=self.decode_tokens + other.decode_tokens,
            engine_steps=opt(self.engine_steps, other.engine_steps),
            slot_steps=opt(self.slot_steps, other.slot_steps),
            drafts=self.drafts + other.drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted_tokens=self.accepted_tokens + other.accepted_tokens,
            accepted_per_position=tuple(x + y for x, y in zip(a, b, strict=True)),
            seconds=opt(self.seconds, other.seconds),
            resets=self.resets + other.resets,
            errors=(e1[0] + e2[0], e1[1] + e2[1], e1[2] + e2[2], e1[3] + e2[3], e1[4] + e2[4]),
            intervals=self.intervals + other.intervals,
        )
