"""The laws a configuration epoch's counts obey, one function each, used where an interval is
counted (:mod:`specmon.state.epochs`) and where a saved epoch is read back: what counting
admits is exactly what reading back accepts (issue 61: a hostile target's alternating
counters were counted, written, and then refused the whole file at the next start). Pure.

- An interval between two scrapes counts the increase of each counter. **A restart** is the
  activity counter (drafts; else drafted, else accepted tokens) going down: every counter's
  new value is then its increase, as :mod:`specmon.windows` takes it. Another counter going
  down while the activity counter did not is **a broken page**, not a rise: the interval is
  not counted and the earlier reading stays the baseline, until
  :data:`~specmon.windows.PARTIAL_DECREASE_LIMIT` such pages in a row, taken as a restart
  with nothing added (windows' rule). The generated-token counter (another family) restarts
  alone.
- What an epoch holds stays within :func:`counts_refusal`: every count from 0 to 2^53 (the
  bound specmon puts on every counter a page shows), no more accepted tokens or drafts than
  drafted tokens, a mean acceptance length within :mod:`specmon.bounds`' [1, k + 1] (k the
  epoch's), and no drafts in an epoch not yet known to speculate. An interval that would
  break one is not counted (its speculative part alone when the rest fits).

A saved epoch's fields are read back here too (:func:`saved_epoch`): types, times and the
same :func:`counts_refusal`.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from typing import Any

from specmon.bounds import acceptance_length_refusal, chain_bound
from specmon.engines import ModelReading
from specmon.records import record
from specmon.windows import PARTIAL_DECREASE_LIMIT

__all__ = [
    "MAX_COUNT",
    "PARTIAL_DECREASE_LIMIT",
    "Counts",
    "Sighting",
    "clean_text",
    "counters",
    "counts_refusal",
    "partial_fall",
    "rise",
    "saved_epoch",
    "saved_event",
    "saved_list",
    "sighting",
]

#: The largest count an epoch holds (a page's counter beyond it is refused as implausible).
MAX_COUNT = 2**53


class Counts:
    """Counts added to an epoch: an interval's, or several."""

    __slots__ = ("accepted", "draft_tokens", "drafts", "generated", "scrapes")

    def __init__(self) -> None:
        self.drafts = self.draft_tokens = self.accepted = self.generated = self.scrapes = 0

    def add(self, other: Counts) -> None:
        self.drafts += other.drafts
        self.draft_tokens += other.draft_tokens
        self.accepted += other.accepted
        self.generated += other.generated
        self.scrapes += other.scrapes

    def plain(self) -> Counts:
        """These counts without their speculative part (drafts, drafted, accepted)."""
        out = Counts()
        out.generated, out.scrapes = self.generated, self.scrapes
        return out

    def __bool__(self) -> bool:
        return bool(
            self.drafts or self.draft_tokens or self.accepted or self.generated or self.scrapes
        )


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


def rise(before: int | None, now: int | None) -> tuple[int | None, bool]:
    """The increase of a counter between two readings (reset-aware: after a fall the new
    value is the increase since the restart) and whether it fell."""
    if before is None or now is None:
        return None, False
    if now < before:
        return now, True
    return now - before, False


def counters(seen: Sighting) -> tuple[int | None, int, int, int]:
    return (seen.activity, seen.drafts, seen.draft_tokens, seen.accepted_tokens)


def counts_refusal(
    *,
    drafts: int,
    draft_tokens: int,
    accepted: int,
    generated: int,
    scrapes: int,
    chain_length: int | None,
    unsure: bool,
) -> str | None:
    """Why counts cannot be an epoch's (or an interval's), or None. ``chain_length``: the
    epoch's k (None: unknown, the largest any adapter reads bounds it); ``unsure``: the epoch
    is not yet known to speculate."""
    for name, value in (
        ("drafts", drafts),
        ("draft_tokens", draft_tokens),
        ("accepted", accepted),
        ("generated", generated),
        ("scrapes", scrapes),
    ):
        if not 0 <= value <= MAX_COUNT:
            return f"{name}: {value} is not a count from 0 to 2^53"
    if unsure and (drafts or draft_tokens or accepted):
        return "an epoch not yet known to speculate counted drafts"
    if draft_tokens and (accepted > draft_tokens or drafts > draft_tokens):
        return "more accepted tokens or drafts than draft tokens"
    if drafts:
        return acceptance_length_refusal(
            1.0 + accepted / drafts, chain_length=chain_bound(detected=chain_length)
        )
    return None


