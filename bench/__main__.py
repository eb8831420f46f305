"""Benchmarks. ``python -m bench [parser|answer|scale|overload|starve|rules|promsource|fleetsynth|cost|sidebyside|anchor|fleet|load|memory|shutdown|promhostile|status|state|digest|tap]``; results are
recorded in bench/RESULTS.md."""

from __future__ import annotations

import sys

from bench import parser


def main(argv: list[str]) -> int:
    which = argv[0] if argv else "parser"
    if which == "parser":
        parser.run()
        return 0
    if which == "state":
        from bench import state

        return state.main(argv[1:])
    if which == "scale":
        from bench import scale

        return scale.main(argv[1:])
    if which == "rules":
        from bench import engine_rules

        return engine_rules.main(argv[1:])
    if which == "fleetsynth":
        from bench import fleetsynth

        return fleetsynth.main(argv[1:])
    if which == "promsource":
        from bench import promsource

        return promsource.main(argv[1:])
    if which == "digest":
        from bench import digest

        return digest.main(argv[1:])
    if which == "load":
        from bench import loadcost

        return loadcost.main(argv[1:])
    if which == "memory":
        from bench import memory

        return memory.main(argv[1:])
    if which == "sidebyside":
        from bench import sidebyside

        return sidebyside.main(argv[1:])
    if which == "anchor":
        from bench import anchor

        return anchor.main(argv[1:])
    if which == "cost":
        from bench import cost

        return cost.main(argv[1:])
    if which == "overload":
        from bench import overload

        return overload.main(argv[1:])
    if which == "starve":
        from bench import starve

        return starve.main(argv[1:])
    if which == "promhostile":
        from bench import promhostile

        return promhostile.main(argv[1:])
    if which == "shutdown":
        from bench import shutdown

        return shutdown.main(argv[1:])
    if which == "status":
        from bench import statuspage

        return statuspage.main(argv[1:])
    if which == "answer":
        from bench import answer

        return answer.main(argv[1:])
    if which == "fleet":
        from bench import fleet

        return fleet.main(argv[1:])
    if which == "tap":
        from bench import tap

        return tap.main(argv[1:])
    print(
        f"unknown benchmark {which!r}; choose parser, answer, scale, rules, promsource, cost, sidebyside, anchor, fleet, load, memory, shutdown, promhostile, status or tap",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
