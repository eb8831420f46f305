"""A queue of equal-width rows of numbers held in one :class:`array.array` used as a ring.

The rolling windows keep one record per reading (:class:`specmon.windows.CounterHistory`) or
per interval between readings (:class:`specmon.load.LoadHistory`) for as long as the longest
window: 182 records a target with the default 15-minute window at 5 s. Held as a Python object
each (a ``bytes``, a tuple, a float), a record costs its object header and a pointer in a
deque besides its numbers; here it costs its numbers only, 8 bytes a column, and a
history is one object for the cycle collector, not one per record.

The array is allocated whole, ``capacity`` rows, and rows are written in place around it: a
history that has filled its retention never allocates again. That matters as much as the
bytes: 1,000 arrays growing a little at every scrape (``array.extend``) and shrinking when
their dead front is dropped made glibc move and re-move them, and the daemon's RSS grew as
fast as with an object per record (bench/results/HISTORY.md). The owner says how
many rows it expects (:meth:`Rows.reserve`, from its retention and the interval between its
readings); past that the ring grows by an eighth.

Every held row is as wide as the widest row appended so far (``stride``): a narrower row is
padded with zeros, and a wider one re-lays the rows held (rare: an engine's number of
per-position series changed). The newest row's own width is kept (:meth:`Rows.newest`).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["MAX_RESERVE", "Rows", "rows_for"]

_N = TypeVar("_N", int, float)

#: The most rows :meth:`Rows.reserve` allocates ahead (a longer history grows as it fills).
MAX_RESERVE = 8192
_FIRST_CAPACITY = 8


def rows_for(*, retention: float, intervals: int, span: float) -> int | None:
    """Rows a ring needs for ``retention`` seconds when ``intervals`` rows came in ``span``
    seconds (two more for jitter, at most :data:`MAX_RESERVE`); None when that says nothing
    (no time passed, or an endless retention: the ring then grows as it fills)."""
    if span <= 0 or intervals <= 0 or not math.isfinite(retention):
        return None
    return min(math.ceil(intervals * retention / span) + 2, MAX_RESERVE)


class Rows(Generic[_N]):
    """Rows of ``typecode`` numbers ("d": doubles, "q": 64-bit integers), oldest first."""

    __slots__ = ("_capacity", "_count", "_data", "_first", "_newest_width", "_stride", "_typecode")

    def __init__(self, typecode: str) -> None:
        self._typecode = typecode
        self._data: array[_N] = array(typecode)
        self._first = 0  # ring slot of the oldest held row
        self._count = 0
        self._capacity = 0  # rows the array holds
        self._stride = 0
        self._newest_width = 0

    def __len__(self) -> int:
        return self._count

    @property
    def stride(self) -> int:
        """Numbers a held row takes (the widest row appended)."""
        return self._stride

    @property
    def capacity(self) -> int:
        """Rows the ring holds before it grows."""
        return self._capacity

    def _at(self, index: int) -> int:
        """Where held row ``index`` (0: the oldest) starts in the array."""
        slot = self._first + index
        if slot >= self._capacity:
            slot -= self._capacity
        return slot * self._stride

    def _zeros(self, count: int) -> array[_N]:
        return array(self._typecode, bytes(self._data.itemsize * count))

    def _relay(self, capacity: int, stride: int) -> None:
        """A new array of ``capacity`` rows of ``stride``, the held rows first, in order."""
        data = self._zeros(capacity * stride)
        old = self._stride
        for index in range(self._count):
            at = self._at(index)
            data[index * stride : index * stride + old] = self._data[at : at + old]
        self._data, self._first, self._capacity, self._stride = data, 0, capacity, stride

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows (at most :data:`MAX_RESERVE`) in one allocation; never
        shrinks, and does nothing before the first row (the width is not known)."""
        rows = min(rows, MAX_RESERVE)
        if self._stride and rows > self._capacity:
            self._relay(rows, self._stride)

    def reserve_for(self, *, retention: float, intervals: int, span: float) -> None:
        """:meth:`reserve` what :func:`rows_for` says ``retention`` needs, if anything."""
        expected = rows_for(retention=retention, intervals=intervals, span=span)
        if expected is not None:
            self.reserve(expected)

    def append(self, row: array[_N] | tuple[_N, ...]) -> None:
        width, stride = len(row), self._stride
        if width > stride or self._count >= self._capacity:
            grown = self._capacity + max(self._capacity >> 3, _FIRST_CAPACITY)
            self._relay(
                grown if self._count >= self._capacity else self._capacity, max(width, stride)
            )
            stride = self._stride
        at = self._at(self._count)
        data = self._data
        if isinstance(row, array):
            data[at : at + width] = row
        else:
            data[at : at + width] = array(self._typecode, row)
        if width < stride:
            data[at + width : at + stride] = self._zeros(stride - width)
        self._count += 1
        self._newest_width = width

    def row(self, index: int) -> array[_N]:
        """Held row ``index`` (0: the oldest), ``stride`` wide: a copy."""
        slot = self._first + index  # _at(), inline: the windows' every scrape reads rows
        if slot >= self._capacity:
            slot -= self._capacity
        at = slot * self._stride
        return self._data[at : at + self._stride]

    def cell(self, index: int, column: int) -> _N:
        slot = self._first + index
        if slot >= self._capacity:
            slot -= self._capacity
        return self._data[slot * self._stride + column]

    def newest(self) -> array[_N]:
        """The newest row as wide as it was appended."""
        at = self._at(self._count - 1)
        return self._data[at : at + self._newest_width]

    def replace(self, index: int, row: Iterable[_N]) -> None:
        """Write ``row`` (at most ``stride`` numbers; the rest of the row becomes 0) over held
        row ``index``."""
        values = array(self._typecode, row)
        if len(values) > self._stride:
            raise ValueError("a replacing row may not be wider than the rows held")
        at = self._at(index)
        self._data[at : at + self._stride] = values + self._zeros(self._stride - len(values))

    def column_max(self, column: int, first: int = 0, last: int | None = None) -> _N | None:
        """The largest value of ``column`` in held rows ``first`` to ``last`` (inclusive;
        default: the newest), or None when there are none."""
        last = self._count - 1 if last is None else last
        if last < first:
            return None
        stride, data = self._stride, self._data
        a, b = self._at(first) + column, self._at(last) + column
        if a <= b:
            return max(data[a : b + 1 : stride])
        return max(max(data[a::stride]), max(data[column : b + 1 : stride]))

    def bisect_left(self, value: _N, column: int = 0) -> int:
        """The index of the first held row whose ``column`` is ``value`` or more, the column
        being sorted (a time); ``len`` when there is none."""
        count, stride = self._count, self._stride
        if not count:
            return 0
        if stride == 1:  # the two runs of the ring, searched in C
            data, first, capacity = self._data, self._first, self._capacity
            end = first + count
            if end <= capacity:
                return bisect.bisect_left(data, value, first, end) - first
            if value <= data[capacity - 1]:
                return bisect.bisect_left(data, value, first, capacity) - first
            return capacity - first + bisect.bisect_left(data, value, 0, end - capacity)
        low, high = 0, count
        while low < high:
            middle = (low + high) // 2
            if self.cell(middle, column) < value:
                low = middle + 1
            else:
                high = middle
        return low

    def popleft(self) -> None:
        """Drop the oldest row (its slot is written over later)."""
        self._count -= 1
        self._first = self._first + 1 if self._first + 1 < self._capacity else 0

    def clear(self) -> None:
        self._data = array(self._typecode)
        self._first = self._count = self._capacity = self._stride = self._newest_width = 0
