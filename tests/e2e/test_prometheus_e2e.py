"""End to end, on loopback: Debian's Prometheus scrapes a specmon daemon that watches simulated
engines, evaluates the shipped alert rules (durations and window matchers rewritten by
``tests/e2e/stack.py``) and sends to Debian's Alertmanager, which routes with the shipped
configuration to a webhook receiver run by the test.

Engines (``specmon simulate`` subprocesses, 100 drafts/s each, k = 3, draft cost 0.3, so
break-even alpha is 0.509):

- ``healthy-vllm-0``, ``healthy-vllm-1`` (vLLM), ``healthy-llamacpp`` (llama.cpp),
  ``healthy-trtllm`` (TensorRT-LLM on ``/prometheus/metrics``, with its engine-measured draft
  cost) and ``healthy-tgi`` (TGI's histogram): survival 0.9, 0.8, 0.7 (alpha 0.893, expected
  speed-up 1.79x) for the whole run;
- ``degraded-vllm`` (vLLM): the same until :data:`DROP_AT` seconds after it starts, then
  survival 0.1, 0.01, 0.001 (a broken draft: alpha 0.10, expected speed-up 0.58x, below the
  0.75 that pages);
- ``rejecting-vllm``: a healthy vLLM whose page passes through a proxy that adds a second
  model with more accepted than drafted tokens (a buggy engine, or a proxy mixing pages):
  specmon refuses that model at every scrape and reads the other one;
- ``loaded-vllm`` (vLLM, k = 4, survival 0.9, 0.7, 0.5, 0.3, configured c 0.1) and its twin
  without speculation ``baseline-vllm`` (``baseline:`` in specmon's config), on the simulator's
  bandwidth load model (the demo's, ten times faster: the same crossover near 10.9 requests).
  Both run 2 requests per step, then 16 from :data:`LOAD_AT` seconds after they start: there
  speculation pays 2.7x, here it costs time (0.70x) although the acceptance never changes, and
  the figures at the configured c still say 2.4x;
- ``profiled-vllm``: the loaded engine's page again, compared with a cost profile of the same
  load model (written by the test) instead of the twin;
- ``guessing-vllm`` (vLLM, k = 5, no draft cost configured: the verdict rests on the default
  guess) with a broken draft from the start: 0.71x at the default c;
- ``changed-vllm`` (vLLM, the loaded engine's k = 4 draft and load model at 2 requests per
  step, configured c 0.1) restarted :data:`CHANGE_AT` seconds after it starts with k = 3 and a
  worse draft (alpha 0.6): a new configuration epoch whose time per output token at the same
  load is 1 / 0.68 of the old one's (the load model's truth), while speculation still pays
  (1.67x at the configured c; k = 3 is the best chain there, and no verdict alert fires).

Every target but the guessing one names its draft cost (0.3 unless said).

specmon scrapes every 500 ms with windows 2s, 10s, 30s (standing for 1m, 5m, 15m: every
shipped duration / 30); Prometheus scrapes and evaluates every second.

The test sees SpecmonBelowBreakEven (both tiers) go pending and then firing for the degraded
target only, through /api/v1/alerts and the ALERTS series; Alertmanager delivers the critical
tier to the pager webhook and inhibits the warning tier; SpecmonReadingsRejected fires for the
rejecting target (and goes to the ticket webhook); once the load rises, SpecmonAboveCrossover
and SpecmonSlowerThanBaseline go pending and fire for the loaded target; one situation pages
once on each basis of the verdict (twin, profile, default guess): SpecmonBelowBreakEven's
critical tier reaches the pager as one alert group per target, and Alertmanager inhibits its
warning tier and the load alerts, so nothing reaches the ticket receiver about the same loss;
the changed target's new epoch is seen (specmon_config_change_timestamp_seconds appears,
dated at the restart, for that target only) with the change's speed-up at 2 requests per step
near the truth and its 95 % upper bound well below 1, and SpecmonChangeRegressed goes pending
and then firing for that target only and reaches the ticket receiver (warning), never the
pager, while SpecmonAcceptanceDrop stays quiet although alpha fell by more than 0.15 (its
`unless` leaves out the 90 minutes after a change: the guard is checked to hold);
the healthy targets and the baseline twin raise no alert of any kind at any time; and
every panel query of both dashboards, with variables set to values that exist, returns data
from the same Prometheus (where the metric contract says a family exists for the engines
selected and the target's baseline: tests/dashboards/coverage.py; "did the change help?" and
the configuration-change annotation for the changed target, and for it only). It prints the
measured delays.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon.load import PROFILE_FORMAT, PROFILE_VERSION, profile_from_json
from specmon.sim.load_model import load_model_from
from tests.dashboards.coverage import CHANGE, CLASSES, ON_FIRST_EVENT, may_be_empty
from tests.dashboards.queries import (
    duration_seconds,
    load_dashboard,
    panel_queries,
    substitute,
    variable_queries,
)
from tests.e2e.stack import (
    SCALE,
    WINDOWS,
    AlertPoller,
    Proc,
    Prometheus,
    RewritingProxy,
    Webhook,
    alertmanager_config,
    free_port,
    http_json,
    http_ok,
    prometheus_config,
    require_binaries,
    scaled,
    shortened_rules,
    simulate,
    simulate_all,
    wait_until,
)
from tests.rules.alert_rules import alert_rules, dump_rules, load_rules
from tests.rules.common import DASHBOARD_DIR, promql_metric_names, run_tool
from tests.support.daemon import Daemon, daemon, get

pytestmark = pytest.mark.prometheus

#: Seconds after the degraded engine starts at which its draft breaks.
DROP_AT = 25.0
DRAFTS_PER_SECOND = 100
DRAFT_COST = 0.3
HEALTHY_SURVIVAL = (0.9, 0.8, 0.7)
BROKEN_SURVIVAL = (0.1, 0.01, 0.001)
DEGRADED = "degraded-vllm"
HEALTHY = (
    "healthy-vllm-0",
    "healthy-vllm-1",
    "healthy-llamacpp",
    "healthy-trtllm",
    "healthy-tgi",
)
REJECTING = "rejecting-vllm"
REJECTED_REASON = "accepted_above_drafted"
#: The model the proxy adds to the rejecting target's page: 400 accepted of 300 drafted tokens.
BROKEN_MODEL = (
    ("vllm:spec_decode_num_drafts_total{", 100),
    ("vllm:spec_decode_num_draft_tokens_total{", 300),
    ("vllm:spec_decode_num_accepted_tokens_total{", 400),
)
REJECTED_ALERT = "SpecmonReadingsRejected"
#: The load-aware pair: the speculative target, its twin, and when their load rises.
LOADED = "loaded-vllm"
TWIN = "baseline-vllm"
LOAD_AT = 20.0
LOW_LOAD, HIGH_LOAD = 2, 16
LOADED_SURVIVAL = (0.9, 0.7, 0.5, 0.3)
LOADED_COST = 0.1
#: specmon.sim.load_model.DEMO_LOAD_MODEL ten times faster (same ratios, same crossover), so
#: that even the 2s window holds the 200 engine steps a bucket needs at 16 requests.
LOAD_MODEL = (
    "weights_seconds=0.0008,token_seconds=0.00005,fixed_seconds=0.0001,draft_fixed_seconds=0.00006"
)
#: A second target on the loaded engine's page, compared with a cost profile of its twin's
#: speeds (written from the load model: the constructed truth) instead of the twin itself.
PROFILED = "profiled-vllm"
#: A target with no draft cost configured (the verdict rests on the default guess) and a
#: broken draft on a chain of 5: at the default c = 0.1 that is 1.06 / 1.5 = 0.71x, a page.
GUESSING = "guessing-vllm"
GUESSING_SURVIVAL = (0.05, 0.01, 0.001, 0.0003, 0.0001)
#: A target whose speculative configuration is changed for the worse: the loaded engine's k = 4
#: draft at LOW_LOAD requests per step, restarted at :data:`CHANGE_AT` seconds with k = 3 and a
#: worse draft (alpha 0.6). At the same load that decodes at 0.68x the speed of the old
#: configuration (the load model's time per output token, before over after), although
#: speculation still pays (1.67x at the configured c = 0.1, k = 3 is the best chain there).
CHANGED = "changed-vllm"
CHANGE_AT = 20.0
CHANGED_BEFORE = LOADED_SURVIVAL
CHANGED_AFTER = (0.6, 0.36, 0.216)
REGRESSED = "SpecmonChangeRegressed"
#: The targets where one situation (speculation slower than none, sustained) must page once,
#: on each basis of the verdict.
BASES = {LOADED: "twin", PROFILED: "profile", GUESSING: "default"}
SLOWER = "SpecmonSlowerThanBaseline"
ABOVE = "SpecmonAboveCrossover"
LOAD_ALERTS = (SLOWER, ABOVE)
#: The windows specmon exports here (the rules' 5m and 15m are mapped onto 10s and 30s).
SPECMON_WINDOWS = tuple(WINDOWS.values())
FAST = WINDOWS["5m"]
#: The window the load alerts read (15m in the shipped rules).
SLOW = WINDOWS["15m"]
ALERT = "SpecmonBelowBreakEven"
#: Prometheus's scrape and evaluation interval, and Grafana's $__rate_interval for it.
INTERVAL = "1s"
RATE_INTERVAL = "4s"

#: No global draft_cost: every target names its own but the guessing one.
SPECMON_CONFIG = """\
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  windows: [{windows}]
targets:
{targets}
  - name: {loaded}
    url: {loaded_url}
    draft_cost: {loaded_cost}
    baseline: {twin}
  - name: {changed}
    url: {changed_url}
    draft_cost: {loaded_cost}
  - name: {profiled}
    url: {loaded_url}
    draft_cost: {loaded_cost}
    cost_profile: {profile}
  - name: {twin}
    url: {twin_url}
    draft_cost: {cost}
  - name: {guessing}
    url: {guessing_url}
