"""Prometheus mode against direct mode on the same engines: a real llama-server (target + 5 %
noise draft, k = 4) and a simulated fleet (``specmon simulate``: two vLLM and one llama.cpp),
scraped by Debian's Prometheus every 500 ms (jobs ``llama`` and ``fleet``) and, in the same
``specmon run``, both directly (targets named ``host:port``) and through Prometheus (a source
with ``name_prefix: prom/``, read every 500 ms). Windows 10 s and 20 s, draft cost 0.2.

The simulated engines follow one scenario (engine time): 0-18 s steady traffic (300 drafts/s);
18-30 s none; 30-33 s a burst (400 drafts/s, another survival); none after. The llama-server is
driven once, at 30 s (4 requests of 200 tokens).

- **Moving (sims, 10 s window at 14-16 s).** The two windows are not the same stretch of time:
  a direct window ends at specmon's last scrape (at most 0.5 s old), a Prometheus-mode window
  at the engine's last sample in Prometheus (at most one Prometheus scrape, 0.5 s, and one read,
  0.5 s, old, plus the read's duration); the same at their start. SKEW = 2 s bounds the offset
  at each end, so the windows differ by at most e = rate x 2 x SKEW drafts (llama.cpp: plus one
  request's lump, 60 drafts, at each end). Window drafts must agree within e; each ratio, a
  draft-weighted mean of a per-draft value in [0, 1] (mean acceptance length: in [1, 1 + k]),
  within Z = 6 standard deviations of swapping e of n drafts: Z (V / 2) sqrt(e) / n (the
  derivation of tests/e2e/test_recording_rules_e2e.py's steady_tolerance).
- **Exact (all four engines, 20 s window at about 40-48 s).** The test reads every engine's raw
  page in the quiet stretch before the burst and again after it (the llama-server once its
  counters settle). Once both paths' 20 s windows hold exactly that increase (checked, not
  assumed: the window's first reading lies in the quiet stretch before, its last in the one
  after), every per-model and per-window figure must be identical (zero tolerance: the same
  integer increases through the same arithmetic), and equal to the hand computation from the
  two raw pages (tests/realengines/conftest.py).
"""

from __future__ import annotations

import contextlib
import math
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.stack import Proc, free_port, http_json, http_ok, require_binaries, simulate
from tests.realengines import servers
from tests.realengines.conftest import Counters, assert_window_matches, scrape, settled
from tests.support.daemon import Exported, daemon

pytestmark = [pytest.mark.realengine, pytest.mark.prometheus]

K_LLAMA = 4
DRAFT_COST = 0.2
STEADY_RATE = 300.0
STEADY_END, BURST_START, BURST_END = 18.0, 30.0, 33.0
MOVING_AT = 14.0
BEFORE_AT, AFTER_AT, EXACT_BY = 25.0, 37.0, 52.0
SKEW = 2.0
Z = 6.0
LUMP = 60
SCENARIOS = {
    "vllm": ([0.85, 0.6, 0.35], [0.6, 0.3, 0.1]),
    "llamacpp": ([0.9, 0.7, 0.5, 0.3], [0.7, 0.4, 0.2, 0.1]),
}
#: Families compared exactly once both windows hold the same increase.
EXACT = (
    "specmon_chain_length",
    "specmon_draft_cost_ratio",
    "specmon_breakeven_alpha_ratio",
    "specmon_window_drafts",
    "specmon_window_generated_tokens",
    "specmon_draft_acceptance_ratio",
    "specmon_mean_acceptance_length",
    "specmon_position_survival_ratio",
    "specmon_position_conditional_ratio",
    "specmon_alpha_ratio",
    "specmon_alpha_margin_ratio",
    "specmon_expected_speedup_ratio",
    "specmon_best_chain_length",
    "specmon_best_speedup_ratio",
)


