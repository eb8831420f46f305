"""When a window's figures are shown, and from which intervals: the engine's printed
precision, the physical ranges, and a window that straddles a configuration change. Pure.

**A window that straddles a configuration change** (its model's current epoch began inside
it: speculation turned on or off, k changed, a change marked by hand; docs/history.md) is read
from the current epoch's intervals only: its counters (drafts, alpha, every position), its
load (concurrency, step time, the buckets a twin or profile is compared in, the cost curve)
and so its verdict on every basis. Until those intervals hold what a load bucket needs
(:class:`~specmon.load.buckets.Thresholds`: 3 scrape intervals, 200 engine steps or 500
request-steps, 100 drafts on a speculating model) its figures are withheld, the reason on
every surface ("window straddles the configuration change at 14:01:07 UTC ...; 2 s of the
new configuration so far: ..."). Read whole, such a window would mix two servers: right after
the demo's ``vllm-switched`` turned its draft on, its 2 m window's ``history`` verdict read
1.24x (1.23-1.26) while the truth was 2.28x, its interval narrow around the mixture. Cut at the
change, every window answers for the configuration running now, and says for how long
(``covered_seconds``, ``specmon_window_seconds``).

The opening of an epoch, in readings: the epoch tracker (:mod:`specmon.state.epochs`) counts
into a new epoch every interval that ends at or after the change was first seen (a mark: the
first scrape after it), so a window cut at the change starts at the reading before that one
(:class:`Openings`), and counts exactly what the epoch counts.
"""

from __future__ import annotations

import time

from specmon.engines import Rejection, RejectReason
from specmon.load.buckets import DEFAULT_THRESHOLDS
from specmon.records import record
from specmon.report import AcceptanceReport, figure_out_of_range
from specmon.state.epoch_book import EpochBook
from specmon.state.epochs import Reason
from specmon.windows import MAX_WINDOW_ERROR, WindowDelta

__all__ = [
    "Openings", "Straddle", "cuts", "straddle", "why_withheld", "withhold",
]  # fmt: skip


@record
class Straddle:
    """A window cut at its model's configuration change (read from the new configuration
    only, or withheld while it holds too little of it)."""

    #: Unix time the current configuration was first seen (its epoch's start).
    change: float
    #: The configuration running now, in words ("speculating, k = 4").
    now: str
    #: Seconds of the new configuration the window holds.
    seconds: float
    #: Why its figures are withheld (too little of the new configuration yet), else None.
    held: str | None = None

    @property
    def clock(self) -> str:
        """The change's time of day, UTC ("14:01:07")."""
        return time.strftime("%H:%M:%S", time.gmtime(self.change))

    def text(self) -> str:
        """The one wording every surface shows."""
        at = self.clock
        if self.held is not None:
            return (
                f"window straddles the configuration change at {at} UTC (now {self.now}); "
                f"{self.seconds:.0f} s of the new configuration so far: {self.held}"
            )
        return (
            f"read from the {self.seconds:.0f} s since the configuration change at {at} UTC "
            f"(now {self.now}) only"
        )

    def as_dict(self) -> dict[str, object]:
        return {"change": self.change, "now": self.now, "seconds": self.seconds,
                "held": self.held, "text": self.text()}  # fmt: skip


def cuts(seconds: float, since: float | None, end: float | None) -> bool:
    """Whether a change whose first interval opens at ``since`` falls inside the window of
    ``seconds`` ending at ``end`` (monotonic times)."""
    return since is not None and end is not None and since > end - seconds


def straddle(
    *,
    seconds: float,
    since: float | None,
    end: float | None,
    change: tuple[float, str, bool] | None,
    counts: tuple[int, float | None, float | None],
    drafts: int | None,
) -> Straddle | None:
    """Whether the window of ``seconds`` ending at ``end`` straddles the configuration change
    whose first interval opens at ``since`` (monotonic), and if so whether the new
    configuration's part holds enough. ``change``: the epoch's start (Unix time), what runs
    now and whether it speculates; ``counts``: that part's scrape intervals, engine steps and
    request-steps (None without load series); ``drafts``: its drafts (None: not counted)."""
    if change is None or not cuts(seconds, since, end):
        return None
    assert since is not None and end is not None
    intervals, engine, request = counts
    held = DEFAULT_THRESHOLDS.counts_short_of(
        engine_steps=engine, request_steps=request, intervals=intervals,
        drafts=drafts if change[2] else None,
    )  # fmt: skip
    return Straddle(change[0], change[1], max(end - since, 0.0), held)


