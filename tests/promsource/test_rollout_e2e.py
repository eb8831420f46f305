"""Issue 64 for real: Debian's Prometheus scrapes simulated vLLM pods (``specmon simulate``
on the demo's load model, 4 requests each) found through a file_sd file whose target labels
say what Kubernetes' would (``namespace``, ``deployment``, ``pod``), and ``specmon run``
reads them through it (a Prometheus source, ``instance_labels: [namespace, pod]``,
``group_labels: [namespace, deployment]``). A rollout that switches speculation on:

1. three pods without speculation run long enough to be the group's past (an epoch of at
   least a minute: a shorter one would be folded into the next);
2. a fourth pod with its draft (k = 4) starts: a canary. Its verdict rests on the ``canary``
   basis, "canary: 1 of 4 pods on k = 4, compared with the 3 on k = 0", within 5 % of the
   load model's truth;
3. the old pods are stopped one by one while two more new pods start (file_sd: the targets
   leave and join Prometheus's config): the group keeps its past (each new pod's epochs hold
   the configuration without speculation, "joined group ..."), and once no old pod is left
   the canary's verdict rests on the group's past (``history``), within 5 % too.

About 100 s; run it under ``flock /work/heavy.lock`` on a shared machine.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon.sim.load_model import DEMO_LOAD_MODEL
from tests.e2e.stack import (
    Proc,
    free_port,
    http_json,
    http_ok,
    require_binaries,
    simulate_all,
    wait_until,
)
from tests.support.daemon import Daemon, daemon

pytestmark = pytest.mark.prometheus

N = 4
SURVIVAL = (0.9, 0.7, 0.5, 0.3)
COMMON = ["--engine", "vllm", "--targets", "3", "--load-model", "demo", "--requests-running",
          str(N), "--survival", ",".join(map(str, SURVIVAL)), "--listen", "127.0.0.1:0"]  # fmt: skip
GROUP = "namespace=llm,deployment=llama"
#: How long the old pods run before the canary starts: their epoch must outlive
#: specmon.state.epochs.MIN_EPOCH_SECONDS (60 s) to stay the group's past.
PAST = 64.0


def _truth() -> float:
    return DEMO_LOAD_MODEL.speedup(N, len(SURVIVAL), 1 + sum(SURVIVAL))


@dataclass
class Stack:
    tmp: Path
    port: int
    #: pod name -> instance (host:port), for the pods in the file_sd file now.
    pods: dict[str, str] = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    prometheus: Proc | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def sd_file(self) -> Path:
        return self.tmp / "pods.json"

    def write_sd(self) -> None:
        groups = [
            {"targets": [instance],
             "labels": {"namespace": "llm", "deployment": "llama", "pod": pod}}
            for pod, instance in sorted(self.pods.items())
        ]  # fmt: skip
        tmp = self.sd_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.sd_file)

    def start_prometheus(self) -> None:
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "pods", "file_sd_configs": [{"files": [str(self.sd_file)],
                                                          "refresh_interval": "1s"}]}
            ],
        }  # fmt: skip
        (self.tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.prometheus = Proc.start(
            "prometheus",
            ["prometheus", f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            self.tmp / "prometheus.log",
        )  # fmt: skip
        wait_until("Prometheus ready", lambda: http_ok(self.base + "/-/ready"), timeout=30,
                   alive=self.prometheus.check_alive)  # fmt: skip

    def scraped(self, pod: str) -> bool:
        query = f'vllm:num_requests_running{{pod="{pod}"}}'
        params = urllib.parse.urlencode({"query": query})
        return bool(http_json(f"{self.base}/api/v1/query?{params}")["data"]["result"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Stack, dict[str, str], dict[str, str]]]:
    require_binaries("prometheus")
    with contextlib.ExitStack() as cleanup:
        s = Stack(tmp_path, free_port())

        def stop_pods() -> None:
            for proc in s.procs:
                proc.stop()

        cleanup.callback(stop_pods)
        started = simulate_all(tmp_path, {
            "old": ([*COMMON, "--no-speculation", "--seed", "31"], 3),
            "new": ([*COMMON, "--seed", "32"], 3),
        })  # fmt: skip
        s.procs = [proc for proc, _ in started.values()]
        old, new = ({f"llama-{tag}-{i}": urllib.parse.urlsplit(url.strip()).netloc
                     for i, url in enumerate(started[key][1].values())}
                    for key, tag in (("old", "6b7c"), ("new", "9f2d")))  # fmt: skip
        s.pods = dict(old)
        s.write_sd()
        s.start_prometheus()
        cleanup.callback(lambda: s.prometheus.stop() if s.prometheus else None)
        wait_until("Prometheus to scrape the old pods", lambda: all(map(s.scraped, old)),
                   timeout=30)  # fmt: skip
        yield s, old, new


def _config(path: Path, prometheus: str) -> Path:
    doc = {
        "global": {"scrape_interval": "1s", "windows": ["30s"]},
        "sources": [{"prometheus": {
            "url": prometheus, "name": "pods", "selector": '{job="pods"}', "interval": "1s",
            "timeout": "900ms", "stale_after": "5s",
            "instance_labels": ["namespace", "pod"],
            "group_labels": ["namespace", "deployment"],
        }}],
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


def _verdict(d: Daemon, pod: str) -> dict[str, Any] | None:
    target = d.targets().get(f"llm/{pod}")
    if target is None:
        return None
    found = [w["verdict"] for m in target["models"] for w in m["windows"] if w.get("verdict")]
    return found[0] if found else None


def _measured(d: Daemon, pod: str, basis: str) -> dict[str, Any] | None:
    verdict = _verdict(d, pod)
    if verdict is None or verdict["basis"] != basis or verdict["state"] != "measured":
        return None
    return verdict


def _epochs(d: Daemon, pod: str) -> list[dict[str, Any]]:
    target = d.targets()[f"llm/{pod}"]
    return [e for model in target["epochs"] for e in model["epochs"]]


def _events(d: Daemon, pod: str) -> list[str]:
    target = d.targets()[f"llm/{pod}"]
    return [e[1] if isinstance(e, list) else e["text"] for m in target["epochs"]
            for e in m["events"]]  # fmt: skip


def test_a_rollout_reads_the_canary_basis_then_the_group_past(
    stack: tuple[Stack, dict[str, str], dict[str, str]], tmp_path: Path
) -> None:
    s, old, new = stack
    truth = _truth()
    with daemon(_config(tmp_path / "specmon.yml", s.base), tmp_path) as d:
        seen = time.monotonic()
        d.wait_for(lambda: all(_epochs_known(d, p) for p in old), timeout=30)
        time.sleep(max(0.0, PAST - (time.monotonic() - seen)))

        # A canary: one new pod with its draft beside the three without.
        canary = next(iter(new))
        s.pods[canary] = new[canary]
        s.write_sd()
        verdict = d.wait_for(lambda: _measured(d, canary, "canary"), timeout=40)
        # Read it again a little later: the window filled with the new configuration only, and
        # every old pod pooled (on a loaded machine a CI run read "compared with the 1 on k = 0"
        # at 5 s: an old pod is left out, and named, while its window holds too little).
        time.sleep(5)
        full = "canary: 1 of 4 pods on k = 4, compared with the 3 on k = 0"

        def pooled_all() -> Any:
            read = _measured(d, canary, "canary")
            return read if read and read["basis_text"] == full else None

        try:
            verdict = d.wait_for(pooled_all, timeout=30)
        except AssertionError:
            last = _measured(d, canary, "canary") or verdict
            raise AssertionError(f"{last['basis_text']}; {last}") from None
        print(f"\ncanary: {verdict['speedup']:.3f}x {verdict['speedup_interval']} "
              f"truth {truth:.3f}: {verdict['basis_text']}")  # fmt: skip
        assert abs(verdict["speedup"] / truth - 1) < 0.05, (verdict["speedup"], truth)
        events = _events(d, canary)
        assert any(t.startswith(f"joined group {GROUP}") for t in events), events

        # The rollout: the old pods stopped one by one while the other new pods start.
        coming: list[str | None] = [p for p in new if p != canary]
        for gone, pod in zip(old, [*coming, None], strict=True):
            del s.pods[gone]
            if pod is not None:
                s.pods[pod] = new[pod]
            s.write_sd()
            time.sleep(3)
        verdict = d.wait_for(lambda: _measured(d, canary, "history"), timeout=40)
        print(f"after the rollout: {verdict['speedup']:.3f}x {verdict['speedup_interval']} "
              f"truth {truth:.3f}: {verdict['detail']}")  # fmt: skip
        assert abs(verdict["speedup"] / truth - 1) < 0.05, (verdict["speedup"], truth)
        d.wait_for(lambda: set(d.targets()) == {f"llm/{p}" for p in new}, timeout=15)
        for pod in new:  # each holds the group's past: the configuration without speculation
            assert any(e["speculation"] is False for e in _epochs(d, pod)), _epochs(d, pod)
        assert "Task exception was never retrieved" not in d.log_text()


def _epochs_known(d: Daemon, pod: str) -> bool:
    target = d.targets().get(f"llm/{pod}")
    if target is None or not target["epochs"]:
        return False
    return all(m["epochs"][-1]["speculation"] is False for m in target["epochs"])
