"""Every configuration change kept (issue 64): a target's (or its group's) changes, newest
last, each with its last answer. Pure: no I/O.

The answer to "did the change help?" is made for each model's newest change only (the current
epoch against the previous one, daemon/epoch_curves.py). When a newer change comes (k changed
again, or a ``specmon mark``), the older change's last answer is kept here, frozen, instead of
being erased: its epochs' curve data may be let go later, its answer is not. At most
:data:`MAX_CHANGES` changes are kept per target, the oldest let go first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["MAX_CHANGES", "ChangeKey", "ChangeLog"]

#: Changes kept per target (over its models), the newest of each model among them.
MAX_CHANGES = 20

#: A change: its model and its epochs' numbers (before, after).
ChangeKey = tuple[str, int, int]

T = TypeVar("T")


class ChangeLog(Generic[T]):
    """A target's changes, oldest first: each model's newest replaced at every answer, older
    ones frozen at their last answer."""

    __slots__ = ("_items", "max_changes")

    def __init__(self, items: Iterable[tuple[ChangeKey, T]] = (), *,
                 max_changes: int = MAX_CHANGES) -> None:  # fmt: skip
        self._items: dict[ChangeKey, T] = {}
        self.max_changes = max_changes
        for key, item in items:
            self._put(key, item)

    def update(self, newest: Iterable[tuple[ChangeKey, T]]) -> tuple[T, ...]:
        """Each model's newest change and its answer now; every change kept, oldest first."""
        changed = False
        for key, item in newest:
            if self._items.get(key) is not item:
                self._put(key, item)
                changed = True
        if changed:
            self._trim()
        return tuple(self._items.values())

    def _put(self, key: ChangeKey, item: T) -> None:
        if key not in self._items:
            # A change renumbered (epochs merged at a late restore) replaces its older key.
            for old in [k for k in self._items if k[0] == key[0] and k[2] == key[2]]:
                del self._items[old]
        self._items[key] = item

    def _trim(self) -> None:
        while len(self._items) > self.max_changes:
            del self._items[next(iter(self._items))]

    def items(self) -> tuple[tuple[ChangeKey, T], ...]:
        return tuple(self._items.items())

    def __len__(self) -> int:
        return len(self._items)

    def copy(self) -> ChangeLog[T]:
        return ChangeLog(self._items.items(), max_changes=self.max_changes)