class Openings:
    """Per model, the monotonic time of the reading that opens its current configuration
    epoch's first interval: the time no window of it reaches before. None for the first
    epoch seen, for one that began before every reading this state holds (restored), and
    once the longest window lies after it (:meth:`settle`)."""

    __slots__ = ("_at", "_cut", "_models", "_previous", "_seen")

    def __init__(self) -> None:
        #: The previous reading's (Unix, monotonic) time.
        self._previous: tuple[float, float] | None = None
        #: Per model, a change being confirmed: when first seen, and the reading before.
        self._seen: dict[str, tuple[float, float | None]] = {}
        #: Per model: its current epoch's start (Unix), what runs now, whether it speculates.
        self._at: dict[str, tuple[float, str, bool]] = {}
        #: Per model whose windows a change may cut: the opening (monotonic).
        self._cut: dict[str, float] = {}
        self._models: tuple[str, ...] = ()

    def observe(self, book: EpochBook, *, wall: float, mono: float) -> list[tuple[str, float]]:
        """After ``book`` observed the page read at ``wall`` / ``mono`` (or marked a change
        since the previous one): the models whose epoch opened anew, with the opening."""
        previous, self._previous = self._previous, (wall, mono)
        moved = []
        models = book.models()
        for model in models:
            opening = book.opening(model)
            if opening is None:
                continue
            start, reason, since = opening
            known = self._at.get(model)
            if known is not None and known[0] == start:
                # The same epoch, maybe settled in place since (specmon.state.epochs: a first
                # or marked epoch not yet known to speculate): a cut window says what it
                # turned out to be (described only while a window is cut).
                if model in self._cut and (now := book.current(model)) is not None:
                    described = now.describe()
                    if described != known[1]:
                        self._at[model] = (start, described, bool(now.speculation))
            else:
                seen = self._seen.get(model)
                at: float | None = None
                if reason is Reason.FIRST or previous is None:
                    at = None
                elif start > previous[0]:  # seen at this page, or marked since the last one
                    at = previous[1]
                elif seen is not None and seen[0] == start:
                    at = seen[1]
                now = book.current(model)
                self._at[model] = (start, now.describe() if now else "",
                                   bool(now and now.speculation))  # fmt: skip
                self._cut.pop(model, None)
                if at is not None:
                    self._cut[model] = at
                    moved.append((model, at))
            if since is not None and since == wall:
                self._seen[model] = (wall, previous[1] if previous is not None else None)
            elif since is None and self._seen:
                self._seen.pop(model, None)
        if models != self._models:  # a model gone (or the book started afresh)
            self._models = models
            for gone in set(self._at) - set(models):
                del self._at[gone]
                self._cut.pop(gone, None)
        return moved

    def settle(self, before: float) -> list[str]:
        """Forget the openings older than ``before`` (the longest window's start: no window
        reaches them any more); the models whose opening went."""
        if not self._cut:
            return []
        gone = [model for model, at in self._cut.items() if at < before]
        for model in gone:
            del self._cut[model]
        return gone

    def at(self, model: str) -> float | None:
        """The model's opening (monotonic), or None: no window of it is cut."""
        return self._cut.get(model)

    def change(self, model: str) -> tuple[float, str, bool] | None:
        """When the model's current configuration began (Unix), what it is and whether it
        speculates; None when no window of it is cut."""
        return self._at.get(model) if model in self._cut else None


def withhold(withheld: list[Rejection], model: str, reason: RejectReason, detail: str) -> None:
    """Count a withheld figure once a model and reason a scrape."""
    if not any(r.model == model and r.reason is reason for r in withheld):
        withheld.append(Rejection(model, reason, detail, whole_model=False))


def why_withheld(delta: WindowDelta, report: AcceptanceReport) -> tuple[RejectReason, str] | None:
    """Why a window's figures must not be shown, or None: the engine's printed precision
    leaves them less certain than MAX_WINDOW_ERROR, or one lies outside its physical range
    (what no single page can give; rounding within the bound still can, near 1)."""
    if delta.uncertainty > MAX_WINDOW_ERROR:
        return RejectReason.IMPRECISE_WINDOW, (
            f"the engine prints its counters rounded: {delta.drafts} drafts in the window "
            f"leave its figures {delta.uncertainty:.1%} uncertain (more than "
            f"{MAX_WINDOW_ERROR:.0%})"
        )
    problem = figure_out_of_range(report)
    if problem is not None:
        return RejectReason.OUT_OF_RANGE, problem
    return None
