"""What keeping the epochs across restarts costs, in-process (specmon/daemon/persist.py).

Run: ./dev.sh bench state [--targets 1000,10000] [--epochs 12] [--buckets 0] [--repeat 5]
(``--memory``: a real daemon's peak memory reading files of every shape, bench/state_memory.py)

For each count, that many targets, each with one model holding ``--epochs`` epochs (12, the
cap, is the worst case; a target that never changes has one): the snapshot taken on the event
loop (what holds it), the encoding and the atomic write with its fsyncs (in a thread in the
daemon), the file's size, and the read at start (size check, checksum, every value through
its bounds). ``--buckets N``: each model also keeps the cost-curve sums of the epochs whose
curves are kept (the current, the previous and the newest without speculation: 3) in N
concurrency buckets each, k = 4 (issue 55's history basis). Median of ``--repeat`` runs, in a temporary directory, the targets' states
frozen out of the cycle collector's scans as ``specmon run`` does (specmon/process/memory.py).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

from specmon.daemon.config import TargetConfig
from specmon.daemon.persist import SLICE, StateKeeper
from specmon.daemon.target import TargetState
from specmon.logs import get_logger
from specmon.sharding import Shard

NOW = time.time()


def _model(epochs: int) -> dict[str, object]:
    saved = []
    for n in range(1, epochs + 1):
        saved.append({
            "n": n, "start": NOW - 3600.0 * (epochs - n + 1), "end": None if n == epochs
            else NOW - 3600.0 * (epochs - n), "spec": n % 2 == 1, "k": 4 if n % 2 else None,
            "reason": "chain_length" if n > 1 else "first_seen", "note": "",
            "drafts": 123456 * (n % 2), "draft_tokens": 493824 * (n % 2),
            "accepted": 300000 * (n % 2), "generated": 987654, "scrapes": 720,
        })  # fmt: skip
    return {
        "m": {"epochs": saved, "events": [[NOW - 60.0, "engine restarted (its counters fell)"]]}
    }


def _curves(buckets: int) -> dict[str, object]:
    """The saved sums of the kept epochs' curves, ``buckets`` buckets each (k = 4)."""
    from specmon.load.curve import COLUMNS, CurveAccumulator, state_to_dict

    values = [720.0, 1.2e5, 61.3, 2.9e5, 3.1e4, 1.2e5, 1.2e5, 4.9e5, 3.0e5, 0.46, 0.00031,
              2.41, 5.83, 1.1e5, 8.6e4, 6.2e4, 4.1e4]  # fmt: skip
    assert len(values) == len(COLUMNS) + 4
    state = CurveAccumulator.for_epoch().state()
    from specmon.load.curve import SlotSums

    slots = tuple(SlotSums(0.0, b, tuple(v * (1 + b / 7) for v in values)) for b in range(buckets))
    return state_to_dict(type(state)(state.retention, state.slot_seconds, slots))


def _states(count: int, epochs: int, buckets: int = 0) -> list[TargetState]:
    model = _model(epochs)
    curve = _curves(buckets) if buckets else None
    states = []
    for i in range(count):
        state = TargetState(
            TargetConfig(
                name=f"vllm-{i:05d}", url=f"http://10.0.{i // 250}.{i % 250}:8000/metrics"
            ),
            windows=(60.0,),
            retention=70.0,
        )
        state.epochs.engine = "vllm"
        state.epochs.restore(model, now=NOW)
        where = state.epochs.position("m")
        if curve is not None and where is not None:
            state.curves.restore({"m": {str(n): curve for n in where[2]}}, state.epochs)
        states.append(state)
    return states


def _slots(count: int = 10_000) -> int:
    """A cost-curve slot's memory (specmon.load.curve_sums.SLOT_BYTES): tracemalloc over
    ``count`` one-minute slots of one accumulator, one interval each, at k = 0, 4 and 64."""
    import tracemalloc

    from specmon.load.curve_sums import SLOT_BYTES, CurveAccumulator
    from specmon.load.interval import LoadInterval

    for k in (0, 4, 64):
        acc = CurveAccumulator(retention=count * 60.0, slot_seconds=60.0)
        interval = LoadInterval(
            request_steps=400.0, decode_seconds=8.0, decode_tokens=1600.0, engine_steps=100.0,
            slot_steps=400.0, drafts=300, draft_tokens=300 * k, accepted_tokens=100 * k,
            accepted_per_position=tuple(range(k, 0, -1)), seconds=60.0,
        )  # fmt: skip
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            acc.add(60.0 * i + 30.0, interval)
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        slots = len(acc.state().slots)
        print(f"k = {k}: {used / slots:.0f} bytes a slot ({slots} slots; SLOT_BYTES {SLOT_BYTES})")
    return 0


def _median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms"


def main(argv: list[str]) -> int:
    if "--memory" in argv:  # what reading a file costs a real daemon (bench/state_memory.py)
        from bench import state_memory

        return state_memory.main(argv)
    if "--slots" in argv:  # what one cost-curve slot costs in memory
        return _slots()
    parser = argparse.ArgumentParser(prog="bench state")
    parser.add_argument("--targets", default="1000,10000")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--buckets", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    for count in (int(n) for n in args.targets.split(",")):
        states = _states(count, args.epochs, args.buckets)
        gc.collect()
        gc.freeze()  # as `specmon run` keeps its long-lived objects out of the collector's scans
        snap, write, read = [], [], []
        size = 0
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                keeper = StateKeeper(directory=Path(tmp), shard=Shard(), log=get_logger(),
                                     max_age=90 * 86400.0)  # fmt: skip
                started = time.perf_counter()
                keeper.open()
                read.append(time.perf_counter() - started)
                started = time.perf_counter()
                body = keeper.snapshot(states)  # the daemon's takes it in slices of SLICE
                snap.append(time.perf_counter() - started)
                started = time.perf_counter()
                size = keeper.write_now(body)
                write.append(time.perf_counter() - started)
                keeper.close()
        print(
            f"{count} targets x {args.epochs} epochs, {args.buckets} curve buckets: file {size / 1e6:.2f} MB "
            f"({size / count:.0f} B a target); snapshot on the loop {_median_ms(snap)} "
            f"(in slices of {SLICE} targets: {max(1, -(-count // SLICE))}); "
            f"encode + write + fsyncs (thread) {_median_ms(write)}; read at start "
            f"{_median_ms(read[1:] or read)} (median of {args.repeat})"
        )
    return 0
