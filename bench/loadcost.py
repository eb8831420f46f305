"""What the load signals add to the daemon's CPU per scrape, in-process.

Run: ./dev.sh bench load [--scrapes 720] [--rounds 5] [--interval 5] [--windows 1m,5m,15m]
     [--only NAME]... [--pages cycle|fleet]

The daemon's per-scrape path without the network: ``read_page`` of the page text,
``TargetState.observe`` (windows, reports, load history and load figures) and the exposition's
``update`` (the target's series rendered to text), exactly as ``specmon run`` wires them
(``on_view``, and the twin found through ``Twins``). The pages are the simulator's
(:class:`specmon.sim.server.VirtualTarget`, the real vLLM 0.32.0 page format, about 56 KB),
rendered beforehand at simulated times ``--interval`` apart under the demo's load model with
``requests_running`` cycling through 1, 2, 4, 8, 16 and 4 (a minute each), so the load
history fills several concurrency buckets, the windows fill up, and the speculative target's
bucket comparisons have data: one simulated hour at 5 s is 720 scrapes.

Variants, each fed the same pages in order with fresh state (the CPU time of every scrape,
``time.process_time``, summed over the run, divided by the scrapes):

- ``one target, load on``: a speculating vLLM target, no baseline (load figures per window);
- ``one target, load off``: the same pages with ``specmon.daemon.target.load_counters``
  replaced by a function returning None, so the target keeps no load history and exports no
  load figures, as a daemon without load figures did (the adapter still reads the load series);
- ``one target, load series stripped``: the pages without the load series' lines
  (inter-token latency, TTFT, iteration tokens, per-request TPOT, waiting requests): the
  adapter's reading of them is out too;
- ``twin pair, baseline``: the speculating target with ``baseline:`` its twin (same load
  model, no speculation), both fed, per scrape = both targets' CPU / (2 x scrapes);
- ``twin pair, load off``: the same pair with ``load_counters`` replaced (no history, no
  figures; the twin's plain model then has no view).

``--pages fleet``: instead, the pages ``bench sidebyside`` serves (``bench/light_fleet.py``:
20 drafts a second, one load level throughout, the pair a speculating target and its twin):
its per-scrape path in-process, without the network, the fleet or the other daemon.
``--only NAME`` (repeatable) runs only the variants whose name contains NAME (``--only
"twin pair"``: the pair alone, the variant a compared target's cost curve shows in).
``--parts``: each variant's CPU per target scrape split over the parts of ``observe``
(:data:`PARTS`, each timed with ``time.process_time`` around its calls; a part's time holds
the parts it calls, and each timed call adds about a microsecond). The
variants run ``--rounds`` times in rotating order (drift on a shared machine hits all
alike); the table gives the median and the best round, and the load signals' share as
(on - off) / off from the medians.
"""

from __future__ import annotations

import argparse
import gc
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import specmon.daemon.target as target_module
from specmon.config_values import parse_duration
from specmon.daemon.config import TargetConfig
from specmon.daemon.exposition import Exposition
from specmon.daemon.target import TargetState, Twins
from specmon.engines import read_page
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL
from specmon.sim.pages import PageKind
from specmon.sim.scenario import parse_scenario
from specmon.sim.server import VirtualTarget, make_target

SURVIVAL = (0.9, 0.7, 0.5)
#: requests_running, one minute each, then again.
CYCLE = (1, 2, 4, 8, 16, 4)
#: The load series of a vLLM page: every line of these families goes in the stripped pages.
LOAD_FAMILIES = (
    "vllm:inter_token_latency_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:iteration_tokens_total",
    "vllm:request_time_per_output_token_seconds",
    "vllm:num_requests_waiting",
)
_LOAD_LINE = re.compile(r"^(# (HELP|TYPE) )?(" + "|".join(map(re.escape, LOAD_FAMILIES)) + r")")


def strip_load(page: str) -> str:
    return "\n".join(line for line in page.split("\n") if not _LOAD_LINE.match(line))


def scenario_text() -> str:
    phases = "\n".join(f"  - at: {i * 60}s\n    requests_running: {n}" for i, n in enumerate(CYCLE))
    return f"phases:\n{phases}\nrepeat: true\nperiod: {60 * len(CYCLE)}s\n"


def fleet_pages(*, speculation: bool, scrapes: int, interval: float, seed: int) -> list[str]:
    """The pages of ``bench sidebyside``'s fleet (bench/light_fleet.py, its default 20 drafts a
    second): one speculating target, or (``speculation`` False) its twin."""
    from bench.light_fleet import build

    target = build(first=0 if speculation else 1, count=1, drafts_per_second=20.0, seed=seed,
                   twins=True)[0]  # fmt: skip
    pages = []
    for i in range(scrapes):
        target.tick(target.started + i * interval)
        pages.append(target.page())
    return pages


