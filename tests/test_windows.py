"""Rolling windows: exact deltas, resets, gaps, positions that come and go."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from specmon.engines import SpecCounters
from specmon.windows import CounterHistory, GaugeHistory


def c(drafts: int, tokens: int, accepted: int, *per_pos: int) -> SpecCounters:
    return SpecCounters(drafts, tokens, accepted, tuple(per_pos))


def test_window_is_increase_from_oldest_reading_inside_it() -> None:
    h = CounterHistory(retention=60)
    for t, drafts in [(0, 0), (10, 10), (20, 30), (30, 60), (40, 100)]:
        h.add(float(t), c(drafts, 3 * drafts, drafts, drafts))
    w = h.window(20)
    assert w is not None
    assert (w.drafts, w.start, w.end, w.readings) == (70, 20.0, 40.0, 3)
    assert w.seconds == 20.0
    assert w.accepted_per_position == (70,)
    full = h.window(1000)
    assert full is not None and full.drafts == 100 and full.readings == 5


def test_single_reading_gives_no_window() -> None:
    h = CounterHistory(retention=600)
    assert h.window(10) is None
    h.add(0.0, c(5, 5, 5))
    assert h.window(10) is None
    h.add(100.0, c(6, 6, 6))
    assert h.window(10) is None  # the older reading is outside the window
    assert h.window(100) is not None


def test_reset_counts_new_value_and_never_goes_negative() -> None:
    h = CounterHistory(retention=600)
    h.add(0.0, c(1000, 3000, 1500, 800, 500, 200))
    h.add(10.0, c(1100, 3300, 1650, 880, 550, 220))
    obs = h.add(20.0, c(40, 120, 60, 30, 20, 10))  # server restarted, then served 40 drafts
    assert obs.reset
    h.add(30.0, c(90, 270, 135, 70, 45, 20))
    w = h.window(600)
    assert w is not None
    assert w.drafts == 100 + 40 + 50
    assert w.accepted_per_position == (80 + 30 + 40, 50 + 20 + 25, 20 + 10 + 10)
    assert w.resets == 1
    assert h.resets == 1
    totals = h.totals()
    assert totals is not None and totals.drafts == 190


def test_positions_appearing_later_count_from_zero() -> None:
    h = CounterHistory(retention=600)
    h.add(0.0, c(0, 0, 0))  # llama.cpp before its first speculative request
    h.add(5.0, c(20, 60, 30, 15, 10, 5))
    w = h.window(600)
    assert w is not None
    assert w.accepted_per_position == (15, 10, 5)
    assert w.drafts == 20


def test_vanished_positions_leave_with_the_readings_that_had_them() -> None:
    h = CounterHistory(retention=600)
    h.add(0.0, c(10, 40, 20, 8, 6, 4, 2))
    h.add(5.0, c(20, 80, 40, 16, 12, 8, 4))
    h.add(10.0, c(5, 15, 7, 4, 2, 1))  # restart with a shorter chain
    h.add(15.0, c(9, 27, 12, 7, 3, 2))
    w = h.window(600)
    assert w is not None
    assert w.accepted_per_position == (8 + 4 + 3, 6 + 2 + 1, 4 + 1 + 1, 2)
    recent = h.window(6)  # only readings after the restart
    assert recent is not None
    assert recent.accepted_per_position == (3, 1, 1)


def test_old_or_duplicate_readings_are_rejected() -> None:
    h = CounterHistory(retention=60)
    assert h.add(10.0, c(1, 1, 1)).accepted
    assert not h.add(10.0, c(2, 2, 2)).accepted
    assert not h.add(5.0, c(2, 2, 2)).accepted
    assert len(h) == 1


def test_retention_prunes_but_keeps_the_last_reading() -> None:
    h = CounterHistory(retention=30)
    for t in range(0, 100, 5):
        h.add(float(t), c(t, t, t))
    assert len(h) <= 8
    w = h.window(30)
    assert w is not None and w.drafts == 30


def test_gap_keeps_exact_total() -> None:
    h = CounterHistory(retention=900)
    h.add(0.0, c(10, 30, 15))
    h.add(5.0, c(20, 60, 30))
    # target down for 200 s, counters kept running
    h.add(205.0, c(520, 1560, 780))
    w = h.window(300)
    assert w is not None and w.drafts == 510 and w.seconds == 205.0


@given(steps=st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=2, max_size=60))
def test_window_total_equals_sum_of_true_increases(steps: list[tuple[int, bool]]) -> None:
    """Whatever the restarts, the window's delta is the sum of what really happened."""
    h = CounterHistory(retention=10_000)
    raw = 0
    true_increase_after_first = 0
    for i, (served, restart) in enumerate(steps):
        if restart and i > 0 and raw > 0:
            raw = served  # restarted, then served some drafts before the scrape
            increase = served
        else:
            raw += served
            increase = served
        if i > 0:
            true_increase_after_first += increase
        h.add(float(i), c(raw, raw, raw))
    w = h.window(10_000)
    assert w is not None
    # A restart whose new value is not below the old one is invisible (as in Prometheus);
    # the window then under-counts but never over-counts or goes negative.
    assert 0 <= w.drafts <= true_increase_after_first
    if not any(r for _, r in steps[1:]):
        assert w.drafts == true_increase_after_first


