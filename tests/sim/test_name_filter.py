"""``name_filter``: asking a prometheus_client page app for only the series specmon reads.

The simulator's filter is checked against prometheus_client's own ``RestrictedRegistry`` (what
vLLM's ``/metrics/`` runs), and the reading of a filtered page against the whole page's: the
same figures from a twentieth of the bytes. The real server is checked in
tests/realengines/test_vllm_real.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from specmon.engines import Engine, read_page, wanted_names
from specmon.sim.pages import PageKind, restrict_page
from specmon.sources.http import ACCEPT_CLASSIC, open_session, with_name_filter
from specmon.sources.page import HttpPageSource
from tests.support.fake_engines import manual_target, running, set_counters

PAGES = Path(__file__).resolve().parent.parent / "fixtures" / "pages"


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    drafts = Counter("vllm:spec_decode_num_drafts", "Drafts.", ["model_name"], registry=registry)
    drafts.labels("m").inc(7)
    running = Gauge("vllm:num_requests_running", "Running.", ["model_name"], registry=registry)
    running.labels("m").set(3)
    Gauge("vllm:num_requests_waiting", "Waiting.", registry=registry).set(1)
    itl = Histogram(
        "vllm:inter_token_latency_seconds", "ITL.", ["model_name"], buckets=(0.01, 0.1),
        registry=registry,
    )  # fmt: skip
    itl.labels("m").observe(0.05)
    return registry


@pytest.mark.parametrize(
    "names",
    [
        ["vllm:spec_decode_num_drafts_total"],
        ["vllm:num_requests_running", "vllm:inter_token_latency_seconds_count"],
        [
            "vllm:inter_token_latency_seconds_bucket",
            "vllm:inter_token_latency_seconds_sum",
            "vllm:spec_decode_num_drafts_created",
            "nothing_of_the_kind",
        ],
        ["nothing_of_the_kind"],
    ],
)
def test_restrict_page_is_what_prometheus_client_serves(names: list[str]) -> None:
    registry = _registry()
    whole = generate_latest(registry).decode()
    served = generate_latest(registry.restricted_registry(names)).decode()
    mine = restrict_page(whole, names)
    # prometheus_client walks a set of collectors: the families' order may differ.
    assert sorted(mine.splitlines()) == sorted(served.splitlines())
    assert len(mine) < len(whole)


def test_a_filtered_vllm_page_reads_the_same_from_a_twentieth_of_the_bytes() -> None:
    whole = (PAGES / "vllm-single.txt").read_text()
    cut = restrict_page(whole, wanted_names(Engine.VLLM))
    assert len(cut) * 15 < len(whole)
    full, filtered = read_page(whole), read_page(cut)
    assert full.models and filtered == full
    # Detection works on the filtered page too (the names of every adapter: engine auto).
    assert read_page(restrict_page(whole, wanted_names())) == full


def test_with_name_filter_keeps_the_query_and_adds_every_name() -> None:
    names = ("vllm:a_total", "vllm:b_bucket")
    url = with_name_filter("http://h:8000/metrics/?x=1&y=a%20b", names)
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("http", "h:8000", "/metrics/")
    assert parse_qsl(parts.query) == [("x", "1"), ("y", "a b"), *(("name[]", n) for n in names)]
    assert with_name_filter("http://h/metrics", ()) == "http://h/metrics"


def test_the_source_asks_for_the_names_and_reads_the_same_figures() -> None:
    """Against the simulator: its ``/metrics/`` honours ``name[]`` as vLLM's does, its
    ``/metrics`` ignores it (as vLLM's instrumentator page); either way, the same reading."""
    target = manual_target("v", PageKind.VLLM)
    set_counters(target, 100, 300, [80, 50, 20])

    async def read_all(base: str) -> list[tuple[int, object]]:
        out: list[tuple[int, object]] = []
        async with open_session() as session:
            for path, name_filter in (("/metrics", False), ("/metrics/", True), ("/metrics", True)):
                source = HttpPageSource(
                    url=base + path, session=lambda: session, timeout=5.0,
                    max_bytes=1 << 20, engine=Engine.VLLM, name_filter=name_filter,
                )  # fmt: skip
                reading = await source.read()
                out.append((reading.size, reading.page))
        return out

    with running([target]) as engines:
        base = engines.url("v").removesuffix("/metrics")
        (whole, full), (cut, filtered), (ignored, unfiltered) = asyncio.run(read_all(base))
        asked = engines.server.last_metrics_headers
    assert asked is not None and asked["Accept"] == ACCEPT_CLASSIC  # not OpenMetrics
    assert filtered == full == unfiltered
    assert cut * 15 < whole  # the filter was honoured on /metrics/
    assert ignored == whole  # and ignored on /metrics
