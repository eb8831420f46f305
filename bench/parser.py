"""Parser benchmark: specmon's page reading vs prometheus_client.parser on a real vLLM page.

Run: ./dev.sh bench  (or .venv/bin/python -m bench parser)
Each figure is the best of 7 rounds of N calls (min is the least noisy estimate of the cost on
a shared machine); the ratio is computed from those figures in the same run.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specmon.engines import read_page
from specmon.parser import parse

PAGE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pages" / "vllm-single.txt"


def best_of(fn: Callable[[], object], *, number: int, rounds: int = 7) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def run() -> dict[str, float]:
    text = PAGE.read_text()
    reference = best_of(lambda: list(text_string_to_metric_families(text)), number=20)
    ours = best_of(lambda: read_page(text), number=500)
    ours_validating = best_of(lambda: read_page(text, validate_all=True), number=100)
    line_filter = best_of(
        lambda: [line for line in text.split("\n") if line.startswith("vllm:spec_decode")],
        number=2000,
    )
    parse_all = best_of(lambda: parse(text), number=50)
    results = {
        "page_bytes": float(len(text.encode())),
        "prometheus_client_ms": reference * 1e3,
        "specmon_read_page_ms": ours * 1e3,
        "specmon_read_page_validate_all_ms": ours_validating * 1e3,
        "specmon_parse_everything_ms": parse_all * 1e3,
        "bare_line_filter_ms": line_filter * 1e3,
    }
    print(
        f"page: {PAGE.name} ({len(text.encode())} bytes, {text.count(chr(10))} lines), "
        f"Python {platform.python_version()}, prometheus_client {version('prometheus-client')}"
    )
    print(f"prometheus_client.parser (all families)     {reference * 1e3:8.3f} ms   1.0x")
    for label, value in (
        ("specmon read_page (spec families only)", ours),
        ("specmon read_page, validate every line", ours_validating),
        ("specmon parse, every family materialised", parse_all),
        ("bare line filter (ceiling)", line_filter),
    ):
        print(f"{label:<44}{value * 1e3:8.3f} ms {reference / value:6.1f}x")
    return results
