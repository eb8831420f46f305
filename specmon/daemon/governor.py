"""The overload governor: past what the process can do on time, scrape every target less
often, evenly, instead of letting some of them time out; and never let targets that do not
answer hold back those that do. No I/O: the scrapers tell it when each scrape started, the
loop watch how long the event loop idled, the daemon closes a period every
:attr:`Policy.period` seconds, and it answers with the stretch every target's interval is
multiplied by and the number of scrapes that may run at once.

Why a stretch, and why evenly. Every scrape runs on one event loop. When the scrapes due in a
second need more than a second of the process's CPU (more targets than a core scrapes on
time, a shorter interval, a slower or shared core), callbacks wait in the loop's queue: every
scrape starts late, and a healthy engine's answer waits behind others' until the scrape's
deadline fires, a timeout that is specmon's, not the target's. Multiplying every target's
interval by one factor lowers the demand until it fits again: every target is still scraped,
at the same reduced rate, and none is singled out. The factor is the one figure to watch
(``specmon_scrape_interval_stretch``; 1 is on schedule) and ``SpecmonOverloaded`` fires on it.

**Two signals, both needed** (issue 67). The stretch answers one question: is specmon short of
CPU? A schedule can fall behind for reasons the stretch does not cure: a hold of the loop (a
``/metrics`` build, a full collection) makes the scrapes due meanwhile start together, and
those over the in-flight limit wait; targets that accept and never answer hold places until
their timeout while specmon sits idle. Judging on start lateness counted all of that as
trouble, and the stretch ratcheted (issue 58: 2.8 to 7.7 beside a competitor where 3 kept up;
to its cap with 2,000 hung targets while specmon used a tenth of a core). So a period is
judged on:

- **busy**: the share of the period the event loop was not idle (not waiting in its selector
  for I/O or a timer), from :meth:`ran`, which the loop watch calls every tick. A loop that
  never idles is short of CPU: it has more to do than it gets to run, whether it lacks a core
  or shares one with another process. A loop waiting on targets that do not answer idles.
  Unmeasured (an event loop whose selector cannot be timed), it counts as busy, and the
  slip alone decides.
- **slip**: the schedule's slip, the mean of each scrape's achieved gap since its target's
  previous start over the gap it asked for (the stretched interval, or a failing target's
  back-off). A burst after a hold barely moves it (a 2.5 s hold at 15 s gaps: about 1.04 over
  the period), where it moved the median start lateness past the old threshold.

Targets with a recent timeout of their own (suspects, below) are left out of the slip and of
the lateness figures: their waits are theirs.

The control law (:class:`Policy` holds its constants), once a period of ``period`` (5) s.
Grow fast on trouble, shrink slowly on room, remember where trouble was. Each period is one
of:

- **trouble**: specmon is short of CPU (busy ``short_above`` (0.9) or more) and its schedule
  is behind: the slip is ``slip_behind`` (1.1) or more, or at least ``excused_min`` (3) and
  ``excused_share`` (0.5 %) of the scrapes started timed out while specmon was behind
  (excused: they started on time and their answers waited behind others'). If the last change
  was a relaxation within the settling time, the stretch goes back to where it was before it
  (one step) and that value is a floor for ``hold`` (30) s; otherwise, once the last change
  has settled, it is multiplied by the slip over ``headroom`` (0.8), between ``raise_min``
  (1.25) and ``raise_max`` (2), up to ``max_stretch`` (16).
- **calm**: room to spare: busy under ``room_below`` (0.7: a relaxation by ``relax_step``
  (0.8) multiplies the scrapes' work by 1.25, which stays under ``short_above``) over this
  period and the one before (a page build every other period does not hide the room), the
  slip under ``slip_calm`` (1.05) and no timeout excused. After ``relax_after`` (2) calm periods, and at
  least the settling time, since the last change, the stretch is multiplied by
  ``relax_step``, not below 1 nor, while it holds, the floor. The floor is dropped early when
  the period starts fewer than half the scrapes it started when the floor was set.
- **hold**: anything between: nothing changes, and the calm periods counted so far still
  count. Between 0.7 and 0.9 busy the stretch rests: a steady competitor gives a steady
  stretch.

The settling time is one stretched interval of the longest configured interval, at least two
periods and at most ``settle_max`` (10) s: a change reaches every target at its next scrape,
and the period it was made in ends with the backlog from before it, so until then the
periods still show the schedule before it.

**The in-flight limit, in two lanes.** The stretch sets how many scrapes start; it cannot
help when more are in flight than complete inside their timeout: each of them waits behind
the others, on the loop and in the client's connection pool, until its deadline, and the work
spent on it is lost (issue 58: 5,205 excused against 70,134 read in 140 s at 6,000 targets
every 1 s). So at most :attr:`Governor.limit` scrapes of targets that answer run at once
(:meth:`admit`); one over it waits before it starts, in order, outside its timeout
(:meth:`defer`, ``specmon_scrapes_deferred_total``), and starts when one in flight ends. A
target whose last judged scrape timed out (a **suspect**: it hangs, or answers slower than
its timeout) scrapes in a lane of its own, at most ``suspect_max`` (512) at once: a scrape
that never answers holds a place for its whole timeout while costing specmon nothing, and
2,000 of them in the one lane kept healthy targets waiting behind them for a minute or more
(issue 67). A suspect that answers again is back in the first lane from its next scrape. The
first lane's limit starts at ``inflight_max`` (256). A period of trouble with excused
timeouts cuts it to ``inflight_cut`` (0.5) of itself, or lower to Little's law's share of
what completes inside the timeout: the scrapes that completed per second, times the smallest
timeout among them, times ``inflight_share`` (0.5); at least ``inflight_min`` (4). Excuses
while specmon idles (a hold, not a shortage) cut nothing: a lower limit would only queue
scrapes behind the hold. A period in which scrapes waited and none was excused grows it by
``inflight_grow`` (10 %, at least one), never above ``inflight_max``, nor for
``inflight_hold`` (120) s after a cut above 0.9 of the limit that was cut.

A timeout is **excused** (:meth:`Governor.excuses`) when specmon itself was behind while the
scrape ran: a wake-up inside the scrape's span started at least ``excuse_fraction`` of the
scrape timeout late. The target is then neither marked down nor counted as failed (its
``specmon_up`` stays as it was); the scrape counts in
``specmon_scrape_timeouts_excused_total``. An excused timeout makes no suspect.

**Excuses are bounded.** A target's timeouts are excused at most ``excuse_limit`` (1) in a
row. Its next scrape, at the configured interval (not stretched), is a **probe**: judged
whatever specmon's state, on a deadline that counts specmon's own running time, the time on
the clock less the stalls the loop watch measured meanwhile (:meth:`Governor.owed`: a
process stopped 0.7 s in every second gives a 1.5 s timeout about 5 s on the clock), and at
most ``probe_wall`` (8) timeouts on the clock. A healthy engine answers a probe; one that
hangs goes down on it. A probe that reaches that bound before specmon gave it half its timeout (the
process ran less than a sixteenth of the time) judges nothing: it is excused, and the next
scrape is a probe again. A target that hangs is therefore down at most one stretched
interval, the wait at the first lane's limit when many hang at once (``N / limit`` timeouts
for ``N`` targets hanging together), one timeout, and, when that timeout was excused, one
configured interval and ``scrape_timeout`` over the share of the time specmon runs, after it
hangs (bench/RESULTS.md, "Starved" and "Hung targets").
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SLOT", "Governor", "Period", "Policy", "defers"]

#: Width, seconds, of the slots in which the worst lateness is kept for :meth:`excuses`.
SLOT = 0.1
#: Seconds of slots kept (a scrape timeout is at most the interval; two minutes cover it).
_KEPT = 120.0
#: Lateness samples kept per period for the percentiles (reservoir sampling beyond).
_SAMPLES = 1024
#: Configured intervals whose achieved interval is exported (one series each).
_INTERVALS = 32


@dataclass(frozen=True, kw_only=True)
class Policy:
    """The governor's control law's constants (see the module docstring)."""

    period: float = 5.0
    short_above: float = 0.9
    room_below: float = 0.7
    slip_behind: float = 1.1
    slip_calm: float = 1.05
    excused_share: float = 0.005
    excused_min: int = 3
    relax_after: int = 2
    settle_max: float = 10.0
    hold: float = 30.0
    headroom: float = 0.8
    raise_min: float = 1.25
    raise_max: float = 2.0
    relax_step: float = 0.8
    max_stretch: float = 16.0
    excuse_fraction: float = 0.2
    excuse_limit: int = 1
    probe_wall: float = 8.0
    inflight_max: int = 256
    inflight_min: int = 4
    inflight_share: float = 0.5
    inflight_cut: float = 0.5
    inflight_grow: float = 1.1
    inflight_hold: float = 120.0
    suspect_max: int = 512

    def __post_init__(self) -> None:
        if not (0 < self.room_below < self.short_above <= 1):
            raise ValueError("need 0 < room_below < short_above <= 1")
        if not (1 < self.slip_calm <= self.slip_behind):
            raise ValueError("need 1 < slip_calm <= slip_behind")
        if not (1 < self.raise_min <= self.raise_max) or not (0 < self.relax_step < 1):
            raise ValueError("need 1 < raise_min <= raise_max and 0 < relax_step < 1")
        if self.period <= 0 or self.relax_after < 1 or self.max_stretch < 1:
            raise ValueError("need period > 0, relax_after >= 1, max_stretch >= 1")
        if not (0 < self.headroom <= 1) or self.excuse_fraction <= 0:
            raise ValueError("need 0 < headroom <= 1 and excuse_fraction > 0")
        if self.excuse_limit < 1 or self.probe_wall < 1:
            raise ValueError("need excuse_limit >= 1 and probe_wall >= 1")
        if not (0 < self.excused_share < 1) or self.excused_min < 1:
            raise ValueError("need 0 < excused_share < 1 and excused_min >= 1")
        if self.settle_max < self.period or self.hold < 0:
            raise ValueError("need settle_max >= period and hold >= 0")
        if not (1 <= self.inflight_min <= self.inflight_max) or self.inflight_share <= 0:
            raise ValueError("need 1 <= inflight_min <= inflight_max and inflight_share > 0")
        if not (0 < self.inflight_cut < 1 < self.inflight_grow) or self.inflight_hold < 0:
            raise ValueError("need 0 < inflight_cut < 1 < inflight_grow and inflight_hold >= 0")
        if self.suspect_max < 1:
            raise ValueError("need suspect_max >= 1")


@dataclass(frozen=True, kw_only=True)
class Period:
    """What one closed period measured and decided."""

    scrapes: int
    #: Median and 90th percentile of how late scrapes started, seconds (0 without scrapes).
    median: float
    p90: float
    #: Mean achieved gap over the gap asked for (1 without data).
    slip: float
    #: Timeouts excused in the period, and the share of the period the loop could not run
    #: (the loop watch's lags summed, over the period).
    excused: int
    stall: float
    #: ``trouble``, ``calm`` or ``hold`` (module docstring).
    state: str
    stretch: float
    changed: bool
    #: Scrapes that completed (judged: not excused) and that waited at the in-flight limit;
    #: the limit decided for the next period.
    completed: int = 0
    deferred: int = 0
    limit: int = 0
    #: The share of the period the event loop was not idle (None: not measured).
    busy: float | None = None


class Governor:
    """Scrape starts and the loop's idle time in; one stretch factor and the in-flight
    limits out (see the module docstring)."""

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        seed: int | None = None,
        on_excuse: Callable[[], None] | None = None,
        on_defer: Callable[[], None] | None = None,
    ) -> None:
        self.policy = policy or Policy()
        self._on_excuse = on_excuse
        self._on_defer = on_defer
        #: Scrapes allowed in flight at once (the in-flight limit), and those in flight;
        #: the same for suspects' scrapes (their own lane, a fixed limit).
        self.limit = self.policy.inflight_max
        self.inflight = 0
        self.suspect_limit = self.policy.suspect_max
        self.suspect_inflight = 0
        #: Scrapes that waited at the limit since the start.
        self.deferred = 0
        self._deferred_now = 0
        self._completed_now = 0
        self._timeout_least = math.inf
        #: After a cut, the limit grows no higher than this for ``hold`` s (periods left).
        self._ceiling = self.policy.inflight_max
        self._ceiling_left = 0
        #: The factor every target's interval is multiplied by (1: on schedule).
        self.stretch = 1.0
        #: The last closed period's 90th percentile of scrape lateness, seconds.
        self.delay = 0.0
        #: Configured interval -> the median gap between two successful scrapes of one
        #: target, seconds, in the last period that had such scrapes.
        self.achieved: dict[float, float] = {}
        #: Timeouts excused since the start.
        self.excused = 0
        self._random = random.Random(seed)  # noqa: S311 (sampling, not secrets)
        self._samples: list[float] = []
        self._seen = 0
        self._slip_sum = 0.0
        self._slip_count = 0
        self._gaps: dict[float, list[float]] = {}
        self._gaps_seen: dict[float, int] = {}
        self._excused_now = 0
        self._stall_sum = 0.0
        self._longest = 0.0
        #: Seconds the loop watch's ticks spanned in the period, and how many of them the
        #: loop idled (None: never measured).
        self._span = 0.0
        self._idle: float | None = None
        #: The previous period's (span, idle), for the calm test's two-period busy share.
        self._previous = (0.0, 0.0)
        #: The last closed period's busy share (None: not measured).
        self.busy: float | None = None
        #: Calm periods since the last change; periods since it; the stretch before it and
        #: whether it was a relaxation; the known-good stretch and the periods it holds.
        self._calm = 0
        self._since = 1 << 30  # no change yet: the first trouble acts at once
        self._before = 1.0
        self._relaxed = False
        self._floor = 1.0
        self._floor_left = 0
        self._floor_scrapes = 0
        self._slots: deque[tuple[int, float]] = deque()
        self._stalls: deque[tuple[int, float]] = deque()

    # -- what the scrapers report -------------------------------------------------------------

    def started(
        self,
        *,
        at: float,
        late: float,
        interval: float,
        asked: float,
        gap: float | None,
        waited: bool = False,
        suspect: bool = False,
    ) -> None:
        """A scrape started at loop time ``at``, ``late`` seconds after its wake-up; its
        target's configured interval is ``interval``, and ``gap`` seconds passed since the
        target's previous scrape started (None for its first), where ``asked`` were asked
        for (the stretched interval, or a failing target's back-off). ``waited``: it waited
        at the in-flight limit, so its lateness is not the loop's and is no evidence for
        :meth:`excuses` (the scraper reports the loop's own through :meth:`lagged`).
        ``suspect``: its target's last judged scrape timed out; its wait is its own, and it
        counts in none of the period's figures."""
        late = max(0.0, late)
        if suspect:
            if not waited:
                self.lagged(at=at, lag=late)
            return
        self._seen += 1
        if len(self._samples) < _SAMPLES:
            self._samples.append(late)
        else:
            index = self._random.randrange(self._seen)
            if index < _SAMPLES:
                self._samples[index] = late
        if not waited:
            self.lagged(at=at, lag=late)
        self._longest = max(self._longest, interval)
        if gap is None or asked <= 0 or not math.isfinite(gap):
            return
        self._slip_sum += gap / asked
        self._slip_count += 1

    def completed(self, *, interval: float, gap: float) -> None:
        """A target whose configured interval is ``interval`` was read successfully ``gap``
        seconds after its previous successful read: a sample of the interval achieved."""
        if not math.isfinite(gap) or gap <= 0:
            return
        gaps = self._gaps.get(interval)
        if gaps is None:
            if len(self._gaps) >= _INTERVALS:
                return
            gaps = self._gaps[interval] = []
        seen = self._gaps_seen[interval] = self._gaps_seen.get(interval, 0) + 1
        if len(gaps) < _SAMPLES:
            gaps.append(gap)
        else:
            index = self._random.randrange(seen)
            if index < _SAMPLES:
                gaps[index] = gap

    def ran(self, *, span: float, idle: float) -> None:
        """The loop watch's last tick spanned ``span`` seconds, of which the event loop
        idled ``idle`` (waited in its selector): summed for the period's busy share."""
        if span <= 0 or not math.isfinite(span) or not math.isfinite(idle):
            return
        self._span += span
        self._idle = (self._idle or 0.0) + min(span, max(0.0, idle))

    def lagged(self, *, at: float, lag: float) -> None:
        """The event loop was ``lag`` seconds late at loop time ``at`` (a scrape's start, or
        the loop watch's timer): kept, worst per :data:`SLOT`, for :meth:`excuses`."""
        _keep(self._slots, at=at, lag=lag)

    def watched(self, *, at: float, lag: float) -> None:
        """The loop watch's timer woke ``lag`` seconds late at loop time ``at``: the loop
        could not run for that long (held, or the process stopped). Kept for :meth:`excuses`
        and, summed, for :meth:`owed`."""
        _keep(self._slots, at=at, lag=lag)
        _keep(self._stalls, at=at, lag=lag)
        self._stall_sum += max(0.0, lag)

    def stalled_during(self, *, start: float, end: float) -> float:
        """Seconds between loop times ``start`` and ``end`` the loop could not run: the
        stalls the loop watch (and the deadlines of probes) measured, at most ``end -
        start``."""
        first, last = math.floor(start / SLOT), math.floor(end / SLOT)
        total = 0.0
        for slot, lag in reversed(self._stalls):
            if slot < first:
                break
            if slot <= last:  # a stall seen just after start may have begun before it
                total += min(lag, (slot + 1) * SLOT - start)
        return min(total, max(0.0, end - start))

    def owed(self, *, start: float, now: float, late: float, timeout: float, until: float) -> float:
        """Seconds a probe scrape that started at loop time ``start`` is still owed at loop
        time ``now`` to have had ``timeout`` seconds of specmon's own running time (the time
        on the clock less :meth:`stalled_during`); ``late``: how late its deadline woke (a
        stall the loop watch may not have reported yet). Never past loop time ``until``."""
        _keep(self._stalls, at=now, lag=late)
        if now >= until:
            return 0.0
        ran = (now - start) - self.stalled_during(start=start, end=now)
        return max(0.0, min(timeout - ran, until - now))

    def behind_during(self, *, start: float, end: float) -> float:
        """The worst lateness seen between loop times ``start`` and ``end``, seconds."""
        first, last = math.floor(start / SLOT), math.floor(end / SLOT)
        worst = 0.0
        for slot, lag in reversed(self._slots):
            if slot < first:
                break
            if slot <= last and lag > worst:
                worst = lag
        return worst

    def excuses(self, *, timeout: float, start: float, end: float) -> bool:
        """Whether a scrape that timed out after ``timeout`` seconds, between loop times
        ``start`` and ``end``, timed out because specmon was behind; counted when so."""
        own = max(
            self.behind_during(start=start, end=end), self.stalled_during(start=start, end=end)
        )
        if own >= self.policy.excuse_fraction * timeout:
            self.excuse()
            return True
        return False

    def excuse(self) -> None:
        """Count one timeout excused (a probe specmon could not give its timeout, too)."""
        self.excused += 1
        self._excused_now += 1
        if self._on_excuse is not None:
            self._on_excuse()

    # -- the in-flight limit ------------------------------------------------------------------

    def admit(self, *, suspect: bool = False) -> bool:
        """Whether one more scrape may start now in its lane (counted in flight when so);
        ``suspect``: the lane of targets whose last judged scrape timed out."""
        if suspect:
            if self.suspect_inflight >= self.suspect_limit:
                return False
            self.suspect_inflight += 1
            return True
        if self.inflight >= self.limit:
            return False
        self.inflight += 1
        return True

    def defer(self, *, suspect: bool = False) -> None:
        """Count one scrape that waits for a place under its lane's limit (not started:
        its timeout has not begun, and its target reads later)."""
        self.deferred += 1
        if not suspect:
            self._deferred_now += 1
        if self._on_defer is not None:
            self._on_defer()

    def finished(self, *, judged: bool, timeout: float, suspect: bool = False) -> None:
        """A scrape admitted by :meth:`admit` ended; ``judged``: it completed with an
        outcome for its target (not excused, not cancelled); ``timeout``: its target's;
        ``suspect``: the lane it was admitted in."""
        if suspect:
            self.suspect_inflight = max(0, self.suspect_inflight - 1)
            return
        self.inflight = max(0, self.inflight - 1)
        if judged:
            self._completed_now += 1
            if timeout > 0:
                self._timeout_least = min(self._timeout_least, timeout)

    def _limit(self, *, trouble: bool, deferred: int, completed: int, timeout: float) -> None:
        """The in-flight limit's law (module docstring): cut on excused timeouts to at most
        what completes inside the timeout (Little's law), grow slowly while scrapes wait and
        nothing is excused."""
        policy = self.policy
        self._ceiling_left = max(0, self._ceiling_left - 1)
        if trouble:
            cut = self.limit * policy.inflight_cut
            if completed and math.isfinite(timeout):  # Little: in flight = rate x time
                cut = min(cut, completed / policy.period * timeout * policy.inflight_share)
            self._ceiling = max(policy.inflight_min, math.floor(self.limit * 0.9))
            self._ceiling_left = math.ceil(policy.inflight_hold / policy.period)
            self.limit = max(policy.inflight_min, math.floor(cut))
        elif deferred:
            grown = max(self.limit + 1, math.floor(self.limit * policy.inflight_grow))
            top = self._ceiling if self._ceiling_left else policy.inflight_max
            self.limit = max(self.limit, min(grown, top, policy.inflight_max))

    # -- the decision -------------------------------------------------------------------------

    def close(self) -> Period:
        """End the current period: decide the stretch and the limit for the next one (the
        control law, module docstring)."""
        policy = self.policy
        samples = sorted(self._samples)
        scrapes, excused = self._seen, self._excused_now
        median = _quantile(samples, 0.5)
        p90 = _quantile(samples, 0.9)
        slip = self._slip_sum / self._slip_count if self._slip_count else 1.0
        stall = self._stall_sum / policy.period
        busy = roomy = None
        if self._idle is not None and self._span > 0:
            busy = max(0.0, min(1.0, 1.0 - self._idle / self._span))
            span, idle = self._previous
            span, idle = span + self._span, idle + self._idle
            roomy = max(0.0, min(1.0, 1.0 - idle / span))  # over this period and the last
            self._previous = (self._span, self._idle)
        for interval, gaps in self._gaps.items():
            self.achieved[interval] = _quantile(sorted(gaps), 0.5)
        longest = self._longest
        deferred, completed, timeout = self._deferred_now, self._completed_now, self._timeout_least
        self._deferred_now, self._completed_now, self._timeout_least = 0, 0, math.inf
        self._samples, self._seen, self._excused_now, self._stall_sum = [], 0, 0, 0.0
        self._slip_sum, self._slip_count, self._longest = 0.0, 0, 0.0
        self._gaps, self._gaps_seen = {}, {}
        self._span, self._idle = 0.0, (None if self._idle is None else 0.0)
        before = self.stretch
        self._since += 1
        self._floor_left = max(0, self._floor_left - 1)
        if scrapes < self._floor_scrapes / 2:  # half the work it held for: another load
            self._floor_left = 0
        # A change reaches every target within one stretched interval: until then the
        # period's figures still show the schedule before it.
        # The period a change was made in ends with a backlog from before it: at least two.
        settle = max(2, math.ceil(min(longest * self.stretch, policy.settle_max) / policy.period))
        # Short of CPU: the loop never idled (unmeasured: assumed, the slip decides).
        short = busy is None or busy >= policy.short_above
        doomed = excused >= max(policy.excused_min, policy.excused_share * scrapes)
        trouble = scrapes > 0 and short and (slip >= policy.slip_behind or doomed)
        self._limit(
            trouble=doomed and short, deferred=deferred, completed=completed, timeout=timeout
        )
        calm = (
            scrapes > 0
            and (roomy is None or roomy < policy.room_below)
            and slip < policy.slip_calm
            and excused == 0
        )
        if trouble:
            self._calm = 0
            if self._relaxed and self._since <= settle + 1:
                # The last relaxation caused it: back one step, and hold there.
                self._floor, self._floor_left = self._before, math.ceil(policy.hold / policy.period)
                self._floor_scrapes = scrapes
                self._change(self._before, relaxed=False)
            elif self._since >= settle:
                factor = min(policy.raise_max, max(policy.raise_min, slip / policy.headroom))
                self._change(min(policy.max_stretch, self.stretch * factor), relaxed=False)
        elif calm:
            self._calm += 1
            if self.stretch > 1.0 and self._calm >= max(policy.relax_after, settle):
                relaxed = self.stretch * policy.relax_step
                relaxed = 1.0 if relaxed < 1.0 + 1e-9 else relaxed
                if self._floor_left > 0:
                    relaxed = max(relaxed, self._floor)
                if relaxed < self.stretch:
                    self._change(relaxed, relaxed=True)
        if scrapes:
            self.delay = p90
        self.busy = busy
        return Period(
            scrapes=scrapes,
            median=median,
            p90=p90,
            slip=slip,
            excused=excused,
            stall=stall,
            state="trouble" if trouble else "calm" if calm else "hold",
            stretch=self.stretch,
            changed=self.stretch != before,
            completed=completed,
            deferred=deferred,
            limit=self.limit,
            busy=busy,
        )

    def _change(self, stretch: float, *, relaxed: bool) -> None:
        if stretch == self.stretch:
            return
        self._before, self.stretch, self._relaxed = self.stretch, stretch, relaxed
        self._since, self._calm = 0, 0

    def forget_intervals(self, keep: set[float]) -> list[float]:
        """Drop the achieved interval of configured intervals no target has any more;
        returns those dropped."""
        gone = [interval for interval in self.achieved if interval not in keep]
        for interval in gone:
            del self.achieved[interval]
        return gone


def defers(period: Period, policy: Policy) -> bool:
    """Whether a target's series may wait to be rendered until ``/metrics`` is fetched
    (:attr:`specmon.daemon.exposition.Exposition.defer`) after ``period``: only while every
    target is on schedule (stretch 1) and the loop idled for more than ``1 - room_below`` of
    the period, measured. Deferred, a target scraped every 5 s under a Prometheus fetching
    every 15 s is rendered once in three scrapes, but a fetch then renders every target that
    changed since the last one; past the core those renders, in slices, starved scrapes in
    flight and healthy targets were reported down (bench/results/HISTORY.md, 2026-12-05), so
    a loop short of CPU, or unmeasured, renders at each scrape."""
    return period.stretch <= 1.0 and period.busy is not None and period.busy < policy.room_below


def _keep(slots: deque[tuple[int, float]], *, at: float, lag: float) -> None:
    """Keep ``lag`` at loop time ``at`` in ``slots``: the worst per :data:`SLOT`, for
    :data:`_KEPT` seconds."""
    slot = math.floor(at / SLOT)
    if slots and slots[-1][0] == slot:
        if lag > slots[-1][1]:
            slots[-1] = (slot, lag)
    elif not slots or slot > slots[-1][0]:
        slots.append((slot, lag))
        oldest = slot - int(_KEPT / SLOT)
        while slots[0][0] < oldest:
            slots.popleft()
    elif lag > slots[-1][1]:  # out of order (callers on one loop are not): the newest slot
        slots[-1] = (slots[-1][0], lag)


def _quantile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``ordered`` (nearest rank; 0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]
