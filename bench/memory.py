"""What one target holds in the daemon, in-process: ``tracemalloc`` over the per-scrape path.

Run: ./dev.sh bench memory [--targets 50] [--scrapes 80] [--interval 5] [--windows 1m,5m]
[--top 12]

``--targets`` vLLM targets (a ``TargetState`` each, wired to one ``Exposition`` as ``specmon
run`` wires them) are fed the simulator's pages (:func:`bench.loadcost.simulated_pages`: the
real vLLM 0.32.0 format under the demo's load model, ``requests_running`` cycling so the load
history fills several concurrency buckets) ``--interval`` simulated seconds apart; the
default 80 scrapes at 5 s fill a 5m window. The memory still allocated at the end, against a
snapshot taken before the targets were made, is divided by the targets and listed by source
line (the largest first): the windows, the load history, the rendered fragments. No network,
no subprocess; the figure excludes the interpreter and libraries (the daemon's RSS adds them).
"""

from __future__ import annotations

import argparse
import gc
import platform
import tracemalloc

from bench.loadcost import simulated_pages
from specmon.config_values import parse_duration
from specmon.daemon.config import TargetConfig
from specmon.daemon.exposition import Exposition
from specmon.daemon.target import TargetState
from specmon.engines import read_page


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench memory")
    parser.add_argument("--targets", type=int, default=50)
    parser.add_argument("--scrapes", type=int, default=80)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--windows", default="1m,5m")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    windows = tuple(parse_duration(w) for w in args.windows.split(","))
    pages = simulated_pages(speculation=True, scrapes=args.scrapes, interval=args.interval, seed=1)
    exposition = Exposition()
    gc.collect()
    tracemalloc.start(1)
    before = tracemalloc.take_snapshot()
    states = [
        TargetState(
            TargetConfig(name=f"t{i}", url=f"http://127.0.0.1:1/t{i}"),
            windows=windows,
            retention=max(windows) + 2 * args.interval,
            on_view=exposition.update,
        )
        for i in range(args.targets)
    ]
    for scrape, page in enumerate(pages):
        at = scrape * args.interval
        for state in states:
            state.observe(read_page(page), mono=at, wall=at, duration=0.005)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    stats = after.compare_to(before, "lineno")
    total = sum(s.size_diff for s in stats)
    print(
        f"Python {platform.python_version()}; {args.targets} vLLM targets x {args.scrapes} "
        f"scrapes {args.interval:g} s apart (simulated), windows {args.windows}: "
        f"{total / args.targets / 1024:.1f} KiB a target"
    )
    print()
    print("| KiB a target | allocated at |")
    print("|---|---|")
    for stat in stats[: args.top]:
        frame = stat.traceback[0]
        print(
            f"| {stat.size_diff / args.targets / 1024:.1f} | {frame.filename.split('/specmon/')[-1]}:{frame.lineno} |"
        )
    assert states  # held until after the snapshot
    return 0
