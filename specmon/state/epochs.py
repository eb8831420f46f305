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

from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from itertools import pairwise
from typing import Any

import orjson

from specmon.bounds import ADAPTER_MAX_CHAIN
from specmon.records import record
from specmon.state.epoch_laws import (
    PARTIAL_DECREASE_LIMIT,
    Counts,
    Sighting,
    clean_text,
    counters,
    counts_refusal,
    partial_fall,
    rise,
    saved_epoch,
    saved_event,
    saved_list,
    sighting,
)
from specmon.state.store import saved_json

__all__ = [
    "ENGINE_SCRAPES",
    "K_SCRAPES",
    "MAX_AHEAD",
    "MAX_EPOCHS",
    "MIN_EPOCH_SECONDS",
    "OFF_SCRAPES",
    "OFF_TOKENS",
    "VANISH_SCRAPES",
    "Epoch",
    "EpochTracker",
    "ModelEpochs",
    "Reason",
    "Sighting",
    "epoch_from",
    "epoch_json",
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
#: An epoch ended by an automatic change sooner than this is folded back or replaced
#: (:meth:`EpochTracker._debounce`): a flapping engine makes no new epoch number.
MIN_EPOCH_SECONDS = 60.0
#: Consecutive pages from another engine that start a target's epochs afresh.
ENGINE_SCRAPES = 3
#: How far after the file's own write time (or now) a saved time may lie: a writer's wall
#: clock that stepped back while it ran.
MAX_AHEAD = 86400.0


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


class _Candidate:
    """A change seen but not yet confirmed."""

    __slots__ = ("reason", "scrapes", "since", "tokens", "value")

    def __init__(self, reason: Reason, since: float, value: int | None = None) -> None:
        self.reason = reason
        self.since = since
        self.value = value
        self.scrapes = 0
        self.tokens = 0


class EpochTracker:
    """One model's epochs, fed one :class:`Sighting` per scrape."""

    __slots__ = (
        "_candidate", "_counts", "_current", "_events", "_last", "_partials", "_past",
        "_past_json", "_pending", "_quiet",
    )  # fmt: skip

    def __init__(self) -> None:
        self._past: list[Epoch] = []
        #: The past epochs as written (each made once: a snapshot at 1,000 targets with 12
        #: epochs each takes 25 ms on the loop instead of 150; bench/state.py).
        self._past_json: tuple[bytes, ...] = ()
        #: The current epoch without its counts (kept in ``_counts``), or None before the
        #: first sighting.
        self._current: Epoch | None = None
        self._counts = Counts()
        self._pending = Counts()
        self._candidate: _Candidate | None = None
        #: The previous sighting (None: the next one starts counting).
        self._last: Sighting | None = None
        #: Pages in a row with a counter down while the activity counter was not.
        self._partials = 0
        self._events: deque[tuple[float, str]] = deque(maxlen=MAX_EVENTS)
        #: While the current epoch is not yet known to speculate: the scrapes and tokens
        #: generated without a draft since it began.
        self._quiet = (0, 0)

    # -- reading ----------------------------------------------------------------------------

    def observe(self, seen: Sighting, wall: float) -> list[tuple[str, dict[str, Any]]]:
        """Count one scrape; returns the events worth a log line (name, fields)."""
        out: list[tuple[str, dict[str, Any]]] = []
        last = self._last
        both = last is not None and last.speculating and seen.speculating
        rebase = False
        if both and partial_fall(counters(last), counters(seen)):  # type: ignore[arg-type]
            # A broken page, not a restart (specmon.state.epoch_laws): neither counted nor
            # the baseline, as the windows refuse it; persistent, the new baseline.
            self._partials += 1
            if self._partials < PARTIAL_DECREASE_LIMIT:
                return out
            rebase = True
        self._partials = 0
        self._last = seen
        step = Counts()
        generated, gen_reset = rise(
            last.generated_tokens if last is not None else None, seen.generated_tokens
        )
        activity, act_reset = (None, False)
        if both and not rebase:
            assert last is not None
            activity, act_reset = rise(last.activity, seen.activity)
            if act_reset:  # a restart: every counter's new value is its increase
                step.drafts, step.draft_tokens = seen.drafts, seen.draft_tokens
                step.accepted = seen.accepted_tokens
            else:  # none fell (a fall without the activity counter's is refused above)
                step.drafts = seen.drafts - last.drafts
                step.draft_tokens = seen.draft_tokens - last.draft_tokens
                step.accepted = seen.accepted_tokens - last.accepted_tokens
        if generated is not None:
            step.generated = generated
            step.scrapes = 1
        if gen_reset or act_reset or rebase:  # logged as counter_reset already
            self._events.append((wall, "engine restarted (its counters fell)"))
        current = self._current
        if current is None:
            drafted = seen.speculating and (seen.activity is None or seen.activity > 0)
            self._current = Epoch(1, wall, None, True if drafted else None,
                                  seen.chain_length if seen.speculating else None, Reason.FIRST)  # fmt: skip
            return out
        if current.speculation is None:  # no change can be pending: settled in place
            settled = self._settle(current, seen, last, activity, generated)
            self._admit(step)  # into the epoch as settled by this very interval
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
                pending, self._pending = self._pending, Counts()
                self._admit(pending)  # a change cancelled: its scrapes were this epoch's
                self._admit(step)
            else:
                self._pending.add(step)  # admitted where it goes, once that is known
            return out
        self._pending.add(step)
        speculation = confirmed.reason in (Reason.ON, Reason.CHAIN, Reason.CONFIG)
        out.append(self._begin(confirmed, speculation=speculation))
        return out

    def _admit(self, step: Counts) -> bool:
        """Add ``step`` to the current epoch's counts when the interval and the epoch stay
        within the laws (:func:`~specmon.state.epoch_laws.counts_refusal`, which a restored
        epoch must pass too); else its speculative part is left out, or all of it when even
        the rest does not fit. Whether it was added whole."""
        current = self._current
        if current is None or not step:
            return True
        if self._fits(current, step):
            self._counts.add(step)
            return True
        plain = step.plain()
        if plain and self._fits(current, plain):
            self._counts.add(plain)
        return False

    def _fits(self, current: Epoch, step: Counts) -> bool:
        unsure, k, c = current.speculation is None, current.chain_length, self._counts
        alone = counts_refusal(
            drafts=step.drafts, draft_tokens=step.draft_tokens, accepted=step.accepted,
            generated=step.generated, scrapes=step.scrapes, chain_length=k, unsure=unsure,
        )  # fmt: skip
        return alone is None and counts_refusal(
            drafts=current.drafts + c.drafts + step.drafts,
            draft_tokens=current.draft_tokens + c.draft_tokens + step.draft_tokens,
            accepted=current.accepted_tokens + c.accepted + step.accepted,
            generated=current.generated_tokens + c.generated + step.generated,
            scrapes=current.scrapes + c.scrapes + step.scrapes,
            chain_length=k, unsure=unsure,
        ) is None  # fmt: skip

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
        current = self._current
        assert current is not None
        since = max(change.since, current.start)  # in order, should the wall clock step back
        k = change.value if speculation else None
        pending, self._pending, self._candidate = self._pending, Counts(), None
        lasted = since - current.start
        if current.reason not in (Reason.FIRST, Reason.MANUAL) and lasted < MIN_EPOCH_SECONDS:
            return self._debounce(current, since, speculation, k, change.reason, pending)
        old = self._close(since)
        self._current = Epoch(old.number + 1, since, None, speculation, k, change.reason)
        self._counts = Counts()
        self._admit(pending)  # the scrapes since the change was first seen
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

    def _debounce(
        self, brief: Epoch, since: float, speculation: bool, k: int | None, reason: Reason,
        pending: Counts,
    ) -> tuple[str, dict[str, Any]]:  # fmt: skip
        """A change ending an epoch younger than MIN_EPOCH_SECONDS (a flapping engine): back
        to the configuration before it, that epoch goes on (the brief one folded back into
        it); to another one, the new configuration takes the brief epoch's place and number.
        The brief epoch's counts go (they mix a flapping server's states), so the ``epoch``
        label takes a new value only when an epoch has lasted: at most one per
        MIN_EPOCH_SECONDS and model, whatever the engine does."""
        previous = self._past[-1] if self._past else None
        lasted = f"{brief.describe()}, {since - brief.start:.0f} s"
        self._counts = Counts()
        if previous is not None and previous.configuration == (speculation, k, ""):
            self._past.pop()
            self._past_json = self._past_json[:-1]
            self._current = replace(previous, end=None)
            self._admit(pending)
            self._events.append(
                (since, f"flapping: epoch {brief.number} ({lasted}) folded back into it")
            )
            return (
                "config_epoch_folded",
                {"epoch": previous.number, "folded": brief.number, "after": previous.describe()},
            )
        self._current = Epoch(brief.number, since, None, speculation, k, reason)
        self._admit(pending)
        self._events.append((since, f"flapping: epoch {brief.number} ({lasted}) replaced"))
        return (
            "config_epoch_replaced",
            {"epoch": brief.number, "reason": reason.value, "before": brief.describe(),
             "after": self._current.describe()},
        )  # fmt: skip

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
        self._past_json = (*self._past_json, saved_json(epoch_json(old)))
        self._prune()
        return old

    def mark(self, *, wall: float, note: str) -> Epoch | None:
        """An operator's mark: a new epoch of the same detected configuration, named by
        ``note`` (None before the first sighting)."""
        current = self._current
        if current is None:
            return None
        pending, self._pending, self._candidate = self._pending, Counts(), None
        self._admit(pending)
        note = clean_text(note)[:MAX_NOTE]
        old = self._close(max(wall, current.start))
        self._current = Epoch(old.number + 1, max(wall, current.start), None, old.speculation,
                              old.chain_length, Reason.MANUAL, note)  # fmt: skip
        self._counts = Counts()
        self._events.append((wall, f"marked by hand: {note}"))
        return self._current

    def moved(self, *, wall: float, text: str) -> None:
        """The server was replaced at another address (same name or group): an event, not
        an epoch; counting starts again at the next reading (as after a restore: the new
        server's counters are not the old one's)."""
        self._last = None
        self._partials = 0
        self._events.append((wall, clean_text(text)[:MAX_NOTE]))

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
            self._past_json = tuple(saved_json(epoch_json(e)) for e in past)

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

    def position(self) -> tuple[int, bool, tuple[int, ...], float] | None:
        """The current epoch's number, whether a change is being confirmed, the epochs
        whose cost curves are kept (the current, the previous and the newest without
        speculation: what the history basis and "did the change help?" read; at most 3
        curves a model, so a target's state stays small), and the current epoch's start (a
        flapping engine's brief epoch replaced keeps its number, not its start). None before
        the first sighting."""
        current = self._current
        if current is None:
            return None
        past = self._past
        plain = next((e.number for e in reversed(past) if e.speculation is False), None)
        numbers = {current.number, *(e.number for e in past[-1:])} | (
            {plain} if plain is not None else set()
        )
        return (current.number, self._candidate is not None, tuple(sorted(numbers)),
                current.start)  # fmt: skip

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
        """The saved form, as plain JSON values."""
        current = self._current
        live = () if current is None else (epoch_json(self._live(current)),)
        return {
            "epochs": [*(orjson.loads(e) for e in self._past_json), *live],
            "events": [[t, text] for t, text in self._events],
        }

    def saved_form(self) -> dict[str, Any]:
        """:meth:`to_json` for the state file: the past epochs' JSON made once each (never
        changed after), kept as bytes (a fifth of a dict's memory) and written as they are."""
        current = self._current
        live = () if current is None else (epoch_json(self._live(current)),)
        return {
            "epochs": [*map(orjson.Fragment, self._past_json), *live],
            "events": [[t, text] for t, text in self._events],
        }

    def restore(self, data: Mapping[str, Any], *, now: float, ceiling: float | None = None) -> None:
        """Take the epochs of a saved tracker (validated: raises ValueError). Epochs this
        tracker saw since it started follow them, numbered on. ``ceiling``: the latest time
        a saved one may hold (default ``now`` + MAX_AHEAD; the file's own write time +
        MAX_AHEAD when it says so); a time after ``now`` (this clock is behind the writer's)
        is taken as ``now``, which keeps every epoch in order."""
        limit = now + MAX_AHEAD if ceiling is None else ceiling
        epochs, events_raw = (saved_list(data.get(k), k, most=4 * MAX_EPOCHS)
                              for k in ("epochs", "events"))  # fmt: skip
        saved = [epoch_from(e, limit=limit) for e in epochs]
        for before, after in pairwise(saved):
            if after.number <= before.number or after.start < before.start:
                raise ValueError("epochs out of order")
            if before.end is None:
                raise ValueError("an epoch before the last has no end")
        events = [saved_event(e, limit=limit, max_note=MAX_NOTE) for e in events_raw]
        if not saved:
            return
        live = self.epochs()
        latest = min(now, live[0].start) if live else now
        saved = [_no_later(e, latest) for e in saved]
        events = [(min(t, latest), text) for t, text in events]
        if not live:
            self._past = saved[:-1]
            self._current = saved[-1] if saved[-1].end is None else replace(saved[-1], end=None)
            self._counts = Counts()
            self._past_json = tuple(saved_json(epoch_json(e)) for e in self._past)
        else:  # seen live before the state could be read (the lock came late)
            last = saved[-1] if saved[-1].end is not None else replace(saved[-1], end=latest)
            base = last.number
            self._past = [*saved[:-1], last, *(replace(e, number=base + i + 1)
                                                for i, e in enumerate(self._past))]  # fmt: skip
            assert self._current is not None
            self._current = replace(self._current, number=base + len(live))
            self._past_json = tuple(saved_json(epoch_json(e)) for e in self._past)
        self._events.extendleft(reversed(events[-MAX_EVENTS:]))
        self._prune()


def _no_later(epoch: Epoch, latest: float) -> Epoch:
    """``epoch`` with no time after ``latest`` (in order: each time moves down to it)."""
    if epoch.start <= latest and (epoch.end is None or epoch.end <= latest):
        return epoch
    end = None if epoch.end is None else min(epoch.end, latest)
    return replace(epoch, start=min(epoch.start, latest), end=end)


def epoch_json(e: Epoch) -> dict[str, Any]:
    """An epoch as the state file keeps it (also a kept change's, specmon.state.changelog)."""
    out = {
        "n": e.number, "start": e.start, "end": e.end, "spec": bool(e.speculation),
        "k": e.chain_length, "reason": e.reason, "note": e.note, "drafts": e.drafts,
        "draft_tokens": e.draft_tokens, "accepted": e.accepted_tokens,
        "generated": e.generated_tokens, "scrapes": e.scrapes,
    }  # fmt: skip
    if e.speculation is None:  # a key of its own: a file without it reads as before
        out["unsure"] = True
    return out


def epoch_from(raw: object, *, limit: float) -> Epoch:
    """:func:`epoch_json` read back within the same laws as a live epoch
    (specmon.state.epoch_laws; raises ValueError)."""
    f = saved_epoch(raw, limit=limit, max_chain=MAX_CHAIN, max_note=MAX_NOTE)
    try:
        reason = Reason(f.reason)
    except ValueError:
        raise ValueError("reason: not one specmon writes") from None
    return Epoch(f.number, f.start, f.end, f.speculation, f.chain_length, reason, f.note,
                 *f.counts)  # fmt: skip
