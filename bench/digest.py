"""Every figure the demo's fleet exports, fed in-process at fixed simulated times, hashed: a
change that must not move any figure (a faster path, a cache) prints the same digests.

Run: ./dev.sh bench digest [--seconds 1500] [--every 250] [--curve-retention 5m]

The demo's engines (``specmon demo``'s fleet and configuration: twins on vLLM and TGI with
loads cycling across the crossover, a target whose own past is its baseline, every engine)
are ticked at 1 s steps from clocks pinned at construction (their pages depend on nothing
else), each page goes through ``read_page`` and ``TargetState.observe`` as the daemon wires
them, and after each step the sha256 of the exported target families and of every target's
view is updated. One line per ``--every`` seconds and the final digests; compare two trees
with ``PYTHONPATH=TREE`` or a worktree (issue 54's cost: bench/RESULTS.md). Single core, about
20 s for 1,500 seconds; bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

from specmon.cli.demo import _config_yaml, demo_fleet
from specmon.daemon.config import parse_config
from specmon.daemon.exposition import Exposition
from specmon.daemon.target import TargetState, Twins
from specmon.engines import read_page
from specmon.sim.server import VirtualTarget

__all__ = ["main"]

#: The clocks every simulated engine starts from (its pages then depend only on the seed and
#: the simulated time: a started time read from the real clock made the floating-point
#: elapsed time, and so a phase boundary, differ from run to run).
START, WALL = 1000.0, 1.7e9


def pinned_fleet() -> list[VirtualTarget]:
    monotonic, wall = time.monotonic, time.time
    time.monotonic, time.time = (lambda: START), (lambda: WALL)
    try:
        fleet = demo_fleet()
    finally:
        time.monotonic, time.time = monotonic, wall
    if any(t.started != START for t in fleet):
        raise RuntimeError("a simulated engine did not start from the pinned clock")
    return fleet


class _Addresses:
    def __init__(self, fleet: list[VirtualTarget]) -> None:
        self.addresses = {t.name: f"http://127.0.0.1:1/t/{t.name}" for t in fleet}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench digest")
    p.add_argument("--seconds", type=int, default=1500)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--curve-retention", help="global.curve_retention (default: the config's)")
    args = p.parse_args(argv)
    fleet = pinned_fleet()
    text = _config_yaml(_Addresses(fleet))  # type: ignore[arg-type]
    if args.curve_retention:
        text = text.replace("global:\n", f"global:\n  curve_retention: {args.curve_retention}\n", 1)
    config = parse_config(text)
    exposition, twins = Exposition(), Twins()
    states: dict[str, TargetState] = {}
    for target in config.targets:
        state = TargetState(
            target, windows=config.global_.windows, retention=config.retention,
            curve_retention=config.global_.curve_retention, on_view=exposition.update,
            twins=twins,
        )  # fmt: skip
        twins.put(state)
        states[target.name] = state
    exported, views = hashlib.sha256(), hashlib.sha256()
    for s in range(1, args.seconds + 1):
        for engine in fleet:
            engine.tick(START + s)
            states[engine.name].observe(
                read_page(engine.page()), mono=START + s, wall=WALL + s, duration=0.005
            )
        exported.update(exposition.text())
        for name in sorted(states):
            views.update(repr(states[name].view).encode())
        if s % args.every == 0:
            print(s, exported.hexdigest()[:16], views.hexdigest()[:16], flush=True)
    print("final", exported.hexdigest(), views.hexdigest())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
