"""specmon.rows.Rows against a list of lists, over random appends of changing widths and
removals from the front."""

from __future__ import annotations

import random

import pytest

from specmon.rows import Rows


def test_rows_behave_like_a_list_of_zero_padded_rows() -> None:
    rng = random.Random(5)
    rows: Rows[int] = Rows("q")
    model: list[list[int]] = []
    newest: list[int] = []
    widest = 0
    widths = (3, 3, 3, 4, 2, 6)
    for step in range(3000):
        if rng.random() < 0.55 or not model:
            width = widths[(step // 400) % len(widths)] if rng.random() < 0.98 else 1
            row = [rng.randint(-(2**40), 2**40) for _ in range(width)]
            rows.append(tuple(row))
            newest = row
            widest = max(widest, width)
            model.append(row)
        else:
            rows.popleft()
            model.pop(0)
        assert len(rows) == len(model)
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
        assert rows.column_max(0, first, last) == max(r[0] for r in padded[first : last + 1])
        assert rows.column_max(0) == max(r[0] for r in padded)
    # the array never holds much more than the live rows (the dead front is dropped)
    assert len(rows._data) <= rows.stride * (len(model) + 16 + len(model) // 15 + 1)


def test_sorted_times_bisect_and_replace_and_clear() -> None:
    times: Rows[float] = Rows("d")
    assert times.bisect_left(5.0) == 0 and times.column_max(0) is None
    for t in range(100):
        times.append((float(t),))
    for _ in range(40):
        times.popleft()
    assert len(times) == 60 and times.cell(0, 0) == 40.0
    assert times.bisect_left(39.0) == 0
    assert times.bisect_left(55.0) == 15
    assert times.bisect_left(55.5) == 16
    assert times.bisect_left(1000.0) == 60
    rows: Rows[int] = Rows("q")
    rows.append((1, 2, 3))
    rows.append((4, 5))
    rows.replace(1, (7,))
    assert [list(rows.row(i)) for i in range(2)] == [[1, 2, 3], [7, 0, 0]]
    with pytest.raises(ValueError, match="wider"):
        rows.replace(0, (1, 2, 3, 4))
    rows.clear()
    assert len(rows) == 0 and rows.stride == 0
    rows.append((9,))
    assert list(rows.row(0)) == [9] and rows.column_max(0) == 9
