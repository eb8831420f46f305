"""Fleet mode for real: Debian's Prometheus scrapes simulated engines (``specmon simulate``)
found through a file_sd file, and ``specmon run`` reads them through it (a Prometheus source,
every second). The fleet changes under it:

- an engine added to the file_sd file appears in specmon within two read intervals of its
  first sample in Prometheus;
- an engine that stops vanishes within two read intervals of Prometheus's failed scrape
  (Prometheus writes staleness markers; timed from the stop, so one scrape interval more);
- a Prometheus killed with SIGKILL turns every instance's figures off within two read
  intervals (``specmon_up 0``, nothing derived, ``specmon_source_up 0``, reads counted as
  ``down``); restarted, it brings them back.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.e2e.stack import (
    Proc,
    free_port,
    http_json,
    http_ok,
    require_binaries,
    simulate,
    wait_until,
)
from tests.support.daemon import Daemon, Exported, daemon

pytestmark = pytest.mark.prometheus

#: Prometheus's scrape interval and specmon's read interval, seconds.
SCRAPE = 1.0
READ = 1.0
#: Added to every bound: polling (0.1 s), one read's duration, the subprocesses' scheduling
#: on a shared 2-core machine.
SLACK = 1.0
HEALTH = {"specmon_up", "specmon_scrape_duration_seconds", "specmon_last_success_timestamp_seconds"}


@dataclass
class Stack:
    tmp: Path
    sd_file: Path
    port: int
    prometheus: Proc
    engines: dict[str, str] = field(default_factory=dict)  # instance (host:port) -> URL
    procs: dict[str, Proc] = field(default_factory=dict)
    instances: dict[str, list[str]] = field(default_factory=dict)  # simulate key -> instances

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_sd(self) -> None:
        groups = [{"targets": sorted(self.engines), "labels": {"job": "fleet"}}]
        tmp = self.sd_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.sd_file)

    def start_prometheus(self) -> None:
        config = {
            "global": {"scrape_interval": f"{SCRAPE:g}s", "scrape_timeout": f"{SCRAPE:g}s"},
            "scrape_configs": [
                {"job_name": "fleet", "file_sd_configs": [{"files": [str(self.sd_file)]}]}
            ],
        }
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.prometheus = Proc.start(
            "prometheus",
            ["prometheus", f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            self.tmp / f"prometheus-{time.monotonic_ns()}.log",
        )  # fmt: skip
        wait_until("Prometheus ready", lambda: http_ok(self.base + "/-/ready"), timeout=30,
                   alive=self.prometheus.check_alive)  # fmt: skip

    def first_sample(self, instance: str) -> float | None:
        """Unix time of Prometheus's first sample of the instance's drafts counter, if any."""
        query = f'timestamp(vllm:spec_decode_num_drafts_total{{instance="{instance}"}}) or ' \
                f'timestamp(llamacpp:spec_decode_num_drafts_total{{instance="{instance}"}})'  # fmt: skip
        params = urllib.parse.urlencode({"query": query})
        result = http_json(f"{self.base}/api/v1/query?{params}")["data"]["result"]
        return float(result[0]["value"][1]) if result else None


def _engine(stack: Stack, key: str, args: list[str], count: int = 1) -> list[str]:
    proc, found = simulate(key, stack.tmp, [*args, "--listen", "127.0.0.1:0"], targets=count)
    stack.procs[key] = proc
    added = []
    for url in found.values():
        instance = urllib.parse.urlsplit(url.strip()).netloc
        stack.engines[instance] = url.strip()
        added.append(instance)
    stack.instances[key] = added
    return added


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    require_binaries("prometheus")
    with contextlib.ExitStack() as cleanup:
        s = Stack(tmp_path, tmp_path / "fleet.json", free_port(), prometheus=None)  # type: ignore[arg-type]

        def stop_engines() -> None:
            for proc in s.procs.values():
                proc.stop()

        cleanup.callback(stop_engines)
        _engine(s, "vllm", ["--engine", "vllm", "--targets", "2", "--seed", "21",
                            "--drafts-per-second", "80"], 2)  # fmt: skip
        _engine(s, "llamacpp", ["--engine", "llamacpp", "--seed", "22",
                                "--drafts-per-second", "80"])  # fmt: skip
        s.write_sd()
        s.start_prometheus()
        cleanup.callback(lambda: s.prometheus.stop())
        wait_until("Prometheus to have scraped every engine",
                   lambda: all(s.first_sample(i) for i in s.engines), timeout=20)  # fmt: skip
        yield s


def _specmon_config(path: Path, prometheus: str) -> Path:
    doc = {
        "global": {"scrape_interval": "1s", "windows": ["3s", "30s"]},
        "sources": [
            {
                "prometheus": {
                    "url": prometheus,
                    "name": "fleet",
                    "selector": '{job="fleet"}',
                    "interval": f"{READ:g}s",
                    "timeout": "900ms",
                    "stale_after": "10s",
                }
            }
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _up(m: Exported) -> dict[str, float]:
    return {dict(labels)["target"]: value for labels, value in m.series("specmon_up").items()}


def _derived(m: Exported, target: str) -> set[str]:
    return {name for name, series in m.samples.items() for labels in series
            if ("target", target) in labels} - HEALTH - {"specmon_scrapes_total"}  # fmt: skip


def _poll(d: Daemon, what: str, probe: object, timeout: float) -> tuple[float, Exported]:
    """Poll /metrics every 0.1 s until ``probe(metrics)``; the time it first held."""
    deadline = time.monotonic() + timeout
    while True:
        m = d.metrics()
        if probe(m):  # type: ignore[operator]
            return time.time(), m
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:.1f}s: {_up(m)}")
        time.sleep(0.1)


def test_instances_follow_the_fleet_and_a_dead_prometheus_turns_figures_off(
    stack: Stack, tmp_path: Path
) -> None:
    cfg = _specmon_config(tmp_path / "specmon.yml", stack.base)
    with daemon(cfg, tmp_path) as d:
        first = set(stack.engines)
        _poll(d, "the first instances with figures", lambda m: set(_up(m)) == first and all(
            m.value("specmon_alpha_ratio", target=i, window="3s") is not None for i in first
        ), timeout=15)  # fmt: skip

        # An engine appears: added to Prometheus's file_sd file.
        (new,) = _engine(stack, "llamacpp-2", ["--engine", "llamacpp", "--seed", "23"])
        stack.write_sd()
        added = time.time()
        seen, _ = _poll(d, "the new instance", lambda m: _up(m).get(new) == 1, timeout=20)
        sampled = stack.first_sample(new)
        assert sampled is not None and sampled >= added - 0.1
        appear = seen - sampled
        print(f"\nappeared {appear:.2f}s after its first sample in Prometheus "
              f"({seen - added:.2f}s after the file_sd change)")  # fmt: skip
        assert appear <= 2 * READ + SLACK, appear

        # An engine vanishes: it stops, Prometheus's next scrape fails and marks it stale.
        (gone,) = stack.instances["llamacpp"]
        stack.procs["llamacpp"].stop()
        stopped = time.time()
        vanished, m = _poll(d, "the stopped instance to vanish", lambda m: gone not in _up(m),
                            timeout=15)  # fmt: skip
        took = vanished - stopped
        print(f"vanished {took:.2f}s after its engine stopped")
        assert took <= SCRAPE + 2 * READ + SLACK, took
        assert not m.series("specmon_scrapes_total", target=gone)
        logs = d.log_lines()
        # The first read listed the first engines in one line; the new one appeared once.
        (listing,) = [x for x in logs if x.get("event") == "source_instances"]
        assert listing["current"] == len(first)
        assert [x["target"] for x in logs if x.get("event") == "instance_appeared"] == [new]
        assert [x["target"] for x in logs if x.get("event") == "instance_vanished"] == [gone]
        live = set(stack.engines) - {gone}

        # Prometheus killed: every figure off within two reads, the health metrics say so.
        logged = len(d.log_lines())
        stack.prometheus.popen.send_signal(signal.SIGKILL)
        stack.prometheus.popen.wait(timeout=10)
        killed = time.time()
        off, m = _poll(d, "every instance down", lambda m: m.value(
            "specmon_source_up", source="fleet") == 0 and all(
            _up(m).get(i) == 0 for i in live), timeout=10)  # fmt: skip
        print(f"every instance down {off - killed:.2f}s after Prometheus was killed")
        assert off - killed <= 2 * READ + SLACK
        for inst in live:
            assert _derived(m, inst) == set(), (inst, _derived(m, inst))
            assert m.value("specmon_scrapes_total", target=inst, result="connection_error")
        assert m.value("specmon_source_reads_total", source="fleet", result="down")
        api = d.targets()
        assert all("cannot connect" in api[i]["error"] for i in live)
        # One line for the outage. A read that timed out earlier on a loaded machine logs its
        # own line; it must have been followed by the source coming back.
        lines = d.log_lines()
        downs = [x for x in lines[logged:] if x.get("event") == "source_down"]
        assert len(downs) == 1 and downs[0]["status"] == "down", downs
        transitions = [x["event"] for x in lines[:logged]
                       if x.get("event") in ("source_down", "source_up")]  # fmt: skip
        assert transitions == ["source_down", "source_up"] * (len(transitions) // 2), transitions

        # Restarted on the same storage: back, with figures.
        stack.start_prometheus()
        _poll(d, "every instance back with figures", lambda m: m.value(
            "specmon_source_up", source="fleet") == 1 and all(
            _up(m).get(i) == 1 and m.value("specmon_mean_acceptance_length", target=i,
                                           window="30s") is not None
            for i in live), timeout=20)  # fmt: skip
        assert "Task exception was never retrieved" not in d.log_text()