def partial_fall(
    before: tuple[int | None, int, int, int], after: tuple[int | None, int, int, int]
) -> bool:
    """Whether a counter of ``after`` (activity, drafts, drafted, accepted) went down from
    ``before`` while the activity counter did not: a broken page, not a restart."""
    activity_before, activity_after = before[0], after[0]
    if (
        activity_before is not None
        and activity_after is not None
        and activity_after < activity_before
    ):
        return False  # a restart
    return any(a < b for b, a in zip(before[1:], after[1:], strict=True))


#: Unicode categories a note loses: controls (newline, escape), formatting (bidi overrides,
#: zero-width), line and paragraph separators.
_STRIPPED = frozenset({"Cc", "Cf", "Zl", "Zp"})


def clean_text(text: str) -> str:
    """``text`` without control or invisible formatting characters (each run of them one
    space), trimmed: a note or an event as a terminal, a log and a page may show it."""
    if text.isprintable():
        return text.strip()
    out: list[str] = []
    for ch in text:
        if unicodedata.category(ch) in _STRIPPED:
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(ch)
    return "".join(out).strip()


@record
class SavedEpoch:
    """A saved epoch's fields, checked (its reason still a string)."""

    number: int
    start: float
    end: float | None
    speculation: bool | None
    chain_length: int | None
    reason: str
    note: str
    #: drafts, draft tokens, accepted tokens, generated tokens, scrapes.
    counts: tuple[int, int, int, int, int]


def saved_list(value: object, what: str, *, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > most:
        raise ValueError(f"{what}: not a list of at most {most}")
    return value


def _time(value: object, what: str, *, limit: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: not a number")
    number = float(value)
    if not math.isfinite(number) or not 0 < number <= limit:
        raise ValueError(f"{what}: {number!r} is not a time up to a day after the file's")
    return number


def _count(raw: Mapping[str, Any], key: str) -> int:
    value = raw.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{key}: not a count from 0 to 2^53")
    return value


def saved_epoch(raw: object, *, limit: float, max_chain: int, max_note: int) -> SavedEpoch:
    """A saved epoch's fields within the laws a live epoch's obey (raises ValueError):
    times up to ``limit``, k up to ``max_chain``, counts by :func:`counts_refusal`."""
    if not isinstance(raw, dict):
        raise ValueError("an epoch is not an object")
    number = raw.get("n")
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number < 2**31:
        raise ValueError("epoch number: not an integer from 1")
    start = _time(raw.get("start"), "start", limit=limit)
    end = None if raw.get("end") is None else _time(raw.get("end"), "end", limit=limit)
    if end is not None and end < start:
        raise ValueError("an epoch ends before it starts")
    spec, unsure = raw.get("spec"), raw.get("unsure", False)
    if not isinstance(spec, bool) or not isinstance(unsure, bool):
        raise ValueError("speculation, unsure: not booleans")
    k = raw.get("k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= max_chain):
        raise ValueError(f"chain length: not an integer from 1 to {max_chain}")
    note = raw.get("note", "")
    if not isinstance(note, str) or len(note) > max_note:
        raise ValueError(f"note: not a string of at most {max_note} characters")
    k = k if spec or unsure else None
    counts = tuple(_count(raw, key) for key in ("drafts", "draft_tokens", "accepted",
                                                "generated", "scrapes"))  # fmt: skip
    drafts, draft_tokens, accepted, generated, scrapes = counts
    problem = counts_refusal(
        drafts=drafts, draft_tokens=draft_tokens, accepted=accepted, generated=generated,
        scrapes=scrapes, chain_length=k, unsure=unsure,
    )  # fmt: skip
    if problem is not None:
        raise ValueError(problem)
    return SavedEpoch(number, start, end, None if unsure else spec, k, str(raw.get("reason")),
                      clean_text(note), (drafts, draft_tokens, accepted, generated, scrapes))  # fmt: skip


def saved_event(raw: object, *, limit: float, max_note: int) -> tuple[float, str]:
    """A saved event: [time, text] (the text cut to ``max_note`` + 40, cleaned)."""
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
        raise ValueError("an event is not [time, text]")
    return _time(raw[0], "event time", limit=limit), clean_text(raw[1][: max_note + 40])
