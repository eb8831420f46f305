"""A queue of equal-width rows of numbers held end to end in one :class:`array.array`.

The rolling windows keep one record per reading (:class:`specmon.windows.CounterHistory`) or
per interval between readings (:class:`specmon.load.LoadHistory`) for as long as the longest
window: 182 records a target with the default 15-minute window at 5 s. Held as a Python object
each (a ``bytes``, a tuple, a float), a record costs its object header and a pointer in a
deque besides its numbers; here it costs its numbers only, 8 bytes a column (issue 15), and a
history is one object for the cycle collector, not one per record.

Every held row is as wide as the widest row appended so far (``stride``): a narrower row is
padded with zeros, and a wider one re-lays the rows held (rare: an engine's number of
per-position series changed). The newest row's own width is kept (:meth:`Rows.newest`). Rows
leave from the front; the dead front is dropped once it is a sixteenth of the array (a
``memmove`` of the live part, every 16 rows or more), so the array stays within about 7 % of
the live rows.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["Rows"]

_N = TypeVar("_N", int, float)

#: The dead front is dropped when it holds at least this many rows and a sixteenth of the array.
_DROP_ROWS = 16


class Rows(Generic[_N]):
    """Rows of ``typecode`` numbers ("d": doubles, "q": 64-bit integers), oldest first."""

    __slots__ = ("_data", "_head", "_newest_width", "_stride", "_typecode")

    def __init__(self, typecode: str) -> None:
        self._typecode = typecode
        self._data: array[_N] = array(typecode)
        self._head = 0  # index in _data of the oldest held row
        self._stride = 0
        self._newest_width = 0

    def __len__(self) -> int:
        return (len(self._data) - self._head) // self._stride if self._stride else 0

    @property
    def stride(self) -> int:
        """Numbers a held row takes (the widest row appended)."""
        return self._stride

    def _zeros(self, count: int) -> array[_N]:
        return array(self._typecode, bytes(self._data.itemsize * count))

    def append(self, row: array[_N] | tuple[_N, ...]) -> None:
        width, stride = len(row), self._stride
        if width > stride:
            if stride and len(self._data) > self._head:  # re-lay the held rows with zeros
                data, pad = self._data, self._zeros(width - stride)
                wider: array[_N] = array(self._typecode)
                for at in range(self._head, len(data), stride):
                    wider.extend(data[at : at + stride])
                    wider.extend(pad)
                self._data, self._head = wider, 0
            self._stride = stride = width
        self._data.extend(row)
        if width < stride:
            self._data.extend(self._zeros(stride - width))
        self._newest_width = width

    def row(self, index: int) -> array[_N]:
        """Held row ``index`` (0: the oldest), ``stride`` wide: a copy."""
        at = self._head + index * self._stride
        return self._data[at : at + self._stride]

    def cell(self, index: int, column: int) -> _N:
        return self._data[self._head + index * self._stride + column]

    def newest(self) -> array[_N]:
        """The newest row as wide as it was appended."""
        at = len(self._data) - self._stride
        return self._data[at : at + self._newest_width]

    def replace(self, index: int, row: Iterable[_N]) -> None:
        """Write ``row`` (at most ``stride`` numbers; the rest of the row becomes 0) over held
        row ``index``."""
        values = array(self._typecode, row)
        if len(values) > self._stride:
            raise ValueError("a replacing row may not be wider than the rows held")
        at = self._head + index * self._stride
        self._data[at : at + self._stride] = values + self._zeros(self._stride - len(values))

    def column_max(self, column: int, first: int = 0, last: int | None = None) -> _N | None:
        """The largest value of ``column`` in held rows ``first`` to ``last`` (inclusive;
        default: the newest), or None when there are none."""
        stop = len(self) if last is None else last + 1
        if stop <= first:
            return None
        at = self._head + column
        return max(self._data[at + first * self._stride : at + stop * self._stride : self._stride])

    def bisect_left(self, value: _N, column: int = 0) -> int:
        """The index of the first held row whose ``column`` is ``value`` or more, the column
        being sorted (a time); ``len`` when there is none."""
        stride, at = self._stride, self._head + column
        if not stride:
            return 0
        if stride == 1:
            return bisect.bisect_left(self._data, value, at) - at
        return bisect.bisect_left(self._data[at::stride], value)

    def popleft(self) -> None:
        """Drop the oldest row."""
        self._head += self._stride
        data = self._data
        if self._head >= len(data):
            del data[:]
            self._head = 0
        elif self._head >= _DROP_ROWS * self._stride and 16 * self._head >= len(data):
            del data[: self._head]  # move the live rows down: a rare memmove
            self._head = 0

    def clear(self) -> None:
        del self._data[:]
        self._head = self._stride = self._newest_width = 0
