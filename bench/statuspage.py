"""What the status page, the target page and their history cost, in-process.

Run: ./dev.sh bench status [--targets 1000] [--history-targets 10000] [--repeat 5]

``--targets`` vLLM targets, each a ``TargetState`` fed the simulator's pages (80 scrapes 5 s
apart, windows 1m and 5m: :func:`bench.loadcost.simulated_pages`), one in ten then down; the
status page is rendered cold (a new cache: every row made) and warm (the daemon's case between
scrapes), at the default 200 targets a page and all on one page; one target's page with a full
15 minutes of history. Then ``--history-targets`` targets' history is filled (61 samples each,
one and four models) and measured with ``tracemalloc``. Median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable

from bench.loadcost import simulated_pages
from specmon.daemon.config import TargetConfig
from specmon.daemon.history import SLOTS, SPAN, STEP, History
from specmon.daemon.target import TargetState, TargetView
from specmon.engines import read_page
from specmon.surfaces.status import StatusCache, render_status
from specmon.surfaces.target import render_target

WINDOWS = (60.0, 300.0)


def _views(count: int) -> list[TargetView]:
    pages = simulated_pages(speculation=True, scrapes=80, interval=5.0, seed=1)
    views = []
    for i in range(count):
        state = TargetState(
            TargetConfig(
                name=f"vllm-{i:05d}", url=f"http://10.0.{i // 250}.{i % 250}:8000/metrics"
            ),
            windows=WINDOWS,
            retention=310.0,
        )
        if i == 0:
            for n, page in enumerate(pages):
                state.observe(read_page(page), mono=n * 5.0, wall=n * 5.0, duration=0.005)
            first = state.view
        view = dataclasses.replace(first, name=state.config.name, url=state.view.url)
        if i % 10 == 9:
            view = dataclasses.replace(
                view, up=False, error="cannot connect to 10.0.0.9:8000: connection refused"
            )
        views.append(view)
    return views


def _median_ms(action: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _history_bytes(targets: int, view: TargetView, models: int) -> float:
    model = view.models[0]
    many = tuple(dataclasses.replace(model, model=f"model-{m}") for m in range(models))
    views = [dataclasses.replace(view, name=f"t{i:05d}", models=many) for i in range(targets)]
    history = History()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for second in range(0, int(SPAN) + 2 * int(STEP), int(STEP)):
        for v in views:
            history.record(v, window="5m", now=1e6 + second)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(history.series(views[0].name)[0].samples) == SLOTS
    return used / targets


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench status")
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--history-targets", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    views = sorted(_views(args.targets), key=lambda v: v.name)
    print(f"Python {platform.python_version()}; {args.targets} vLLM targets (1 in 10 down)")
    print()
    print("| page | cold, ms | warm, ms | bytes |")
    print("|---|---|---|---|")
    for per_page in (200, args.targets):
        html = render_status(views, primary_window="5m", ready=True, per_page=per_page)
        cold = _median_ms(
            lambda p=per_page: render_status(  # type: ignore[misc]
                views, primary_window="5m", ready=True, per_page=p, cache=StatusCache()
            ),
            args.repeat,
        )
        cache = StatusCache()
        render_status(views, primary_window="5m", ready=True, per_page=per_page, cache=cache)
        warm = _median_ms(
            lambda p=per_page, c=cache: render_status(  # type: ignore[misc]
                views, primary_window="5m", ready=True, per_page=p, cache=c
            ),
            args.repeat,
        )
        print(f"| / ({per_page} a page) | {cold:.1f} | {warm:.1f} | {len(html.encode()):,} |")
    history = History()
    for second in range(0, int(SPAN) + int(STEP), int(STEP)):
        history.record(views[0], window="5m", now=1e6 + second)
    now = 1e6 + SPAN

    def one() -> str:
        return render_target(
            views[0],
            primary_window="5m",
            series=history.series(views[0].name),
            events=history.events(views[0].name),
            now=now,
        )

    page = one()
    print(f"| /target/NAME (15 min of history) | {_median_ms(one, args.repeat):.2f} | - | "
          f"{len(page.encode()):,} |")  # fmt: skip
    print()
    for models in (1, 4):
        per = _history_bytes(args.history_targets, views[0], models)
        print(
            f"history, {args.history_targets:,} targets x {models} model(s), {SLOTS} samples: "
            f"{per:.0f} B a target, {per * args.history_targets / 1e6:.1f} MB in all"
        )
    return 0
