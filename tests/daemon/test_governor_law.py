"""specmon.daemon.governor's control law, in-process on a load the test controls: each period
is what a fleet on a process of a given capacity would report, on a clock that moves a period
at a time; no loop. The stretch grows only when the loop is short of CPU and the schedule
slips; a competitor's steady share gives a steady stretch; waits that are not specmon's
(holds, targets that never answer) never raise it; it relaxes when the load goes."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest

from specmon.daemon.governor import Governor, Period, Policy

#: Loop time of each period's first scrape: every period later than the last.
_STARTS = itertools.count(0.0, 20.0)


def _period(
    governor: Governor,
    *,
    busy: float | None,
    late: float = 0.005,
    scrapes: int = 200,
    interval: float = 5.0,
    slip: float = 1.0,
    excused: int = 0,
    stall: float = 0.0,
    suspects: int = 0,
) -> Period:
    """One period: ``scrapes`` scrapes each ``late`` seconds late and ``slip`` times the gap
    asked for, ``excused`` timeouts while behind, the loop stalled ``stall`` of the period
    and not idle ``busy`` of it (None: unmeasured), ``suspects`` scrapes of targets whose
    last scrape timed out, each after 30 s at the gate; closed."""
    asked = interval * governor.stretch
    at = next(_STARTS)
    for index in range(scrapes):
        governor.started(
            at=at + index * 0.01, late=late, interval=interval, asked=asked, gap=asked * slip
        )
    for index in range(suspects):
        governor.started(
            at=at + index * 0.01,
            late=30.0,
            interval=interval,
            asked=interval * 8,
            gap=interval * 8 + 30.0,
            waited=True,
            suspect=True,
        )
    end = at + scrapes * 0.01
    if excused:
        governor.lagged(at=end + 1.0, lag=5.0)
        for _ in range(excused):
            assert governor.excuses(timeout=1.0, start=end + 0.5, end=end + 1.5)
    if stall:
        governor.watched(at=end + 2.0, lag=stall * governor.policy.period)
    if busy is not None:
        for _ in range(50):  # the loop watch's ticks, 0.1 s each
            governor.ran(span=0.1, idle=0.1 * (1.0 - busy))
    return governor.close()


def test_on_schedule_nothing_changes() -> None:
    governor = Governor(seed=1)
    for _ in range(20):
        period = _period(governor, busy=0.2, late=0.004)
        assert not period.changed and period.state == "calm"
        assert period.busy == pytest.approx(0.2)
    assert governor.stretch == 1.0 and governor.busy == pytest.approx(0.2)
    assert governor.delay == pytest.approx(0.004)


def test_short_of_cpu_and_behind_it_stretches_by_the_slip_over_the_headroom() -> None:
    governor = Governor(seed=1)
    period = _period(governor, busy=0.97, late=0.8, slip=1.5, interval=1.0)  # 1.5 / 0.8
    assert period.changed and period.state == "trouble" and period.median == pytest.approx(0.8)
    assert governor.stretch == pytest.approx(1.875)
    # The period after a change still ends with the backlog from before it: it settles.
    assert not _period(governor, busy=1.0, slip=1.5, interval=1.0).changed
    _period(governor, busy=1.0, slip=1.12, interval=1.0)  # just behind: the least raise
    assert governor.stretch == pytest.approx(1.875 * 1.4)
    _period(governor, busy=1.0, slip=1.12, interval=1.0)
    _period(governor, busy=1.0, late=3.0, slip=9.0, interval=1.0)  # far behind: doubled
    assert governor.stretch == pytest.approx(1.875 * 1.4 * 2.0)
    for _ in range(10):
        _period(governor, busy=1.0, late=3.0, slip=9.0, interval=1.0)
    assert governor.stretch == Policy().max_stretch  # the cap


def test_behind_while_the_loop_idles_is_no_reason_to_stretch() -> None:
    """Waits specmon does not cause (targets that never answer holding places at the limit,
    scrapes queued behind them) slip the schedule and make scrapes late, but the loop idles:
    a longer interval would not help, and the stretch stays (issue 67's second half)."""
    governor = Governor(seed=1)
    for _ in range(40):
        period = _period(governor, busy=0.1, late=4.0, slip=3.0, interval=1.0, excused=50)
        assert period.state != "trouble"
    assert governor.stretch == 1.0
    assert governor.limit == Policy().inflight_max  # the excuses cut nothing either


def test_short_of_cpu_but_on_schedule_nothing_changes() -> None:
    """A busy loop that keeps its schedule (the slip under 1.1) is where the stretch should
    rest, not a reason to move it."""
    governor = Governor(seed=1)
    for _ in range(20):
        assert _period(governor, busy=0.98, slip=1.05, late=0.3).state == "hold"
    assert governor.stretch == 1.0


def test_timeouts_while_behind_are_trouble_though_scrapes_start_on_time() -> None:
    """Issue 58's second run: scrapes started on time, most timed out while specmon was
    behind; with the loop short of CPU, that is trouble whatever the slip."""
    governor = Governor(seed=1)
    period = _period(governor, busy=0.95, late=0.01, scrapes=1000, excused=10, interval=1.0)
    assert period.state == "trouble" and governor.stretch == pytest.approx(1.25)
    # Below the share (0.5 %) or the least count (3): noise, not trouble.
    governor = Governor(seed=1)
    assert _period(governor, busy=0.95, scrapes=1000, excused=4).state == "hold"
    assert _period(governor, busy=0.95, scrapes=100, excused=2).state == "hold"
    assert governor.stretch == 1.0


def test_unmeasured_the_loop_counts_as_short_and_the_slip_decides() -> None:
    governor = Governor(seed=1)
    assert _period(governor, busy=None, slip=1.5, interval=1.0).state == "trouble"
    assert governor.stretch == pytest.approx(1.875) and governor.busy is None
    assert _period(governor, busy=None, interval=1.0).state == "calm"


def test_a_raise_waits_for_the_last_to_reach_every_target() -> None:
    """At 5 s x 2 a change reaches every target within 10 s: two periods."""
    governor = Governor(seed=1)
    _period(governor, busy=1.0, slip=1.6)
    assert governor.stretch == 2.0
    assert not _period(governor, busy=1.0, slip=1.6).changed  # still the old schedule
    assert _period(governor, busy=1.0, slip=1.6).changed
    assert governor.stretch == 4.0


def test_a_held_loop_now_and_then_does_not_stretch() -> None:
    """Issue 58's ratchet: a /metrics build or a full collection holds the loop; the
    scrapes due meanwhile start late together (a burst at the limit), but the slip over the
    period barely moves and the loop idles the rest of the time."""
    governor = Governor(seed=1)
    for index in range(40):
        held = index % 2 == 0
        _period(
            governor,
            busy=0.85 if held else 0.55,
            late=1.5 if held else 0.01,
            slip=1.04 if held else 1.0,
            stall=0.3 if held else 0.0,
        )
    assert governor.stretch == 1.0


def test_it_relaxes_in_steps_and_a_hold_neither_relaxes_nor_breaks_the_calm() -> None:
    policy = Policy()
    governor = Governor(seed=1)
    _period(governor, busy=1.0, slip=1.6, interval=1.0)
    assert governor.stretch == 2.0
    for _ in range(10):  # busy between the thresholds: it rests
        assert _period(governor, busy=0.8, interval=1.0).state == "hold"
    assert governor.stretch == 2.0
    history = []
    for index in range(40):
        # A hold now and then (a long collection: the loop stalled 40 % of a period).
        period = _period(governor, busy=0.3, interval=1.0, stall=0.4 if index % 3 == 1 else 0)
        history.append(governor.stretch)
        assert period.state in ("calm", "hold")
    assert history[0] == 2.0
    assert history[1] == 2.0 * policy.relax_step or history[2] == 2.0 * policy.relax_step
    assert history == sorted(history, reverse=True)
    assert history[-1] == 1.0
    steps = {round(b / a, 6) for a, b in itertools.pairwise(history) if a != b}
    assert all(step >= policy.relax_step for step in steps)  # never more than a step


def test_suspects_are_left_out_of_the_figures() -> None:
    """Scrapes of targets whose last scrape timed out waited 30 s at their lane's limit:
    neither their lateness nor their slip is the schedule's."""
    governor = Governor(seed=1)
    period = _period(governor, busy=0.95, late=0.01, slip=1.0, suspects=2000)
    assert period.scrapes == 200 and period.median == pytest.approx(0.01)
    assert period.slip == pytest.approx(1.0) and period.state == "hold"


def test_a_period_without_scrapes_changes_nothing() -> None:
    governor = Governor(seed=1)
    _period(governor, busy=1.0, late=1.0, slip=1.6)
    for _ in range(10):
        period = governor.close()
        assert period.scrapes == 0 and not period.changed
    assert governor.stretch == 2.0 and governor.delay == pytest.approx(1.0)


def test_the_achieved_interval_is_the_median_gap_between_successful_reads() -> None:
    governor = Governor(seed=1)
    for gap in (5.2, 5.4, 40.0, 5.3, 5.1):  # one target read after a long gap: not the median
        governor.completed(interval=5.0, gap=gap)
    governor.completed(interval=1.0, gap=11.0)  # issue 58: a reading every 11 s at 1 s
    governor.completed(interval=1.0, gap=float("nan"))
    governor.close()
    assert governor.achieved == {5.0: pytest.approx(5.3), 1.0: pytest.approx(11.0)}
    governor.close()  # no reads of either: the last measured values stay
    assert governor.achieved == {5.0: pytest.approx(5.3), 1.0: pytest.approx(11.0)}
    assert governor.forget_intervals({5.0}) == [1.0]
    assert governor.achieved == {5.0: pytest.approx(5.3)}


# -- on a load the test controls ------------------------------------------------------------


@dataclass
class _Plant:
    """``targets`` every ``interval`` s, each scrape ``work`` s of CPU, on a process that gets
    ``share`` of a core (a competitor pinned beside it takes the rest while both want it) and
    spends ``fixed`` of a core on work that does not shrink with the stretch; every
    ``hold_every`` periods a page build holds the loop ``hold`` s at once. At a stretch s the
    loop needs fixed + targets x work / (interval x s) of a core, busy that over ``share`` of
    the time (at most all of it). Past all of it the schedule slips by the need and 2 % of the
    scrapes time out while behind; a hold makes the scrapes due in it start late together
    (the slip of the period barely moves). A change of stretch takes effect a period later
    (it reaches every target within one stretched interval)."""

    targets: int
    interval: float
    work: float
    share: float
    fixed: float = 0.05
    hold: float = 1.5
    hold_every: int = 2
    applied: list[float] = field(default_factory=lambda: [1.0])

    def need(self, stretch: float) -> float:
        """The loop's busy share the load asks for at ``stretch`` (above 1: more than it
        gets)."""
        return (self.fixed + self.targets * self.work / (self.interval * stretch)) / self.share

    def smallest(self) -> float:
        """The smallest stretch at which the process keeps up (its loop not always busy)."""
        return max(1.0, self.targets * self.work / self.interval / (self.share - self.fixed))

    def step(self, governor: Governor) -> Period:
        period = governor.policy.period
        stretch = self.applied[-1]
        need = self.need(stretch)
        asked = self.interval * stretch
        held = self.hold_every > 0 and len(self.applied) % self.hold_every == 0
        rate = self.targets / asked / max(1.0, need)
        scrapes = max(1, round(rate * period))
        slip, late, excused = 1.0, 0.005, 0
        if need > 1.0:
            slip, late, excused = need, min(5.0, asked * (need - 1.0)), math.ceil(scrapes / 50)
        if held:  # the scrapes due in the hold start late together
            slip += (self.hold / period) * (self.hold / (2 * asked))
            late = max(late, self.hold / 2)
        shown = min(scrapes, 600)
        result = _period(
            governor,
            busy=min(1.0, need + (self.hold / period if held else 0.0)),
            late=late,
            scrapes=shown,
            interval=self.interval,
            slip=slip,
            excused=math.ceil(excused * shown / scrapes),
            stall=self.hold / period if held else 0.0,
        )
        self.applied.append(governor.stretch)
        return result


def _run(plant: _Plant, governor: Governor, periods: int) -> list[float]:
    return [plant.step(governor).stretch for _ in range(periods)]


def test_a_competitors_steady_share_gives_a_stable_stretch() -> None:
    """Issue 58's ratchet, on a clock the test controls: 5,000 targets every 5 s beside a
    competitor pinned to the same core (half of it each), 0.8 ms of CPU a scrape, a page build
    holding the loop 1.5 s every other period. Keeps up from 1.78; the stretch settles within
    1.5x of it in the first minute and then never moves in 20 minutes."""
    plant = _Plant(targets=5000, interval=5.0, work=0.0008, share=0.5)
    governor = Governor(seed=1)
    smallest = plant.smallest()
    assert smallest == pytest.approx(1.78, abs=0.01)
    history = _run(plant, governor, 12)
    assert smallest / 1.5 <= history[-1] <= 1.5 * smallest
    later = _run(plant, governor, 240)
    assert set(later) == {history[-1]}
    # A heavier competitor (a third of the core left): a new point, as steady.
    plant.share = 1 / 3
    _run(plant, governor, 12)
    point = governor.stretch
    assert plant.smallest() / 1.5 <= point <= 1.5 * plant.smallest()
    assert set(_run(plant, governor, 240)) == {point}


def test_it_converges_to_within_a_step_of_the_smallest_stretch_that_keeps_up() -> None:
    """6,000 targets every 1 s on a core of its own, 0.5 ms a scrape: keeps up from 3.16."""
    plant = _Plant(targets=6000, interval=1.0, work=0.0005, share=1.0)
    governor = Governor(seed=1)
    history = _run(plant, governor, 12)
    smallest = plant.smallest()
    assert smallest == pytest.approx(3.16, abs=0.01)
    assert smallest <= history[-1] <= 1.5 * smallest
    assert max(history) <= 2 * smallest  # grew fast, not to the cap
    later = _run(plant, governor, 240)
    assert max(later) <= history[-1] / Policy().relax_step  # at most one step off


def test_it_relaxes_back_to_1_within_2_minutes_when_the_load_goes() -> None:
    for change in ("fewer targets", "the competitor stopped"):
        plant = _Plant(targets=6000, interval=1.0, work=0.0005, share=0.5)
        governor = Governor(seed=1)
        _run(plant, governor, 60)
        assert governor.stretch > 2.5
        if change == "fewer targets":
            plant.targets = 500
        else:  # and fewer targets: 6,000 every 1 s need more than a core
            plant.share = 1.0
            plant.targets = 1000
        plant.hold = 0.3  # a smaller page to build
        history = _run(plant, governor, 24)  # 2 minutes
        assert history[-1] == 1.0, change
        assert history == sorted(history, reverse=True)


def test_far_past_the_core_at_5_s_it_settles_and_never_stays_at_the_cap() -> None:
    """5,000 targets every 5 s with a fifth of a core (issue 58 saw the stretch sit at its
    cap of 8)."""
    policy = Policy()
    plant = _Plant(targets=5000, interval=5.0, work=0.0008, share=0.2)
    governor = Governor(seed=1)
    history = _run(plant, governor, 240)
    smallest = plant.smallest()
    assert max(history) < policy.max_stretch
    settled = history[24:]
    assert min(settled) >= smallest / 1.5
    assert max(settled) <= 1.5 * smallest


# -- the in-flight limit, on a process the test controls --------------------------------------


@dataclass
class _Pipe:
    """``targets`` every ``interval`` s on a process that completes ``capacity`` scrapes a
    second, a ``timeout`` s each. Scrapes in flight share the process: when more arrive
    than it completes, the in-flight limit fills and each scrape takes limit / capacity s;
    the part of them past the timeout time out while specmon is behind (excused); the
    arrivals beyond the capacity wait at the gate (deferred) and start late. The stretch and
    the limit decided at a period's close apply from the next."""

    targets: int
    interval: float
    capacity: float
    timeout: float = 1.0
    excused: int = 0
    completed: int = 0
    limits: list[int] = field(default_factory=list)

    def step(self, governor: Governor) -> Period:
        period = governor.policy.period
        arrivals = self.targets / (self.interval * governor.stretch)
        saturated = arrivals > self.capacity
        started = round(min(arrivals, self.capacity) * period)
        in_flight = governor.limit if saturated else arrivals * 0.01
        share = max(0.0, 1.0 - self.timeout * self.capacity / in_flight) if in_flight else 0.0
        excused = round(started * share)
        deferred = round((arrivals - self.capacity) * period) if saturated else 0
        late = 1.0 if deferred else 0.005
        at = next(_STARTS)
        asked = self.interval * governor.stretch
        for index in range(started):
            governor.started(
                at=at + index * 0.001,
                late=late,
                interval=self.interval,
                asked=asked,
                gap=asked * (arrivals / self.capacity if saturated else 1.0),
            )
        for _ in range(deferred):
            governor.defer()
        for _ in range(started - excused):
            governor.finished(judged=True, timeout=self.timeout)
        if excused:
            end = at + started * 0.001
            governor.lagged(at=end + 1.0, lag=5.0)
            for _ in range(excused):
                assert governor.excuses(timeout=self.timeout, start=end + 0.5, end=end + 1.5)
                governor.finished(judged=False, timeout=self.timeout)
        busy = 1.0 if saturated else arrivals / self.capacity
        for _ in range(50):  # the loop watch's ticks
            governor.ran(span=period / 50, idle=period / 50 * (1.0 - busy))
        self.excused += excused
        self.completed += started - excused
        closed = governor.close()
        self.limits.append(governor.limit)
        return closed


def test_the_limit_is_cut_to_what_completes_inside_the_timeout() -> None:
    """256 in flight on a process of 200 a second: 1.28 s each against a 1 s timeout, 22 %
    excused; the limit is cut at once to Little's law's share of what completed (156 a
    second x 1 s x 0.5 = 78), below half its value."""
    governor = Governor(seed=1)
    pipe = _Pipe(targets=6000, interval=1.0, capacity=200.0)
    period = pipe.step(governor)
    assert period.state == "trouble" and period.excused > 0
    assert period.completed == 781 and governor.limit == 78  # floor(781 / 5 x 1 x 0.5)
    assert governor.limit < Policy().inflight_max * Policy().inflight_cut


def test_the_limit_grows_slowly_while_scrapes_wait_and_nothing_is_excused() -> None:
    governor = Governor(policy=Policy(inflight_max=1000), seed=1)
    governor.limit = 20
    pipe = _Pipe(targets=6000, interval=1.0, capacity=400.0)
    pipe.step(governor)  # 20 in flight at 400 a second: 0.05 s each, scrapes wait
    assert governor.limit == 22  # 10 %
    pipe.step(governor)
    assert governor.limit == 24
    pipe.capacity = 10_000.0  # nothing waits: the limit stays where it is
    for _ in range(5):
        pipe.step(governor)
    assert governor.limit == 24


def test_far_past_the_core_the_limit_settles_and_almost_nothing_is_excused() -> None:
    """Issue 58's first bullet on a process the test controls: 6,000 targets every 1 s, a 1 s
    timeout, a process of 200 scrapes a second (a third of a core): past the stretch's cap
    (375 a second at 16) the gate holds the rest. Over 20 minutes after the first: excused
    timeouts under 1 % of the completed scrapes, the limit never above what completes inside
    the timeout by more than one growth step, cut at most once every 2 minutes."""
    policy = Policy()
    governor = Governor(seed=1)
    pipe = _Pipe(targets=6000, interval=1.0, capacity=200.0)
    for _ in range(12):
        pipe.step(governor)
    assert governor.stretch == policy.max_stretch  # and scrapes wait at the gate beyond it
    excused, completed = pipe.excused, pipe.completed
    pipe.limits.clear()
    for _ in range(240):
        pipe.step(governor)
    assert (pipe.excused - excused) < 0.01 * (pipe.completed - completed)
    edge = pipe.capacity * pipe.timeout
    assert max(pipe.limits) <= edge * policy.inflight_grow
    cuts = sum(1 for a, b in itertools.pairwise(pipe.limits) if b < a)
    assert cuts <= 240 * policy.period / 120.0
    assert min(pipe.limits) >= edge * policy.inflight_share * policy.inflight_cut


def test_when_the_load_goes_the_gate_holds_nothing_back_and_the_stretch_relaxes() -> None:
    """From the cap at a 1 s interval: 13 steps of 0.8 to 1, each after 2 calm periods, so
    130 s (at 5 s, or from a stretch under 8, within 2 minutes); the limit left where it was
    binds nothing, nothing waits at the gate."""
    governor = Governor(seed=1)
    pipe = _Pipe(targets=6000, interval=1.0, capacity=200.0)
    for _ in range(60):
        pipe.step(governor)
    assert governor.stretch == Policy().max_stretch
    pipe.targets = 1000
    pipe.capacity = 2000.0
    excused = pipe.excused
    periods = [pipe.step(governor) for _ in range(27)]
    history = [period.stretch for period in periods]
    assert history[-2:] == [1.0, 1.0] and history[-3] > 1.0
    assert history == sorted(history, reverse=True)
    assert sum(period.deferred for period in periods) == 0 and pipe.excused == excused
