"""Capture real Prometheus answers for the Prometheus-source tests (tests/fixtures/prometheus/).

    .venv/bin/python -m tests.promsource.capture [--out tests/fixtures/prometheus]

Starts simulated engines (``specmon simulate``: two vLLM, one vLLM multiprocess, one llama.cpp,
one SGLang), Debian's Prometheus scraping them every second (plus a second job scraping one vLLM
engine again, the classic ServiceMonitor-plus-PodMonitor mistake), and two more Prometheus
servers for failures (one with a dead ``remote_read`` store marked ``read_recent``, whose
queries answer with ``warnings``; one with ``--query.max-samples=3``). It sends the queries
that :class:`specmon.sources.prometheus.PrometheusSource` sends (built by the same functions)
with the same form parameters, and stores every answer verbatim (status, Content-Type, body as
text) in one JSON file per scenario, with the source config that produces those queries and the
evaluation time. Finally it kills the main Prometheus with SIGKILL and restarts it on the same
storage without the llama.cpp job, so the llama.cpp series stay in the TSDB without staleness
markers: the ``stale`` scenario. Everything stops at the end.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from specmon.sources.prometheus import QueryStrategy, freshness_query, value_queries
from specmon.sources.prometheus_config import PrometheusSourceConfig, check_sources
from tests.e2e.stack import Proc, free_port, http_json, http_ok, simulate, wait_until

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "prometheus"


def source_config(source: dict[str, Any]) -> PrometheusSourceConfig:
    (config,), problems = check_sources([{"prometheus": source}], environ={})
    assert not problems, problems
    return config


def post(base: str, query: str, at: float, *, path: str = "/api/v1/query") -> dict[str, Any]:
    data = urllib.parse.urlencode({"query": query, "time": f"{at:.3f}", "timeout": "5000ms"})
    request = urllib.request.Request(
        base + path,
        data=data.encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, headers, body = exc.code, exc.headers, exc.read()
    return {
        "query": query,
        "status": status,
        "content_type": headers.get("Content-Type", ""),
        "body": body.decode("utf-8"),
    }


def answers_for(
    base: str, config: PrometheusSourceConfig, at: float, strategies: tuple[QueryStrategy, ...]
) -> list[dict[str, Any]]:
    queries: list[str] = []
    for strategy in strategies:
        queries += [q for q in value_queries(config, strategy) if q not in queries]
    queries.append(freshness_query(config))
    return [post(base, q, at) for q in queries]


def start_prometheus(
    name: str,
    tmp: Path,
    config: dict[str, Any],
    *,
    port: int | None = None,
    extra: tuple[str, ...] = (),
) -> tuple[Proc, str]:
    directory = tmp / name
    directory.mkdir(exist_ok=True)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    proc = Proc.start(
        name,
        [
            "prometheus",
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            *extra,
        ],
        tmp / f"{name}-{int(time.time() * 1000)}.log",
    )
    base = f"http://127.0.0.1:{port}"
    wait_until(
        f"{name} ready", lambda: http_ok(base + "/-/ready"), timeout=30, alive=proc.check_alive
    )
    return proc, base


def scrape_config(jobs: dict[str, list[str]]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": targets}]}
            for job, targets in jobs.items()
        ],
    }


def hostport(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def all_up(base: str, count: int) -> bool:
    targets = http_json(base + "/api/v1/targets")["data"]["activeTargets"]
    return len(targets) == count and all(t["health"] == "up" for t in targets)


def prometheus_version() -> str:
    import subprocess

    out = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=True)
    return (out.stdout or out.stderr).splitlines()[0].strip()


def write(out: Path, scenario: str, payload: dict[str, Any]) -> None:
    path = out / f"{scenario}.json"
    path.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size} bytes)", flush=True)


@contextmanager
def engines(tmp: Path, stack: ExitStack) -> Iterator[dict[str, str]]:
    found: dict[str, str] = {}
    specs = [
        ("vllm", ["--engine", "vllm", "--targets", "2", "--seed", "1"], 2),
        ("vllm-multiproc", ["--engine", "vllm-multiproc", "--seed", "3"], 1),
        ("llamacpp", ["--engine", "llamacpp", "--seed", "4"], 1),
        ("sglang", ["--engine", "sglang", "--seed", "5"], 1),
    ]
    for name, args, count in specs:
        proc, addresses = simulate(
            name,
            tmp,
            [*args, "--listen", "127.0.0.1:0", "--drafts-per-second", "50"],
            targets=count,
        )
        stack.callback(proc.stop)
        found.update(addresses)
    yield found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.promsource.capture")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    version = prometheus_version()
    tmp = Path(tempfile.mkdtemp(prefix="specmon-promcapture-"))
    with ExitStack() as stack, engines(tmp, stack) as found:
        vllm = [hostport(found["vllm-0"]), hostport(found["vllm-1"])]
        jobs = {
            "vllm": [*vllm, hostport(found["vllm-multiproc"])],
            "llamacpp": [hostport(found["llamacpp"])],
            "sglang": [hostport(found["sglang"])],
            "vllm-again": [vllm[0]],
        }
        main_port = free_port()
        prom, base = start_prometheus("prometheus", tmp, scrape_config(jobs), port=main_port)
        stack.callback(prom.stop)
        warn_cfg = scrape_config({"vllm": [vllm[0]]})
        warn_cfg["remote_read"] = [
            {"url": f"http://127.0.0.1:{free_port()}/api/v1/read", "read_recent": True,
             "remote_timeout": "1s"}
        ]  # fmt: skip
        warn, warn_base = start_prometheus("prometheus-remote-read", tmp, warn_cfg)
        stack.callback(warn.stop)
        small, small_base = start_prometheus(
            "prometheus-max-samples",
            tmp,
            scrape_config({"vllm": [vllm[0]]}),
            extra=("--query.max-samples=3",),
        )
        stack.callback(small.stop)
        wait_until("every target up", lambda: all_up(base, 6), timeout=30)
        time.sleep(6)  # llama.cpp's per-position series appear after its first request

        at = round(time.time() - 0.25, 3)
        stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        common = {"prometheus": version, "captured": stamp, "at": at}
        fleet_selector = '{job=~"vllm|llamacpp|sglang"}'
        scenarios: dict[str, tuple[str, dict[str, Any], tuple[QueryStrategy, ...], str]] = {
            "fleet": (
                "Five simulated engines (two vLLM, a vLLM multiprocess, llama.cpp, SGLang) "
                "scraped every second, one instance per `instance` label; every strategy's "
                "value queries and the freshness query.",
                {"selector": fleet_selector},
                tuple(QueryStrategy),
                base,
            ),
            "fleet-by-pod-labels": (
                "The same fleet grouped by [job, instance] (two labels: names job/host:port).",
                {"selector": fleet_selector, "instance_labels": ["job", "instance"]},
                (QueryStrategy.SINGLE,),
                base,
            ),
            "by-job": (
                "The same fleet grouped by [job]: every vLLM engine lands in one instance, "
                "whose series collide (instance_labels too coarse).",
                {"selector": fleet_selector, "instance_labels": ["job"]},
                (QueryStrategy.SINGLE,),
                base,
            ),
            "duplicate-jobs": (
                "Every series, by instance: one vLLM engine is scraped by two jobs "
                "(vllm and vllm-again), so its series appear twice, differing only in job.",
                {},
                (QueryStrategy.SINGLE,),
                base,
            ),
            "empty": (
                "A selector that matches nothing: empty vectors.",
                {"selector": '{job="no-such-job"}'},
                (QueryStrategy.SINGLE,),
                base,
            ),
            "bad-selector": (
                "An invalid RE2 regular expression in the selector: HTTP 400 bad_data.",
                {"selector": '{job=~"(vllm"}'},
                (QueryStrategy.SINGLE,),
                base,
            ),
            "warnings": (
                "A Prometheus with an unreachable remote_read store (read_recent: true): "
                "every answer carries warnings (a partial response).",
                {},
                (QueryStrategy.SINGLE,),
                warn_base,
            ),
            "max-samples": (
                "A Prometheus started with --query.max-samples=3: HTTP 422 execution error.",
                {},
                (QueryStrategy.SINGLE,),
                small_base,
            ),
        }
        for scenario, (description, source, strategies, server) in scenarios.items():
            config = source_config({"url": server, **source})
            write(
                out,
                scenario,
                {
                    "scenario": scenario,
                    "description": description,
                    **common,
                    "source": {"url": "http://prometheus.invalid:9090", **source},
                    "answers": answers_for(server, config, at, strategies),
                },
            )
        # Prometheus's own timeout answer (for a deliberately heavy query; the tests serve it
        # for any query) and its 404 for a wrong path prefix.
        heavy = "count(count_over_time(up[1h:1ms]))"
        data = urllib.parse.urlencode({"query": heavy, "timeout": "10ms"}).encode()
        request = urllib.request.Request(base + "/api/v1/query", data=data)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                timeout_answer = {"status": response.status, "body": response.read().decode()}
        except urllib.error.HTTPError as exc:
            timeout_answer = {
                "status": exc.code,
                "content_type": exc.headers.get("Content-Type", ""),
                "body": exc.read().decode(),
            }
        timeout_answer["query"] = heavy
        config = source_config({"url": base})
        not_found = post(base, value_queries(config)[0], at, path="/prometheus/api/v1/query")
        write(
            out,
            "errors",
            {
                "scenario": "errors",
                "description": "Prometheus's answer to a query that exceeded its timeout "
                "(errorType timeout, HTTP 503), and its 404 for a URL with a path prefix it "
                "does not have (text/plain).",
                **common,
                "timeout": timeout_answer,
                "not_found": not_found,
            },
        )

        # Stale: kill Prometheus (no staleness markers get written), restart it on the same
        # storage without the llama.cpp job; its last samples stay within the lookback.
        killed_at = time.time()
        prom.popen.send_signal(signal.SIGKILL)
        prom.popen.wait(timeout=10)
        del jobs["llamacpp"]
        del jobs["vllm-again"]
        prom2, base2 = start_prometheus("prometheus", tmp, scrape_config(jobs), port=main_port)
        stack.callback(prom2.stop)
        count = sum(len(t) for t in jobs.values())
        wait_until("targets up again", lambda: all_up(base2, count), timeout=30)
        time.sleep(max(0.0, killed_at + 8 - time.time()))
        at2 = round(time.time() - 0.25, 3)
        source = {"selector": fleet_selector, "stale_after": "5s"}
        config = source_config({"url": base2, **source})
        write(
            out,
            "stale",
            {
                "scenario": "stale",
                "description": "The main Prometheus killed with SIGKILL and restarted on the "
                "same storage without the llama.cpp job, 8 s later: the llama.cpp series are "
                "still answered (no staleness marker was written) with samples from before the "
                "kill; the vLLM and SGLang ones are fresh.",
                "prometheus": version,
                "captured": datetime.fromtimestamp(at2, UTC).isoformat(timespec="milliseconds"),
                "at": at2,
                "killed_at": round(killed_at, 3),
                "source": {"url": "http://prometheus.invalid:9090", **source},
                "answers": answers_for(base2, config, at2, (QueryStrategy.SINGLE,)),
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