def _scenario(engine: str) -> dict[str, Any]:
    steady, burst = SCENARIOS[engine]
    return {
        "phases": [
            {"at": "0s", "survival": steady, "drafts_per_second": STEADY_RATE},
            {"at": f"{STEADY_END:g}s", "drafts_per_second": 0},
            {"at": f"{BURST_START:g}s", "survival": burst, "drafts_per_second": 400},
            {"at": f"{BURST_END:g}s", "drafts_per_second": 0},
        ]
    }


def _series(m: Exported, name: str, target: str) -> dict[tuple[tuple[str, str], ...], float]:
    """A family's series of one target, keyed by their labels without ``target``."""
    return {
        tuple(kv for kv in labels if kv[0] != "target"): value
        for labels, value in m.series(name, target=target).items()
    }


def _ratio_tolerance(name: str, n: float, e: float, k: int) -> float:
    spread = float(k) if name == "specmon_mean_acceptance_length" else 1.0
    return Z * (spread / 2) * math.sqrt(e) / n


def test_prometheus_mode_exports_what_direct_mode_exports(tmp_path: Path) -> None:
    require_binaries("prometheus")
    with contextlib.ExitStack() as stack:
        llama = stack.enter_context(servers.llama_spec_server(n_max=K_LLAMA))
        urls: dict[str, str] = {}  # instance (host:port) -> metrics URL
        engine_of: dict[str, str] = {}
        started: list[float] = []
        for engine, args, count in (
            ("vllm", ["--engine", "vllm", "--targets", "2", "--seed", "31"], 2),
            ("llamacpp", ["--engine", "llamacpp", "--seed", "32"], 1),
        ):
            scenario = tmp_path / f"{engine}.yml"
            scenario.write_text(yaml.safe_dump(_scenario(engine)))
            launched = time.time()
            proc, found = simulate(engine, tmp_path, [*args, "--listen", "127.0.0.1:0",
                                                      "--scenario", str(scenario)], targets=count)  # fmt: skip
            started.append(launched)
            stack.callback(proc.stop)
            for url in found.values():
                instance = urllib.parse.urlsplit(url.strip()).netloc
                urls[instance] = url.strip()
                engine_of[instance] = engine
        origin = max(started)  # engine time 0 of the last simulator (the others are earlier)
        real = urllib.parse.urlsplit(llama.metrics_url).netloc
        urls[real] = llama.metrics_url
        sims = [i for i in urls if i != real]

        port = free_port()
        prom_cfg = {
            "global": {"scrape_interval": "500ms", "scrape_timeout": "500ms"},
            "scrape_configs": [
                {"job_name": "fleet", "static_configs": [{"targets": sims}]},
                {"job_name": "llama", "static_configs": [{"targets": [real]}]},
            ],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_cfg))
        prometheus = Proc.start(
            "prometheus",
            ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            tmp_path / "prometheus.log",
        )  # fmt: skip
        stack.callback(prometheus.stop)
        base = f"http://127.0.0.1:{port}"

        def all_up() -> bool:
            if not http_ok(base + "/-/ready"):
                return False
            active = http_json(base + "/api/v1/targets")["data"]["activeTargets"]
            return len(active) == 4 and all(t["health"] == "up" for t in active)

        deadline = time.monotonic() + 30
        while not all_up():
            prometheus.check_alive()
            assert time.monotonic() < deadline, prometheus.tail()
            time.sleep(0.2)

        cfg = tmp_path / "specmon.yml"
        cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "500ms", "scrape_timeout": "400ms",
                       "windows": ["10s", "20s"], "draft_cost": DRAFT_COST},
            "targets": [{"name": i, "url": u} for i, u in urls.items()],
            "sources": [{"prometheus": {
                "url": base, "name": "prometheus", "name_prefix": "prom/",
                "selector": '{job=~"fleet|llama"}', "interval": "500ms", "timeout": "400ms",
            }}],
        }))  # fmt: skip

        def sleep_until(engine_time: float) -> None:
            wait = origin + engine_time - time.time()
            assert wait > -1.0, f"too late for engine time {engine_time}: machine overloaded?"
            if wait > 0:
                time.sleep(wait)

        with daemon(cfg, tmp_path) as d:
            d.wait_for(lambda: all(d.metrics().value("specmon_up", target=t) == 1
                                   for i in urls for t in (i, "prom/" + i)), timeout=15)  # fmt: skip

            # Moving: the 10 s windows of the steady phase, within the derived tolerance.
            sleep_until(MOVING_AT)
            m = d.metrics()
            compared, worst = 0, 0.0
            for inst in sims:
                direct, via = inst, "prom/" + inst
                k = len(SCENARIOS[engine_of[inst]][0])
                dd = m.value("specmon_window_drafts", target=direct, window="10s")
                pd = m.value("specmon_window_drafts", target=via, window="10s")
                assert dd and pd, (inst, dd, pd)
                e = STEADY_RATE * 2 * SKEW + (2 * LUMP if engine_of[inst] == "llamacpp" else 0)
                assert abs(dd - pd) <= e, (inst, dd, pd, e)
                for name in ("specmon_draft_acceptance_ratio", "specmon_mean_acceptance_length",
                             "specmon_position_survival_ratio"):  # fmt: skip
                    want = _series(m, name, direct)
                    got = _series(m, name, via)
                    assert want.keys() == got.keys() and want, (inst, name)
                    for labels, value in want.items():
                        if ("window", "10s") not in labels:
                            continue
                        tol = _ratio_tolerance(name, min(dd, pd), e, k)
                        assert abs(got[labels] - value) <= tol, (inst, name, labels, value,
                                                                 got[labels], tol)  # fmt: skip
                        compared += 1
                        worst = max(worst, abs(got[labels] - value) / tol)
            print(f"\nmoving phase: {compared} ratios within tolerance (largest difference "
                  f"{worst:.2f} of its tolerance)")  # fmt: skip

            # Exact: raw pages before and after the burst; the windows holding exactly it.
            sleep_until(BEFORE_AT)
            before = {i: scrape(u)[1] for i, u in urls.items()}
            sleep_until(BURST_START)
            servers.drive_load(llama.base_url, n_requests=4, concurrency=2, max_tokens=200)
            sleep_until(AFTER_AT)
            after = {i: (settled(u, quiet=1.0)[1] if i == real else scrape(u)[1])
                     for i, u in urls.items()}  # fmt: skip
            delta: dict[str, Counters] = {i: after[i].minus(before[i]) for i in urls}
            assert all(x.drafts > 0 for x in delta.values()), delta

            def holds_the_burst() -> Exported | None:
                m = d.metrics()
                ok = all(
                    m.value("specmon_window_drafts", target=t, window="20s") == delta[i].drafts
                    for i in urls for t in (i, "prom/" + i)
                )  # fmt: skip
                return m if ok else None

            m = d.wait_for(holds_the_burst, timeout=max(1.0, origin + EXACT_BY - time.time()),
                           interval=0.25)  # fmt: skip
            identical = 0
            for inst in urls:
                direct, via = inst, "prom/" + inst
                for name in EXACT:
                    want = {k: v for k, v in _series(m, name, direct).items()
                            if ("window", "10s") not in k}  # fmt: skip
                    got = {k: v for k, v in _series(m, name, via).items()
                           if ("window", "10s") not in k}  # fmt: skip
                    assert got == want, (inst, name, want, got)
                    identical += len(want)
                k = K_LLAMA if inst == real else len(delta[inst].per_pos)
                engine = "llamacpp" if inst == real else engine_of[inst]
                for target in (direct, via):
                    (model,) = {dict(x)["model"] for x in m.series("specmon_chain_length",
                                                                    target=target)}  # fmt: skip
                    ids = {"target": target, "engine": engine, "model": model}
                    assert_window_matches(m, ids, "20s", delta[inst], k=k, c=DRAFT_COST)
            print(
                f"burst: {identical} series identical across the two paths; "
                f"drafts {[delta[i].drafts for i in urls]}"
            )
