"""One measured answer that holds still (issue 54): the demo's load-aware verdict against the
truth it was built from, polled every 2 s over several load cycles.

Run: ./dev.sh bench answer [--cycles 4] [--poll 2] [--out bench/results/DATE-answer.json]

Starts ``specmon demo`` (default options: load levels 1, 4, 16, 8, 2, 32 requests for 20 s
each, windows 10s, 30s, 2m) as a child process on a free loopback port, polls
``/api/v1/targets`` every ``--poll`` seconds, and for ``vllm-loaded`` and ``tgi-loaded``
records, per window: the verdict's basis, speed-up, interval and how it was read, the
crossover and its range, and the load level the target runs now (its ``requests_running``
gauge, set by the demo's scenario). The truth is ``LoadModel.speedup(level, 4, 3.4)`` of the
demo's load model (survival 0.9/0.7/0.5/0.3: K = 3.4), the crossover ``LoadModel.crossover``
(10.88). Checks (issue 54's "Done when"):

- after a target's first twin verdict, no window shows a ``configured`` or ``default`` basis
  while its level lies inside the levels it has already had a twin verdict at;
- of the samples at least 15 s into a phase (the level unchanged for 15 s of polling), the
  verdict lies within 10 % of the truth in at least 90 %, and the truth inside the 95 %
  interval in at least 85 %;
- after the first full cycle, every crossover reported lies within [9.5, 12.5].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from specmon.cli.demo import FAST_LOAD_MODEL, LOAD_CYCLE, LOAD_PHASE, STEP_NOISE

TARGETS = ("vllm-loaded", "tgi-loaded")
K, TOKENS = 4, 3.4
SETTLED = 15.0
CROSSOVER_BAND = (9.5, 12.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (loopback only)
        return json.load(answer)


def _sample(doc: dict[str, Any], now: float) -> list[dict[str, Any]]:
    out = []
    for target in doc.get("targets", []):
        if target.get("target") not in TARGETS:
            continue
        for model in target.get("models", []):
            level = model.get("requests_running")
            for window in model.get("windows", []):
                verdict = window.get("verdict") or {}
                load = window.get("load") or {}
                crossing = load.get("crossover") or {}
                out.append(
                    {
                        "t": round(now, 2),
                        "target": target["target"],
                        "window": window.get("window"),
                        "level": level,
                        "basis": verdict.get("basis"),
                        "speedup": verdict.get("speedup"),
                        "interval": verdict.get("speedup_interval"),
                        "read": verdict.get("read"),
                        "bucket": load.get("bucket"),
                        "concurrency_now": load.get("read_concurrency"),
                        "crossover": crossing.get("concurrency"),
                        "crossover_range": [crossing.get("low"), crossing.get("high")]
                        if crossing
                        else None,
                    }
                )
    return out


def _judge(samples: list[dict[str, Any]], cycle_seconds: float) -> dict[str, Any]:
    """The checks over the samples (see the module docstring)."""
    results: dict[str, Any] = {}
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in samples:
        by_target[s["target"]].append(s)
    for name, rows in by_target.items():
        rows.sort(key=lambda r: r["t"])
        # When the level last changed, per poll (the first phase seen has an unknown start).
        changed_at: float | None = None
        previous: float | None = None
        first_change: float | None = None
        twin_levels: set[float] = set()
        guesses = 0
        guess_examples: list[dict[str, Any]] = []
        settled = within = covered = with_interval = 0
        misses: list[dict[str, Any]] = []
        crossovers: list[float] = []
        outside: list[dict[str, Any]] = []
        per_window: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in rows:
            level = r["level"]
            if level != previous:
                if previous is not None:
                    changed_at = r["t"]
                    first_change = first_change if first_change is not None else r["t"]
                previous = level
            if level is None:
                continue
            basis = r["basis"]
            if basis in ("twin", "profile") and r["read"] == "measured":
                twin_levels.add(level)
            if (
                basis in ("configured", "default")
                and twin_levels
                and min(twin_levels) <= level <= max(twin_levels)
            ):
                guesses += 1
                if len(guess_examples) < 5:
                    guess_examples.append(r)
            truth = FAST_LOAD_MODEL.speedup(level, K, TOKENS)
            if (
                changed_at is not None
                and r["t"] - changed_at >= SETTLED
                and basis in ("twin", "profile")
                and r["speedup"] is not None
            ):
                settled += 1
                ok = abs(r["speedup"] / truth - 1) <= 0.10
                within += ok
                w = per_window[r["window"]]
                w[0] += 1
                w[1] += ok
                if r["interval"]:
                    with_interval += 1
                    inside = r["interval"][0] <= truth <= r["interval"][1]
                    covered += inside
                    w[2] += inside
                if not ok and len(misses) < 8:
                    misses.append({**r, "truth": truth})
            if (
                first_change is not None
                and r["t"] - first_change >= cycle_seconds
                and r["crossover"] is not None
            ):
                crossovers.append(r["crossover"])
                lo, hi = CROSSOVER_BAND
                if not lo <= r["crossover"] <= hi and len(outside) < 8:
                    outside.append(r)
        results[name] = {
            "samples": len(rows),
            "guessed_inside_measured_range": guesses,
            "guess_examples": guess_examples,
            "settled_samples": settled,
            "within_10_percent": within,
            "within_10_percent_share": within / settled if settled else None,
            "with_interval": with_interval,
            "truth_inside_interval": covered,
            "coverage_share": covered / settled if settled else None,
            "per_window_settled_within_covered": dict(per_window),
            "misses": misses,
            "crossovers_after_first_cycle": len(crossovers),
            "crossover_min": min(crossovers) if crossovers else None,
            "crossover_max": max(crossovers) if crossovers else None,
            "crossovers_outside_band": sum(
                not CROSSOVER_BAND[0] <= c <= CROSSOVER_BAND[1] for c in crossovers
            ),
            "outside_examples": outside,
        }
        results[name]["passed"] = (
            guesses == 0
            and settled > 0
            and within / settled >= 0.90
            and covered / settled >= 0.85
            and results[name]["crossovers_outside_band"] == 0
        )
    return results


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench answer", description=__doc__)
    p.add_argument("--cycles", type=int, default=4, help="load cycles to run (default 4)")
    p.add_argument("--poll", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    cycle = LOAD_PHASE * len(LOAD_CYCLE)
    duration = args.cycles * cycle + 10
    port = _free_port()
    command = [sys.executable, "-m", "specmon", "demo", "--no-tui", "--duration",
               f"{duration:g}", "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    cpu_before = os.times()
    try:
        url = f"http://127.0.0.1:{port}/api/v1/targets"
        while child.poll() is None and time.monotonic() - started < duration + 30:
            tick = time.monotonic()
            with contextlib.suppress(OSError):
                samples.extend(_sample(_get(url), tick - started))
            time.sleep(max(0.0, args.poll - (time.monotonic() - tick)))
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=20)
    cpu_after = os.times()
    judged = _judge(samples, cycle)
    record = {
        "benchmark": "answer",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "python": platform.python_version(),
        "cycles": args.cycles,
        "cycle_seconds": cycle,
        "levels": LOAD_CYCLE,
        "step_noise": STEP_NOISE,
        "poll_seconds": args.poll,
        "truth_crossover": FAST_LOAD_MODEL.crossover(K, TOKENS),
        "children_cpu_seconds": round(
            (cpu_after.children_user + cpu_after.children_system)
            - (cpu_before.children_user + cpu_before.children_system),
            1,
        ),
        "results": judged,
    }
    out = args.out or Path("bench/results") / f"{time.strftime('%Y-%m-%d')}-answer.json"
    # One line a sample, figures to 4 decimals: a run is 1,500 samples.
    lines = ",\n".join(json.dumps(_rounded(s), separators=(",", ":")) for s in samples)
    head = json.dumps(_rounded(record), indent=1)[:-2]
    out.write_text(f'{head},\n "samples": [\n{lines}\n ]\n}}\n')
    print(json.dumps(record, indent=1))
    return 0 if all(r["passed"] for r in judged.values()) and judged else 1
