"""One answer on every surface, and honest at every load (issues 54 and 62): the demo's
load-aware verdict read every 2 s through the JSON API, /metrics, the status page and the
target pages, against the truth it was built from.

Run: ./dev.sh bench answer [--cycles 3] [--poll 2] [--noise none|drift|classes|both]
[--out bench/results/DATE-answer.json]

``--noise`` runs the demo with its realistic noise (``specmon demo --noise``,
specmon/sim/noise.py); the truth is then the expectation under it: the drift's factor has
mean 1, and the request classes' mix is judged at its mean survival (3.4 tokens per step
either way, so the crossover's truth stays 10.88).

Starts ``specmon demo`` (default options: load levels 1, 4, 16, 8, 2, 32 requests for 20 s
each, windows 10s, 30s, 2m) as a child process on a free loopback port. Every ``--poll``
seconds it reads, for ``vllm-loaded`` and ``tgi-loaded``, one consistent snapshot (the API
read again after the pages: the same document, else read again): ``/api/v1/targets``,
``/metrics``, ``/`` and ``/target/NAME``. Per target and window it records the answer's basis,
state, speed-up, interval, best k and crossover as each surface shows it. The truth is
``LoadModel.speedup(level, 4, 3.4)`` of the demo's load model at the level whose bucket the
answer reads at (a measured bucket's mean load, or the load a read off the cost curve is
made at; levels 1, 2, 4, 8, 16, 32 each have their own bucket); the crossover
``LoadModel.crossover`` (10.88). Checks:

- every surface shows the same basis, state, speed-up, interval, best k and crossover as the
  API (/metrics exactly; the pages to the digits they print);
- after a target's first measured answer, no read rests on the configured or default c;
- the best k shown is the load model's own at the load read (within a 2 % tie): at 16 and 32
  requests (past the crossover) 0, "off", never 4;
- each read is ``measuring``, or its speed-up lies within 10 % of the truth, or its 95 %
  interval holds it (and, over the settled reads, 15 s into a phase: within 10 % in at least
  90 %, coverage and the half-width beside the actual error);
- after the first full cycle, every crossover lies within [10.5, 11.3].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from html import unescape
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specmon.cli.demo import (
    FAST_LOAD_MODEL,
    LOAD_CYCLE,
    LOAD_PHASE,
    NOISE_CHOICES,
    NOISE_CLASSES,
    NOISE_DRIFT,
    NOISE_SURVIVAL,
    PLAIN_SURVIVAL,
    STEP_NOISE,
)
from specmon.load import DEFAULT_SCHEME
from specmon.sim.noise import mean_survival

TARGETS = ("vllm-loaded", "tgi-loaded")
K = 4
#: The speculating side's expected per-position survival: the demo's, or with its request
#: classes the two classes' mix at its mean share; set by main() from --noise.
SURVIVAL: tuple[float, ...] = PLAIN_SURVIVAL
#: Its expected tokens per step (3.4 either way, by construction).
TOKENS = 1.0 + sum(SURVIVAL)
SETTLED = 15.0
CROSSOVER_BAND = (10.5, 11.3)
#: The status page's window (the demo's middle one).
PRIMARY = "30s"
#: Each level's bucket, to name the truth of the bucket an answer reads.
LEVEL_OF = {DEFAULT_SCHEME.bucket_of(n).label: n for n in LOAD_CYCLE}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (loopback only)
        return bytes(answer.read())


# -- what each surface shows ----------------------------------------------------------------


def _api(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for target in doc.get("targets", []):
        if target.get("target") not in TARGETS or not target.get("models"):
            continue
        model = target["models"][0]
        for window in model.get("windows", []):
            v = window.get("verdict")
            if v is None:
                continue
            x = v.get("crossover") or {}
            here: dict[str, Any] = next(
                (p for p in v.get("per_load") or [] if p["label"] == v["bucket"]), {}
            )
            out[(target["target"], window["window"])] = {
                "basis": v["basis"], "state": v["state"], "speedup": v["speedup"],
                "interval": v["speedup_interval"], "best": v["best_chain_length"],
                "crossover": x.get("concurrency"), "range": [x.get("low"), x.get("high")],
                "bucket": v["bucket"], "level": model.get("requests_running"),
                "at": v["concurrency"], "bucket_concurrency": here.get("concurrency"),
            }  # fmt: skip
    return out


def _metrics(text: str) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    names = {
        "specmon_verdict_speedup_ratio": "speedup", "specmon_verdict_speedup_lower_ratio": "low",
        "specmon_verdict_speedup_upper_ratio": "high", "specmon_best_chain_length": "best",
        "specmon_crossover_concurrency": "crossover",
    }  # fmt: skip
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.labels.get("target", ""), s.labels.get("window", ""))
            if key[0] not in TARGETS:
                continue
            if s.name == "specmon_verdict_info":
                out[key]["basis"], out[key]["state"] = s.labels["basis"], s.labels["state"]
            elif s.name in names:
                out[key][names[s.name]] = s.value
    return out


_FIGURE = re.compile(r'<span class="big[^"]*">([0-9.]+)&times;</span>')
_RANGE = re.compile(r"\(([0-9.]+)&ndash;([0-9.]+)\)")


def _shown(cell: str) -> dict[str, Any]:
    """The speed-up and interval a verdict cell shows (to the 2 digits it prints)."""
    figure, interval = _FIGURE.search(cell), _RANGE.search(cell)
    return {
        "speedup": float(figure.group(1)) if figure else None,
        "interval": [float(interval.group(1)), float(interval.group(2))] if interval else None,
        "measuring": ">measuring<" in cell,
    }


def _best(cell: str) -> int | None:
    found = re.search(r"(?:^|[ >/])(\d+) \((?:off|[0-9.]+&times;)\)", cell)
    return int(found.group(1)) if found else None


def _status(html: str) -> dict[str, dict[str, Any]]:
    out = {}
    for body in re.findall(r"<tbody.*?</tbody>", html, re.S):
        name = re.search(r'<a class="name" href="[^"]*">([^<]+)</a>', body)
        if name is None or unescape(name.group(1)) not in TARGETS:
            continue
        cells = re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)
        verdict = next((c for c in cells if "big" in c), "")
        best = next((c for c in cells if " / " in c and "at " in c), "")
        out[unescape(name.group(1))] = {**_shown(verdict), "best": _best(best.split(" / ")[-1])}
    return out


def _target_page(html: str) -> dict[str, dict[str, Any]]:
    """Per window: what the windows table of the target page shows."""
    out = {}
    table = html.split("<th>window</th>", 1)[-1].split("</table>", 1)[0]
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if len(cells) < 8:
            continue
        out[unescape(cells[0])] = {**_shown(cells[3]), "best": _best(cells[7])}
    x = re.search(r"stops paying at n &asymp; ([0-9.]+)", html)
    out["crossover"] = {"value": float(x.group(1)) if x else None}
    return out


def _snapshot(base: str) -> dict[str, Any] | None:
    """One consistent read of every surface (None: the daemon scraped meanwhile)."""
    before = _get(base + "/api/v1/targets")
    metrics = _get(base + "/metrics").decode()
    status = _get(base + "/").decode()
    pages = {t: _get(f"{base}/target/{t}").decode() for t in TARGETS}
    after = _get(base + "/api/v1/targets")
    if before != after:
        return None
    return {"api": _api(json.loads(before)), "metrics": _metrics(metrics),
            "status": _status(status), "pages": {t: _target_page(p) for t, p in pages.items()}}  # fmt: skip


# -- checks ---------------------------------------------------------------------------------


def _r2(x: float | None) -> float | None:
    return None if x is None else round(x + 1e-12, 2)


def _disagreements(snap: dict[str, Any]) -> list[str]:
    """Where a surface shows another answer than the API's."""
    out = []
    for (target, window), a in snap["api"].items():
        m = snap["metrics"].get((target, window), {})
        low, high = a["interval"] or (None, None)
        want = {"basis": a["basis"], "state": a["state"], "speedup": a["speedup"], "low": low,
                "high": high, "best": a["best"], "crossover": a["crossover"]}  # fmt: skip
        for key, value in want.items():
            if m.get(key) != value and not (value is None and key not in m):
                out.append(f"{target} {window} /metrics {key}: {m.get(key)} != {value}")
        shown = [("target page", snap["pages"][target].get(window))]
        if window == PRIMARY:
            shown.append(("status page", snap["status"].get(target)))
        for surface, s in shown:
            if s is None:
                out.append(f"{target} {window} {surface}: no row")
                continue
            if s["speedup"] != _r2(a["speedup"]):
                out.append(f"{target} {window} {surface} speed-up {s['speedup']} != {a['speedup']}")
            if (s["interval"] or None) != (
                [_r2(low), _r2(high)] if a["interval"] and a["speedup"] is not None else None
            ):
                out.append(
                    f"{target} {window} {surface} interval {s['interval']} != {a['interval']}"
                )
            if s["best"] != a["best"]:
                out.append(f"{target} {window} {surface} best k {s['best']} != {a['best']}")
            if s["measuring"] != (a["state"] == "measuring"):
                out.append(
                    f"{target} {window} {surface} measuring {s['measuring']} != {a['state']}"
                )
    return out