def test_gauge_history_mean() -> None:
    g = GaugeHistory(retention=100)
    for t, v in [(0, 2.0), (10, 3.0), (20, 4.0)]:
        g.add(float(t), v)
    assert g.mean(10) == (3.5, 2)
    assert g.mean(100) == (3.0, 3)


def test_generated_tokens_ride_along_with_resets() -> None:
    h = CounterHistory(retention=600)
    h.add(0.0, c(10, 30, 15), generated_tokens=1000)
    h.add(5.0, c(10, 30, 15), generated_tokens=1500)  # busy, but no drafts
    h.add(10.0, c(2, 6, 3), generated_tokens=40)  # restart
    w = h.window(600)
    assert w is not None
    assert w.drafts == 2
    assert w.generated_tokens == 500 + 40
    no_counter = CounterHistory(retention=600)
    no_counter.add(0.0, c(1, 1, 1))
    no_counter.add(1.0, c(2, 2, 2))
    w = no_counter.window(600)
    assert w is not None and w.generated_tokens is None


def test_a_reading_without_the_generated_counter_is_not_a_reset() -> None:
    h = CounterHistory(retention=100)
    big = 1_000_000
    h.add(0, c(big, 3 * big, 2 * big, big), generated_tokens=3 * big)
    h.add(1, c(big + 100, 3 * big + 300, 2 * big + 200, big + 100), generated_tokens=3 * big + 300)
    h.add(2, c(big + 200, 3 * big + 600, 2 * big + 400, big + 200), generated_tokens=None)
    w = h.window(10)
    assert w is not None and w.resets == 0 and w.drafts == 200
    assert w.generated_tokens is None  # the newest page has no such counter
    h.add(3, c(big + 300, 3 * big + 900, 2 * big + 600, big + 300), generated_tokens=3 * big + 900)
    w = h.window(10)
    assert w is not None
    assert w.resets == 0 and w.drafts == 300
    assert w.generated_tokens == 900


def test_idle_restart_without_position_series_keeps_the_window() -> None:
    """llama-server restarted and idle: scalars at 0, no per-position series yet."""
    h = CounterHistory(retention=600)
    h.add(0.0, c(0, 0, 0))
    h.add(1.0, c(100, 400, 150, 60, 40, 30, 20))
    assert h.add(2.0, c(0, 0, 0)).reset
    assert h.add(3.0, c(0, 0, 0)).accepted  # used to raise ValueError from zip(strict=True)
    h.add(4.0, c(5, 20, 6, 3, 2, 1, 0))
    w = h.window(600)
    assert w is not None
    assert w.drafts == 105
    assert w.accepted_per_position == (63, 42, 31, 20)
    assert h.max_positions() == 4


