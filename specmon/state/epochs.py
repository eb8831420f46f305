"""Configuration epochs: per target and model, the stretches of time over which the server's
speculative configuration stayed the same. Pure: fed one reading per scrape, no I/O.

A new epoch starts when (constants below, the numbers of scrapes an operator can count on):

- speculation stops: no drafts over ``OFF_SCRAPES`` consecutive scrapes while the server
  generated at least ``OFF_TOKENS`` tokens, or the speculative series vanish from
  ``VANISH_SCRAPES`` consecutive pages that still name the model;
- speculation starts: drafts rise again (at the first scrape that shows it);
- the chain length changes: a new detected k (position series, or the k TensorRT-LLM's
  ``speculative_config_info`` or SGLang's ``spec_num_steps`` publish) on ``K_SCRAPES``
  consecutive scrapes (llama.cpp publishes no position series until its first speculative
  request ends: a page without them neither confirms nor cancels a change);
- an operator marks one by hand (a draft model swap shows on no engine's page).

The first epoch seen is *not yet known* to speculate (``speculation`` None) until the first
evidence, which settles it in place, no change recorded: drafts rise (speculating), or
``OFF_TOKENS`` tokens are generated over ``OFF_SCRAPES`` scrapes without a draft (without
speculation). A page's speculative series alone are no evidence: llama.cpp publishes its draft
counters at 0 with no draft model loaded, and TGI's shows none until a draft is accepted; a
first page whose drafts already rose is evidence at once, and so are the speculative gauges of
an engine that publishes no counters (SGLang's, vLLM v0's: its only word on it).

An engine restart (its counters fall) is an event, not an epoch. The new epoch starts when the
change was first seen, not when it was confirmed; the counts of the scrapes in between go to
the epoch they turn out to belong to. Each epoch keeps its acceptance counts and the tokens
generated in it; the interval spanning specmon's own downtime is counted nowhere (a restored
tracker starts counting at its second live reading).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from itertools import pairwise
from typing import Any

from specmon.bounds import ADAPTER_MAX_CHAIN, acceptance_length_refusal, chain_bound
from specmon.engines import ModelReading, PageReading
from specmon.records import record

__all__ = [
    "K_SCRAPES",
    "MAX_EPOCHS",
    "OFF_SCRAPES",
    "OFF_TOKENS",
    "VANISH_SCRAPES",
    "Epoch",
    "EpochBook",
    "EpochTracker",
    "ModelEpochs",
    "Reason",
    "Sighting",
    "sighting",
]

#: Consecutive scrapes without drafts (while ``OFF_TOKENS`` are generated) that make
#: speculation off.
OFF_SCRAPES = 5
OFF_TOKENS = 400
#: Consecutive pages naming the model without its speculative series that make it off.
VANISH_SCRAPES = 2
#: Consecutive scrapes showing a new chain length that make it the epoch's.
K_SCRAPES = 3
#: Epochs kept per target and model (the current one included); the newest epoch of each
#: distinct configuration is kept before any older one.
MAX_EPOCHS = 12
#: Models followed per target; events (restarts) and the longest note kept.
MAX_MODELS = 8
MAX_EVENTS = 5
MAX_NOTE = 200
#: Longest chain length a restored epoch may have (the largest k an adapter reads).
MAX_CHAIN = ADAPTER_MAX_CHAIN
_MAX_COUNT = 2**53


class Reason(StrEnum):
    """Why an epoch began."""

    FIRST = "first_seen"
    ON = "speculation_on"
    OFF = "speculation_off"
    VANISHED = "series_vanished"
    CHAIN = "chain_length"
    CONFIG = "engine_config"
    MANUAL = "manual"


@record
class Epoch:
    #: 1, 2, ... per target and model, kept across restarts (the ``epoch`` label).
    number: int
    #: Unix time the configuration was first seen; ``end`` None for the current epoch.
    start: float
    end: float | None
    #: None: not yet known (no draft seen, too few tokens generated to say it is off).
    speculation: bool | None
    #: Detected (or published) chain length; None when unknown or off.
    chain_length: int | None
    reason: Reason
    note: str = ""
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    generated_tokens: int = 0
    #: Intervals counted into the epoch.
    scrapes: int = 0

    @property
    def configuration(self) -> tuple[bool | None, int | None, str]:
        """What makes two epochs the same configuration (a manual mark's note sets it
        apart: it names what no page shows, such as a new draft model)."""
        return (self.speculation, self.chain_length, self.note)

    def describe(self) -> str:
        if self.speculation is None:
            return "speculation not yet known (no draft seen yet)" + (
                f" ({self.note})" if self.note else ""
            )
        if not self.speculation:
            return "without speculation" + (f" ({self.note})" if self.note else "")
        k = f"k = {self.chain_length}" if self.chain_length else "k unknown"
        return f"speculating, {k}" + (f" ({self.note})" if self.note else "")


@record
class ModelEpochs:
    """One model's epochs, oldest first (the last is current), and its recent events."""

    model: str
    epochs: tuple[Epoch, ...]
    #: Restarts and marks seen, newest last: (Unix time, text).
    events: tuple[tuple[float, str], ...] = ()
    #: A change being confirmed, in words, or None.
    pending: str | None = None

    @property
    def current(self) -> Epoch:
        return self.epochs[-1]

    @property
    def previous(self) -> Epoch | None:
        return self.epochs[-2] if len(self.epochs) > 1 else None


