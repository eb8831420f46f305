"""``--shard I/N``: split a target list between N replicas with no coordination.

A target belongs to shard ``hashmod(name, N)``, computed exactly as Prometheus's ``hashmod``
relabel action does (``model/relabel/relabel.go``): the MD5 digest of the value, its last
8 bytes read as a big-endian unsigned 64-bit integer, modulo N. So a replica running
``--shard 1/3`` keeps the same targets as a Prometheus job with

```yaml
relabel_configs:
  - {source_labels: [name], modulus: 3, target_label: __tmp_hash, action: hashmod}
  - {source_labels: [__tmp_hash], regex: "1", action: keep}
```

and every target lands in exactly one shard. Shards are numbered from 0, like hashmod's values.
Pure: no I/O, no state.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Shard", "hashmod", "parse_shard"]

T = TypeVar("T")

#: More shards than this is a typo, not a deployment.
MAX_SHARDS = 10_000
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def hashmod(value: str, modulus: int) -> int:
    """Prometheus's ``hashmod``: md5(value), last 8 bytes big-endian, mod ``modulus``."""
    if modulus < 1:
        raise ValueError("modulus must be at least 1")
    digest = hashlib.md5(value.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % modulus


@dataclass(frozen=True, slots=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"the shard count must be between 1 and {MAX_SHARDS}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"shard {self.index} does not exist: shards of {self.count} are numbered "
                f"0 to {self.count - 1}"
            )

    def keeps(self, name: str) -> bool:
        return self.count == 1 or hashmod(name, self.count) == self.index

    def select(self, items: Iterable[T], *, key: Callable[[T], str]) -> list[T]:
        """The items whose ``key`` (the target name) falls in this shard, in order."""
        return [item for item in items if self.keeps(key(item))]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"I/N"`` -> :class:`Shard`; ValueError with a message an operator can act on."""
    match = _SHARD.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a shard like 0/3 (index/count, index from 0)")
    return Shard(index=int(match.group(1)), count=int(match.group(2)))
