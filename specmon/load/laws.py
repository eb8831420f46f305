"""The laws an interval between two readings' load counters obeys, checked before the
interval counts (as :mod:`specmon.engines.validate` checks the acceptance counters). Pure.

From the page's own series, per model:

- a restart is the engine's step counter going down (the request-steps when the engine
  publishes no step counter): every value since is then the increase;
- otherwise no sum or count goes down (decode seconds, decode tokens, request-steps,
  slot-steps, engine steps, TGI's step seconds, the drafts counters): a broken page, not a
  restart (``load_counter_decrease``; for TGI a fall of the request-steps, its observations
  less its prefills, is ``prefills_above_observations``);
- steps that were decoded took time: a mean step time above 0 (``zero_step_time``);
- the engine's time over the interval (TGI: its decode-step seconds; vLLM, llama.cpp: the mean
  step time x the engine steps) is at most the interval's wall time x 1.25 + 1 s per engine
  replica (``engine_time_above_wall``; the wall time is between the two readings: specmon's
  clock for a scrape, Prometheus's sample times for a source; a scrape is stamped when its
  answer arrives, so :class:`~specmon.load.history.LoadHistory` adds the first scrape's
  duration: a slow scrape of a starved server shows counters from as early as its start).

A broken interval is left out of every load figure with its reason; the readings stay (the
next interval starts from the newer one) and the acceptance figures are untouched.
"""

from __future__ import annotations

from specmon.engines.model import RejectReason
from specmon.load.counters import LoadCounters

__all__ = ["WALL_FACTOR", "WALL_SLACK_SECONDS", "interval_refusal", "is_reset"]

#: Engine time may exceed the wall time between two readings by this factor ...
WALL_FACTOR = 1.25
#: ... plus this many seconds (a scrape's own latency, timers' granularity), per replica.
WALL_SLACK_SECONDS = 1.0


def is_reset(before: LoadCounters, after: LoadCounters) -> bool:
    """Whether the engine restarted between the two readings: its step counter (else its
    request-steps) went down by more than the printed rounding allows."""
    eb, ea = before.errors, after.errors
    if before.engine_steps is not None and after.engine_steps is not None:
        return before.engine_steps - after.engine_steps > eb[3] + ea[3]
    return before.request_steps - after.request_steps > eb[0] + ea[0]


def interval_refusal(
    before: LoadCounters, after: LoadCounters, seconds: float | None
) -> tuple[RejectReason, str] | None:
    """The first law the interval from ``before`` to ``after`` breaks, with its detail, or
    None. ``seconds``: the wall time between the readings (None: unknown, not checked)."""
    reset = is_reset(before, after)
    eb, ea = before.errors, after.errors
    step_sum: float | None = None
    if reset:
        steps, engine, decode = after.request_steps, after.engine_steps, after.decode_seconds
        step_sum = after.engine_step_seconds
        steps_error, decode_error = ea[0], ea[1]
    elif _any_fell(before, after):
        falls: list[tuple[str, float | None, float | None, float]] = [
            ("decode seconds", before.decode_seconds, after.decode_seconds, eb[1] + ea[1]),
            ("decode tokens", before.decode_tokens, after.decode_tokens, eb[2] + ea[2]),
            ("slot-steps", before.slot_steps, after.slot_steps, eb[4] + ea[4]),
            ("decode-step seconds", before.engine_step_seconds, after.engine_step_seconds, 0.0),
            ("drafts", float(before.drafts), float(after.drafts), 0.0),
            ("drafted tokens", float(before.draft_tokens), float(after.draft_tokens), 0.0),
            ("accepted tokens", float(before.accepted_tokens), float(after.accepted_tokens), 0.0),
        ]
        if before.request_steps - after.request_steps > eb[0] + ea[0]:
            if after.source == "engine_step_seconds":
                return RejectReason.PREFILLS_ABOVE_OBSERVATIONS, (
                    "request-steps (step observations less prefilled requests) fell from "
                    f"{before.request_steps:.0f} to {after.request_steps:.0f} while the decode "
                    "steps rose: more requests prefilled than observed"
                )
            falls.insert(0, ("request-steps", before.request_steps, after.request_steps, 0.0))
        for name, old, new, slack in falls:
            if old is not None and new is not None and old - new > slack:
                return RejectReason.LOAD_DECREASE, (
                    f"{name} fell from {old:.6g} to {new:.6g} while the engine's step "
                    "counter did not: not a restart"
                )
        raise AssertionError("_any_fell and the list above disagree")  # pragma: no cover
    else:
        steps = after.request_steps - before.request_steps
        engine = (
            None
            if after.engine_steps is None or before.engine_steps is None
            else after.engine_steps - before.engine_steps
        )
        decode = after.decode_seconds - before.decode_seconds
        if after.engine_step_seconds is not None and before.engine_step_seconds is not None:
            step_sum = after.engine_step_seconds - before.engine_step_seconds
        steps_error, decode_error = eb[0] + ea[0], eb[1] + ea[1]
    if after.engine_step_seconds is not None:
        # TGI: its decode steps' own wall time.
        engine_time = step_sum
        if engine and engine > 0 and step_sum is not None and step_sum <= 0:
            return RejectReason.ZERO_STEP_TIME, (
                f"{engine:.0f} decode steps took {step_sum:g} s (the decode-step seconds did "
                "not rise)"
            )
    else:
        if steps > steps_error and decode + decode_error <= 0:
            return RejectReason.ZERO_STEP_TIME, (
                f"{steps:.0f} request-steps took {decode:g} s (the decode seconds did not rise)"
            )
        engine_time = None
        if engine and engine > 0 and steps > steps_error and decode > 0:
            engine_time = decode / steps * engine
    if seconds is not None and seconds > 0 and engine_time is not None:
        replicas = max(after.replicas, 1)
        limit = (seconds * WALL_FACTOR + WALL_SLACK_SECONDS) * replicas
        if engine_time > limit:
            return RejectReason.ENGINE_TIME_ABOVE_WALL, (
                f"{engine_time:.6g} s of engine time in {seconds:.3g} s of wall time (at most "
                f"{WALL_FACTOR:g} x wall + {WALL_SLACK_SECONDS:g} s per replica, {replicas} "
                f"replica{'s' if replicas != 1 else ''})"
            )
    return None


def _any_fell(before: LoadCounters, after: LoadCounters) -> bool:
    """Whether any sum or count of :func:`interval_refusal`'s list fell (the common case, none,
    costs a few comparisons: the list and its messages are made only for a broken page)."""
    eb, ea = before.errors, after.errors
    slots_b, slots_a = before.slot_steps, after.slot_steps
    step_b, step_a = before.engine_step_seconds, after.engine_step_seconds
    return (
        before.request_steps - after.request_steps > eb[0] + ea[0]
        or before.decode_seconds - after.decode_seconds > eb[1] + ea[1]
        or before.decode_tokens - after.decode_tokens > eb[2] + ea[2]
        or (slots_b is not None and slots_a is not None and slots_b - slots_a > eb[4] + ea[4])
        or (step_b is not None and step_a is not None and step_b > step_a)
        or before.drafts > after.drafts
        or before.draft_tokens > after.draft_tokens
        or before.accepted_tokens > after.accepted_tokens
    )