def _true_best(n: float) -> set[int]:
    """The best chain lengths at load ``n`` under the demo's load model (within 2 % of the
    best speed-up: a near tie is either)."""
    cost = FAST_LOAD_MODEL.draft_cost(n, K)
    survival = SURVIVAL
    speedups = [(1 + sum(survival[:j])) / (1 + j * cost) for j in range(K + 1)]
    top = max(speedups)
    return {j for j, s in enumerate(speedups) if s >= top * 0.98}


def _judge(reads: list[dict[str, Any]], cycle_seconds: float) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for target in TARGETS:
        rows = [r for r in reads if r["target"] == target]
        first_measured: float | None = None
        guesses, not_off, wrong, measuring = [], [], [], 0
        settled = within = covered = 0
        ratios: list[float] = []
        crossovers: list[float] = []
        for r in rows:
            if r["state"] in ("measured", "interpolated") and first_measured is None:
                first_measured = r["t"]
            if first_measured is not None and r["basis"] in ("configured", "default"):
                guesses.append(r)
            if r["state"] == "measuring":
                measuring += 1
                continue
            level = LEVEL_OF.get(r["bucket"] or "")
            if level is None or r["speedup"] is None:
                continue
            # The truth where the answer was read: a measured bucket's mean load (its
            # intervals), a read off the curve at the load itself (between levels, right after
            # the load moved: a mixed interval's).
            n = r["bucket_concurrency"] if r["state"] == "measured" else r["at"]
            truth = FAST_LOAD_MODEL.speedup(n or level, K, TOKENS)
            near = abs(r["speedup"] / truth - 1) <= 0.10
            inside = bool(r["interval"]) and r["interval"][0] <= truth <= r["interval"][1]
            if not (near or inside):
                wrong.append({**r, "truth": truth})
            # The best k shown against the load model's own at the load read (its c there, the
            # demo's survival); a near tie (within 2 %) may go either way. At 16 and 32 that is
            # 0, "off": never the configured 4.
            if r["best"] not in _true_best(n or level) or (level in (16, 32) and r["best"] == K):
                not_off.append({**r, "true_best": sorted(_true_best(n or level))})
            if r["since_change"] is not None and r["since_change"] >= SETTLED:
                settled += 1
                within += near
                covered += inside
                if r["interval"]:
                    half = math.log(r["interval"][1] / r["interval"][0]) / 2
                    error = abs(math.log(r["speedup"] / truth))
                    ratios.append(half / error if error > 0 else math.inf)
            if r["t"] >= cycle_seconds + 5 and r["crossover"] is not None:
                crossovers.append(r["crossover"])
        ratios.sort()
        lo, hi = CROSSOVER_BAND
        outside = [c for c in crossovers if not lo <= c <= hi]
        results[target] = {
            "reads": len(rows), "measuring_reads": measuring,
            "guesses_after_first_measured": len(guesses), "guess_examples": guesses[:4],
            "best_k_not_the_truths": len(not_off), "not_off_examples": not_off[:4],
            "neither_near_nor_covered": len(wrong), "wrong_examples": wrong[:6],
            "settled": settled, "within_10_percent": within, "truth_inside_interval": covered,
            "median_half_width_over_error": ratios[len(ratios) // 2] if ratios else None,
            "crossovers_after_first_cycle": len(crossovers),
            "crossover_min": min(crossovers, default=None),
            "crossover_max": max(crossovers, default=None),
            "crossovers_outside_band": len(outside),
        }  # fmt: skip
        results[target]["passed"] = (
            not guesses and not not_off and not wrong and not outside and settled > 0
            and within >= 0.9 * settled
        )  # fmt: skip
    return results


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench answer", description=__doc__)
    p.add_argument("--cycles", type=int, default=3, help="load cycles to run (default 3)")
    p.add_argument("--poll", type=float, default=2.0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--noise", choices=NOISE_CHOICES, default="none", help="the demo's --noise")
    args = p.parse_args(argv)
    global SURVIVAL, TOKENS
    classes = args.noise in ("classes", "both")
    SURVIVAL = mean_survival(NOISE_SURVIVAL, NOISE_CLASSES) if classes else PLAIN_SURVIVAL
    TOKENS = 1.0 + sum(SURVIVAL)
    cycle = LOAD_PHASE * len(LOAD_CYCLE)
    duration = args.cycles * cycle + 10
    port = _free_port()
    command = [sys.executable, "-m", "specmon", "demo", "--no-tui", "--duration",
               f"{duration:g}", "--listen", f"127.0.0.1:{port}",
               "--noise", args.noise]  # fmt: skip
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    reads: list[dict[str, Any]] = []
    disagreements: list[str] = []
    snapshots = retried = 0
    started = time.monotonic()
    cpu_before = os.times()
    #: Per target: its level and when it changed to it (None: the first level seen).
    changed: dict[str, tuple[Any, float | None]] = {}
    try:
        base = f"http://127.0.0.1:{port}"
        while child.poll() is None and time.monotonic() - started < duration + 30:
            tick = time.monotonic()
            snap = None
            with contextlib.suppress(OSError, ValueError):
                for _ in range(5):
                    snap = _snapshot(base)
                    if snap is not None:
                        break
                    retried += 1
            if snap is not None:
                snapshots += 1
                now = tick - started
                disagreements += _disagreements(snap)
                for (target, window), a in snap["api"].items():
                    level = a["level"]
                    if target not in changed:
                        changed[target] = (level, None)
                    elif changed[target][0] != level:
                        changed[target] = (level, now)
                    since = changed[target][1]
                    reads.append({
                        "t": round(now, 2), "target": target, "window": window, **a,
                        "since_change": None if since is None else now - since,
                    })  # fmt: skip
            time.sleep(max(0.0, args.poll - (time.monotonic() - tick)))
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=20)
    cpu_after = os.times()
    judged = _judge(reads, cycle)
    record = {
        "benchmark": "answer", "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "python": platform.python_version(), "load_average": os.getloadavg(),
        "cycles": args.cycles, "cycle_seconds": cycle, "levels": LOAD_CYCLE,
        "step_noise": STEP_NOISE,
        "noise": args.noise,
        "drift": {"sd": NOISE_DRIFT.sd, "seconds": NOISE_DRIFT.seconds}
        if args.noise in ("drift", "both") else None,
        "classes": {
            "survival": NOISE_SURVIVAL, "class_survival": NOISE_CLASSES.survival,
            "class_share": NOISE_CLASSES.share, "class_swing": NOISE_CLASSES.swing,
            "class_period": NOISE_CLASSES.period,
        } if classes else None,
        "mean_survival": SURVIVAL, "tokens_per_step": TOKENS,
        "poll_seconds": args.poll, "snapshots": snapshots,
        "snapshots_retried": retried, "truth_crossover": FAST_LOAD_MODEL.crossover(K, TOKENS),
        "children_cpu_seconds": round((cpu_after.children_user + cpu_after.children_system)
                                      - (cpu_before.children_user + cpu_before.children_system), 1),
        "surface_disagreements": len(disagreements),
        "disagreement_examples": disagreements[:10], "results": judged,
    }  # fmt: skip
    out = args.out or Path("bench/results") / f"{time.strftime('%Y-%m-%d')}-answer.json"
    lines = ",\n".join(json.dumps(r, separators=(",", ":"), default=str) for r in reads)
    head = json.dumps(record, indent=1, default=str)[:-2]
    out.write_text(f'{head},\n "reads": [\n{lines}\n ]\n}}\n')
    print(json.dumps(record, indent=1, default=str))
    passed = judged and all(r["passed"] for r in judged.values()) and not disagreements
    return 0 if passed else 1
