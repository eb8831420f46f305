"""Side by side: two or more daemons (trees or variants) scraping one fleet at the same time.

Run: ./dev.sh bench sidebyside --rev A --rev B [--rev C] [--targets 1000] [--windows 1m]
     [--warm 75] [--measure 60] [--rounds 4] [--twins] [--fetch-every 15s|never]
     [--json-out FILE]

Why: ``bench cost`` runs its revisions one after another, and this shared 2-core machine drifts
by up to 13 % between passes of the same tree (bench/RESULTS.md), more than most changes it
is asked to judge. Here every daemon runs at once against the same simulated fleet
(``bench/light_fleet.py``, real vLLM 0.32.0 pages), so whatever else the machine does hits
them alike, and each round's figures are compared within the round: the spread of the ratios
over rounds is the measurement's own error (about 1 % in the runs recorded).

``--rev`` takes what ``bench cost`` takes: a git revision (checked out into a temporary
worktree, removed at the end), ``worktree``, and the suffixes ``+baseline`` (with
``--twins``: every speculating target compared with its twin) and ``+noload`` (the load
processing switched off: bench/cost.py). The first ``--rev`` is the reference of the ratios.

Throughout, each daemon's ``/metrics`` is fetched every ``--fetch-every`` (15 s, Prometheus's
interval for specmon in deploy/prometheus/prometheus.example.yml; its Accept header, gzip), so
the figures include serving it, as a deployed daemon does.

Per round (after ``--warm`` seconds, for the windows to fill), per daemon: its CPU seconds
(utime + stime from /proc) over ``--measure`` seconds divided by the scrapes its own
``specmon_scrapes_total`` counted in them. Bounded: the run stops after warm + rounds x
(measure + a few seconds), and every process stops at the end, on Ctrl-C, or if this one
dies. Output: one line per round, a summary table (median per daemon, median and range of
each ratio to the first), and with ``--json-out`` the raw figures. Each round also reads every
target's last ``specmon_scrape_duration_seconds`` from each daemon at its start and its end
(2 x targets values) and prints their median and 99th percentile: a change that saves CPU by
batching scrapes must show what it costs in the duration operators alert on.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.cost import (
    Counters,
    Rev,
    _pct,
    cpu_seconds,
    daemon_command,
    daemon_env,
    fetching,
    free_port,
    http_get,
    prepare_rev,
    read_counters,
    start,
    start_fleet,
    stopping,
    wait_http,
    write_config,
)
from specmon.config_values import parse_duration

__all__ = ["main"]


def _counters(port: int) -> Counters:
    return read_counters(http_get(f"http://127.0.0.1:{port}/metrics").body)


def _percentile(values: list[float], q: float) -> float:
    """``bench cost``'s nearest-rank quantile, NaN when there are no values."""
    found = _pct(values, q)
    return float("nan") if found is None else found


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench sidebyside")
    p.add_argument("--rev", action="append", required=True, help="as bench cost (repeatable)")
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--windows", default="1m")
    p.add_argument("--interval", default="5s")
    p.add_argument("--warm", type=float, default=75.0, help="seconds before the first round")
    p.add_argument("--measure", type=float, default=60.0, help="seconds per round")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--twins", action="store_true", help="every odd target does not speculate")
    p.add_argument(
        "--fetch-every",
        default="15s",
        help="GET each daemon's /metrics this often, as Prometheus would ('never': not at all)",
    )
    p.add_argument("--json-out", type=Path)
    args = p.parse_args(argv)
    if len(args.rev) < 2:
        p.error("give at least two --rev")
    if not 1 <= args.rounds <= 50 or not 1 <= args.measure <= 3600 or args.warm < 0:
        p.error("--rounds 1..50, --measure 1..3600 s, --warm >= 0")
    interval = parse_duration(args.interval)
    fetch_every = None if args.fetch_every == "never" else parse_duration(args.fetch_every)
    longest = max(parse_duration(w) for w in args.windows.split(","))
    budget = args.warm + args.rounds * (args.measure + 15) + 120
    deadline = time.monotonic() + budget
    print(
        f"bench sidebyside: {len(args.rev)} daemons at once, {args.targets} targets each, "
        f"windows {args.windows} (longest {longest:g} s; --warm {args.warm:g} s), "
        f"{args.rounds} rounds of {args.measure:g} s; /metrics fetched every "
        f"{args.fetch_every}; at most {budget / 60:.0f} min. "
        f"Python {platform.python_version()}",
        flush=True,
    )
    if args.warm < longest + interval:
        print(f"note: --warm {args.warm:g} s is shorter than the longest window and one interval: "
              "the rounds start before the windows are full", flush=True)  # fmt: skip
    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="specmon-sbs-")))
        revs: list[Rev] = [prepare_rev(given, stack) for given in args.rev]
        fleet = start_fleet(
            args.targets, kind="fleet", procs=1, work=work, stack=stack, deadline=deadline,
            twins=args.twins,
        )  # fmt: skip
        ports: list[int] = []
        pids: list[int] = []
        for index, rev in enumerate(revs):
            config = work / f"config-{index}.yaml"
            write_config(
                config, fleet.urls, interval=args.interval, timeout=args.interval,
                windows=args.windows, baseline=rev.baseline, name_filter=rev.name_filter,
            )  # fmt: skip
            port = free_port()
            proc = start(
                daemon_command(rev, config, port), cwd=rev.tree, env=daemon_env(rev.tree),
                log=work / f"daemon-{index}.log",
            )  # fmt: skip
            stack.enter_context(stopping(proc))
            wait_http(f"http://127.0.0.1:{port}/readyz", deadline, proc)
            ports.append(port)
            pids.append(proc.pid)
        fetches = stack.enter_context(fetching(ports, fetch_every))
        time.sleep(args.warm)
        rounds: list[list[float]] = []
        #: Per round, per daemon: the scrape duration's median and 99th percentile, seconds.
        durations: list[list[tuple[float, float]]] = []
        for number in range(1, args.rounds + 1):
            fleet.check()
            before = [
                (cpu_seconds(pid), _counters(port)) for pid, port in zip(pids, ports, strict=True)
            ]
            time.sleep(args.measure)
            after = [
                (cpu_seconds(pid), _counters(port)) for pid, port in zip(pids, ports, strict=True)
            ]
            scrapes = [
                sum(a[1].scrapes.values()) - sum(b[1].scrapes.values())
                for a, b in zip(after, before, strict=True)
            ]
            per_scrape = [
                (a[0] - b[0]) / n if n > 0 else float("nan")
                for a, b, n in zip(after, before, scrapes, strict=True)
            ]
            pooled = [b[1].durations + a[1].durations for a, b in zip(after, before, strict=True)]
            spread = [(_percentile(d, 0.5), _percentile(d, 0.99)) for d in pooled]
            rounds.append(per_scrape)
            durations.append(spread)
            print(
                f"round {number}: "
                + " | ".join(
                    f"{rev.spec} {ms * 1e3:.3f} ms ({n:.0f} scrapes; "
                    f"scrape duration p50 {d[0] * 1e3:.1f} / p99 {d[1] * 1e3:.1f} ms)"
                    for rev, ms, n, d in zip(revs, per_scrape, scrapes, spread, strict=True)
                ),
                flush=True,
            )
    print()
    print(
        "| daemon | CPU per target scrape, ms (median of rounds) | ratio to the first: median "
        "(range) | scrape duration p50 / p99, ms (median of rounds) |"
    )
    print("|---|---|---|---|")
    for index, rev in enumerate(revs):
        values = [r[index] for r in rounds]
        ratios = [r[index] / r[0] for r in rounds]
        p50 = statistics.median(d[index][0] for d in durations) * 1e3
        p99 = statistics.median(d[index][1] for d in durations) * 1e3
        label = f"{rev.spec} ({rev.commit[:9]}{' + changes' if rev.dirty else ''})"
        print(
            f"| {label} | {statistics.median(values) * 1e3:.3f} | "
            f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) | "
            f"{p50:.1f} / {p99:.1f} |"
        )
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps(
                {
                    "argv": argv,
                    "revs": [{"rev": r.spec, "commit": r.commit, "dirty": r.dirty} for r in revs],
                    "metrics_fetches_per_daemon": fetches,
                    "ms_per_scrape_by_round": [[v * 1e3 for v in r] for r in rounds],
                    "scrape_duration_ms_p50_p99_by_round": [
                        [[p * 1e3 for p in pair] for pair in r] for r in durations
                    ],
                }
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
