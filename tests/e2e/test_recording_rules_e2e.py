"""The engine recording rules in a real Prometheus equal specmon's own figures on the same data.

Debian's Prometheus scrapes simulated engines directly (``specmon simulate``: vLLM on
``/metrics`` as job ``vllm`` and on ``/metrics/`` with OpenMetrics, where sample names read
``vllm_``, as job ``vllm-om``; llama.cpp; today's SGLang on ``/metrics`` and through
sgl-router's ``/engine_metrics`` (``sglang_`` names, a ``worker_addr`` label); TensorRT-LLM on
``/prometheus/metrics`` with its per-position counters; TGI with the histogram and with the
summary) and evaluates the shipped ``engine-recording.rules.yml`` with its window rewritten from
5m to 20s (:func:`tests.rules.engine_rules.with_window`) plus a per-job draft cost for
llama.cpp written as docs/recording-rules.md says. A specmon daemon scrapes the same engines
with a 20s window and the same draft costs. Prometheus scrapes and evaluates every second,
specmon every 500 ms. The SGLang, TensorRT-LLM and TGI pages are written from those engines'
source (specmon/sim/templates/README.md); so are the rules: this checks that both read them
the same way.

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

SGLang's gauges (the engine's own last-interval figures, which the simulator sets to the
configured survival's expectation) are checked against that expectation in the steady phase:
specmon reads the counters instead, so there is nothing of specmon's to compare them with.
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
    simulate_all,
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

STEADY = {"at": "0s", "drafts_per_second": 500}
STEADY_END, BURST_START, BURST_END = 45.0, 55.0, 60.0
STEADY_AT = (31.0, 42.0)
BURST_AT = (67.0, 72.0)
IDLE_AT = 82.0
#: Engines whose counters move a request at a time deliver a request's drafts as one lump
#: (20-60 drafts in the simulator): llama.cpp, SGLang's tokenizer counters, TensorRT-LLM's
#: per-position counters.
LUMP = 60

#: Simulated engine -> its survival in the steady phase and in the burst.
ENGINES: dict[str, dict[str, list[float]]] = {
    "vllm": {"steady": [0.85, 0.6, 0.35], "burst": [0.7, 0.4, 0.2]},
    "llamacpp": {"steady": [0.9, 0.7, 0.5, 0.3], "burst": [0.8, 0.5, 0.3, 0.1]},
    "sglang": {"steady": [0.8, 0.6, 0.4], "burst": [0.6, 0.3, 0.1]},
    "sglang-router": {"steady": [0.75, 0.5, 0.25], "burst": [0.5, 0.3, 0.1]},
    "trtllm": {"steady": [0.85, 0.7, 0.55, 0.4], "burst": [0.6, 0.4, 0.2, 0.1]},
    "tgi-histogram": {"steady": [0.8, 0.55, 0.3], "burst": [0.65, 0.35, 0.15]},
    "tgi": {"steady": [0.7, 0.5, 0.3], "burst": [0.5, 0.2, 0.1]},
}
LUMPY = {"llamacpp", "sglang", "sglang-router", "trtllm"}
#: Where each simulated engine serves its Prometheus page (as the real ones do).
PATHS = {"trtllm": "/prometheus/metrics", "sglang-router": "/engine_metrics"}

ALL_FIGURES = ("acceptance", "mean_length", "speedup", "survival", "conditional")


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
    target: str  # the simulated engine, also specmon's target name
    engine: str  # the rules' engine: vllm | llamacpp | sglang | trtllm | tgi
    level: str  # the rules' level prefix (without _position)
    drafts: str  # a selector of the engine's raw drafts counter (one series per job)
    cost: float
    #: The figures the rules give for this engine (specmon may give more, from assumptions
    #: or a configured chain length).
    figures: tuple[str, ...] = ALL_FIGURES
    path: str | None = None  # scrape path, when not /metrics

    def record(self, figure: str) -> str:
        position = "_position" if figure.startswith("position_") else ""
        return f"{self.level}{position}:{self.engine}_spec_decode_{figure}"

    @property
    def drafts_record(self) -> str:
        if self.engine == "sglang":
            return f"{self.level}:sglang_spec_verify_calls:increase{WINDOW}"
        return self.record(f"num_drafts:increase{WINDOW}")

    def drafts_selector(self) -> str:
        name, _, rest = self.drafts.partition("{")
        matchers = [f'job="{self.job}"'] + ([rest.rstrip("}")] if rest else [])
        return f"{name}{{{', '.join(matchers)}}}"

    @property
    def k(self) -> int:
        return len(ENGINES[self.target]["steady"])


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
        path="/metrics/",
    ),
    Job(
        "llamacpp",
        "llamacpp",
        "llamacpp",
        "instance",
        "llamacpp:spec_decode_num_drafts_total",
        LLAMACPP_COST,
    ),
    # No per-position data: acceptance (assuming k per step), mean length and speed-up.
    Job(
        "sglang",
        "sglang",
        "sglang",
        "instance_model_name",
        "sglang:spec_verify_calls_total",
        DEFAULT_COST,
        figures=("acceptance", "mean_length", "speedup"),
    ),
    Job(
        "sglang-router",
        "sglang-router",
        "sglang",
        "instance_model_name",
        "sglang_spec_verify_calls_total",
        DEFAULT_COST,
        figures=("acceptance", "mean_length", "speedup"),
        path=PATHS["sglang-router"],
    ),
    Job(
        "trtllm",
        "trtllm",
        "trtllm",
        "instance_model_name",
        'trtllm_spec_decode_drafted_tokens_total{token_position="0"}',
        DEFAULT_COST,
        path=PATHS["trtllm"],
    ),
    Job(
        "tgi-histogram",
        "tgi-histogram",
        "tgi",
        "instance",
        "tgi_request_skipped_tokens_count",
        DEFAULT_COST,
    ),
    # A summary: the mean acceptance length only (no k on the page).
    Job(
        "tgi-summary",
        "tgi",
        "tgi",
        "instance",
        "tgi_request_skipped_tokens_count",
        DEFAULT_COST,
        figures=("mean_length",),
    ),
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
        """(earliest, latest) time on ``engine``'s scenario clock at Unix time ``wall``."""
        early, late = self.started[engine]
        return wall - late, wall - early

    def within(self, job: Job, span: tuple[float, float]) -> bool:
        """Whether the job's engine clock is inside ``span`` now, whatever its start."""
        low, high = self.engine_time(job.target, time.time())
        return span[0] <= low and high <= span[1]

    def past(self, span: tuple[float, float]) -> bool:
        """Whether every engine's clock has passed the end of ``span``."""
        return all(self.engine_time(e, time.time())[0] > span[1] for e in self.started)


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
    """When the simulated engine's scenario clock started, to the second: every simulated
    engine answers /v1/models with its start (Unix seconds, rounded down)."""
    base = url.split("/", 3)
    status, body, _ = get("/".join(base[:3]) + "/v1/models")
    assert status == 200
    (model,) = json.loads(body)["data"]
    return float(model["created"])


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

        runs: dict[str, tuple[list[str], int]] = {}
        for seed, engine in enumerate(ENGINES, start=3):
            scenario = tmp / f"{engine}.scenario.yml"
            scenario.write_text(yaml.safe_dump(_scenario(engine)))
            args = ["--engine", engine, "--listen", "127.0.0.1:0", "--seed", str(seed)]
            args += ["--survival", ",".join(map(str, ENGINES[engine]["steady"]))]
            args += ["--scenario", str(scenario)]
            runs[engine] = (args, 1)
        # Started together, so that their scenario clocks are close.
        launched = time.time()
        for engine, (proc, addresses) in simulate_all(tmp, runs).items():
            procs.append(proc)
            urls[engine] = addresses[engine]
        ready = time.time()
        for engine, url in urls.items():
            created = _created(url)
            assert math.floor(launched) <= created <= ready, (engine, launched, created, ready)
            started[engine] = (max(launched, created), min(ready, created + 1))

        config = tmp / "specmon.yml"
        costs = {"llamacpp": LLAMACPP_COST}
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
                        {"name": engine, "url": url}
                        | ({"draft_cost": costs[engine]} if engine in costs else {})
                        for engine, url in urls.items()
                    ],
                }
            )
        )
        specmon = cleanup.enter_context(daemon(config, tmp))

        rule_files = _rules(tmp)

        def scrape(job: Job) -> dict[str, Any]:
            host = urls[job.target].removeprefix("http://").split("/", 1)[0]
            out: dict[str, Any] = {"job_name": job.job, "static_configs": [{"targets": [host]}]}
            if job.path:
                out["metrics_path"] = job.path
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
                    # vLLM's OpenMetrics path (job vllm-om): Prometheus negotiates it, names
                    # read vllm_.
                    "scrape_configs": [scrape(job) for job in JOBS],
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
    """specmon's figures for the job's engine, those the rules give for it (positions counted
    from 0, as the rules do)."""
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
        if report[key] is not None and name in job.figures:
            figures[name] = float(report[key])
    for pos in report["positions"]:
        for key in ("survival", "conditional"):
            if pos[key] is not None and key in job.figures:
                figures[f"{key}:{pos['position'] - 1}"] = float(pos[key])
    return figures, report


