"""The engine recording rules in a real Prometheus equal specmon's own figures on the same data.

Debian's Prometheus scrapes simulated engines directly (``specmon simulate``: vLLM on
``/metrics`` as job ``vllm`` and on ``/metrics/`` with OpenMetrics, where sample names read
``vllm_``, as job ``vllm-om``; llama.cpp; SGLang) and evaluates the shipped
``engine-recording.rules.yml`` with its window rewritten from 5m to 20s
(:func:`tests.rules.engine_rules.with_window`) plus a per-job draft cost for llama.cpp written
as docs/recording-rules.md says. A specmon daemon scrapes the same engines with a 20s window and
the same draft costs. Prometheus scrapes and evaluates every second, specmon every 500 ms.

The engines follow one scenario (engine time, from each engine's start):

- 0-45 s: steady traffic, 500 drafts/s. Compared from 31 s (and once Prometheus has a full
  window of samples) to 42 s, when both windows lie in it.
  The two windows are not the same stretch of time: each ends at its own last scrape (the
  rule's also at its last evaluation), so up to SKEW seconds of drafts at either end belong to
  one window only. The tolerance is derived from that (:func:`steady_tolerance`).
- 45-55 s: no traffic; 55-60 s: a burst at 800 drafts/s with another survival; then no traffic.
  Compared at 67-72 s, when both windows start in the first quiet stretch and end in the
  second: then both count exactly the burst's drafts (checked: specmon's window holds exactly
  the burst's drafts, and the raw samples the rule read start and end at the quiet values),
  Prometheus's extrapolation cancels out of every ratio (all series of one engine share the
  same scrape timestamps), and the figures must agree to rounding (EXACT).
- From 80 s: the window holds no drafts: the rules record a count of 0 and no ratio, specmon
  exports no ratio.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.stack import (
    Proc,
    Prometheus,
    free_port,
    http_ok,
    require_binaries,
    simulate,
    wait_until,
)
from tests.rules.alert_rules import dump_rules
from tests.rules.common import run_tool
from tests.rules.engine_rules import COST_RECORD, load_engine_rules, with_window
from tests.support.daemon import Daemon, daemon, get

pytestmark = pytest.mark.prometheus

WINDOW = "20s"
WINDOW_SECONDS = 20.0
INTERVAL = "1s"
SPECMON_INTERVAL = 0.5
#: Upper bound of the offset between the two windows' ends (and starts), in seconds: specmon's
#: scrape interval (0.5 s) + Prometheus's scrape interval (1 s) + its rule evaluation interval
#: (1 s), rounded up for scrape durations and the moment each side is read.
SKEW = 3.0
#: Standard deviations the steady-state tolerance allows.
Z = 6.0
#: Relative tolerance when both windows hold the same drafts (float rounding only).
EXACT = 1e-9

DEFAULT_COST = 0.1
LLAMACPP_COST = 0.25
SGLANG_K = 3

STEADY = {"at": "0s", "drafts_per_second": 500}
STEADY_END, BURST_START, BURST_END = 45.0, 55.0, 60.0
STEADY_AT = (31.0, 42.0)
BURST_AT = (67.0, 72.0)
IDLE_AT = 82.0
#: llama.cpp delivers a request's drafts as one lump (20-60 drafts in the simulator).
LUMP = 60

ENGINES: dict[str, dict[str, Any]] = {
    "vllm": {
        "steady": [0.85, 0.6, 0.35],
        "burst": [0.7, 0.4, 0.2],
    },
    "llamacpp": {
        "steady": [0.9, 0.7, 0.5, 0.3],
        "burst": [0.8, 0.5, 0.3, 0.1],
    },
}


def _scenario(engine: str) -> dict[str, Any]:
    steady, burst = ENGINES[engine]["steady"], ENGINES[engine]["burst"]
    return {
        "phases": [
            {**STEADY, "survival": steady},
            {"at": f"{STEADY_END:g}s", "drafts_per_second": 0},
            {"at": f"{BURST_START:g}s", "survival": burst, "drafts_per_second": 800},
            {"at": f"{BURST_END:g}s", "drafts_per_second": 0},
        ]
    }


@dataclass(frozen=True)
class Job:
    """One Prometheus job and the specmon target that scrapes the same engine."""

    job: str
    target: str
    engine: str  # vllm | llamacpp | sglang
    level: str  # the rules' level prefix
    drafts_counter: str  # raw sample name of the drafts counter ("" for SGLang)
    cost: float

    def record(self, figure: str) -> str:
        position = "_position" if figure.startswith("position_") else ""
        if self.engine == "sglang":
            return f"{self.level}:sglang_{figure}"
        return f"{self.level}{position}:{self.engine}_spec_decode_{figure}"


JOBS = (
    Job(
        "vllm",
        "vllm",
        "vllm",
        "instance_model_name",
        "vllm:spec_decode_num_drafts_total",
        DEFAULT_COST,
    ),
    Job(
        "vllm-om",
        "vllm",
        "vllm",
        "instance_model_name",
        "vllm_spec_decode_num_drafts_total",
        DEFAULT_COST,
    ),
    Job(
        "llamacpp",
        "llamacpp",
        "llamacpp",
        "instance",
        "llamacpp:spec_decode_num_drafts_total",
        LLAMACPP_COST,
    ),
    Job("sglang", "sglang", "sglang", "instance_model_name", "", DEFAULT_COST),
)


@dataclass
class Stack:
    tmp: Path
    prometheus: Prometheus
    specmon: Daemon
    #: Engine -> (earliest, latest) Unix time at which its scenario clock started.
    started: dict[str, tuple[float, float]]
    procs: list[Proc] = field(default_factory=list)

    def alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()
        if self.specmon.proc.poll() is not None:
            raise AssertionError(f"specmon exited:\n{self.specmon.log_text()[-3000:]}")

    def sleep_until(self, engine_time: float) -> None:
        """Wait until every engine's scenario clock has passed ``engine_time``."""
        deadline = max(late for _, late in self.started.values()) + engine_time
        while (now := time.time()) < deadline:
            self.alive()
            time.sleep(min(0.5, deadline - now))

    def engine_time(self, engine: str, wall: float) -> tuple[float, float]:
        early, late = self.started[engine]
        return wall - late, wall - early