def simulated_pages(*, speculation: bool, scrapes: int, interval: float, seed: int) -> list[str]:
    settings = SimSettings(
        survival=SURVIVAL, requests_running=CYCLE[0], speculation=speculation,
        load_model=DEMO_LOAD_MODEL,
    )  # fmt: skip
    target: VirtualTarget = make_target(
        name="t", kind=PageKind.VLLM, settings=settings, model="qwen",
        scenario=parse_scenario(scenario_text()), seed=seed,
    )  # fmt: skip
    pages = []
    for i in range(scrapes):
        target.tick(target.started + i * interval)
        pages.append(target.page())
    return pages


#: The parts ``--parts`` times: (module, class or None, function, label). The render is
#: timed at each scrape here; ``specmon run`` defers it to the ``/metrics`` fetch when idle.
PARTS: tuple[tuple[str, str | None, str, str], ...] = (
    ("bench.loadcost", None, "read_page", "read_page (the page read)"),
    ("specmon.daemon.target", "TargetState", "observe", "observe (all below)"),
    ("specmon.daemon.target", "TargetState", "_record", "  _record (counter history)"),
    ("specmon.daemon.target", "TargetState", "_record_load", "  _record_load (load history)"),
    ("specmon.state.epoch_book", "EpochBook", "observe", "  epochs.observe (issue 64)"),
    ("specmon.daemon.epoch_curves", "EpochCurves", "feed", "  curves.feed (issue 64)"),
    ("specmon.daemon.epoch_curves", "EpochCurves", "changes", "  curves.changes (issue 64)"),
    ("specmon.daemon.target", "TargetState", "_model_view", "  _model_view (windows, answers)"),
    ("specmon.daemon.target", None, "report_from_counters", "    report_from_counters"),
    ("specmon.daemon.target", "TargetState", "_live", "    _live (load figures)"),
    ("specmon.daemon.target", "TargetState", "_answer", "    _answer (compare + decide)"),
    ("specmon.daemon.answers", "WindowAnswers", "_compare", "      _compare"),
    ("specmon.daemon.answers", None, "read_comparison", "        read_comparison"),
    ("specmon.answer.reads", None, "_measured_interval", "          _measured_interval"),
    ("specmon.load.curve_sums", "CurveAccumulator", "slot_drift", "            slot_drift"),
    ("specmon.daemon.answers", None, "decide", "      decide"),
    # ef4fdb1's names (issue 62's baseline): the load figures with the twin's comparison,
    # and the verdict at the configured c.
    ("specmon.daemon.target", "TargetState", "_load", "    _load (ef4fdb1: figures, compare)"),
    ("specmon.daemon.target", None, "verdict", "    verdict (ef4fdb1)"),
    ("specmon.daemon.exposition", "Exposition", "update", "  render (exposition.update)"),
)


