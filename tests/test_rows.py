"""specmon.rows.Rows against a list of lists, over random appends of changing widths,
removals from the front and reservations; the ring's wrap-around and its one allocation."""

from __future__ import annotations

import math
import random

import pytest

from specmon.engines import SpecCounters
from specmon.rows import MAX_RESERVE, Rows, rows_for


def test_rows_behave_like_a_list_of_zero_padded_rows() -> None:
    rng = random.Random(5)
    rows: Rows[int] = Rows("q")
    model: list[list[int]] = []
    newest: list[int] = []
    widest = peak = reserved = 0
    widths = (3, 3, 3, 4, 2, 6)
    for step in range(4000):
        if rng.random() < 0.005:
            asked = rng.randint(1, 300)
            rows.reserve(asked)
            reserved = max(reserved, asked) if rows.stride else reserved
        if rng.random() < 0.55 or not model:
            width = widths[(step // 400) % len(widths)] if rng.random() < 0.98 else 1
            row = [rng.randint(-(2**40), 2**40) for _ in range(width)]
            rows.append(tuple(row))
            newest = row
            widest = max(widest, width)
            model.append(row)
            peak = max(peak, len(model))
        else:
            rows.popleft()
            model.pop(0)
        assert len(rows) == len(model)
        assert len(model) <= rows.capacity <= max(8, peak + peak // 8 + 8, reserved)
        if not model:
            continue
        stride = rows.stride
        assert stride == widest  # the widest row ever appended
        padded = [r + [0] * (stride - len(r)) for r in model]
        i = rng.randrange(len(model))
        assert list(rows.row(i)) == padded[i]
        assert rows.cell(i, stride - 1) == padded[i][stride - 1]
        assert list(rows.newest()) == newest
        first = rng.randrange(len(model))
        last = rng.randrange(first, len(model))
        column = rng.randrange(stride)
        want = max(r[column] for r in padded[first : last + 1])
        assert rows.column_max(column, first, last) == want
        assert rows.column_max(0) == max(r[0] for r in padded)
    assert len(rows._data) == rows.capacity * rows.stride


def test_a_full_ring_allocates_nothing_more() -> None:
    """Once reserved, appending and dropping rows writes in place: the same array, whatever
    the number of rows that passed through (the point of the ring: no realloc churn)."""
    rows: Rows[float] = Rows("d")
    rows.append((0.0, 0.0, 0.0))
    rows.reserve(20)
    data = rows._data
    for n in range(1, 500):
        rows.append((float(n), float(2 * n), float(3 * n)))
        if len(rows) > 19:
            rows.popleft()
        assert rows._data is data and rows.capacity == 20
    assert [rows.cell(i, 1) for i in range(len(rows))] == [2.0 * n for n in range(481, 500)]
    assert rows.bisect_left(485.0) == 4
    rows.reserve(10)  # never shrinks
    assert rows.capacity == 20
    rows.reserve(10**9)
    assert rows.capacity == MAX_RESERVE


@pytest.mark.parametrize("dropped", [0, 3, 9, 10])
def test_sorted_times_bisect_across_the_wrap(dropped: int) -> None:
    times: Rows[float] = Rows("d")
    assert times.bisect_left(5.0) == 0 and times.column_max(0) is None
    times.append((0.0,))
    times.reserve(10)
    for t in range(1, 10):
        times.append((float(t),))
    for _ in range(dropped):
        times.popleft()
    for t in range(10, 10 + dropped):  # written over the dropped slots: the ring wraps
        times.append((float(t),))
    held = [float(t) for t in range(dropped, 10 + dropped)]
    assert times.capacity == 10 and [times.cell(i, 0) for i in range(10)] == held
    for probe in [x / 2 for x in range(-2, 2 * (12 + dropped))]:
        want = next((i for i, t in enumerate(held) if t >= probe), len(held))
        assert times.bisect_left(probe) == want, probe
    assert times.column_max(0, 2, 8) == held[8]
    pairs: Rows[float] = Rows("d")  # the same over rows of two (the general search)
    for when in held:
        pairs.append((when, -when))
    assert [pairs.bisect_left(p) for p in (held[0], held[4] + 0.5, 99.0)] == [0, 5, 10]


def test_replace_and_clear() -> None:
    rows: Rows[int] = Rows("q")
    rows.append((1, 2, 3))
    rows.append((4, 5))
    rows.replace(1, (7,))
    assert [list(rows.row(i)) for i in range(2)] == [[1, 2, 3], [7, 0, 0]]
    with pytest.raises(ValueError, match="wider"):
        rows.replace(0, (1, 2, 3, 4))
    rows.clear()
    assert len(rows) == 0 and rows.stride == 0 and rows.capacity == 0
    rows.append((9,))
    assert list(rows.row(0)) == [9] and rows.column_max(0) == 9


def test_an_endless_retention_grows_the_ring_as_it_fills() -> None:
    """``retention=inf`` (``windows.increase`` uses it) reserves nothing ahead: the rings
    grow by an eighth when full, and every reading is kept."""
    from specmon.load import LoadCounters, LoadHistory
    from specmon.windows import CounterHistory

    assert rows_for(retention=math.inf, intervals=8, span=40.0) is None
    assert rows_for(retention=100.0, intervals=8, span=0.0) is None
    assert rows_for(retention=100.0, intervals=8, span=40.0) == 22
    assert rows_for(retention=1e12, intervals=8, span=40.0) == MAX_RESERVE
    counters = CounterHistory(retention=math.inf)
    load = LoadHistory(retention=math.inf)
    for n in range(60):
        counters.add(float(n), SpecCounters(n, 3 * n, 2 * n, (n,)))
        load.add(float(n), LoadCounters(request_steps=10.0 * n, decode_seconds=0.1 * n,
                                         decode_tokens=20.0 * n))  # fmt: skip
    window = counters.window(math.inf)
    assert window is not None and window.readings == 60 and window.drafts == 59
    assert len(load._rows) == 59 and load._rows.capacity >= 59