_RULE_FIGURES = {
    "acceptance": "draft_acceptance:ratio_rate{w}",
    "mean_length": "acceptance_length:mean{w}",
    "speedup": "expected_speedup:ratio_rate{w}",
    "survival": "position_survival:ratio_rate{w}",
    "conditional": "position_conditional:ratio_rate{w}",
}


def rule_figures(stack: Stack, job: Job) -> tuple[Figures, float | None]:
    """The recorded figures for ``job`` as of half a second ago (so that no evaluation is
    half-written), and the time of the evaluation that produced them; ({}, None) when they
    came from different evaluations."""
    at = time.time() - 0.5
    figures: Figures = {}
    stamps: set[float] = set()
    for name, suffix in _RULE_FIGURES.items():
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
    SKEW seconds at each end, e <= rate x 2 x SKEW drafts (engines whose counters move a request
    at a time: plus one request's lump at each end). Each figure is a draft-weighted mean of a
    per-draft value v with range V (acceptance and survival: a share, V = 1; mean length:
    1 + accepted tokens, V = k; speed-up: (1 + accepted) / (1 + c k), V = k / (1 + c k);
    conditional at position i: a share of the drafts that reached position i - 1, so n and e
    scale by the survival s_(i-1)). Swapping e of n drafts moves such a mean by
    (e / n) (mean of the swapped - mean of the rest), whose standard deviation is at most
    (V / 2) sqrt(e) / n when drafts are independent: the tolerance is Z of those. Prometheus's
    extrapolation adds nothing: every series of one engine is scaled by the same factor, which
    cancels in the ratio.
    """
    k = job.k
    n = float(report["drafts"])
    rate = n / WINDOW_SECONDS
    e = rate * 2 * SKEW + (2 * LUMP if job.target in LUMPY else 0)
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
    #: SGLang's gauge figures against the simulated engine's (job, figure, rule, expected).
    gauges: list[tuple[str, str, float, float]]


def _compare(job: Job, phase: str, rules: Figures, ours: Figures, tol: Any) -> list[Comparison]:
    assert set(rules) == set(ours), (job.job, phase, sorted(rules), sorted(ours))
    return [Comparison(job.job, phase, n, rules[n], ours[n], tol(n)) for n in sorted(rules)]


def _value_at(stack: Stack, selector: str, at: float) -> float:
    (series,) = stack.prometheus.query(selector, at=at)
    return float(series["value"][1])


def _sglang_gauges(stack: Stack) -> list[tuple[str, str, float, float]]:
    """The gauge rules of both SGLang jobs, against what the simulated gauges publish in the
    steady phase: length 1 + sum(s), rate sum(s) / k, k, and the speed-up from them."""
    out = []
    for job in JOBS:
        if job.engine != "sglang":
            continue
        steady = ENGINES[job.target]["steady"]
        length, k = 1 + sum(steady), len(steady)
        expected = {
            "spec_accept_length:avg": length,
            "spec_accept_rate:avg": sum(steady) / k,
            "spec_num_steps:avg": float(k),
            "spec_decode_expected_speedup:ratio_avg": length / (1 + job.cost * k),
        }
        for figure, value in expected.items():
            record = f"{job.level}:sglang_{figure}{WINDOW}"
            (series,) = stack.prometheus.query(f'{record}{{job="{job.job}"}}')
            out.append((job.job, figure, float(series["value"][1]), value))
    return out


@pytest.fixture(scope="module")
def run(stack: Stack) -> Run:
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
    gauges = _sglang_gauges(stack)
    while not stack.past(STEADY_AT):
        for job in JOBS:
            if not stack.within(job, STEADY_AT):
                continue
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

    # The burst: the counters' values in the quiet stretches before and after it.
    stack.sleep_until(BURST_AT[0])
    quiet: dict[str, tuple[float, float]] = {}
    for job in JOBS:
        engine_start = sum(stack.started[job.target]) / 2
        selector = job.drafts_selector()
        before = _value_at(stack, selector, engine_start + (STEADY_END + BURST_START) / 2)
        after = _value_at(stack, selector, engine_start + BURST_END + 4)
        assert after - before >= 1000, (job.job, before, after)
        quiet[job.job] = (before, after)
    burst: list[Comparison] = []
    validated = dict.fromkeys((j.job for j in JOBS), 0)
    while not stack.past(BURST_AT):
        for job in JOBS:
            if not stack.within(job, BURST_AT):
                continue
            before, after = quiet[job.job]
            ours, report = specmon_figures(stack, job)
            rules, evaluated = rule_figures(stack, job)
            if report is None or evaluated is None:
                continue
            # specmon's window holds exactly the burst's drafts ...
            if report["drafts"] != after - before:
                continue
            # ... and so did the raw samples behind the rule's last evaluation.
            window = f"{job.drafts_selector()}[{WINDOW}]"
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
    for job in JOBS:
        rules, _ = rule_figures(stack, job)
        ours, _ = specmon_figures(stack, job)
        drafts = stack.prometheus.query(f'{job.drafts_record}{{job="{job.job}"}}')
        assert [float(s["value"][1]) for s in drafts] == [0.0], (job.job, drafts)
        idle[job.job] = (rules, ours)

    result = Run(steady, burst, idle, validated, gauges)
    steady_ratio = {
        j.job: max((c.difference / c.tolerance for c in steady if c.job == j.job), default=None)
        for j in JOBS
    }
    burst_relative = max((c.difference / abs(c.specmon) for c in burst if c.specmon), default=None)
    summary = {
        "steady": steady_ratio,
        "steady_comparisons": {j.job: sum(c.job == j.job for c in steady) for j in JOBS},
        "burst_max_relative_difference": burst_relative,
        "validated_bursts": validated,
        "sglang_gauges": gauges,
        "comparisons": [c.__dict__ for c in steady + burst],
    }
    (stack.tmp / "comparisons.json").write_text(json.dumps(summary, indent=2))
    sys.stdout.write(
        "\nrules vs specmon (steady: largest difference / tolerance; burst: relative):\n"
        + "".join(f"  steady {job:<14} {v}\n" for job, v in steady_ratio.items())
        + f"  burst {burst_relative} over {validated}\n"
        + "".join(f"  gauge {j} {f}: {r!r} (engine {e!r})\n" for j, f, r, e in gauges)
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
        assert {(job.job, kind) for kind in job.figures} <= figures, job.job
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
    assert {c.job for c in run.burst} == {j.job for j in JOBS}
    figures = {(c.job, c.figure.split(":", 1)[0]) for c in run.burst}
    for job in JOBS:
        assert {(job.job, kind) for kind in job.figures} <= figures, job.job


def test_idle_window_has_no_ratios_on_either_side(run: Run) -> None:
    for job, (rules, ours) in run.idle.items():
        assert rules == {}, (job, rules)
        assert ours == {}, (job, ours)


def test_sglang_gauge_rules_read_the_engines_gauges(run: Run) -> None:
    assert len(run.gauges) == 8
    for job, figure, recorded, engine in run.gauges:
        assert math.isclose(recorded, engine, rel_tol=EXACT), (job, figure, recorded, engine)
