"""Real vLLM (CPU build, n-gram speculation, k = 3) under specmon.

- Per-position figures equal the hand computation from the raw counters, and agree with
  vLLM's own ``SpecDecoding metrics`` log lines over the same interval within their printed
  rounding.
- ``--api-server-count 2`` (the multiprocess metrics page): the same counts as a single API
  server for the same deterministic workload, and the daemon's figures are those of the page,
  not twice them.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from specmon.engines import Engine
from specmon.sources import Reading
from specmon.sources.http import open_session
from specmon.sources.page import HttpPageSource
from tests.realengines import servers
from tests.realengines.conftest import (
    VLLM_LOG_INTERVAL,
    Counters,
    assert_window_matches,
    scrape,
    settled,
    wait_target_up,
    wait_window_drafts,
    write_config,
)
from tests.support.daemon import daemon

pytestmark = pytest.mark.realengine

K = servers.VLLM_NGRAM_K
DRAFT_COST = 0.2
WINDOW = "10m"
LABELS = {"target": "vllm", "engine": "vllm", "model": "tiny-llama"}
#: Counters still for this long: vLLM has called its stats logger at least once since the last
#: step (it logs every VLLM_LOG_INTERVAL seconds), so no step is pending in its log buffer.
QUIET = 2 * VLLM_LOG_INTERVAL + 1.0

_SPEC_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: (?P<mal>[\d.]+), .*"
    r"Accepted: (?P<accepted>\d+) tokens, Drafted: (?P<drafted>\d+) tokens, "
    r"Per-position acceptance rate: (?P<rates>[\d., ]+), "
    r"Avg Draft acceptance rate: (?P<pct>[\d.]+|nan)%"
)


@dataclass(frozen=True)
class SpecLine:
    """One ``SpecDecoding metrics`` line: vLLM's figures over one logging interval."""

    mean_acceptance_length: float  # printed with 2 decimals
    accepted: int
    drafted: int
    rates: tuple[float, ...]  # per-position accepted / drafts, 3 decimals
    acceptance_pct: float  # accepted / drafted * 100, 1 decimal

    @classmethod
    def parse(cls, line: str) -> SpecLine:
        m = _SPEC_LINE.search(line)
        assert m, line
        return cls(
            mean_acceptance_length=float(m["mal"]),
            accepted=int(m["accepted"]),
            drafted=int(m["drafted"]),
            rates=tuple(float(r) for r in m["rates"].split(", ")),
            acceptance_pct=float(m["pct"]),
        )

    def drafts_range(self, k: int) -> tuple[float, float]:
        """The drafts this line covered, from its rounded mean acceptance length.

        mean = 1 + accepted / drafts, printed to +-0.005; each draft holds 1..k tokens.
        """
        lo, hi = float(math.ceil(self.drafted / k)), float(self.drafted)
        if self.accepted > 0:
            hi = min(hi, self.accepted / max(self.mean_acceptance_length - 0.005 - 1, 1e-12))
            lo = max(lo, self.accepted / (self.mean_acceptance_length + 0.005 - 1))
        return lo, hi