"""


def _profile_document() -> dict[str, Any]:
    """A cost profile of the loaded pair as ``specmon measure --profile-out`` would write it,
    from the simulator's load model (the constructed truth) at 1 to 32 requests per step."""
    model = load_model_from(LOAD_MODEL)
    assert model is not None
    k = len(LOADED_SURVIVAL)
    tokens = 1 + sum(LOADED_SURVIVAL)
    accepted = [round(1000 * s) for s in LOADED_SURVIVAL]

    def side(step: float, tpot: float, n: int) -> dict[str, object]:
        return {"time_per_output_token_seconds": tpot, "step_seconds": step,
                "tokens_per_second": None, "concurrency": float(n), "engine_steps": 10000}  # fmt: skip

    levels = []
    for n in (1, 2, 4, 8, 16, 32):
        base, spec = model.step_seconds(n, 0), model.step_seconds(n, k)
        cost = model.draft_cost(n, k)
        levels.append({
            "concurrency": n, "baseline": side(base, base, n),
            "speculative": side(spec, spec / tokens, n),
            "tokens_per_step": tokens, "drafted_tokens_per_step": float(k),
            "acceptance": {"drafts": 1000, "draft_tokens": 1000 * k,
                           "accepted_tokens": sum(accepted),
                           "accepted_per_position": accepted},
            "speed_ratio": model.speedup(n, k, tokens),
            "draft_cost": {"value": cost, "from_step_times": cost},
        })  # fmt: skip
    document = {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "levels": levels,
                "engine": "vllm", "chain_length": k}  # fmt: skip
    profile_from_json(document)  # what specmon will read: valid
    return document


def _survival(values: tuple[float, ...]) -> str:
    return ",".join(str(v) for v in values)


@dataclass
class Stack:
    tmp: Path
    prometheus: Prometheus
    alertmanager: str
    webhook: Webhook
    poller: AlertPoller
    #: Unix time at which the degraded engine's draft broke.
    drop: float
    #: Unix time at which the loaded pair's load rose (the speculative side's clock).
    load_rise: float
    #: The same on the twin's clock (its simulator started a little earlier or later).
    twin_rise: float
    #: Unix time at which the changed engine was restarted with its new configuration.
    change: float
    #: Unix time at which Prometheus first had every target's 10s window above the guard.
    ready: float
    #: Unix time at which Prometheus started.
    started: float
    rules: dict[str, Any]
    specmon: Daemon
    procs: list[Proc] = field(default_factory=list)

    def alive(self) -> None:
        _check_alive(self.procs, self.specmon)


def _check_alive(procs: list[Proc], specmon: Daemon) -> None:
    for proc in procs:
        proc.check_alive()
    if specmon.proc.poll() is not None:
        raise AssertionError(
            f"specmon exited with {specmon.proc.returncode}:\n{specmon.log_text()[-3000:]}"
        )


def _start_server(
    name: str,
    tmp: Path,
    args_for_port: Callable[[int], list[str]],
    ready_path: str,
    *,
    attempts: int = 3,
) -> tuple[Proc, str]:
    """Start a server on a free loopback port (retrying if another process took the port)."""
    last = ""
    for attempt in range(attempts):
        port = free_port()
        proc = Proc.start(name, args_for_port(port), tmp / f"{name}-{attempt}.log")
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.popen.poll() is None:
            if http_ok(base + ready_path):
                return proc, base
            time.sleep(0.2)
        last = proc.tail()
        proc.stop()
        if "address already in use" not in last:
            break
    raise AssertionError(f"{name} did not become ready:\n{last}")


def _with_broken_model(page: str) -> str:
    """The page with a second model, ``broken``, that no real engine could publish: each of its
    counters right after the first sample of the same family."""
    lines = page.splitlines(keepends=True)
    out = []
    pending = dict(BROKEN_MODEL)
    for line in lines:
        out.append(line)
        for prefix, value in list(pending.items()):
            if line.startswith(prefix):
                out.append(f'{prefix}engine="0",model_name="broken"}} {value}.0\n')
                del pending[prefix]
    assert not pending, f"the simulated page lacks {sorted(pending)}"
    return "".join(out)