@record
class Sighting:
    """What one scrape shows of a model's configuration."""

    speculating: bool
    #: Drafts (or, without a drafts counter, draft tokens, or accepted tokens): the counter
    #: whose rise means speculation is at work. None without speculative counters.
    activity: int | None = None
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    generated_tokens: int | None = None
    chain_length: int | None = None
    #: Whether ``chain_length`` comes from an engine's configuration gauge.
    published: bool = False


def sighting(model: ModelReading, *, speculating: bool) -> Sighting:
    """A model reading as what its configuration shows."""
    counters = model.counters
    generated = model.context.generation_tokens
    if counters is None:
        return Sighting(speculating=speculating and model.gauges is not None,
                        generated_tokens=generated, chain_length=model.chain_length,
                        published=model.chain_length is not None)  # fmt: skip
    if counters.knows("drafts"):
        activity = counters.drafts
    elif counters.knows("draft_tokens"):
        activity = counters.draft_tokens
    else:
        activity = counters.accepted_tokens
    positions = len(counters.accepted_per_position)
    chain = max(positions, model.chain_length or 0) or None
    return Sighting(
        speculating=speculating,
        activity=activity,
        drafts=counters.drafts,
        draft_tokens=counters.draft_tokens,
        accepted_tokens=counters.accepted_tokens,
        generated_tokens=generated,
        chain_length=chain,
        published=model.chain_length is not None and model.chain_length >= positions,
    )


class _Counts:
    __slots__ = ("accepted", "draft_tokens", "drafts", "generated", "scrapes")

    def __init__(self) -> None:
        self.drafts = self.draft_tokens = self.accepted = self.generated = self.scrapes = 0

    def add(self, other: _Counts) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        self.generated += other.generated
        self.scrapes += other.scrapes


class _Candidate:
    """A change seen but not yet confirmed."""

    __slots__ = ("reason", "scrapes", "since", "tokens", "value")

    def __init__(self, reason: Reason, since: float, value: int | None = None) -> None:
        self.reason = reason
        self.since = since
        self.value = value
        self.scrapes = 0
        self.tokens = 0


def _rise(before: int | None, now: int | None) -> tuple[int | None, bool]:
    """The increase of a counter between two readings (reset-aware: after a fall the new
    value is the increase since the restart) and whether it fell."""
    if before is None or now is None:
        return None, False
    if now < before:
        return now, True
    return now - before, False