def test_vllm_per_position_equals_counters_and_its_own_log(
    vllm_single: servers.VllmServer, tmp_path: Path
) -> None:
    """Two scrapes of the engine with no traffic in flight (A before the load, B after it);
    the daemon's window covers exactly A..B.

    1. The daemon's per-position survival and conditional acceptance, alpha, margin and the
       rest equal the hand computation from B - A.
    2. vLLM's own log lines printed between A and B cover the same steps: their Accepted and
       Drafted tokens sum to B - A exactly. Each line prints per-position rates (3 decimals)
       and the mean acceptance length (2 decimals) but not its number of drafts; the latter
       follows from accepted / (mean - 1) within the rounding, so the per-position counts of
       B - A must lie within the sum over lines of (rate +- 0.0005) * drafts. With a single
       line in the interval, its printed figures equal B - A's rounded.

    Alignment: a scrape is taken only after the counters have been still for
    2 * log interval + 1 s, so vLLM has flushed its log buffer (it logs every interval, and
    only intervals that saw drafts print a line) and no step is pending.
    """
    srv = vllm_single
    _, a = settled(srv.metrics_url, quiet=QUIET, timeout=120)
    lines_before = len(srv.spec_log_lines())
    cfg = write_config(
        tmp_path / "specmon.yaml",
        [("vllm", srv.metrics_url, {})],
        windows=[WINDOW],
        interval="1s",
        draft_cost=DRAFT_COST,
    )
    with daemon(cfg, tmp_path) as d:
        wait_target_up(d, "vllm")
        servers.drive_load(
            srv.base_url, n_requests=16, concurrency=4, max_tokens=200, model="tiny-llama"
        )
        _, b = settled(srv.metrics_url, quiet=QUIET, timeout=120)
        lines = [SpecLine.parse(ln) for ln in srv.spec_log_lines()[lines_before:]]
        delta = b.minus(a)
        m = wait_window_drafts(d, LABELS, WINDOW, delta.drafts)

    print(f"\nvLLM counters B-A: {delta}; survival {[round(s, 4) for s in delta.survival()]}")
    for line in lines:
        print(f"  log: {line}")
    assert delta.drafts > 50, "too few drafts to compare anything"
    assert len(delta.per_pos) == K and sum(delta.per_pos) == delta.accepted
    # 1. the daemon equals the hand computation from the raw counters
    assert_window_matches(m, LABELS, WINDOW, delta, k=K, c=DRAFT_COST)

    # 2. vLLM's own log over the same interval
    assert lines, "vLLM printed no SpecDecoding line between the scrapes"
    assert sum(ln.accepted for ln in lines) == delta.accepted
    assert sum(ln.drafted for ln in lines) == delta.draft_tokens
    eps = 1e-9
    ranges = [ln.drafts_range(K) for ln in lines]
    assert sum(lo for lo, _ in ranges) - eps <= delta.drafts <= sum(hi for _, hi in ranges) + eps
    for i in range(K):
        lo = sum(max(ln.rates[i] - 0.0005, 0) * r[0] for ln, r in zip(lines, ranges, strict=True))
        hi = sum((ln.rates[i] + 0.0005) * r[1] for ln, r in zip(lines, ranges, strict=True))
        assert lo - eps <= delta.per_pos[i] <= hi + eps, (i, lo, delta.per_pos[i], hi)
    if len(lines) == 1:
        (line,) = lines
        assert abs(line.mean_acceptance_length - (1 + delta.accepted / delta.drafts)) <= 0.005 + eps
        for rate, survival in zip(line.rates, delta.survival(), strict=True):
            assert abs(rate - survival) <= 0.0005 + eps
        assert abs(line.acceptance_pct - 100 * delta.accepted / delta.draft_tokens) <= 0.05 + eps