def _rules(tmp: Path) -> list[Path]:
    rules = tmp / "engine-recording.rules.yml"
    rules.write_text(dump_rules(with_window(load_engine_rules(), WINDOW)))
    # A per-job draft cost, as docs/recording-rules.md tells operators to add one.
    override = tmp / "draft-cost.rules.yml"
    override.write_text(
        dump_rules(
            {
                "groups": [
                    {
                        "name": "specmon-engine-draft-cost-overrides",
                        "rules": [
                            {
                                "record": COST_RECORD,
                                "expr": f"vector({LLAMACPP_COST})",
                                "labels": {"job": "llamacpp"},
                            }
                        ],
                    }
                ]
            }
        )
    )
    checked = run_tool(["promtool", "check", "rules", str(rules), str(override)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return [rules, override]


def _created(url: str) -> float:
    status, body, _ = get(url)
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith("vllm:spec_decode_num_drafts_created{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("the simulated vLLM page has no _created sample")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binaries("prometheus", "promtool")
    tmp = tmp_path_factory.mktemp("recording")
    procs: list[Proc] = []
    started: dict[str, tuple[float, float]] = {}
    urls: dict[str, str] = {}
    with contextlib.ExitStack() as cleanup:

        @cleanup.callback
        def stop_all() -> None:
            for proc in reversed(procs):
                proc.stop()

        for engine, extra in (
            ("vllm", []),
            ("llamacpp", []),
            ("sglang", ["--survival", "0.8,0.6,0.4", "--drafts-per-second", "500"]),
        ):
            args = ["--engine", engine, "--listen", "127.0.0.1:0", "--seed", "3", *extra]
            if engine in ENGINES:
                scenario = tmp / f"{engine}.scenario.yml"
                scenario.write_text(yaml.safe_dump(_scenario(engine)))
                args += ["--survival", ",".join(map(str, ENGINES[engine]["steady"]))]
                args += ["--scenario", str(scenario)]
            launched = time.time()
            proc, addresses = simulate(engine, tmp, args, targets=1)
            procs.append(proc)
            urls[engine] = addresses[engine]
            started[engine] = (launched, time.time())
        exact = _created(urls["vllm"])
        assert started["vllm"][0] <= exact <= started["vllm"][1]
        started["vllm"] = (exact, exact)

        config = tmp / "specmon.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": f"{int(SPECMON_INTERVAL * 1000)}ms",
                        "scrape_timeout": "400ms",
                        "windows": [WINDOW],
                        "draft_cost": DEFAULT_COST,
                    },
                    "targets": [
                        {"name": "vllm", "url": urls["vllm"]},
                        {"name": "llamacpp", "url": urls["llamacpp"], "draft_cost": LLAMACPP_COST},
                        {"name": "sglang", "url": urls["sglang"], "chain_length": SGLANG_K},
                    ],
                }
            )
        )
        specmon = cleanup.enter_context(daemon(config, tmp))

        rule_files = _rules(tmp)

        def scrape(job: str, url: str, path: str | None = None) -> dict[str, Any]:
            host = url.removeprefix("http://").split("/", 1)[0]
            out: dict[str, Any] = {"job_name": job, "static_configs": [{"targets": [host]}]}
            if path:
                out["metrics_path"] = path
            return out

        prom_dir = tmp / "prometheus"
        prom_dir.mkdir()
        prom_cfg = prom_dir / "prometheus.yml"
        prom_cfg.write_text(
            yaml.safe_dump(
                {
                    "global": {
                        "scrape_interval": INTERVAL,
                        "scrape_timeout": INTERVAL,
                        "evaluation_interval": INTERVAL,
                    },
                    "rule_files": [str(p) for p in rule_files],
                    "scrape_configs": [
                        scrape("vllm", urls["vllm"]),
                        # vLLM's OpenMetrics path: Prometheus negotiates it, names read vllm_.
                        scrape("vllm-om", urls["vllm"], "/metrics/"),
                        scrape("llamacpp", urls["llamacpp"]),
                        scrape("sglang", urls["sglang"]),
                    ],
                }
            )
        )
        base = ""
        for attempt in range(3):
            port = free_port()
            proc = Proc.start(
                "prometheus",
                [
                    "prometheus",
                    f"--config.file={prom_cfg}",
                    f"--storage.tsdb.path={prom_dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                tmp / f"prometheus-{attempt}.log",
            )
            candidate = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.popen.poll() is None:
                if http_ok(candidate + "/-/ready"):
                    base = candidate
                    break
                time.sleep(0.2)
            if base:
                procs.append(proc)
                break
            log = proc.tail()
            proc.stop()
            if "address already in use" not in log:
                raise AssertionError(f"prometheus did not become ready:\n{log}")
        assert base, "prometheus did not start"
        yield Stack(tmp, Prometheus(base), specmon, started, procs)


# --------------------------------------------------------------------------- reading figures

Figures = dict[str, float]


def specmon_figures(stack: Stack, job: Job) -> tuple[Figures, dict[str, Any] | None]:
    """specmon's figures for the job's engine (positions counted from 0, as the rules do)."""
    target = stack.specmon.targets()[job.target]
    (model,) = target["models"]
    (window,) = [w for w in model["windows"] if w["window"] == WINDOW]
    report = window["report"]
    if report is None:
        return {}, None
    figures: Figures = {}
    for key, name in (
        ("draft_acceptance_ratio", "acceptance"),
        ("mean_acceptance_length", "mean_length"),
        ("expected_speedup", "speedup"),
    ):
        if report[key] is not None:
            figures[name] = float(report[key])
    for pos in report["positions"]:
        for key in ("survival", "conditional"):
            if pos[key] is not None:
                figures[f"{key}:{pos['position'] - 1}"] = float(pos[key])
    return figures, report


_RULE_FIGURES = {
    "vllm": {
        "acceptance": "draft_acceptance:ratio_rate{w}",
        "mean_length": "acceptance_length:mean{w}",
        "speedup": "expected_speedup:ratio_rate{w}",
        "survival": "position_survival:ratio_rate{w}",
        "conditional": "position_conditional:ratio_rate{w}",
    },
    "sglang": {
        "acceptance": "spec_accept_rate:avg{w}",
        "mean_length": "spec_accept_length:avg{w}",
        "speedup": "spec_decode_expected_speedup:ratio_avg{w}",
    },
}
_RULE_FIGURES["llamacpp"] = _RULE_FIGURES["vllm"]


def rule_figures(stack: Stack, job: Job) -> tuple[Figures, float | None]:
    """The recorded figures for ``job`` as of half a second ago (so that no evaluation is
    half-written), and the time of the evaluation that produced them; ({}, None) when they
    came from different evaluations."""
    at = time.time() - 0.5
    figures: Figures = {}
    stamps: set[float] = set()
    for name, suffix in _RULE_FIGURES[job.engine].items():
        record = job.record(suffix.format(w=WINDOW))
        for series in stack.prometheus.query(f'timestamp({record}{{job="{job.job}"}})', at=at):
            stamps.add(float(series["value"][1]))
        for series in stack.prometheus.query(f'{record}{{job="{job.job}"}}', at=at):
            value = float(series["value"][1])
            position = series["metric"].get("position")
            figures[name if position is None else f"{name}:{position}"] = value
    if len(stamps) > 1:
        return {}, None
    return figures, stamps.pop() if stamps else None


def steady_tolerance(name: str, report: dict[str, Any], job: Job) -> float:
    """How far two windows of the same steady traffic can disagree, for one figure.

    Both windows hold about n drafts and differ only in the drafts at their ends: at most
    SKEW seconds at each end, e <= rate x 2 x SKEW drafts (llama.cpp: plus one request's lump at
    each end, since its counters move a request at a time). Each figure is a draft-weighted
    mean of a per-draft value v with range V (acceptance and survival: a share, V = 1; mean
    length: 1 + accepted tokens, V = k; speed-up: (1 + accepted) / (1 + c k), V = k / (1 + c k);
    conditional at position i: a share of the drafts that reached position i - 1, so n and e
    scale by the survival s_(i-1)). Swapping e of n drafts moves such a mean by
    (e / n) (mean of the swapped - mean of the rest), whose standard deviation is at most
    (V / 2) sqrt(e) / n when drafts are independent: the tolerance is Z of those. Prometheus's
    extrapolation adds nothing: every series of one engine is scaled by the same factor, which
    cancels in the ratio.
    """
    k = len(report["positions"]) or SGLANG_K
    n = float(report["drafts"])
    rate = n / WINDOW_SECONDS
    e = rate * 2 * SKEW + (2 * LUMP if job.engine == "llamacpp" else 0)
    kind = name.split(":", 1)[0]
    spread = {
        "acceptance": 1.0,
        "survival": 1.0,
        "conditional": 1.0,
        "mean_length": float(k),
        "speedup": k / (1 + job.cost * k),
    }[kind]
    if kind == "conditional":
        position = int(name.split(":", 1)[1])
        reached = 1.0 if position == 0 else report["positions"][position - 1]["survival"]
        n, e = n * reached, e * reached
    return Z * (spread / 2) * math.sqrt(e) / n


@dataclass
class Comparison:
    job: str
    phase: str
    figure: str
    rules: float
    specmon: float
    tolerance: float

    @property
    def difference(self) -> float:
        return abs(self.rules - self.specmon)


# --------------------------------------------------------------------------- the run


@dataclass
class Run:
    steady: list[Comparison]
    burst: list[Comparison]
    idle: dict[str, tuple[Figures, Figures]]
    validated_bursts: dict[str, int]


def _compare(job: Job, phase: str, rules: Figures, ours: Figures, tol: Any) -> list[Comparison]:
    assert set(rules) == set(ours), (job.job, phase, sorted(rules), sorted(ours))
    return [Comparison(job.job, phase, n, rules[n], ours[n], tol(n)) for n in sorted(rules)]


def _value_at(stack: Stack, selector: str, at: float) -> float:
    (series,) = stack.prometheus.query(selector, at=at)
    return float(series["value"][1])


@pytest.fixture(scope="module")
def run(stack: Stack) -> Run:
    counted = [j for j in JOBS if j.drafts_counter]
    steady: list[Comparison] = []
    stack.sleep_until(STEADY_AT[0])
    # Both windows must be full: Prometheus's first scrape of every engine a window ago.
    first = max(
        min(t for _, t, _ in stack.prometheus.raw_samples(f'up{{job="{j.job}"}}', 120))
        for j in JOBS
    )
    wait_until(
        "Prometheus to hold a full window",
        lambda: time.time() > first + WINDOW_SECONDS + SKEW,
        timeout=WINDOW_SECONDS + SKEW + 5,
        alive=stack.alive,
    )
    while max(stack.engine_time(e, time.time())[1] for e in ENGINES) < STEADY_AT[1]:
        for job in counted:
            rules, evaluated = rule_figures(stack, job)
            ours, report = specmon_figures(stack, job)
            assert report is not None, job
            if evaluated is None:
                continue
            steady += _compare(
                job,
                "steady",
                rules,
                ours,
                lambda name, report=report, job=job: steady_tolerance(name, report, job),
            )
        time.sleep(1.0)
    sglang = next(j for j in JOBS if j.engine == "sglang")
    ours, _ = specmon_figures(stack, sglang)
    ours.pop("speedup")  # needs spec_num_steps, which the simulated SGLang page lacks
    rules = wait_until(
        "one evaluation's SGLang figures",
        lambda: rule_figures(stack, sglang)[0],
        timeout=5,
        alive=stack.alive,
    )
    steady += _compare(sglang, "steady", rules, ours, lambda name: EXACT * abs(ours[name]))

    # The burst: the counters' values in the quiet stretches before and after it.
    stack.sleep_until(BURST_AT[0])
    quiet: dict[str, tuple[float, float]] = {}
    for job in counted:
        engine_start = sum(stack.started[job.engine]) / 2
        selector = f'{job.drafts_counter}{{job="{job.job}"}}'
        before = _value_at(stack, selector, engine_start + (STEADY_END + BURST_START) / 2)
        after = _value_at(stack, selector, engine_start + BURST_END + 4)
        assert after - before >= 1000, (job.job, before, after)
        quiet[job.job] = (before, after)
    burst: list[Comparison] = []
    validated = dict.fromkeys((j.job for j in counted), 0)
    while max(stack.engine_time(e, time.time())[1] for e in ENGINES) < BURST_AT[1]:
        for job in counted:
            before, after = quiet[job.job]
            ours, report = specmon_figures(stack, job)
            rules, evaluated = rule_figures(stack, job)
            if report is None or evaluated is None:
                continue
            # specmon's window holds exactly the burst's drafts ...
            if report["drafts"] != after - before:
                continue
            # ... and so did the raw samples behind the rule's last evaluation.
            window = f'{job.drafts_counter}{{job="{job.job}"}}[{WINDOW}]'
            low = _value_at(stack, f"min_over_time({window})", evaluated)
            high = _value_at(stack, f"max_over_time({window})", evaluated)
            if (low, high) != (before, after):
                continue
            validated[job.job] += 1
            burst += _compare(job, "burst", rules, ours, lambda name, o=ours: EXACT * abs(o[name]))
        time.sleep(0.5)

    # Idle: the window holds no drafts.
    stack.sleep_until(IDLE_AT)
    idle: dict[str, tuple[Figures, Figures]] = {}
    for job in counted:
        rules, _ = rule_figures(stack, job)
        ours, _ = specmon_figures(stack, job)
        drafts = stack.prometheus.query(
            f'{job.record("num_drafts:increase" + WINDOW)}{{job="{job.job}"}}'
        )
        assert [float(s["value"][1]) for s in drafts] == [0.0], (job.job, drafts)
        idle[job.job] = (rules, ours)

    result = Run(steady, burst, idle, validated)
    steady_ratio = {
        j.job: max((c.difference / c.tolerance for c in steady if c.job == j.job), default=None)
        for j in JOBS
    }
    burst_relative = max((c.difference / abs(c.specmon) for c in burst if c.specmon), default=None)
    summary = {
        "steady": steady_ratio,
        "burst_max_relative_difference": burst_relative,
        "validated_bursts": validated,
        "comparisons": [c.__dict__ for c in steady + burst],
    }
    (stack.tmp / "comparisons.json").write_text(json.dumps(summary, indent=2))
    sys.stdout.write(
        "\nrules vs specmon (steady: largest difference / tolerance; burst: relative):\n"
        + "".join(f"  steady {job:<9} {v}\n" for job, v in steady_ratio.items())
        + f"  burst {burst_relative} over {validated}\n"
    )
    return result


# --------------------------------------------------------------------------- tests


def test_prometheus_evaluates_every_rule(stack: Stack, run: Run) -> None:
    rules = stack.prometheus.rules()
    assert len(rules) == sum(len(g["rules"]) for g in load_engine_rules()["groups"]) + 1
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))