def _drop_time(metrics_url: str, after: float = DROP_AT) -> float:
    """A simulated vLLM's start (its counters' ``_created`` time) plus ``after``."""
    status, body, _ = get(metrics_url)
    assert status == 200
    match = re.search(
        r"^vllm:(?:spec_decode_num_drafts|generation_tokens)_created\{[^}]*\} (\S+)$",
        body.decode(),
        re.MULTILINE,
    )
    assert match, "the simulated vLLM page has no _created sample"
    return float(match.group(1)) + after


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binaries("prometheus", "prometheus-alertmanager", "promtool")
    tmp = tmp_path_factory.mktemp("e2e")
    procs: list[Proc] = []
    webhook = Webhook()
    with contextlib.ExitStack() as cleanup:

        def stop_all() -> None:
            for proc in reversed(procs):
                proc.stop()

        cleanup.callback(stop_all)
        webhook.start()
        cleanup.callback(webhook.stop)

        # Alertmanager: the shipped routing, timers / 30, webhooks pointed here.
        am_dir = tmp / "alertmanager"
        am_dir.mkdir()
        am_cfg = am_dir / "alertmanager.yml"
        am_cfg.write_text(yaml.safe_dump(alertmanager_config(webhook_base=webhook.base)))
        am_proc, am_base = _start_server(
            "alertmanager",
            tmp,
            lambda port: [
                "prometheus-alertmanager",
                f"--config.file={am_cfg}",
                f"--storage.path={am_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            "/-/ready",
        )
        procs.append(am_proc)

        # Engines. The load pair's scenario: LOW_LOAD requests per step, HIGH_LOAD from LOAD_AT.
        load_scenario = tmp / "load.scenario.yml"
        load_scenario.write_text(
            yaml.safe_dump(
                {
                    "phases": [
                        {"at": "0s", "requests_running": LOW_LOAD},
                        {"at": f"{LOAD_AT:g}s", "requests_running": HIGH_LOAD},
                    ]
                }
            )
        )
        # The changed engine's: restarted with a shorter chain and a worse draft at CHANGE_AT.
        change_scenario = tmp / "change.scenario.yml"
        change_scenario.write_text(
            yaml.safe_dump(
                {
                    "phases": [
                        {
                            "at": f"{CHANGE_AT:g}s",
                            "chain_length": len(CHANGED_AFTER),
                            "survival": list(CHANGED_AFTER),
                            "restart": True,
                        }
                    ]
                }
            )
        )
        common = ["--listen", "127.0.0.1:0", "--drafts-per-second", str(DRAFTS_PER_SECOND)]
        healthy = ["--survival", _survival(HEALTHY_SURVIVAL)]
        sims = simulate_all(
            tmp,
            {
                "healthy-vllm": (
                    [
                        "--engine",
                        "vllm",
                        "--targets",
                        "2",
                        "--shared-port",
                        *common,
                        *healthy,
                        "--seed",
                        "1",
                    ],
                    2,
                ),
                "healthy-llamacpp": (
                    ["--engine", "llamacpp", *common, *healthy, "--seed", "5"],
                    1,
                ),
                "healthy-trtllm": (["--engine", "trtllm", *common, *healthy, "--seed", "6"], 1),
                "healthy-tgi": (
                    ["--engine", "tgi-histogram", *common, *healthy, "--seed", "7"],
                    1,
                ),
                REJECTING: (["--engine", "vllm", *common, *healthy, "--seed", "8"], 1),
                GUESSING: (
                    [
                        "--engine",
                        "vllm",
                        *common,
                        "--chain-length",
                        str(len(GUESSING_SURVIVAL)),
                        "--survival",
                        _survival(GUESSING_SURVIVAL),
                        "--seed",
                        "12",
                    ],
                    1,
                ),
                **{
                    name: (
                        [
                            "--engine",
                            "vllm",
                            "--listen",
                            "127.0.0.1:0",
                            "--chain-length",
                            str(len(LOADED_SURVIVAL)),
                            "--survival",
                            _survival(LOADED_SURVIVAL),
                            "--load-model",
                            LOAD_MODEL,
                            "--requests-running",
                            str(LOW_LOAD),
                            "--scenario",
                            str(load_scenario),
                            "--seed",
                            seed,
                            *extra,
                        ],
                        1,
                    )
                    for name, seed, extra in (
                        (LOADED, "10", []),
                        (TWIN, "11", ["--no-speculation"]),
                    )
                },
                CHANGED: (
                    [
                        "--engine",
                        "vllm",
                        "--listen",
                        "127.0.0.1:0",
                        "--chain-length",
                        str(len(CHANGED_BEFORE)),
                        "--survival",
                        _survival(CHANGED_BEFORE),
                        "--load-model",
                        LOAD_MODEL,
                        "--requests-running",
                        str(LOW_LOAD),
                        "--scenario",
                        str(change_scenario),
                        "--seed",
                        "13",
                    ],
                    1,
                ),
            },
        )
        procs.extend(proc for proc, _ in sims.values())
        vllm_urls = sims["healthy-vllm"][1]
        rejecting_url = sims[REJECTING][1]["vllm"]
        upstream = rejecting_url.removesuffix("/metrics")
        proxy = RewritingProxy(upstream, _with_broken_model)
        proxy.start()
        cleanup.callback(proxy.stop)
        scenario = tmp / "degraded.scenario.yml"
        scenario.write_text(
            yaml.safe_dump(
                {
                    "phases": [
                        {
                            "at": "0s",
                            "survival": list(HEALTHY_SURVIVAL),
                            "drafts_per_second": DRAFTS_PER_SECOND,
                        },
                        {"at": f"{DROP_AT:g}s", "survival": list(BROKEN_SURVIVAL)},
                    ]
                }
            )
        )
        proc, degraded_urls = simulate(
            "degraded",
            tmp,
            ["--engine", "vllm", *common, *healthy, "--scenario", str(scenario), "--seed", "9"],
            targets=1,
        )
        procs.append(proc)
        drop = _drop_time(degraded_urls["vllm"])
        load_rise = _drop_time(sims[LOADED][1]["vllm"], LOAD_AT)
        twin_rise = _drop_time(sims[TWIN][1]["vllm"], LOAD_AT)
        change = _drop_time(sims[CHANGED][1]["vllm"], CHANGE_AT)

        # specmon.
        urls = {
            "healthy-vllm-0": vllm_urls["vllm-0"],
            "healthy-vllm-1": vllm_urls["vllm-1"],
            "healthy-llamacpp": sims["healthy-llamacpp"][1]["llamacpp"],
            "healthy-trtllm": sims["healthy-trtllm"][1]["trtllm"],
            "healthy-tgi": sims["healthy-tgi"][1]["tgi-histogram"],
            DEGRADED: degraded_urls["vllm"],
            REJECTING: proxy.base + "/metrics",
        }
        profile = tmp / "profile.json"
        profile.write_text(json.dumps(_profile_document()))
        config = tmp / "specmon.yml"
        config.write_text(
            SPECMON_CONFIG.format(
                windows=", ".join(SPECMON_WINDOWS),
                cost=DRAFT_COST,
                targets="\n".join(
                    f"  - name: {name}\n    url: {url}\n    draft_cost: {DRAFT_COST}"
                    for name, url in urls.items()
                ),
                loaded=LOADED,
                loaded_url=sims[LOADED][1]["vllm"],
                loaded_cost=LOADED_COST,
                twin=TWIN,
                twin_url=sims[TWIN][1]["vllm"],
                profiled=PROFILED,
                profile=profile,
                guessing=GUESSING,
                guessing_url=sims[GUESSING][1]["vllm"],
                changed=CHANGED,
                changed_url=sims[CHANGED][1]["vllm"],
            )
        )
        specmon = cleanup.enter_context(daemon(config, tmp))

        # Prometheus: the shipped example configuration and the rewritten shipped rules.
        rules = shortened_rules()
        rules_file = tmp / "specmon-alerts.rules.yml"
        rules_file.write_text(dump_rules(rules))
        checked = run_tool(["promtool", "check", "rules", str(rules_file)])
        assert checked.returncode == 0, checked.stdout + checked.stderr
        prom_dir = tmp / "prometheus"
        prom_dir.mkdir()
        prom_cfg = prom_dir / "prometheus.yml"
        host = am_base.removeprefix("http://")

        def prometheus_args(port: int) -> list[str]:
            prom_cfg.write_text(
                yaml.safe_dump(
                    prometheus_config(
                        rules_file=rules_file,
                        specmon=f"127.0.0.1:{specmon.port}",
                        alertmanager=host,
                        interval=INTERVAL,
                    )
                )
            )
            return [
                "prometheus",
                f"--config.file={prom_cfg}",
                f"--storage.tsdb.path={prom_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ]

        started = time.time()
        prom_proc, prom_base = _start_server("prometheus", tmp, prometheus_args, "/-/ready")
        procs.append(prom_proc)
        prometheus = Prometheus(prom_base)
        poller = AlertPoller(prometheus)
        poller.start()
        cleanup.callback(poller.stop)

        def all_above_guard() -> float | None:
            found = prometheus.query(f'specmon_window_drafts{{window="{FAST}"}} >= 400')
            names = {s["metric"]["target"] for s in found}
            return (
                time.time() if names == {*HEALTHY, DEGRADED, REJECTING, *BASES, CHANGED} else None
            )

        ready = wait_until(
            "every target's window to pass the 400-draft guard in Prometheus",
            all_above_guard,
            timeout=30,
            alive=lambda: _check_alive(procs, specmon),
        )
        assert ready < min(drop, load_rise, change) - 5, (
            f"the stack took too long to start: ready {drop - ready:.1f}s before the drop, "
            f"{load_rise - ready:.1f}s before the load rise, {change - ready:.1f}s before the "
            "configuration change"
        )
        yield Stack(
            tmp=tmp,
            prometheus=prometheus,
            alertmanager=am_base,
            webhook=webhook,
            poller=poller,
            drop=drop,
            load_rise=load_rise,
            twin_rise=twin_rise,
            change=change,
            ready=ready,
            started=started,
            rules=rules,
            specmon=specmon,
            procs=procs,
        )


@dataclass
class Cycle:
    """When each step happened (Unix times; Prometheus's own timestamps where it has them)."""

    drop: float
    margin_negative: float
    speedup_below: float
    pending: dict[str, float]
    firing: dict[str, float]
    api_pending: dict[str, float]
    api_firing: dict[str, float]
    delivered: dict[tuple[str, str], float]

    def report(self) -> dict[str, Any]:
        def rel(t: float) -> float:
            return round(t - self.drop, 2)

        return {
            "verdict < 1 scraped": rel(self.margin_negative),
            "speed-up < 0.75 scraped": rel(self.speedup_below),
            **{f"{sev}: pending (ALERTS)": rel(t) for sev, t in self.pending.items()},
            **{f"{sev}: firing (ALERTS)": rel(t) for sev, t in self.firing.items()},
            **{f"{sev}: pending seen in API": rel(t) for sev, t in self.api_pending.items()},
            **{f"{sev}: firing seen in API": rel(t) for sev, t in self.api_firing.items()},
            **{f"{sev}: webhook {path}": rel(t) for (sev, path), t in self.delivered.items()},
        }


def _first_sample(
    prometheus: Prometheus, selector: str, since: float, test: Any = lambda v: True
) -> float | None:
    samples = prometheus.raw_samples(selector, time.time() - since + 5)
    return next((t for _, t, v in samples if t >= since and test(v)), None)


def _delivered(webhook: Webhook, severity: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for note in webhook.received():
        for alert in note.alerts():
            labels = alert["labels"]
            if (
                alert["status"] == "firing"
                and labels.get("alertname") == ALERT
                and labels.get("target") == DEGRADED
                and labels.get("severity") == severity
            ):
                out.setdefault((severity, note.path), note.received)
    return out


@pytest.fixture(scope="module")
def cycle(stack: Stack) -> Cycle:
    """Wait (bounded) for the degraded target's alert to go pending, fire and be delivered."""
    prom = stack.prometheus
    for_seconds = {
        rule["labels"]["severity"]: duration_seconds(rule["for"])
        for rule in alert_rules(stack.rules)
        if rule["alert"] == ALERT
    }
    selector = f'ALERTS{{alertname="{ALERT}", target="{DEGRADED}"'
    pending: dict[str, float] = {}
    firing: dict[str, float] = {}
    for severity in ("warning", "critical"):
        sel = f'{selector}, severity="{severity}", alertstate="pending"}}'
        pending[severity] = wait_until(
            f"{ALERT} ({severity}) to go pending",
            functools.partial(_first_sample, prom, sel, stack.drop - 5),
            # The 10s window must tip (at most 10 s), then a scrape and an evaluation.
            timeout=max(0.0, stack.drop - time.time()) + 10 + 15,
            interval=0.5,
            alive=stack.alive,
        )
    for severity in ("warning", "critical"):
        sel = f'{selector}, severity="{severity}", alertstate="firing"}}'
        firing[severity] = wait_until(
            f"{ALERT} ({severity}) to fire",
            functools.partial(_first_sample, prom, sel, stack.drop - 5),
            timeout=max(0.0, pending[severity] + for_seconds[severity] - time.time()) + 15,
            interval=0.5,
            alive=stack.alive,
        )
    delivered = wait_until(
        "Alertmanager to deliver the critical tier to the webhook",
        lambda: _delivered(stack.webhook, "critical"),
        timeout=20,
        alive=stack.alive,
    )
    delivered.update(_delivered(stack.webhook, "warning"))
    verdict = f'specmon_verdict_speedup_ratio{{target="{DEGRADED}", window="{FAST}"}}'
    margin = _first_sample(prom, verdict, stack.drop, lambda v: v < 1)
    speedup = _first_sample(prom, verdict, stack.drop, lambda v: v < 0.75)
    assert margin is not None and speedup is not None

    def api(state: str) -> dict[str, float]:
        out = {}
        for severity in ("warning", "critical"):
            seen = stack.poller.first(state, alertname=ALERT, target=DEGRADED, severity=severity)
            if seen is not None:
                out[severity] = seen.at
        return out

    result = Cycle(
        drop=stack.drop,
        margin_negative=margin,
        speedup_below=speedup,
        pending=pending,
        firing=firing,
        api_pending=api("pending"),
        api_firing=api("firing"),
        delivered=delivered,
    )
    report = result.report()
    (stack.tmp / "timings.json").write_text(json.dumps(report, indent=2))
    sys.stdout.write(
        "\nseconds after the degraded draft broke (for: "
        + ", ".join(f"{k} {v:g}s" for k, v in for_seconds.items())
        + "):\n"
        + "".join(f"  {k:<40} {v:7.2f}\n" for k, v in report.items())
    )
    return result


@dataclass
class LoadCycle:
    """When each step of the load alerts happened (Unix times; Prometheus's own timestamps)."""

    rise: float
    #: The later of the two servers' rises: a bucket needs both sides.
    both_risen: float
    #: First scraped realized speed-up < 0.95 / crossover <= 1.05 x concurrency (SLOW window).
    slower_scraped: float
    above_scraped: float
    pending: dict[str, float]
    firing: dict[str, float]
    delivered: dict[str, float]
    #: Alertmanager showed both load alerts suppressed (by SpecmonBelowBreakEven).
    inhibited: float

    def report(self) -> dict[str, float]:
        def rel(t: float) -> float:
            return round(t - self.rise, 2)

        return {
            "both servers' load risen": rel(self.both_risen),
            "realized < 0.95 scraped": rel(self.slower_scraped),
            "crossover <= 1.05 x concurrency scraped": rel(self.above_scraped),
            **{f"{name}: pending (ALERTS)": rel(t) for name, t in self.pending.items()},
            **{f"{name}: firing (ALERTS)": rel(t) for name, t in self.firing.items()},
            **{f"{name}: webhook /tickets": rel(t) for name, t in self.delivered.items()},
            "both inhibited in Alertmanager": rel(self.inhibited),
        }


def _load_delivered(webhook: Webhook) -> dict[str, float]:
    out: dict[str, float] = {}
    for note in webhook.received():
        for alert in note.alerts():
            labels = alert["labels"]
            if (
                alert["status"] == "firing"
                and labels.get("alertname") in LOAD_ALERTS
                and labels.get("target") == LOADED
                and note.path == "/tickets"
            ):
                out.setdefault(labels["alertname"], note.received)
    return out


@pytest.fixture(scope="module")
def load_cycle(stack: Stack) -> LoadCycle:
    """Wait (bounded) for the load alerts to go pending and fire for the loaded target, reach
    the ticket receiver and inhibit each other as the shipped routing says."""
    prom = stack.prometheus
    for_seconds = {
        rule["alert"]: duration_seconds(rule["for"])
        for rule in alert_rules(stack.rules)
        if rule["alert"] in LOAD_ALERTS
    }
    # The window's mean concurrency (per engine step) reaches the crossover only when the
    # high load dominates the window's steps: at most one window after the rise.
    window = duration_seconds(SLOW)
    pending: dict[str, float] = {}
    firing: dict[str, float] = {}
    for name in LOAD_ALERTS:
        sel = f'ALERTS{{alertname="{name}", target="{LOADED}", alertstate="pending"}}'
        pending[name] = wait_until(
            f"{name} to go pending",
            functools.partial(_first_sample, prom, sel, stack.load_rise - 5),
            timeout=max(0.0, stack.load_rise - time.time()) + window + 15,
            interval=0.5,
            alive=stack.alive,
        )
    for name in LOAD_ALERTS:
        sel = f'ALERTS{{alertname="{name}", target="{LOADED}", alertstate="firing"}}'
        firing[name] = wait_until(
            f"{name} to fire",
            functools.partial(_first_sample, prom, sel, stack.load_rise - 5),
            timeout=max(0.0, pending[name] + for_seconds[name] - time.time()) + 15,
            interval=0.5,
            alive=stack.alive,
        )

    def both_inhibited() -> float | None:
        suppressed = {
            alert["labels"].get("alertname")
            for alert in http_json(stack.alertmanager + "/api/v2/alerts")
            if alert["labels"].get("target") == LOADED
            and alert["status"]["state"] == "suppressed"
            and alert["status"]["inhibitedBy"]
        }
        return time.time() if set(LOAD_ALERTS) <= suppressed else None

    inhibited = wait_until(
        f"{SLOWER} and {ABOVE} to be inhibited in Alertmanager",
        both_inhibited,
        timeout=20,
        alive=stack.alive,
    )
    delivered = _load_delivered(stack.webhook)
    selector = f'{{target="{LOADED}", window="{SLOW}"}}'
    slower = _first_sample(
        prom, f"specmon_realized_speedup_ratio{selector}", stack.load_rise, lambda v: v < 0.95
    )
    # Both series come from the same scrape of specmon: pair them by timestamp.
    span = time.time() - stack.load_rise + 5
    concurrency = {t: v for _, t, v in prom.raw_samples(f"specmon_concurrency{selector}", span)}
    # The alert reads the crossover range's lower end where there is one, else the point.
    lower = {
        t: v for _, t, v in prom.raw_samples(f"specmon_crossover_lower_concurrency{selector}", span)
    }
    above = next(
        (
            t
            for _, t, crossover in prom.raw_samples(
                f"specmon_crossover_concurrency{selector}", span
            )
            if t >= stack.load_rise
            and t in concurrency
            and lower.get(t, crossover) <= 1.05 * concurrency[t]
        ),
        None,
    )
    assert slower is not None and above is not None
    result = LoadCycle(
        rise=stack.load_rise,
        both_risen=max(stack.load_rise, stack.twin_rise),
        slower_scraped=slower,
        above_scraped=above,
        pending=pending,
        firing=firing,
        delivered=delivered,
        inhibited=inhibited,
    )
    report = result.report()
    (stack.tmp / "load-timings.json").write_text(json.dumps(report, indent=2))
    sys.stdout.write(
        "\nseconds after the loaded pair's load rose (for: "
        + ", ".join(f"{k} {v:g}s" for k, v in for_seconds.items())
        + "):\n"
        + "".join(f"  {k:<52} {v:7.2f}\n" for k, v in report.items())
    )
    return result


@dataclass
class ChangeCycle:
    """When each step of the configuration change's alert happened (Unix times; Prometheus's
    own timestamps where it has them)."""

    change: float
    #: The first scraped specmon_config_change_timestamp_seconds of the changed target.
    epoch_seen: float
    #: The first scraped specmon_change_speedup_upper_ratio < 1 of the changed target.
    upper_below: float
    pending: float
    firing: float
    api_pending: float | None
    api_firing: float | None
    ticket: float

    def report(self) -> dict[str, float | None]:
        def rel(t: float | None) -> float | None:
            return None if t is None else round(t - self.change, 2)

        return {
            "new epoch scraped": rel(self.epoch_seen),
            "change speed-up upper bound < 1 scraped": rel(self.upper_below),
            f"{REGRESSED}: pending (ALERTS)": rel(self.pending),
            f"{REGRESSED}: firing (ALERTS)": rel(self.firing),
            f"{REGRESSED}: pending seen in API": rel(self.api_pending),
            f"{REGRESSED}: firing seen in API": rel(self.api_firing),
            f"{REGRESSED}: webhook /tickets": rel(self.ticket),
        }


def _ticketed(webhook: Webhook) -> float | None:
    """When the ticket receiver first got the changed target's regression, firing."""
    for note in webhook.received():
        if note.path != "/tickets":
            continue
        for alert in note.alerts():
            labels = alert["labels"]
            if (
                alert["status"] == "firing"
                and labels.get("alertname") == REGRESSED
                and labels.get("target") == CHANGED
            ):
                return note.received
    return None


@pytest.fixture(scope="module")
def change_cycle(stack: Stack) -> ChangeCycle:
    """Wait (bounded) for the changed target's new epoch to be seen, for SpecmonChangeRegressed
    to go pending (both epochs need 200 engine steps and 3 scrape intervals at the same load:
    seconds at 2 requests per step) and to fire its `for:` later, and to reach the ticket
    receiver. The timeouts are several times the delays measured (printed below)."""
    prom = stack.prometheus
    (for_seconds,) = {
        duration_seconds(rule["for"])
        for rule in alert_rules(stack.rules)
        if rule["alert"] == REGRESSED
    }
    selector = f'ALERTS{{alertname="{REGRESSED}", target="{CHANGED}"'
    pending = wait_until(
        f"{REGRESSED} to go pending",
        functools.partial(
            _first_sample, prom, f'{selector}, alertstate="pending"}}', stack.change - 5
        ),
        timeout=max(0.0, stack.change - time.time()) + 45,
        interval=0.5,
        alive=stack.alive,
    )
    firing = wait_until(
        f"{REGRESSED} to fire",
        functools.partial(
            _first_sample, prom, f'{selector}, alertstate="firing"}}', stack.change - 5
        ),
        timeout=max(0.0, pending + for_seconds - time.time()) + 30,
        interval=0.5,
        alive=stack.alive,
    )
    ticket = wait_until(
        "Alertmanager to deliver it to the ticket receiver",
        lambda: _ticketed(stack.webhook),
        timeout=30,
        alive=stack.alive,
    )
    target = f'{{target="{CHANGED}"}}'
    epoch_seen = _first_sample(
        prom, f"specmon_config_change_timestamp_seconds{target}", stack.change - 5
    )
    upper_below = _first_sample(
        prom, f"specmon_change_speedup_upper_ratio{target}", stack.change - 5, lambda v: v < 1
    )
    assert epoch_seen is not None and upper_below is not None

    def api(state: str) -> float | None:
        seen = stack.poller.first(state, alertname=REGRESSED, target=CHANGED)
        return None if seen is None else seen.at

    result = ChangeCycle(
        change=stack.change,
        epoch_seen=epoch_seen,
        upper_below=upper_below,
        pending=pending,
        firing=firing,
        api_pending=api("pending"),
        api_firing=api("firing"),
        ticket=ticket,
    )
    report = result.report()
    (stack.tmp / "change-timings.json").write_text(json.dumps(report, indent=2))
    sys.stdout.write(
        f"\nseconds after the changed engine's restart (for: {for_seconds:g}s):\n"
        + "".join(f"  {k:<52} {'-' if v is None else f'{v:7.2f}':>7}\n" for k, v in report.items())
    )
    return result


# --------------------------------------------------------------------------- tests


def test_prometheus_runs_the_shipped_rules_rewritten(stack: Stack) -> None:
    """Prometheus evaluates every shipped rule, rewritten only in durations and windows."""
    shipped = alert_rules(load_rules())
    loaded = [r for r in stack.prometheus.rules() if r["type"] == "alerting"]
    assert [r["name"] for r in loaded] == [r["alert"] for r in shipped]
    for rule, original in zip(loaded, shipped, strict=True):
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        assert rule["duration"] == duration_seconds(original["for"]) / SCALE
        assert rule.get("keepFiringFor", 0) == (
            duration_seconds(original.get("keep_firing_for", "0s")) / SCALE
        )
        shipped_windows = re.findall(r'window="(\w+)"', original["expr"])
        assert re.findall(r'window="(\w+)"', rule["query"]) == [WINDOWS[w] for w in shipped_windows]
        assert rule["labels"] == original["labels"]
        assert rule["annotations"] == original["annotations"]
    for rule in stack.prometheus.rules():
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))


def test_a_change_for_the_worse_fires_change_regressed(
    stack: Stack, change_cycle: ChangeCycle
) -> None:
    """The changed engine, restarted with k = 3 and a worse draft at the same load: specmon sees
    a new configuration epoch (for that target only), exports the change's speed-up at 2
    requests per step with its 95 % upper bound well below 1, and SpecmonChangeRegressed goes
    pending, fires its `for:` later for that target only, and reaches the ticket receiver (its
    warning severity's route) as one alert group, never the pager. SpecmonAcceptanceDrop stays
    quiet although alpha fell by more than its 0.15: the rule leaves out the 90 minutes after a
    configuration change, and that guard is what holds here."""
    prom = stack.prometheus
    cycle = change_cycle
    span = time.time() - stack.started + 5
    # The epoch change: seen after the restart, for the changed target only, dated at it.
    stamps = prom.raw_samples("specmon_config_change_timestamp_seconds", span)
    assert {labels["target"] for labels, _, _ in stamps} == {CHANGED}
    assert min(t for _, t, _ in stamps) >= stack.change
    (changed_at,) = {v for _, _, v in stamps}
    assert stack.change - 1 <= changed_at <= cycle.epoch_seen
    epochs = {
        (s["metric"]["speculation"], s["metric"]["chain_length"])
        for s in prom.query(f'specmon_config_epoch_info{{target="{CHANGED}"}}')
    }
    assert epochs == {("true", str(len(CHANGED_BEFORE))), ("true", str(len(CHANGED_AFTER)))}

    # The change's speed-up at the load both configurations ran at, against the load model's
    # truth: time per output token before over after.
    model = load_model_from(LOAD_MODEL)
    assert model is not None
    before = model.step_seconds(LOW_LOAD, len(CHANGED_BEFORE)) / (1 + sum(CHANGED_BEFORE))
    after = model.step_seconds(LOW_LOAD, len(CHANGED_AFTER)) / (1 + sum(CHANGED_AFTER))
    truth = before / after  # 0.68
    figures = {}
    for family in ("ratio", "lower_ratio", "upper_ratio"):
        (series,) = prom.query(f'specmon_change_speedup_{family}{{target="{CHANGED}"}}')
        assert series["metric"]["concurrency"] == str(LOW_LOAD), series["metric"]
        figures[family] = float(series["value"][1])
    assert abs(figures["ratio"] - truth) < 0.1 * truth, (figures, truth)
    assert figures["lower_ratio"] <= figures["ratio"] <= figures["upper_ratio"] < 0.9, figures
    assert {s["metric"]["target"] for s in prom.query("specmon_change_speedup_ratio")} == {CHANGED}

    # Pending, then firing no sooner than `for:` later, for the changed target only.
    for_seconds = duration_seconds(scaled("30m"))
    assert stack.change <= cycle.epoch_seen <= cycle.upper_below <= cycle.pending
    assert cycle.firing - cycle.pending >= for_seconds
    assert cycle.api_pending is not None and cycle.api_firing is not None
    assert cycle.api_pending < cycle.api_firing
    alerted = prom.raw_samples(f'ALERTS{{alertname="{REGRESSED}"}}', span)
    assert {labels["target"] for labels, _, _ in alerted} == {CHANGED}
    (alert,) = [a for a in prom.alerts() if a["labels"]["alertname"] == REGRESSED]
    labels = alert["labels"]
    assert alert["state"] == "firing"
    assert (labels["target"], labels["engine"], labels["model"], labels["severity"]) == (
        CHANGED,
        "vllm",
        "tiny-llama",
        "warning",
    )
    assert labels["concurrency"] == str(LOW_LOAD)
    text = alert["annotations"]["description"]
    assert text.startswith(
        f"{CHANGED} (engine vllm, model tiny-llama): at {LOW_LOAD} requests per step"
    ), text
    assert re.search(r"decodes at 0\.[67]\dx the speed of the configuration before it", text), text

    # Routed by its severity: the ticket receiver, one alert group; nothing about this target
    # on the pager, and nothing but the regression on any receiver.
    tickets = [
        n for n in stack.webhook.received() if n.payload["groupLabels"].get("target") == CHANGED
    ]
    assert tickets and {n.path for n in tickets} == {"/tickets"}
    assert {json.dumps(n.payload["groupLabels"], sort_keys=True) for n in tickets} == {
        json.dumps(
            {"alertname": REGRESSED, "target": CHANGED, "model": "tiny-llama"}, sort_keys=True
        )
    }
    assert tickets[0].payload["receiver"] == "tickets"

    # SpecmonAcceptanceDrop: alpha fell by more than the rule's 0.15 (the fast window's alpha
    # before the change against now), yet the rule never fired, pending or firing, for it: its
    # `unless` leaves out the 90 minutes after a configuration change.
    alphas = prom.raw_samples(f'specmon_alpha_ratio{{target="{CHANGED}", window="{FAST}"}}', span)
    alpha_before = [v for _, t, v in alphas if t < stack.change]
    assert alpha_before, "no alpha scraped before the change"
    (now,) = prom.query(f'specmon_alpha_ratio{{target="{CHANGED}", window="{FAST}"}}')
    assert float(now["value"][1]) < alpha_before[-1] - 0.15, (alpha_before[-1], now)
    assert prom.query(
        f'time() - specmon_config_change_timestamp_seconds{{target="{CHANGED}"}} < 5400'
    )
    assert not prom.raw_samples(
        f'ALERTS{{alertname="SpecmonAcceptanceDrop", target="{CHANGED}"}}', span
    )


def test_break_even_goes_pending_then_firing_for_the_degraded_target(
    stack: Stack, cycle: Cycle
) -> None:
    for severity in ("warning", "critical"):
        # Nothing before the drop; pending once the 10s window has tipped; firing `for` later.
        assert cycle.drop < cycle.pending[severity] < cycle.drop + 10 + 5, severity
        for_seconds = duration_seconds(scaled("15m"))
        assert (
            for_seconds <= cycle.firing[severity] - cycle.pending[severity] <= for_seconds + 2.5
        ), severity
        # /api/v1/alerts showed it pending (on some poll) before it showed it firing.
        assert severity in cycle.api_pending and severity in cycle.api_firing, severity
        assert cycle.api_pending[severity] < cycle.api_firing[severity], severity
    # The warning (speed-up < 1) tips before the critical tier (speed-up < 0.75).
    assert cycle.margin_negative <= cycle.speedup_below
    assert cycle.pending["warning"] <= cycle.pending["critical"]

    # The firing alerts as Prometheus's API shows them: labels and the rendered description.
    firing = [
        a
        for a in stack.prometheus.alerts()
        if a["labels"]["alertname"] == ALERT and a["state"] == "firing"
    ]
    # The other targets it fires for are the three bases' (test_one_situation_pages_once).
    assert {(a["labels"]["target"], a["labels"]["severity"]) for a in firing} - {
        (t, sev) for t in BASES for sev in ("warning", "critical")
    } == {(DEGRADED, "warning"), (DEGRADED, "critical")}
    for alert in firing:
        labels = alert["labels"]
        if labels["target"] != DEGRADED:
            continue
        assert labels["engine"] == "vllm" and labels["window"] == FAST
        # The speed-up on the verdict's basis: the configured c = 0.3 (alpha 0.10: 0.58x).
        assert float(alert["value"]) < (0.75 if labels["severity"] == "critical" else 1.0)
        text = alert["annotations"]["description"]
        assert text.startswith(f"{DEGRADED} (engine vllm, model tiny-llama): over the last {FAST}")
        assert "at the configured draft cost (basis configured)" in text, text
        assert "k = 3" in text and "c = 0.30" in text and "drafts" in text
        assert re.search(r"alpha (is |of )?0\.[01]\d\d", text), text
        assert "a guess" not in text


def test_alertmanager_delivers_and_inhibits(stack: Stack, cycle: Cycle) -> None:
    # The shipped routing: critical -> pager receiver, which the test serves at /pager.
    assert ("critical", "/pager") in cycle.delivered
    assert cycle.delivered["critical", "/pager"] >= cycle.firing["critical"]
    pager = [
        n
        for n in stack.webhook.received()
        if n.path == "/pager" and n.payload["groupLabels"].get("target") == DEGRADED
    ]
    first = pager[0].payload
    assert first["receiver"] == "pager"
    assert first["groupLabels"] == {"alertname": ALERT, "target": DEGRADED, "model": "tiny-llama"}
    assert first["commonLabels"]["severity"] == "critical"
    assert DEGRADED in first["alerts"][0]["annotations"]["description"]

    # The shipped inhibit rule: the critical tier hides the warning tier of the same target.
    def warning_inhibited() -> bool:
        alerts = http_json(stack.alertmanager + "/api/v2/alerts")
        return any(
            a["labels"].get("target") == DEGRADED
            and a["labels"].get("severity") == "warning"
            and a["status"]["state"] == "suppressed"
            and a["status"]["inhibitedBy"]
            for a in alerts
        )

    wait_until("the warning tier to be inhibited", warning_inhibited, timeout=20)

    # Every notification is about the degraded target, the refusals of the rejecting one, the
    # load alerts of the loaded one, or the changed one's regression.
    for note in stack.webhook.received():
        for alert in note.alerts():
            assert _expected(alert["labels"]), note.payload


# Dashboard variables from label_values(...) as Grafana would resolve them.
def _resolve(
    stack: Stack, board: dict[str, Any], fixed: dict[str, str | list[str]]
) -> list[dict[str, str | list[str]]]:
    """Every combination of existing values for the dashboard's variables (``fixed`` wins)."""
    combos: list[dict[str, str | list[str]]] = [dict(fixed)]
    for var in variable_queries(board):
        if var.name in fixed:
            continue
        out = []
        for combo in combos:
            selector = substitute(var.selector, combo) if var.selector else None
            values = stack.prometheus.label_values(var.label, selector, stack.started)
            assert values, f"variable {var.name}: label_values({selector}, {var.label}) is empty"
            out += [{**combo, var.name: value} for value in values]
        combos = out
    return combos


def _returns_data(stack: Stack, expr: str, instant: bool) -> bool:
    now = time.time()
    if instant:
        return bool(stack.prometheus.query(expr, at=now))
    result = stack.prometheus.query_range(expr, now - 60, now, INTERVAL)
    return any(series["values"] for series in result)


def _via_twin(expr: str) -> bool:
    """Whether ``expr`` reads the baseline as a target of its own (a twin's series)."""
    return '"target", "", "baseline"' in expr


def _selected(engines: dict[str, str], combo: dict[str, str | list[str]]) -> list[str]:
    """The targets (with an engine) a combination of variable values selects."""
    chosen, targets = combo.get("engine", ".+"), combo["target"]
    selected = (
        list(engines) if targets == ".+" else [targets] if isinstance(targets, str) else targets
    )
    return [
        t
        for t in selected
        if t in engines and (chosen == ".+" or engines[t] == chosen or engines[t] in chosen)
    ]


def _per_class(names: set[str] | frozenset[str]) -> bool:
    """Whether a query reads per-class figures (the daemon's, or a tap's own series)."""
    return bool(names & CLASSES) or any(n.startswith("specmon_tap_") for n in names)


@pytest.mark.parametrize("name", ["specmon-overview.json", "specmon-target.json"])
def test_every_dashboard_panel_returns_data(
    stack: Stack, cycle: Cycle, load_cycle: LoadCycle, change_cycle: ChangeCycle, name: str
) -> None:
    """Run after the load rise (load_cycle): the loaded target then has every figure against
    its twin, the crossover included, in every window; and after the changed target's change
    (change_cycle): it then has "did the change help?"."""
    board = load_dashboard(DASHBOARD_DIR / name)
    targets = stack.prometheus.label_values("target", "specmon_up", stack.started)
    assert targets == sorted([*HEALTHY, DEGRADED, REJECTING, *BASES, TWIN, CHANGED])
    windows = stack.prometheus.label_values("window", "specmon_window_drafts", stack.started)
    assert sorted(windows) == sorted(SPECMON_WINDOWS)
    engines = {
        s["metric"]["target"]: s["metric"]["engine"]
        for s in stack.prometheus.query("specmon_speculation_enabled")
    }
    assert sorted(set(engines.values())) == ["llamacpp", "tgi", "trtllm", "vllm"]
    if name == "specmon-overview.json":
        # "All" (Grafana's allValue .+) and the explicit multi-value selection, for all the
        # engines and for each engine alone.
        fixed: list[dict[str, str | list[str]]] = [
            {"target": ".+", "engine": ".+"},
            {"target": targets, "engine": ".+"},
            {"target": ".+"},
            {"target": targets},
        ]
    else:
        fixed = [{}]
    combos = [c for f in fixed for c in _resolve(stack, board, f)]
    if name == "specmon-target.json":
        # Every target that speculates (the twin has no model there: its figures are on the
        # loaded target's panels).
        assert {(c["target"], c["window"]) for c in combos} == {
            (t, w) for t in targets if t != TWIN for w in windows
        }
    else:
        assert {c["engine"] for c in combos} == {".+", *engines.values()}
    empty = []
    allowed = []
    #: Empty only because the target selected did not change its configuration (CHANGE in
    #: coverage.py): every target but the changed one.
    unchanged: list[str] = []
    #: Empty only because no target here has classes (CLASSES in coverage.py).
    classless: list[str] = []
    on_event: dict[str, bool] = {}
    checked = 0
    for combo in combos:
        for q in panel_queries(
            board, combo, interval=INTERVAL, rate_interval=RATE_INTERVAL, range_="1m"
        ):
            checked += 1
            has_data = _returns_data(stack, q.expr, q.instant)
            key = f"{q.panel_title} [{q.ref_id}]"
            if promql_metric_names(q.raw_expr) & ON_FIRST_EVENT:
                # Refusals exist on the rejecting target only: data for some combination.
                on_event[key] = on_event.get(key, False) or has_data
            elif (
                not has_data
                and promql_metric_names(q.raw_expr) & CHANGE
                and CHANGED not in _selected(engines, combo)
            ):
                # Only the changed target changed its speculative configuration.
                unchanged.append(f"{key} {combo}")
            elif not has_data and _per_class(promql_metric_names(q.raw_expr)):
                # Per request class: no target of this stack has a tap or SGLang's class
                # labels (the row's figures against real engines: tests/realengines/test_tap).
                classless.append(f"{key} {combo}")
            elif not has_data and may_be_empty(
                q.expr,
                [engines[t] for t in _selected(engines, combo)],
                baselines=[t in (LOADED, PROFILED) for t in _selected(engines, combo)],
            ):
                allowed.append(f"{key} {combo}")
            elif not has_data and combo.get("target") == PROFILED and _via_twin(q.expr):
                # A cost profile is no target: its own speed is not a series.
                allowed.append(f"{key} {combo}")
            elif not has_data:
                empty.append(f"{key} {combo}: {q.expr}")
    assert checked >= 20
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
    assert all(on_event.values()), on_event
    if name == "specmon-overview.json":
        assert on_event, "no panel shows the refused readings"
    else:
        # Per window: healthy-tgi's draft tokens per second (TGI counts no draft tokens); the
        # ten queries of figures against a baseline for every target without one; for
        # TensorRT-LLM also the target's concurrency (2) and time per output token (no decode
        # timing on its page; TGI's router times its decode steps). Never anything for the
        # loaded target; for the profiled one only the twin's own time per output token.
        per_target = {t: 10 for t in targets if t not in (LOADED, PROFILED, TWIN)}
        per_target[PROFILED] = 1
        per_target.update({"healthy-trtllm": 13, "healthy-tgi": 11})
        for target, count in per_target.items():
            found = [e for e in allowed if f"'target': '{target}'" in e]
            assert len(found) == count * len(windows), (target, found)
        assert not [e for e in allowed if f"'target': '{LOADED}'" in e], allowed
        assert len(allowed) == sum(per_target.values()) * len(windows)
        # "Did the change help?": empty for every target but the changed one, which has it
        # (a query without data for it would be in `empty` above).
        assert unchanged, "no panel reads the change's speed-up"
        assert all("Did the change help" in e for e in unchanged), unchanged
        assert not [e for e in unchanged if f"'target': '{CHANGED}'" in e], unchanged
        # The per-class row is on the page, asked for every speculating target and window.
        assert {e.split(" [", 1)[0] for e in classless} == {
            "Per request class",
            "Margin per class, and the coverage",
            "Per-request acceptance outliers (every tap)",
        }, classless
        assert all(any(f"'target': '{t}'" in e for e in classless) for t in per_target)

    # The alert annotation shows the degraded target's firing alert, and nothing for the others.
    annotations = {
        q.panel_title: q
        for q in panel_queries(
            board,
            {"target": DEGRADED, "engine": ".+", "model": "x", "window": FAST},
            include_annotations=True,
        )
        if q.panel_type == "annotation"
    }
    assert sorted(annotations) == ["configuration changes", "specmon alerts"]
    # Configuration changes: the changed target's, and none for any other (the epoch series
    # is absent before a first change).
    changes = annotations["configuration changes"]
    assert _returns_data(stack, substitute(changes.raw_expr, {"target": CHANGED}), instant=False)
    assert not _returns_data(stack, changes.expr, instant=False)
    for target in targets:
        expr = substitute(changes.raw_expr, {"target": target})
        assert _returns_data(stack, expr, instant=False) is (target == CHANGED), target
    annotation = annotations["specmon alerts"]
    assert _returns_data(stack, annotation.expr, instant=False)
    for healthy in (*HEALTHY, TWIN):
        expr = substitute(annotation.raw_expr, {"target": healthy})
        assert not _returns_data(stack, expr, instant=False), healthy


def _expected(
    labels: dict[str, str], stamp: float | None = None, stack: Stack | None = None
) -> bool:
    """An alert the scenario causes: the degraded target's (after the drop), the rejecting
    target's refusals, the loaded engine's load alerts and break-even alert against its twin
    and its profile (after the rise), the guessing target's break-even alert (and the shorter
    chain that goes with a broken draft), the changed target's regression (after the
    change)."""
    target, name = labels.get("target"), labels.get("alertname")
    if target == CHANGED:
        return name == REGRESSED and (stamp is None or stack is None or stamp >= stack.change)
    if target == DEGRADED:
        return stamp is None or stack is None or stamp >= stack.drop
    if target == REJECTING:
        return name == REJECTED_ALERT
    if target in (LOADED, PROFILED):
        return name in (*LOAD_ALERTS, ALERT) and (
            stamp is None or stack is None or stamp >= stack.load_rise
        )
    if target == GUESSING:
        return name in (ALERT, "SpecmonChainTooLong")
    return False


def test_healthy_targets_raise_nothing(
    stack: Stack, cycle: Cycle, load_cycle: LoadCycle, change_cycle: ChangeCycle
) -> None:
    """No alert the rules define, in any state, ever, for a healthy target or the baseline twin
    (which runs without speculation on purpose); the loaded target only its load alerts, the
    changed target only SpecmonChangeRegressed."""
    prom = stack.prometheus
    # The silence is not vacuous: every healthy target had traffic above the guard, and a
    # positive margin, in the windows the rules read.
    for window in (WINDOWS["5m"], WINDOWS["15m"]):
        for expr in (
            f'specmon_window_drafts{{window="{window}"}} >= 400',
            f'specmon_alpha_margin_ratio{{window="{window}"}} > 0.2',
        ):
            found = {s["metric"]["target"] for s in prom.query(expr)}
            assert set(HEALTHY) <= found, expr
    # The twin has been up without speculative series for the whole run, well past the `for:`
    # of SpecmonSpeculationMissing: only specmon_baseline_info keeps it silent.
    missing_for = next(
        duration_seconds(r["for"])
        for r in alert_rules(stack.rules)
        if r["alert"] == "SpecmonSpeculationMissing"
    )
    twin = prom.raw_samples(f'specmon_speculation_enabled{{target="{TWIN}"}}', 600)
    assert twin and all(v == 0 for _, _, v in twin)
    assert twin[-1][1] - twin[0][1] > 2 * missing_for
    assert prom.query(f'specmon_baseline_info{{target="{LOADED}", baseline="{TWIN}"}}')

    names = {rule["alert"] for rule in alert_rules(load_rules())}
    span = time.time() - stack.started + 5
    # Prometheus starts evaluating rules at once but scrapes only once service discovery has
    # delivered its targets (about 5 s later): until then absent(specmon_build_info) is true
    # and SpecmonAbsent is pending. That is the only alert allowed without the degraded target,
    # and only until the first scrape's data reaches an evaluation.
    first_scrape = prom.raw_samples("specmon_build_info", span)[0][1]
    for name in sorted(names):
        for labels, stamp, _ in prom.raw_samples(f'ALERTS{{alertname="{name}"}}', span):
            if _expected(labels, stamp, stack):
                continue
            if (
                name == "SpecmonAbsent"
                and labels["alertstate"] == "pending"
                and stamp < first_scrape + 1.5
            ):
                continue
            raise AssertionError(f"unexpected alert {labels} at {stamp - stack.drop:+.1f}s")
    for seen in stack.poller.seen():
        if _expected(seen.labels, seen.at, stack):
            continue
        assert seen.labels["alertname"] == "SpecmonAbsent", seen
        assert seen.state == "pending" and seen.at < first_scrape + 3, seen
    assert stack.poller.errors == 0
    # /api/v1/rules: every alerting rule evaluated without error, no alert for a healthy target.
    for rule in prom.rules():
        assert rule["health"] == "ok", rule["name"]
        for alert in rule.get("alerts") or []:
            assert _expected(alert["labels"]), alert


def test_refused_readings_fire_their_alert(stack: Stack, cycle: Cycle) -> None:
    """The rejecting target's broken model is refused at every scrape: the counter moves, the
    target's good model is read as usual, and SpecmonReadingsRejected fires (its `for:` / 30)
    with the reason, and reaches the ticket receiver; no other target has a refusal."""
    prom = stack.prometheus
    refused = prom.query("specmon_rejected_readings_total")
    assert {(s["metric"]["target"], s["metric"]["reason"]) for s in refused} == {
        (REJECTING, REJECTED_REASON)
    }
    (good,) = prom.query(f'specmon_chain_length{{target="{REJECTING}"}}')
    assert good["metric"]["model"] == "tiny-llama"

    def firing() -> dict[str, Any] | None:
        for alert in prom.alerts():
            labels = alert["labels"]
            if labels["alertname"] == REJECTED_ALERT and alert["state"] == "firing":
                return dict(alert)
        return None

    alert = wait_until(
        f"{REJECTED_ALERT} to fire", firing, timeout=duration_seconds(scaled("30m")) + 30
    )
    labels = alert["labels"]
    assert (labels["target"], labels["reason"], labels["severity"]) == (
        REJECTING,
        REJECTED_REASON,
        "info",
    )
    text = alert["annotations"]["description"]
    assert text.startswith(
        f"{REJECTING}: specmon has refused readings of this target's page for the reason "
        f"{REJECTED_REASON} in every 15 minutes"
    ), text

    def delivered() -> bool:
        return any(
            note.path == "/tickets"
            and any(a["labels"].get("alertname") == REJECTED_ALERT for a in note.alerts())
            for note in stack.webhook.received()
        )

    wait_until("the ticket receiver to get it", delivered, timeout=20, alive=stack.alive)


def test_load_alerts_fire_for_the_loaded_target_only(stack: Stack, load_cycle: LoadCycle) -> None:
    """Against its twin, the loaded target's speculation costs time at 16 requests per step:
    SpecmonSlowerThanBaseline goes pending within seconds of the rise (the bucket of 16 needs
    its 200 engine steps a side) and SpecmonAboveCrossover once the window's mean concurrency,
    a mean over engine steps, reaches the crossover (the high load's steps must dominate the
    window). Each fires its `for:` later, with descriptions that quote the figures."""
    window = duration_seconds(SLOW)
    for_seconds = {
        rule["alert"]: duration_seconds(rule["for"])
        for rule in alert_rules(stack.rules)
        if rule["alert"] in LOAD_ALERTS
    }
    cycle = load_cycle
    # Nothing before the rise; realized < 0.95 within a few seconds of both servers' rises
    # (the bucket of 16 needs 3 of specmon's 0.5 s intervals a side, then Prometheus's 1 s).
    assert cycle.rise < cycle.slower_scraped < cycle.both_risen + 5
    # The mean over engine steps: at 2 requests the loaded target makes 877 steps/s, at 16
    # 230; the mean of a 30 s window reaches the crossover read off the cost curve (10.4-10.9) /
    # 1.05 after 25-25.5 s at 16 (a straight line between the buckets read 13.9: 28.2 s).
    assert cycle.rise + 0.8 * window < cycle.above_scraped < cycle.rise + window + 3
    for name, scraped in ((SLOWER, cycle.slower_scraped), (ABOVE, cycle.above_scraped)):
        assert scraped <= cycle.pending[name] < scraped + 2.5, name
        # Firing at the first evaluation after `for:`; on a busy 2-core machine (three test
        # processes side by side) an evaluation was seen 3.0 s late, so 4 s of slack.
        assert (
            for_seconds[name] <= cycle.firing[name] - cycle.pending[name] <= for_seconds[name] + 4
        ), name

    firing = [
        a
        for a in stack.prometheus.alerts()
        if a["labels"]["alertname"] in LOAD_ALERTS and a["state"] == "firing"
    ]
    (stack.tmp / "load-alerts.json").write_text(json.dumps(firing, indent=2))
    # The same engine's page read against the profile may fire them too (inhibited alike).
    assert {a["labels"]["target"] for a in firing} <= {LOADED, PROFILED}
    firing = [a for a in firing if a["labels"]["target"] == LOADED]
    assert sorted((a["labels"]["alertname"], a["labels"]["target"]) for a in firing) == [
        (ABOVE, LOADED),
        (SLOWER, LOADED),
    ]
    for alert in firing:
        labels = alert["labels"]
        assert (labels["engine"], labels["window"], labels["baseline"], labels["severity"]) == (
            "vllm",
            SLOW,
            TWIN,
            "warning",
        )
        text = alert["annotations"]["description"]
        assert text.startswith(f"{LOADED} (engine vllm, model tiny-llama): "), text
        assert f"specmon recommend --from SPECMON_URL --target {LOADED}" in text
        value = float(alert["value"])
        if labels["alertname"] == SLOWER:
            # The load model's speed-up at 16 requests and K = 3.4: 0.705 (specmon.sim).
            assert 0.65 < value < 0.75, value
            assert re.search(r"has been below 0\.95: now 0\.7\dx", text), text
            assert "Speculation stops paying at" in text
            # The verdict's own c at this load (0.96 in the load model), not the configured.
            assert re.search(
                r"Draft cost c measured at this load: 0\.9\d, where the best chain length is 0\.",
                text,
            ), text
        else:
            # The crossover, read off the cost curve between the buckets at 2 and 16 (the
            # curve keeps both: the truth is 10.88; a straight line between the buckets read
            # 13.9, and 16 once the window had lost the low load).
            assert 9.5 < value < 12.5, value
            assert f"for 15 minutes this target has run at {HIGH_LOAD}.0 requests per step" in text
            assert "realized speed-up at this load: 0.7" in text, text


def _verdict_history(prom: Any, target: str) -> list[tuple[float, str, str, str]]:
    """The target's FAST verdict over the run, one sample in five (time, speed-up, its upper
    bound, basis): what a failure needs to tell a flake from an interval that moved."""
    found: list[tuple[float, str, str, str]] = []
    try:
        now = time.time()
        series = {}
        for name in ("specmon_verdict_speedup_ratio", "specmon_verdict_speedup_upper_ratio"):
            result = prom.query_range(
                f'{name}{{target="{target}",window="{FAST}"}}', now - 600, now, "5s"
            )
            series[name] = result[0]["values"] if result else []
        for (t, point), (_, upper) in zip(
            series["specmon_verdict_speedup_ratio"],
            series["specmon_verdict_speedup_upper_ratio"],
            strict=False,
        ):
            found.append((float(t), point, upper, ""))
    except Exception as error:
        found.append((0.0, "", "", repr(error)))
    return found


def test_one_situation_pages_once_on_each_basis(stack: Stack, load_cycle: LoadCycle) -> None:
    """Speculation slower than none, sustained, on each basis of the verdict: realized against
    the twin (the loaded target at 16 requests per step), against the cost profile (the same
    engine's page read by a second target) and on the default guess (no draft cost
    configured, a broken draft on a chain of 5). Each target pages exactly once: one alert
    group, SpecmonBelowBreakEven's critical tier, reaches the pager; its warning tier and the
    load alerts saying the same are inhibited, so no ticket repeats it; each description says
    its basis, and only the guess says it is one."""
    prom = stack.prometheus

    def paged() -> dict[str, list[Any]] | None:
        groups: dict[str, list[Any]] = {}
        for note in stack.webhook.received():
            target = note.payload["groupLabels"].get("target")
            if note.path == "/pager" and target in BASES:
                groups.setdefault(target, []).append(note)
        return groups if set(groups) == set(BASES) else None

    groups = wait_until("a page for each basis", paged, timeout=60, alive=stack.alive)
    verdicts = {
        s["metric"]["target"]: s["metric"]["basis"]
        for s in prom.query(f'specmon_verdict_info{{window="{FAST}"}}')
    }
    for target, basis in BASES.items():
        assert verdicts[target] == basis, (target, verdicts)
        notes = groups[target]
        # One alert group; a later note of it is a reminder after repeat_interval, not a page.
        assert {json.dumps(n.payload["groupLabels"], sort_keys=True) for n in notes} == {
            json.dumps(
                {"alertname": ALERT, "target": target, "model": "tiny-llama"}, sort_keys=True
            )
        }, target
        for note in notes:
            for alert in note.alerts():
                assert alert["labels"]["severity"] == "critical", alert["labels"]
        text = notes[0].alerts()[0]["annotations"]["description"]
        assert f"(basis {basis})" in text, text
        assert ("a guess" in text and "specmon measure --profile-out" in text) is (
            basis == "default"
        ), text
        speedup = float(re.search(r"ran at ([0-9.]+)x the speed", text).group(1))  # type: ignore[union-attr]
        # The load model at 16 requests and K = 3.4: 0.705; the guess: 1.06 / 1.5 = 0.71.
        assert 0.65 < speedup < 0.75, text
    twin_text = groups[LOADED][0].alerts()[0]["annotations"]["description"]
    assert f"realized against its twin without speculation, {TWIN}, at this load" in twin_text
    # The page carries the load it was read at, the crossover with its range read off the
    # last hour's curve (buckets 2 and 16: the truth 10.88) and, since speculation paid at 2,
    # a chain length per load rather than "turn it off" (issue 62).
    assert re.search(r"Load: \d+\.\d requests per engine step over the window", twin_text)
    crossover = re.search(
        r"Speculation stops paying at (\d+\.\d) \(95 % range (\d+\.\d)-(\d+\.\d)\)", twin_text
    )
    assert crossover is not None, twin_text
    point, low, high = (float(g) for g in crossover.groups())
    assert 9.5 < point < 12.5 and low <= point <= high, twin_text
    assert "Speculation still pays at some load" in twin_text, twin_text
    assert "set a chain length per load rather than turning it off" in twin_text
    guess_text = groups[GUESSING][0].alerts()[0]["annotations"]["description"]
    assert "Turning speculation off restores the lost throughput" in guess_text
    profile_text = groups[PROFILED][0].alerts()[0]["annotations"]["description"]
    assert "measured against its cost profile at this load" in profile_text

    # Nothing else about the same situation reached a receiver: the warning tier is hidden by
    # the page, the load alerts by SpecmonBelowBreakEven, which fires first (its 5m window
    # reads the current load at once; SpecmonSlowerThanBaseline's `for:` is twice as long and
    # SpecmonAboveCrossover waits for the window's mean concurrency).
    for note in stack.webhook.received():
        for alert in note.alerts():
            labels = alert["labels"]
            if labels.get("target") in BASES and note.path == "/tickets":
                assert labels["alertname"] not in (ALERT, *LOAD_ALERTS), (
                    note.path,
                    {k: labels.get(k) for k in ("alertname", "target", "severity", "window")},
                    alert.get("startsAt"),
                    alert["annotations"].get("summary"),
                    _verdict_history(prom, labels["target"]),
                )
    assert load_cycle.delivered == {}
    timings = {}
    for target in (LOADED, PROFILED):
        fired = _first_sample(
            prom,
            f'ALERTS{{alertname="{ALERT}", target="{target}", severity="critical", '
            'alertstate="firing"}',
            stack.load_rise,
        )
        assert fired is not None and fired < min(load_cycle.firing.values()), target
        timings[f"{target}: {ALERT} critical firing"] = fired - stack.load_rise
        timings[f"{target}: paged"] = groups[target][0].received - stack.load_rise
    sys.stdout.write(
        "\nseconds after the loaded pair's load rose, the verdict's page:\n"
        + "".join(f"  {k:<52} {v:7.2f}\n" for k, v in timings.items())
    )
    suppressed = {
        (a["labels"]["target"], a["labels"]["alertname"], a["labels"].get("severity"))
        for a in http_json(stack.alertmanager + "/api/v2/alerts")
        if a["labels"].get("target") in BASES and a["status"]["state"] == "suppressed"
    }
    for target in BASES:
        assert (target, ALERT, "warning") in suppressed, (target, suppressed)
    # The changed target's speculation still pays: its regression is a ticket, never a page.
    assert not [
        n
        for n in stack.webhook.received()
        if n.path == "/pager" and n.payload["groupLabels"].get("target") == CHANGED
    ]
    for name in LOAD_ALERTS:
        assert (LOADED, name, "warning") in suppressed, suppressed