def test_totals_past_64_bits_are_rebased_without_changing_any_figure() -> None:
    """A page restarting at the largest count it may publish (2**53) again and again pushes
    the running totals toward 2**63; they are rebased (windows are differences), and every
    window and the lifetime totals equal exact integer arithmetic."""
    big = 2**53
    h = CounterHistory(retention=50)
    expected_total = 0
    readings: list[tuple[float, int]] = []
    for i in range(1100):  # 550 restarts of 2**53 each: about 2**62.1 in all
        drafts = big if i % 2 == 0 else big - 1 - (i % 7)
        h.add(float(i), c(drafts, drafts, drafts // 2, drafts // 2, drafts // 4))
        readings.append((float(i), drafts))
    # The true increases: a drop is a restart (the new value is the increase).
    increases = [0] + [b if b < a else b - a for (_, a), (_, b) in itertools.pairwise(readings)]
    expected_total = sum(increases)
    assert expected_total > 2**62  # the rebase really happened
    totals = h.totals()
    assert totals is not None and totals.drafts == expected_total
    w = h.window(10)
    assert w is not None and w.drafts == sum(increases[-10:])
    assert w.readings == 11 and w.resets == 5


def test_readings_are_rows_of_64_bit_integers_in_one_array() -> None:
    """Memory and collector pauses: the readings are one row each of 64-bit
    integers (reset count, position count, then the totals) in one array, and their times
    in another, not an object a reading."""
    h = CounterHistory(retention=50)
    h.add(0.0, c(1, 2, 1, 1))
    h.add(1.0, c(3, 6, 2, 2))
    assert (len(h._rows), h._rows.stride, len(h._times)) == (2, 2 + 4 + 1, 2)
    assert h._rows._data.typecode == "q" and h._times._data.typecode == "d"
    totals = h.totals()
    assert totals is not None and (totals.drafts, totals.draft_tokens) == (2, 4)


def test_a_rebase_when_a_reading_has_more_positions_than_the_held_ones() -> None:
    """The rebase past 2**62 while the new reading publishes more position series than any
    held reading (the held rows are narrower than the new total): every figure still equals
    exact integer arithmetic."""
    big = 2**53
    h = CounterHistory(retention=1000)
    readings: list[tuple[int, ...]] = []
    for i in range(1030):  # a restart at 2**53 each time: the totals pass 2**62 near the end
        drafts = big if i % 2 == 0 else big - 1
        width = 1 if i < 1025 else 3  # two more position series, five readings from the end
        reading = (drafts, drafts, drafts // 2, *([drafts // 4] * width))
        h.add(float(i), c(*reading))
        readings.append(reading)
    increases: list[tuple[int, ...]] = [(0,) * 6]  # the first reading: no increase
    for a, b in itertools.pairwise(readings):
        a6, b6 = a + (0,) * (6 - len(a)), b + (0,) * (6 - len(b))
        if b[0] < a[0]:  # a restart: the new values are the increase
            increases.append(b6)
        else:  # a series that appears counts from zero
            increases.append(tuple(y - x if k < len(a) else y for k, (x, y) in
                                   enumerate(zip(a6, b6, strict=True))))  # fmt: skip
    total = [sum(column) for column in zip(*increases, strict=True)]
    assert total[0] > 2**62  # the rebase really happened, after the wider readings arrived
    got = h.totals()
    assert got is not None
    assert (got.drafts, got.draft_tokens, got.accepted_tokens) == tuple(total[:3])
    assert got.accepted_per_position == tuple(total[3:])
    for seconds in (3.0, 10.0, 100.0):
        w = h.window(seconds)
        n = int(seconds)
        want = [sum(column) for column in zip(*increases[-n:], strict=True)]
        assert w is not None and (w.drafts, w.accepted_tokens) == (want[0], want[2])
        assert w.accepted_per_position == tuple(want[3:]), seconds


def test_a_counter_going_down_three_times_in_a_row_adds_nothing() -> None:
    """A broken page whose accepted counter reads low three scrapes running, while drafts go
    on rising: the third is taken as a restart, but the drafts' whole value is no increase
    (they did not start again from zero): the window holds only the true increases."""
    h = CounterHistory(retention=600)
    drafts, accepted = 3_000, 2_400
    for t in range(10):
        h.add(t, SpecCounters(drafts, drafts * 2, accepted, (accepted,)))
        drafts, accepted = drafts + 10, accepted + 8
    low = accepted - 1_000  # three readings with the accepted counter far below
    for t in range(10, 13):
        h.add(t, SpecCounters(drafts, drafts * 2, low, (low,)))
        drafts, low = drafts + 10, low + 8
    for t in range(13, 20):
        h.add(t, SpecCounters(drafts, drafts * 2, low, (low,)))
        drafts, low = drafts + 10, low + 8
    w = h.window(600)
    assert w is not None
    # 19 steps of 10 drafts, less the two refused readings' steps, less the restart step.
    assert w.drafts <= 190
    assert w.drafts >= 150
    assert w.resets == 1