class EpochTracker:
    """One model's epochs, fed one :class:`Sighting` per scrape."""

    __slots__ = (
        "_candidate", "_counts", "_current", "_events", "_last", "_past", "_past_json",
        "_pending", "_quiet",
    )  # fmt: skip

    def __init__(self) -> None:
        self._past: list[Epoch] = []
        #: The past epochs as written (each made once: a snapshot at 1,000 targets with 12
        #: epochs each takes 25 ms on the loop instead of 150; bench/state.py).
        self._past_json: tuple[dict[str, Any], ...] = ()
        #: The current epoch without its counts (kept in ``_counts``), or None before the
        #: first sighting.
        self._current: Epoch | None = None
        self._counts = _Counts()
        self._pending = _Counts()
        self._candidate: _Candidate | None = None
        #: The previous sighting (None: the next one starts counting).
        self._last: Sighting | None = None
        self._events: deque[tuple[float, str]] = deque(maxlen=MAX_EVENTS)
        #: While the current epoch is not yet known to speculate: the scrapes and tokens
        #: generated without a draft since it began.
        self._quiet = (0, 0)

    # -- reading ----------------------------------------------------------------------------

    def observe(self, seen: Sighting, wall: float) -> list[tuple[str, dict[str, Any]]]:
        """Count one scrape; returns the events worth a log line (name, fields)."""
        out: list[tuple[str, dict[str, Any]]] = []
        last, self._last = self._last, seen
        step = _Counts()
        generated, gen_reset = _rise(
            last.generated_tokens if last is not None else None, seen.generated_tokens
        )
        activity, act_reset = (None, False)
        if last is not None and last.speculating and seen.speculating:
            activity, act_reset = _rise(last.activity, seen.activity)
            step.drafts = _rise(last.drafts, seen.drafts)[0] or 0
            step.draft_tokens = _rise(last.draft_tokens, seen.draft_tokens)[0] or 0
            step.accepted = _rise(last.accepted_tokens, seen.accepted_tokens)[0] or 0
        if generated is not None:
            step.generated = generated
            step.scrapes = 1
        if gen_reset or act_reset:  # logged as counter_reset already: the page lists it
            self._events.append((wall, "engine restarted (its counters fell)"))
        current = self._current
        if current is None:
            drafted = seen.speculating and (seen.activity is None or seen.activity > 0)
            self._current = Epoch(1, wall, None, True if drafted else None,
                                  seen.chain_length if seen.speculating else None, Reason.FIRST)  # fmt: skip
            return out
        if current.speculation is None:  # no change can be pending: settled in place
            self._counts.add(step)
            settled = self._settle(current, seen, last, activity, generated)
            if settled is not None:
                out.append(settled)
            return out
        if current.speculation:
            confirmed = self._while_on(current, seen, activity, generated, wall)
        else:
            fresh = last is None or not last.speculating
            on = seen.speculating and (
                (activity is not None and activity > 0) or (fresh and (seen.activity or 0) > 0)
            )
            confirmed = _Candidate(Reason.ON, wall, seen.chain_length) if on else None
            if confirmed is None:
                self._candidate = None
        if confirmed is None:
            if self._candidate is None:
                self._counts.add(self._pending)
                self._pending = _Counts()
                self._counts.add(step)
            else:
                self._pending.add(step)
            return out
        self._pending.add(step)
        speculation = confirmed.reason in (Reason.ON, Reason.CHAIN, Reason.CONFIG)
        out.append(self._begin(confirmed, speculation=speculation))
        return out

    def _settle(
        self, current: Epoch, seen: Sighting, last: Sighting | None, activity: int | None,
        generated: int | None,
    ) -> tuple[str, dict[str, Any]] | None:  # fmt: skip
        """Settle a not-yet-known epoch in place from this scrape's evidence (the event worth
        a log line, or None: still not known)."""
        fresh = last is None or not last.speculating
        drafted = seen.speculating and (
            seen.activity is None  # an engine's speculative gauges, its only word on it
            or (activity is not None and activity > 0)
            or (fresh and seen.activity > 0)
        )
        if drafted:
            self._current = replace(current, speculation=True,
                                    chain_length=seen.chain_length or current.chain_length)  # fmt: skip
        elif generated is not None:
            scrapes, tokens = self._quiet[0] + 1, self._quiet[1] + generated
            self._quiet = (scrapes, tokens)
            if scrapes < OFF_SCRAPES or tokens < OFF_TOKENS:
                return None
            self._current = replace(current, speculation=False, chain_length=None)
        else:
            return None
        self._quiet = (0, 0)
        settled = self._current
        return (
            "config_epoch_settled",
            {"epoch": settled.number, "speculation": settled.speculation,
             "after": settled.describe()},
        )  # fmt: skip

    def _while_on(
        self, current: Epoch, seen: Sighting, activity: int | None, generated: int | None,
        wall: float,
    ) -> _Candidate | None:  # fmt: skip
        """The confirmed change of a speculating epoch, or None (candidates updated)."""
        candidate = self._candidate
        if not seen.speculating:
            if candidate is None or candidate.reason is not Reason.VANISHED:
                candidate = self._candidate = _Candidate(Reason.VANISHED, wall)
            candidate.scrapes += 1
            return candidate if candidate.scrapes >= VANISH_SCRAPES else None
        if activity is not None and activity > 0:
            if candidate is not None and candidate.reason in (Reason.OFF, Reason.VANISHED):
                candidate = self._candidate = None
        elif activity == 0 and generated is not None:
            if candidate is None or candidate.reason is Reason.VANISHED:
                candidate = self._candidate = _Candidate(Reason.OFF, wall)
            if candidate.reason is Reason.OFF:
                candidate.scrapes += 1
                candidate.tokens += generated
                if candidate.scrapes >= OFF_SCRAPES and candidate.tokens >= OFF_TOKENS:
                    return candidate
        k = seen.chain_length
        if k is None:
            return None
        if current.chain_length is None:
            self._current = replace(current, chain_length=k)
            return None
        if k == current.chain_length:
            if candidate is not None and candidate.reason in (Reason.CHAIN, Reason.CONFIG):
                self._candidate = None
            return None
        if candidate is None or candidate.value != k or candidate.reason in (
            Reason.OFF, Reason.VANISHED,
        ):  # fmt: skip
            reason = Reason.CONFIG if seen.published else Reason.CHAIN
            candidate = self._candidate = _Candidate(reason, wall, k)
        candidate.scrapes += 1
        return candidate if candidate.scrapes >= K_SCRAPES else None

    def _begin(self, change: _Candidate, *, speculation: bool) -> tuple[str, dict[str, Any]]:
        old = self._close(change.since)
        self._current = Epoch(
            old.number + 1,
            change.since,
            None,
            speculation,
            change.value if speculation else None,
            change.reason,
        )
        self._counts, self._pending, self._candidate = self._pending, _Counts(), None
        new = self._current
        return (
            "config_epoch_started",
            {
                "epoch": new.number,
                "reason": new.reason.value,
                "before": old.describe(),
                "after": new.describe(),
            },
        )

    def _close(self, end: float) -> Epoch:
        assert self._current is not None
        counts = self._counts
        old = replace(
            self._current,
            end=end,
            drafts=self._current.drafts + counts.drafts,
            draft_tokens=self._current.draft_tokens + counts.draft_tokens,
            accepted_tokens=self._current.accepted_tokens + counts.accepted,
            generated_tokens=self._current.generated_tokens + counts.generated,
            scrapes=self._current.scrapes + counts.scrapes,
        )
        self._past.append(old)
        self._past_json = (*self._past_json, _epoch_json(old))
        self._prune()
        return old

    def mark(self, *, wall: float, note: str) -> Epoch | None:
        """An operator's mark: a new epoch of the same detected configuration, named by
        ``note`` (None before the first sighting)."""
        current = self._current
        if current is None:
            return None
        self._counts.add(self._pending)
        self._pending, self._candidate = _Counts(), None
        old = self._close(wall)
        self._current = Epoch(old.number + 1, wall, None, old.speculation, old.chain_length,
                              Reason.MANUAL, note[:MAX_NOTE])  # fmt: skip
        self._events.append((wall, f"marked by hand: {note[:MAX_NOTE]}"))
        return self._current

    # -- bounds -----------------------------------------------------------------------------

    def _prune(self, *, now: float | None = None, max_age: float | None = None) -> None:
        """At most MAX_EPOCHS - 1 past epochs, none ended more than ``max_age`` ago; the
        oldest go first, but never the newest of a configuration while an older epoch of a
        configuration seen again later can go instead."""
        past = self._past
        before = len(past)
        oldest = past[0].end if past else None
        if (
            now is not None
            and max_age is not None
            and oldest is not None
            and oldest < now - max_age
        ):
            past[:] = [e for e in past if e.end is None or e.end >= now - max_age]
        while len(past) > MAX_EPOCHS - 1:
            current = self._current.configuration if self._current else None
            newest: dict[tuple[bool | None, int | None, str], int] = {}
            for index, epoch in enumerate(past):
                newest[epoch.configuration] = index
            drop = next(
                (
                    i
                    for i, e in enumerate(past)
                    if newest[e.configuration] != i or e.configuration == current
                ),
                0,
            )
            del past[drop]
        if len(past) != before:
            self._past_json = tuple(_epoch_json(e) for e in past)

    def expire(self, *, now: float, max_age: float) -> None:
        self._prune(now=now, max_age=max_age)

    # -- views and state --------------------------------------------------------------------

    def epochs(self) -> tuple[Epoch, ...]:
        current = self._current
        if current is None:
            return tuple(self._past)
        return (*self._past, self._live(current))

    def _live(self, current: Epoch) -> Epoch:
        """The current epoch with its counts (built directly: ``replace`` costs 5x more, and
        this runs for every target at every view and snapshot)."""
        c = self._counts
        return Epoch(
            current.number, current.start, None, current.speculation, current.chain_length,
            current.reason, current.note, current.drafts + c.drafts,
            current.draft_tokens + c.draft_tokens, current.accepted_tokens + c.accepted,
            current.generated_tokens + c.generated, current.scrapes + c.scrapes,
        )  # fmt: skip

    def position(self) -> tuple[int, bool, tuple[int, ...]] | None:
        """The current epoch's number, whether a change is being confirmed, and the epochs
        whose cost curves are kept: the current, the previous and the newest without
        speculation (what the history basis and "did the change help?" read; at most 3
        curves a model, so a target's state stays small). None before the first sighting."""
        current = self._current
        if current is None:
            return None
        past = self._past
        plain = next((e.number for e in reversed(past) if e.speculation is False), None)
        numbers = {current.number, *(e.number for e in past[-1:])} | (
            {plain} if plain is not None else set()
        )
        return current.number, self._candidate is not None, tuple(sorted(numbers))

    @property
    def current(self) -> Epoch | None:
        return self._current

    def opening(self) -> tuple[float, Reason, float | None] | None:
        """When the current epoch began and why, and when the change being confirmed was
        first seen (None: none is); None before the first sighting."""
        current, candidate = self._current, self._candidate
        if current is None:
            return None
        return current.start, current.reason, candidate.since if candidate else None

    def view(self, model: str) -> ModelEpochs | None:
        epochs = self.epochs()
        if not epochs:
            return None
        pending = None
        candidate = self._candidate
        current = self._current
        if current is not None and current.speculation is None:
            scrapes, tokens = self._quiet
            pending = (f"speculation not yet known: {scrapes} of {OFF_SCRAPES} scrapes and "
                       f"{tokens} of {OFF_TOKENS} tokens without a draft, or a first draft")  # fmt: skip
        elif candidate is not None:
            need = {Reason.VANISHED: VANISH_SCRAPES, Reason.OFF: OFF_SCRAPES}.get(
                candidate.reason, K_SCRAPES
            )
            what = f" to k = {candidate.value}" if candidate.value else ""
            pending = f"{candidate.reason.value}{what}: {candidate.scrapes} of {need} scrapes"
        return ModelEpochs(model, epochs, tuple(self._events), pending)

    def to_json(self) -> dict[str, Any]:
        """The saved form: the past epochs' dicts (made once, never changed after) and the
        current one's."""
        current = self._current
        live = () if current is None else (_epoch_json(self._live(current)),)
        return {
            "epochs": [*self._past_json, *live],
            "events": [[t, text] for t, text in self._events],
        }

    def restore(self, data: Mapping[str, Any], *, now: float) -> None:
        """Take the epochs of a saved tracker (validated: raises ValueError). Epochs this
        tracker saw since it started follow them, numbered on."""
        saved = [_epoch_from(e, now=now) for e in _list(data.get("epochs"), "epochs")]
        for before, after in pairwise(saved):
            if after.number <= before.number or after.start < before.start:
                raise ValueError("epochs out of order")
            if before.end is None:
                raise ValueError("an epoch before the last has no end")
        events = [_event_from(e, now=now) for e in _list(data.get("events"), "events")]
        if not saved:
            return
        live = self.epochs()
        if not live:
            self._past = saved[:-1]
            self._current = saved[-1] if saved[-1].end is None else replace(saved[-1], end=None)
            self._counts = _Counts()
            self._past_json = tuple(_epoch_json(e) for e in self._past)
        else:  # seen live before the state could be read (the lock came late)
            last = saved[-1] if saved[-1].end is not None else replace(saved[-1], end=live[0].start)
            base = last.number
            self._past = [*saved[:-1], last, *(replace(e, number=base + i + 1)
                                                for i, e in enumerate(self._past))]  # fmt: skip
            assert self._current is not None
            self._current = replace(self._current, number=base + len(live))
            self._past_json = tuple(_epoch_json(e) for e in self._past)
        self._events.extendleft(reversed(events[-MAX_EVENTS:]))
        self._prune()


