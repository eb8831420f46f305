"""The daemon's verdict as an operator sees it while ``specmon measure`` drives a level
(issue 54: "the verdict at concurrency 1 and 4 is within 15 % of ``specmon measure`` on the
same pair, its interval recorded beside it").

The verdict is for the bucket of the latest interval (specmon/answer/reads.py), so it is
read *during* each level: :class:`VerdictWatch` polls ``/api/v1/targets`` from a thread once a
second (the daemon scrapes every few seconds) and keeps what changed; :func:`level_verdict`
takes, among the reads made while a level ran (or right after it, before the next), the last
whose verdict was for that level's bucket on a measured basis (``twin`` or ``profile``): the
bucket as full as it got. :func:`check_verdicts` holds it to measure's tokens/s ratio.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from types import TracebackType
from typing import Any

import pytest

from specmon.load import DEFAULT_SCHEME, ProfileLevel
from tests.realengines.daemon_ab import SPEEDUP_AGREEMENT
from tests.support.daemon import Daemon

#: A verdict on a measured basis (anything else rests on a configured or guessed cost).
MEASURED_BASES = ("twin", "profile")


@dataclass(frozen=True)
class VerdictRead:
    """One read of a window's verdict."""

    wall: float
    #: The verdict's bucket (the load figures' ``bucket``) and the load it was read at.
    bucket: str | None
    read_concurrency: float | None
    basis: str
    speedup: float | None
    interval: tuple[float, float] | None
    #: "measured" (the window's own bucket), "interpolated" / "extrapolated" (the cost curve).
    read: str | None


class VerdictWatch:
    """Polls one target's window verdict from a thread (a context manager: stops on exit)."""

    def __init__(self, d: Daemon, *, target: str, window: str, every: float = 1.0) -> None:
        self._d, self._target, self._window, self._every = d, target, window, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verdict-watch", daemon=True)
        self._lock = threading.Lock()
        self._reads: list[VerdictRead] = []

    def __enter__(self) -> VerdictWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def reads(self) -> list[VerdictRead]:
        with self._lock:
            return list(self._reads)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                api = self._d.targets()
            except (AssertionError, OSError, ValueError):
                continue  # the daemon busy or stopping: the next poll reads it
            found = _read(api, self._target, self._window)
            if found is None:
                continue
            with self._lock:
                last = self._reads[-1] if self._reads else None
                if last is None or asdict(last) | {"wall": 0} != asdict(found) | {"wall": 0}:
                    self._reads.append(found)


def _read(api: dict[str, Any], target: str, window: str) -> VerdictRead | None:
    entry = api.get(target)
    if not entry or not entry.get("models"):
        return None
    found = next((w for w in entry["models"][0]["windows"] if w["window"] == window), None)
    if found is None or found.get("verdict") is None:
        return None
    verdict = found["verdict"]
    interval = verdict.get("speedup_interval")
    return VerdictRead(
        wall=time.time(),
        bucket=verdict.get("bucket"),
        read_concurrency=verdict.get("concurrency"),
        basis=verdict["basis"],
        speedup=verdict.get("speedup"),
        interval=(interval[0], interval[1]) if interval else None,
        read=verdict.get("state"),
    )


def level_verdict(
    reads: Sequence[VerdictRead],
    *,
    level: ProfileLevel,
    start: float,
    end: float,
    bases: Sequence[str] = MEASURED_BASES,
) -> VerdictRead | None:
    """The last verdict read in ``[start, end)`` for the bucket of ``level`` (by the
    speculative engine's concurrency over the level, as check_levels finds its bucket) on one
    of ``bases`` (a measured basis: ``history`` for a server read against its own past);
    None when there was none."""
    concurrency = level.speculative.concurrency
    assert concurrency is not None, level
    label = DEFAULT_SCHEME.bucket_of(concurrency).label
    matching = [
        r
        for r in reads
        if start <= r.wall < end
        and r.bucket == label
        and r.basis in bases
        and r.speedup is not None
    ]
    return matching[-1] if matching else None


@dataclass(frozen=True)
class VerdictRow:
    level: ProfileLevel
    verdict: VerdictRead | None
    #: Every read of the level's span (what a failure shows).
    seen: tuple[VerdictRead, ...]


def check_verdicts(
    rows: Sequence[VerdictRow],
    *,
    asserted: Sequence[int],
    agreement: float = SPEEDUP_AGREEMENT,
) -> None:
    """For each level in ``asserted`` (measure's concurrency): a measured-basis verdict was
    read for its bucket, with a 95 % interval holding its speed-up, and that speed-up is
    within ``agreement`` of measure's tokens/s ratio."""
    for row in rows:
        if row.level.concurrency not in asserted:
            continue
        v = row.verdict
        seen = [(r.bucket, r.basis, r.read, r.speedup) for r in row.seen]
        assert v is not None and v.speedup is not None, (row.level.concurrency, seen)
        assert v.interval is not None, (row.level.concurrency, v)
        low, high = v.interval
        assert low <= v.speedup <= high, v
        ratio = row.level.speed_ratio
        assert ratio is not None
        assert v.speedup == pytest.approx(ratio, rel=agreement), (
            row.level.concurrency, v, ratio,
        )  # fmt: skip


def report_verdicts(rows: Sequence[VerdictRow], write: Callable[[str], object] = print) -> None:
    """The verdicts beside measure (``pytest -s``; appended as ``{"verdicts": [...]}`` to the
    JSON file named by ``SPECMON_LOAD_REPORT`` when set)."""
    write(
        "\nlevel  verdict bucket  read at n  basis  read          verdict  95 % interval"
        "    measure tok/s ratio  off"
    )
    for row in rows:
        v, ratio = row.verdict, row.level.speed_ratio
        if v is None or v.speedup is None or ratio is None:
            write(f"{row.level.concurrency:>5}  no measured verdict read for its bucket")
            continue
        interval = f"{v.interval[0]:.3f}-{v.interval[1]:.3f}" if v.interval else "-"
        n = "-" if v.read_concurrency is None else f"{v.read_concurrency:.2f}"
        write(
            f"{row.level.concurrency:>5}  {v.bucket or '-':>14}  {n:>9}  {v.basis:>5}  "
            f"{v.read or '-':<12}  {v.speedup:>7.3f}  {interval:<15}  {ratio:>19.3f}  "
            f"{(v.speedup / ratio - 1) * 100:+.1f} %"
        )
    path = os.environ.get("SPECMON_LOAD_REPORT")
    if path:
        record = {
            "verdicts": [
                {
                    "level": row.level.concurrency,
                    "measure_speed_ratio": row.level.speed_ratio,
                    "verdict": asdict(row.verdict) if row.verdict else None,
                    "reads": len(row.seen),
                }
                for row in rows
            ]
        }
        with open(path, "a") as out:
            out.write(json.dumps(record) + "\n")