def test_vllm_name_filter_serves_only_what_specmon_reads(
    vllm_single: servers.VllmServer, tmp_path: Path
) -> None:
    """``name_filter`` against the real server. vLLM's ``/metrics/`` (with the slash) is
    prometheus_client's own app, which honours ``?name[]=``; its ``/metrics`` (the
    instrumentator) ignores it. With no traffic in flight, the filtered page gives exactly the
    reading of the whole page from a small fraction of the bytes, and a daemon watching the
    engine both ways exports the same totals."""
    srv = vllm_single
    servers.drive_load(srv.base_url, n_requests=4, concurrency=2, max_tokens=40, model="tiny-llama")
    settled(srv.metrics_url, quiet=QUIET, timeout=120)
    slash = srv.metrics_url + "/"

    async def read_all() -> list[Reading]:
        out = []
        async with open_session() as session:
            for url, name_filter in (
                (srv.metrics_url, False),
                (slash, True),
                (srv.metrics_url, True),
            ):
                source = HttpPageSource(
                    url=url, session=lambda: session, timeout=30.0, max_bytes=1 << 24,
                    engine=Engine.VLLM, name_filter=name_filter,
                )  # fmt: skip
                out.append(await source.read())
        return out

    whole, cut, ignored = asyncio.run(read_all())
    print(f"\nvLLM page: {whole.size} bytes; filtered on /metrics/: {cut.size}; "
          f"name[] on /metrics: {ignored.size}")  # fmt: skip
    assert whole.page.models and whole.page.models[0].counters is not None
    assert cut.page == whole.page
    assert cut.size * 10 < whole.size
    assert ignored.size * 2 > whole.size  # the instrumentator's page ignores name[]

    cfg = write_config(
        tmp_path / "specmon.yaml",
        [("whole", srv.metrics_url, {}), ("cut", slash, {"name_filter": "true"})],
        windows=["1m"],
        interval="1s",
    )
    names = ("specmon_drafts_total", "specmon_draft_tokens_total", "specmon_accepted_tokens_total")

    def same_totals() -> dict[str, float] | None:
        m = d.metrics()
        got = {n: (m.value(n, target="whole"), m.value(n, target="cut")) for n in names}
        if all(w is not None and w > 0 and w == c for w, c in got.values()):
            return {n: w for n, (w, _) in got.items() if w is not None}
        return None

    with daemon(cfg, tmp_path) as d:
        wait_target_up(d, "whole")
        wait_target_up(d, "cut")
        servers.drive_load(
            srv.base_url, n_requests=4, concurrency=2, max_tokens=40, model="tiny-llama"
        )
        settled(srv.metrics_url, quiet=QUIET, timeout=120)
        totals = d.wait_for(same_totals, timeout=30, interval=0.5)
    print(f"daemon totals, both targets: {totals}")


def _workload(base_url: str) -> None:
    """Sequential, temperature 0, same prompts and lengths: n-gram drafting is then
    deterministic."""
    servers.drive_load(base_url, n_requests=8, concurrency=1, max_tokens=100, model="tiny-llama")


def _run_workload(srv: servers.VllmServer) -> Counters:
    _, before = settled(srv.metrics_url, quiet=1.5, timeout=120)
    _workload(srv.base_url)
    _, after = settled(srv.metrics_url, quiet=1.5, timeout=120)
    return after.minus(before)


def test_vllm_multiprocess_page_counts_like_single_process(
    vllm_single: servers.VllmServer, tmp_path: Path
) -> None:
    """The same deterministic workload against one API server and against
    ``--api-server-count 2``: equal drafts, draft tokens, accepted and per-position counts
    (n-gram proposals at temperature 0 with requests one at a time do not depend on the
    front end). The multiprocess page has one series per counter (no per-process duplicates,
    no ``_created``), every API server answers with the same aggregate, and the daemon's
    window equals the page's increase, not twice it. (vLLM turns its stats log off with
    several API servers, so the log cannot be compared here.)"""
    single = _run_workload(vllm_single)
    with servers.vllm_server(api_server_count=2) as multi:
        text, _ = scrape(multi.metrics_url)
        assert "_created" not in text
        drafts_lines = [
            ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode_num_drafts_total")
        ]
        assert len(drafts_lines) == 1 and 'engine="0"' in drafts_lines[0], drafts_lines
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [("vllm", multi.metrics_url, {})],
            windows=[WINDOW],
            interval="1s",
            draft_cost=DRAFT_COST,
        )
        with daemon(cfg, tmp_path) as d:
            wait_target_up(d, "vllm")
            _, before = settled(multi.metrics_url, quiet=1.5, timeout=120)
            _workload(multi.base_url)
            _, after = settled(multi.metrics_url, quiet=1.5, timeout=120)
            delta = after.minus(before)
            m = wait_window_drafts(d, LABELS, WINDOW, delta.drafts)
            # every API server reads the same shared counters
            assert all(scrape(multi.metrics_url)[1] == after for _ in range(6))
    print(f"\nsingle {single}\nmulti  {delta}")
    assert single.drafts > 20
    assert delta == single
    assert_window_matches(m, LABELS, WINDOW, delta, k=K, c=DRAFT_COST)
    assert m.value("specmon_drafts_total", **LABELS) == delta.drafts