def _epoch_json(e: Epoch) -> dict[str, Any]:
    out = {
        "n": e.number, "start": e.start, "end": e.end, "spec": bool(e.speculation),
        "k": e.chain_length, "reason": e.reason, "note": e.note, "drafts": e.drafts,
        "draft_tokens": e.draft_tokens, "accepted": e.accepted_tokens,
        "generated": e.generated_tokens, "scrapes": e.scrapes,
    }  # fmt: skip
    if e.speculation is None:  # a key of its own: a file without it reads as before
        out["unsure"] = True
    return out


def _list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 4 * MAX_EPOCHS:
        raise ValueError(f"{what}: not a list of at most {4 * MAX_EPOCHS}")
    return value


def _time(value: object, what: str, *, now: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: not a number")
    number = float(value)
    if not math.isfinite(number) or not 0 < number <= now + 86400:
        raise ValueError(f"{what}: {number!r} is not a time up to a day ahead")
    return number


def _count(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_COUNT:
        raise ValueError(f"{key}: not a count from 0 to 2^53")
    return value


def _epoch_from(raw: object, *, now: float) -> Epoch:
    """A saved epoch within the same bounds as a live one (raises ValueError)."""
    if not isinstance(raw, dict):
        raise ValueError("an epoch is not an object")
    number = raw.get("n")
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number < 2**31:
        raise ValueError("epoch number: not an integer from 1")
    start = _time(raw.get("start"), "start", now=now)
    end = None if raw.get("end") is None else _time(raw.get("end"), "end", now=now)
    if end is not None and end < start:
        raise ValueError("an epoch ends before it starts")
    spec = raw.get("spec")
    if not isinstance(spec, bool):
        raise ValueError("speculation: not a boolean")
    unsure = raw.get("unsure", False)
    if not isinstance(unsure, bool):
        raise ValueError("unsure: not a boolean")
    k = raw.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_CHAIN):
        raise ValueError(f"chain length: not an integer from 1 to {MAX_CHAIN}")
    try:
        reason = Reason(str(raw.get("reason")))
    except ValueError:
        raise ValueError("reason: not one specmon writes") from None
    note = raw.get("note", "")
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        raise ValueError(f"note: not a string of at most {MAX_NOTE} characters")
    if unsure and (raw.get("drafts") or raw.get("draft_tokens") or raw.get("accepted")):
        raise ValueError("an epoch not yet known to speculate counted drafts")
    epoch = Epoch(number, start, end, None if unsure else spec, k if spec or unsure else None,
                  reason, note,
                  _count(raw, "drafts"), _count(raw, "draft_tokens"), _count(raw, "accepted"),
                  _count(raw, "generated"), _count(raw, "scrapes"))  # fmt: skip
    if epoch.draft_tokens and (
        epoch.accepted_tokens > epoch.draft_tokens or epoch.drafts > epoch.draft_tokens
    ):
        raise ValueError("more accepted tokens or drafts than draft tokens")
    if epoch.drafts:  # the same bound as a live window's (specmon.bounds)
        length = 1.0 + epoch.accepted_tokens / epoch.drafts
        problem = acceptance_length_refusal(length, chain_length=chain_bound(detected=k))
        if problem is not None:
            raise ValueError(problem)
    return epoch


def _event_from(raw: object, *, now: float) -> tuple[float, str]:
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
        raise ValueError("an event is not [time, text]")
    return _time(raw[0], "event time", now=now), raw[1][: MAX_NOTE + 40]


class EpochBook:
    """Every model's epochs for one target (at most MAX_MODELS models), for one engine: a
    page from another engine starts the book afresh."""

    __slots__ = ("_trackers", "engine")

    def __init__(self) -> None:
        self._trackers: dict[str, EpochTracker] = {}
        #: The engine the epochs were seen on (its value), or None before the first page.
        self.engine: str | None = None

    def clear(self) -> None:
        self._trackers.clear()

    def observe(self, reading: PageReading, wall: float) -> list[tuple[str, dict[str, Any]]]:
        """Count one page: its speculating models, and those it names without speculation
        (a model refused whole at this scrape tells nothing and is skipped)."""
        refused = {r.model for r in reading.rejected if r.whole_model}
        out: list[tuple[str, dict[str, Any]]] = []
        engine = reading.engine.value if reading.engine is not None else None
        if engine != self.engine:
            if self.engine is not None:
                self._trackers.clear()
            self.engine = engine
        for speculating, models in ((True, reading.models), (False, reading.plain_models)):
            for model in models:
                if model.model in refused:
                    continue
                tracker = self._trackers.get(model.model)
                if tracker is None:
                    if len(self._trackers) >= MAX_MODELS:
                        continue
                    tracker = self._trackers[model.model] = EpochTracker()
                for name, fields in tracker.observe(sighting(model, speculating=speculating), wall):
                    out.append((name, {"model": model.model, **fields}))
        return out

    def mark(self, *, wall: float, note: str, model: str | None = None) -> list[Epoch]:
        """Mark a change by hand for ``model`` (None: every model); the new epochs."""
        marked = []
        for name, tracker in self._trackers.items():
            if model is None or name == model:
                epoch = tracker.mark(wall=wall, note=note)
                if epoch is not None:
                    marked.append(epoch)
        return marked

    def position(self, model: str) -> tuple[int, bool, tuple[int, ...]] | None:
        """A model's :meth:`EpochTracker.position` (None: not followed)."""
        tracker = self._trackers.get(model)
        return tracker.position() if tracker is not None else None

    def opening(self, model: str) -> tuple[float, Reason, float | None] | None:
        """A model's :meth:`EpochTracker.opening` (None: not followed)."""
        tracker = self._trackers.get(model)
        return tracker.opening() if tracker is not None else None

    def models(self) -> tuple[str, ...]:
        return tuple(self._trackers)

    def current(self, model: str) -> Epoch | None:
        """A model's current epoch, without its counts (None: not followed or not seen)."""
        tracker = self._trackers.get(model)
        return tracker.current if tracker is not None else None

    def view(self) -> tuple[ModelEpochs, ...]:
        views = (t.view(name) for name, t in self._trackers.items())
        return tuple(v for v in views if v is not None)

    def expire(self, *, now: float, max_age: float) -> None:
        for tracker in self._trackers.values():
            tracker.expire(now=now, max_age=max_age)

    def to_json(self) -> dict[str, Any]:
        return {name: t.to_json() for name, t in self._trackers.items()}

    def restore(self, data: Mapping[str, Any], *, now: float) -> None:
        """Take saved models' epochs (raises ValueError on anything out of bounds, leaving
        this book as it was)."""
        if len(data) > MAX_MODELS:
            raise ValueError(f"more than {MAX_MODELS} models")
        restored: dict[str, EpochTracker] = {}
        for name, saved in data.items():
            if not isinstance(name, str) or len(name) > 1024 or not isinstance(saved, dict):
                raise ValueError("a model is not a name and an object")
            tracker = EpochTracker()
            tracker.restore(saved, now=now)  # validates before anything is kept
            restored[name] = tracker
        for name, tracker in restored.items():
            live = self._trackers.get(name)
            if live is None:
                self._trackers[name] = tracker
            else:
                live.restore(data[name], now=now)
