"""The Prometheus source against Debian's real Prometheus scraping simulated engines
(``specmon simulate``: two vLLM, one vLLM multiprocess, one llama.cpp, one SGLang), compared
with direct scrapes of the same engines.

- While the engines' counters move (80 drafts/s each), a direct scrape D0 is taken, then the
  test waits until Prometheus holds a sample of every instance scraped after D0, reads through
  Prometheus (R), and takes a second direct scrape D1. Tolerance: none beyond the one-scrape
  skew of the two paths: every counter of R must lie between D0 and D1 (counters only grow,
  D0 ended before Prometheus's scrape began and D1 began after R was answered), and R must
  differ from D0 somewhere (the counters did move).
- After the engines' scenario freezes their counters (drafts_per_second 0 at FREEZE seconds),
  and Prometheus has scraped every engine since, the readings through Prometheus must equal a
  direct scrape exactly: engine, every model's counters, gauges, context and notes (zero
  tolerance: float64 survives Prometheus's storage and JSON unchanged).
- Then the failures, for real: an engine that stops vanishes from the read within two scrape
  intervals (Prometheus writes staleness markers); a Prometheus killed and restarted without an
  engine's job keeps answering that engine's last numbers with no staleness marker, and the
  read marks it stale; a Prometheus that is gone reads as DOWN.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon.engines import ModelReading, PageReading, read_page
from specmon.sources.http import ACCEPT
from specmon.sources.prometheus import PrometheusSource, ReadResult, ReadStatus
from specmon.sources.prometheus_config import check_sources
from tests.e2e.stack import (
    Proc,
    free_port,
    http_json,
    http_ok,
    require_binaries,
    simulate,
    wait_until,
)

pytestmark = pytest.mark.prometheus

#: Seconds after each simulator starts at which its counters stop moving.
FREEZE = 22.0
SCRAPE = "1s"
ENGINES = {
    # name prefix: simulate arguments, number of targets
    "vllm": (["--engine", "vllm", "--targets", "2", "--seed", "11"], 2),
    "vllm-multiproc": (["--engine", "vllm-multiproc", "--seed", "12"], 1),
    "llamacpp": (["--engine", "llamacpp", "--seed", "13"], 1),
    "sglang": (["--engine", "sglang", "--seed", "14"], 1),
}


@dataclass
class Fleet:
    tmp: Path
    urls: dict[str, str]  # simulated engine name -> metrics URL
    procs: dict[str, Proc]  # simulator process per ENGINES key
    jobs: dict[str, list[str]]
    prometheus: Proc
    base: str
    port: int
    frozen_by: float  # Unix time by which every engine's counters have stopped
    extra: list[Proc] = field(default_factory=list)

    def instance(self, engine: str) -> str:
        return urllib.parse.urlsplit(self.urls[engine]).netloc


def _prometheus_config(jobs: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in jobs.items()
        ],
    }


def _start_prometheus(tmp: Path, jobs: dict[str, list[str]], port: int) -> Proc:
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(_prometheus_config(jobs)))
    proc = Proc.start(
        "prometheus",
        [
            "prometheus",
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp / f"prometheus-{time.monotonic_ns()}.log",
    )
    base = f"http://127.0.0.1:{port}"
    wait_until("Prometheus ready", lambda: http_ok(base + "/-/ready"), timeout=30,
               alive=proc.check_alive)  # fmt: skip
    count = sum(len(t) for t in jobs.values())

    def all_up() -> bool:
        active = http_json(base + "/api/v1/targets")["data"]["activeTargets"]
        return len(active) == count and all(t["health"] == "up" for t in active)

    wait_until("every target up", all_up, timeout=30, alive=proc.check_alive)
    return proc


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    require_binaries("prometheus")
    tmp = tmp_path_factory.mktemp("promsource")
    scenario = tmp / "freeze.yml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "phases": [
                    {"at": "0s", "drafts_per_second": 80},
                    {"at": f"{FREEZE:g}s", "drafts_per_second": 0},
                ]
            }
        )
    )
    urls: dict[str, str] = {}
    procs: dict[str, Proc] = {}
    with contextlib.ExitStack() as cleanup:
        frozen_by = 0.0
        for key, (args, count) in ENGINES.items():
            proc, found = simulate(
                key,
                tmp,
                [*args, "--listen", "127.0.0.1:0", "--scenario", str(scenario)],
                targets=count,
            )
            cleanup.callback(proc.stop)
            # The targets exist once their addresses are printed: they freeze by then + FREEZE.
            frozen_by = max(frozen_by, time.time() + FREEZE)
            procs[key] = proc
            urls.update({name: url.strip() for name, url in found.items()})

        def hostport(name: str) -> str:
            return urllib.parse.urlsplit(urls[name]).netloc

        jobs = {
            "vllm": [hostport("vllm-0"), hostport("vllm-1"), hostport("vllm-multiproc")],
            "llamacpp": [hostport("llamacpp")],
            "sglang": [hostport("sglang")],
        }
        port = free_port()
        prometheus = _start_prometheus(tmp, jobs, port)
        fleet = Fleet(tmp, urls, procs, jobs, prometheus, f"http://127.0.0.1:{port}", port,
                      frozen_by)  # fmt: skip

        def stop_all() -> None:
            for proc in (fleet.prometheus, *fleet.extra):
                proc.stop()

        cleanup.callback(stop_all)
        assert time.time() < frozen_by - 8, "start-up took too long for the moving phase"
        yield fleet


def _config(base: str, **extra: Any) -> Any:
    (config,), problems = check_sources(
        [{"prometheus": {"url": base, "selector": '{job=~"vllm|llamacpp|sglang"}', **extra}}],
        environ={},
    )
    assert not problems
    return config


def _read(base: str, **extra: Any) -> ReadResult:
    async def go() -> ReadResult:
        async with PrometheusSource(_config(base, **extra)) as source:
            return await source.read()

    return asyncio.run(go())


def _direct(fleet: Fleet) -> dict[str, PageReading]:
    """Every engine scraped directly, as the daemon does; keyed by the instance name."""
    out = {}
    for name, url in fleet.urls.items():
        request = urllib.request.Request(url, headers={"Accept": ACCEPT})
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read().decode()
            content_type = response.headers.get("Content-Type", "")
        reading = read_page(text, openmetrics="openmetrics" in content_type or None)
        out[fleet.instance(name)] = reading
    return out


def _counters(model: ModelReading) -> list[int]:
    values: list[int] = []
    if model.counters is not None:
        c = model.counters
        values += [c.drafts, c.draft_tokens, c.accepted_tokens, *c.accepted_per_position]
    if model.context.generation_tokens is not None:
        values.append(model.context.generation_tokens)
    return values


def test_moving_counters_lie_between_two_direct_scrapes(fleet: Fleet) -> None:
    before = _direct(fleet)
    after_d0 = time.time()

    def scraped_since() -> ReadResult | None:
        result = _read(fleet.base)
        assert result.status is ReadStatus.OK, result.message
        oldest = [i.oldest_sample for i in result.instances]
        return result if len(oldest) == 5 and all(o and o > after_d0 for o in oldest) else None

    result = wait_until("a Prometheus scrape after D0", scraped_since, timeout=10, interval=0.2)
    after = _direct(fleet)
    assert time.time() < fleet.frozen_by, "the counters froze during the moving phase"
    moved = 0
    for instance in result.instances:
        reading = instance.reading()
        assert reading is not None and instance.error is None and not instance.stale
        d0, d1 = before[instance.name], after[instance.name]
        assert reading.engine == d0.engine == d1.engine
        assert [m.model for m in reading.models] == [m.model for m in d0.models]
        for via, low, high in zip(reading.models, d0.models, d1.models, strict=True):
            v, lo, hi = _counters(via), _counters(low), _counters(high)
            assert len(v) == len(lo) == len(hi), instance.name
            assert all(a <= b <= c for a, b, c in zip(lo, v, hi, strict=True)), (
                instance.name, lo, v, hi)  # fmt: skip
            moved += v != lo
            if via.gauges is not None:  # SGLang: gauges from the template, constant
                assert via.gauges == low.gauges
    assert moved >= 3, "the counters did not move between D0 and the Prometheus sample"


def test_frozen_counters_are_exactly_equal(fleet: Fleet) -> None:
    wait_for = fleet.frozen_by + 0.5 - time.time()
    if wait_for > 0:
        time.sleep(wait_for)

    def scraped_after_freeze() -> ReadResult | None:
        result = _read(fleet.base)
        ok = len(result.instances) == 5 and all(
            i.oldest_sample and i.oldest_sample > fleet.frozen_by + 0.2 for i in result.instances
        )
        return result if ok else None

    result = wait_until("a scrape of frozen engines", scraped_after_freeze, timeout=10)
    direct = _direct(fleet)
    assert _direct(fleet) == direct, "the engines are not frozen"
    for instance in result.instances:
        via = instance.reading()
        assert via is not None
        d = direct[instance.name]
        assert via.engine == d.engine
        assert via.models == d.models, instance.name
        assert via.notes == d.notes
        assert via.speculation and not via.problems and not d.problems
    print(
        "frozen readings equal:",
        {i.name: [_counters(m) for m in i.reading().models] for i in result.instances},  # type: ignore[union-attr]
    )


def test_failures_for_real(fleet: Fleet) -> None:
    # An engine that stops vanishes: Prometheus's failed scrape writes staleness markers.
    sglang = fleet.instance("sglang")
    assert sglang in _read(fleet.base).by_name()
    stopped = time.monotonic()
    fleet.procs["sglang"].stop()
    wait_until(
        "the stopped engine to vanish",
        lambda: sglang not in _read(fleet.base).by_name(),
        timeout=2 * 1.0 + 1.5,
        interval=0.1,
    )
    print(f"stopped engine vanished after {time.monotonic() - stopped:.2f}s")

    # Prometheus killed (no staleness markers) and restarted without the llama.cpp job.
    llama = fleet.instance("llamacpp")
    fleet.prometheus.popen.send_signal(signal.SIGKILL)
    fleet.prometheus.popen.wait(timeout=10)
    killed = time.time()
    down = _read(fleet.base)
    assert down.status is ReadStatus.DOWN, down
    assert down.message and "cannot connect" in down.message
    jobs = {"vllm": fleet.jobs["vllm"]}
    fleet.prometheus = _start_prometheus(fleet.tmp, jobs, fleet.port)
    time.sleep(max(0.0, killed + 3.5 - time.time()))
    result = _read(fleet.base, stale_after="3s")
    assert result.status is ReadStatus.OK
    by_name = result.by_name()
    assert llama in by_name, "Prometheus should still answer the unscraped engine's numbers"
    assert by_name[llama].stale
    newest = by_name[llama].newest_sample
    assert newest is not None and newest < killed
    assert result.stale == (llama,)
    assert all(not by_name[fleet.instance(n)].stale for n in ("vllm-0", "vllm-1", "vllm-multiproc"))

    fleet.prometheus.stop()
    gone = _read(fleet.base)
    assert gone.status is ReadStatus.DOWN