@contextmanager
def timed_parts(spent: dict[str, float]) -> Iterator[None]:
    """Each of :data:`PARTS` (those this revision has) timed into ``spent`` (CPU seconds by
    label), put back on leaving."""
    import importlib

    undo: list[tuple[Any, str, Any]] = []

    def timed(function: Callable[..., Any], label: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - start

        return run

    try:
        for module_name, owner_name, name, label in PARTS:
            try:
                owner: Any = importlib.import_module(module_name)
            except ImportError:  # another revision's layout (ef4fdb1 has no specmon.state)
                continue
            if owner_name is not None:
                owner = getattr(owner, owner_name, None)
            function = owner.__dict__.get(name) if owner is not None else None
            if function is None:
                continue
            undo.append((owner, name, function))
            setattr(owner, name, timed(function, label))
        yield
    finally:
        for owner, name, function in reversed(undo):
            setattr(owner, name, function)


@contextmanager
def load_off() -> Iterator[None]:
    """The daemon without its load processing: no reading yields load counters."""
    original = target_module.load_counters  # type: ignore[attr-defined]

    def none(*args: Any, **kwargs: Any) -> None:
        return None

    target_module.load_counters = none  # type: ignore[attr-defined]
    try:
        yield
    finally:
        target_module.load_counters = original  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Variant:
    name: str
    #: (target name, baseline name or None, pages) per target, fed in this order each scrape.
    feeds: tuple[tuple[str, str | None, Sequence[str]], ...]
    load: bool = True


def run_variant(variant: Variant, *, windows: tuple[float, ...], interval: float) -> float:
    """CPU seconds per target scrape over the whole run of ``variant``."""
    exposition = Exposition()
    states: dict[str, TargetState] = {}
    twins = Twins()

    retention = max(windows) + 2 * interval
    for name, baseline, _ in variant.feeds:
        states[name] = TargetState(
            TargetConfig(name=name, url=f"http://127.0.0.1:1/{name}", baseline=baseline),
            windows=windows,
            retention=retention,
            on_view=exposition.update,
            twins=twins,
        )
        twins.put(states[name])
    scrapes = len(variant.feeds[0][2])
    gc.collect()
    total = 0.0
    with load_off() if not variant.load else _nothing():
        for i in range(scrapes):
            at = i * interval
            for name, _, pages in variant.feeds:
                start = time.process_time()
                states[name].observe(read_page(pages[i]), mono=at, wall=at, duration=0.005)
                total += time.process_time() - start
    return total / (scrapes * len(variant.feeds))


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench load")
    parser.add_argument("--scrapes", type=int, default=720)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--windows", default="1m,5m,15m")
    parser.add_argument(
        "--pages",
        choices=("cycle", "fleet"),
        default="cycle",
        help="cycle: loads 1-16 a minute each; fleet: bench sidebyside's pages",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the variants whose name contains NAME (repeatable)",
    )
    parser.add_argument(
        "--parts", action="store_true", help="split each variant's CPU over observe's parts"
    )
    args = parser.parse_args(argv)
    windows = tuple(parse_duration(w) for w in args.windows.split(","))
    make = simulated_pages if args.pages == "cycle" else fleet_pages
    spec = make(speculation=True, scrapes=args.scrapes, interval=args.interval, seed=1)
    base = make(speculation=False, scrapes=args.scrapes, interval=args.interval, seed=2)
    stripped = [strip_load(p) for p in spec]
    variants = [
        Variant("one target, load on", (("spec", None, spec),)),
        Variant("one target, load off", (("spec", None, spec),), load=False),
        Variant("one target, load series stripped", (("spec", None, stripped),)),
        Variant("twin pair, baseline", (("twin", None, base), ("spec", "twin", spec))),
        Variant("twin pair, load off", (("twin", None, base), ("spec", "twin", spec)), load=False),
    ]
    if args.only:
        variants = [v for v in variants if any(name in v.name for name in args.only)]
        if not variants:
            parser.error("--only matches no variant")
    print(
        f"Python {platform.python_version()}, {platform.machine()}; {args.pages} pages; "
        f"{args.scrapes} scrapes "
        f"{args.interval:g} s apart (simulated), windows {args.windows}; page "
        f"{len(spec[-1].encode())} bytes ({len(stripped[-1].encode())} stripped); "
        f"{args.rounds} rounds",
        flush=True,
    )
    if args.parts:
        return print_parts(variants, windows=windows, interval=args.interval, rounds=args.rounds)
    results: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for variant in order:
            results[variant.name].append(
                run_variant(variant, windows=windows, interval=args.interval)
            )
        print(f"round {r + 1}: " + ", ".join(
            f"{name} {values[-1] * 1e3:.3f}" for name, values in results.items()
        ), flush=True)  # fmt: skip
    print()
    print("| variant | CPU per target scrape, ms (median / best of rounds) |")
    print("|---|---|")
    median = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"| {name} | {median[name] * 1e3:.3f} / {min(values) * 1e3:.3f} |")
    print()
    share: Callable[[str, str], float] = lambda on, off: (median[on] / median[off] - 1) * 100  # noqa: E731
    pairs = (("one target, load on", "one target, load off", "one target", "against load off"),
             ("one target, load on", "one target, load series stripped", "one target",
              "against the stripped pages"),
             ("twin pair, baseline", "twin pair, load off", "twin pair with baseline", ""))  # fmt: skip
    found = [
        f"{label} {share(on, off):+.1f} %" + (f" ({note})" if note else "")
        for on, off, label, note in pairs
        if on in median and off in median
    ]
    if found:
        print("load signals' share of the CPU per scrape (medians): " + "; ".join(found))
    return 0


def print_parts(
    variants: Sequence[Variant], *, windows: tuple[float, ...], interval: float, rounds: int
) -> int:
    """``--parts``: per variant, the median over ``rounds`` of each part's CPU per target
    scrape (ms), in :data:`PARTS`' order."""
    for variant in variants:
        scrapes = len(variant.feeds[0][2]) * len(variant.feeds)
        per_round: dict[str, list[float]] = {}
        for _ in range(rounds):
            spent: dict[str, float] = {}
            with timed_parts(spent):
                total = run_variant(variant, windows=windows, interval=interval)
            per_round.setdefault("all (timed parts included)", []).append(total)
            for label, seconds in spent.items():
                per_round.setdefault(label, []).append(seconds / scrapes)
        print(f"\n| {variant.name}: part | CPU per target scrape, ms (median of {rounds}) |")
        print("|---|---|")
        order = ["all (timed parts included)"] + [label for *_, label in PARTS]
        for label in order:
            if label in per_round:
                value = statistics.median(per_round[label]) * 1e3
                print(f"| {label.replace(' ', '&nbsp;', len(label) - len(label.lstrip()))} "
                      f"| {value:.4f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