def test_steady_traffic_agrees_within_the_derived_tolerance(run: Run) -> None:
    jobs = {c.job for c in run.steady}
    assert jobs == {j.job for j in JOBS}
    figures = {(c.job, c.figure.split(":", 1)[0]) for c in run.steady}
    for job in JOBS:
        kinds = {"acceptance", "mean_length"}
        if job.engine != "sglang":
            kinds |= {"speedup", "survival", "conditional"}
        assert {(job.job, kind) for kind in kinds} <= figures, job.job
    for c in run.steady:
        assert c.difference <= c.tolerance, c
    # The tolerance is tight enough to matter: well below the gap between adjacent positions'
    # survival (an off-by-one position) and the speed-up change a wrong draft cost makes.
    for c in run.steady:
        if c.figure.startswith("survival"):
            assert c.tolerance < 0.05, c


def test_the_burst_agrees_exactly(run: Run) -> None:
    assert all(count >= 2 for count in run.validated_bursts.values()), run.validated_bursts
    for c in run.burst:
        assert c.difference <= c.tolerance, c
    assert {c.job for c in run.burst} == {j.job for j in JOBS if j.drafts_counter}


def test_idle_window_has_no_ratios_on_either_side(run: Run) -> None:
    for job, (rules, ours) in run.idle.items():
        assert rules == {}, (job, rules)
        assert ours == {}, (job, ours)
