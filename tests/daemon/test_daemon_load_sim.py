"""The daemon finds a crossover known by construction: two
simulated vLLM engines under the same load model (specmon.sim.load_model) and the same
scenario of rising ``requests_running``, one speculating (k = 4, survival 0.9/0.7/0.5/0.3) and
its twin without speculation, watched by ``specmon run`` (a subprocess, real HTTP) with
``baseline:`` the twin.

The load model is the demo's with every time divided by ten (0.8 ms to stream the weights,
0.05 ms of arithmetic per row, 0.1 ms fixed, 0.06 ms per draft step), so that a few seconds
hold hundreds of engine steps per level; the crossover does not change (every step time
scales alike): speculation pays while 3.4 T(n, 0) > T(n, 4), i.e. below n = 10.88. The
daemon sees the engines only through their pages, buckets its scrape intervals by the
concurrency the counters give, compares bucket with bucket, and must put the crossover within
one bucket of the truth; each bucket's measured c must be the model's c at that concurrency.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specmon.load import DEFAULT_SCHEME
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL, LoadModel
from specmon.sim.pages import PageKind
from specmon.sim.scenario import parse_scenario
from specmon.sim.server import make_target
from tests.support.daemon import Exported, daemon
from tests.support.fake_engines import running

SURVIVAL = (0.9, 0.7, 0.5, 0.3)
K = len(SURVIVAL)
MODEL = LoadModel(
    weights_seconds=DEMO_LOAD_MODEL.weights_seconds / 10,
    token_seconds=DEMO_LOAD_MODEL.token_seconds / 10,
    fixed_seconds=DEMO_LOAD_MODEL.fixed_seconds / 10,
    draft_fixed_seconds=DEMO_LOAD_MODEL.draft_fixed_seconds / 10,
)
LEVELS = (1, 2, 4, 8, 16, 32)
#: Seconds per level. At 32 sequences the speculative step takes T(32, 4) = 8.34 ms: 3 s give
#: 360 engine steps (the thresholds ask 200 per bucket).
PHASE = 3.0
#: Scrapes per level: 30, of which one straddles the change of level: its concurrency is a
#: mixture of the two levels', and it lands in one of their buckets with up to one interval of
#: the other level's steps (at most about 1/30 of the bucket's steps, see the tolerances).
INTERVAL = 0.1


def scenario_text() -> str:
    phases = "\n".join(
        f"  - at: {i * PHASE:g}s\n    requests_running: {n}" for i, n in enumerate(LEVELS)
    )
    # Repeating: a daemon that starts late on a loaded machine (its first scrape after the
    # first levels) meets them again one period later instead of waiting for them forever.
    return f"phases:\n{phases}\nrepeat: true\nperiod: {PHASE * len(LEVELS):g}s\n"


def _pair_config(tmp_path: Path, *, spec: tuple[str, str], twin: tuple[str, str]) -> Path:
    """specmon's config for a speculating target (name, URL) compared with its twin."""
    config = tmp_path / "specmon.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {INTERVAL * 1000:g}ms\n"
        f"  scrape_timeout: {INTERVAL * 1000:g}ms\n"
        "  windows: [1m]\n"
        "targets:\n"
        f"  - {{name: {twin[0]}, url: '{twin[1]}'}}\n"
        f"  - {{name: {spec[0]}, url: '{spec[1]}', baseline: {twin[0]}}}\n"
    )
    return config


def test_the_daemon_finds_the_crossover_within_one_bucket(tmp_path: Path) -> None:
    truth = MODEL.crossover(K, 1 + sum(SURVIVAL))
    assert truth is not None
    assert truth == pytest.approx(DEMO_LOAD_MODEL.crossover(K, 1 + sum(SURVIVAL)))
    assert truth == pytest.approx((3.4 * 0.9 - 0.1 - 0.24) / 0.25)  # 10.88, by hand

    def target(name: str, speculation: bool) -> Any:
        settings = SimSettings(
            survival=SURVIVAL, requests_running=LEVELS[0], speculation=speculation,
            load_model=MODEL,
        )  # fmt: skip
        return make_target(
            name=name, kind=PageKind.VLLM, settings=settings, model="m",
            scenario=parse_scenario(scenario_text()), seed=7 if speculation else 8,
        )  # fmt: skip

    pair = [target("spec", True), target("twin", False)]
    with running(pair) as engines:
        config = _pair_config(tmp_path, spec=("spec", engines.url("spec")),
                              twin=("twin", engines.url("twin")))  # fmt: skip
        with daemon(config, tmp_path) as d:

            def finished() -> dict[str, Any] | None:
                models = d.targets()["spec"]["models"]
                if not models:  # before the first scrape (a slow start under load)
                    return None
                window = models[0]["windows"][0]
                answer = window["verdict"]
                if answer is None:
                    return None
                measured = [b for b in answer["per_load"] if b.get("draft_cost") is not None]
                return window if len(measured) == len(LEVELS) else None

            def settled() -> tuple[dict[str, Any], Exported] | None:
                """The window and /metrics of one state: the API the same before and after
                the page (a scrape in between changes both; ask again)."""
                before = finished()
                if before is None:
                    return None
                page = d.metrics()
                return (before, page) if finished() == before else None

            window, metrics = d.wait_for(
                settled, timeout=3 * PHASE * len(LEVELS) + 15, interval=0.5
            )

    answer, report = window["verdict"], window["report"]
    assert answer["against"] == "twin" and answer["basis"] == "twin"
    buckets = {b["label"]: b for b in answer["per_load"] if b.get("draft_cost") is not None}
    assert sorted(buckets, key=int) == [str(n) for n in LEVELS]
    tokens_per_step = 1 + report["accepted_tokens"] / report["drafts"]
    assert tokens_per_step == pytest.approx(1 + sum(SURVIVAL), abs=0.05)
    for n in LEVELS:
        bucket = buckets[str(n)]
        # The bucket's concurrency is the level's, but for the interval that straddled the
        # change into or out of it.
        assert bucket["concurrency"] == pytest.approx(n, rel=0.12)
        # c and the realized speed-up are the model's at that concurrency. A straddling
        # interval mixes up to 1/30 of a neighbouring level's steps into the bucket; between
        # 4 (c = 0.12) and 8 (c = 0.40) that moves c by up to about 0.01 (measured with 12
        # scrapes per level: 0.135 instead of 0.122). Under a loaded machine (a clean-clone
        # CI run, three tiers on two cores) scrapes drift and one run measured 0.437 for 0.400
        # at n = 8: the same 12 % the concurrency above is allowed for the same straddle.
        # The straddling interval can be any level's: the cycle wraps from 32 (c = 0.98) to 1
        # (c = 0.07), and that interval's mean concurrency lands it in bucket 1 or 2 with up
        # to 1/30 of its steps at 32: c moved by up to 0.03 (a loaded run of the fast tier
        # measured 0.090 for 0.067). The bound: 1/30 of the farthest level's difference.
        # c is a difference of step times, c = (r - 1) / d for the step-time ratio r: it carries
        # r / (r - 1) times r's error (1.6 at n = 8), and a clean-clone CI run of 0d7504b (three
        # tiers on two cores) measured 0.318 for 0.400 at n = 8 (-20 %): 25 % when loaded.
        straddle = max(abs(MODEL.draft_cost(m, K) - MODEL.draft_cost(n, K)) for m in LEVELS) / 30
        assert bucket["draft_cost"] == pytest.approx(
            MODEL.draft_cost(n, K), rel=0.25, abs=max(0.015, straddle)
        ), (n, bucket)
        # The speed-up carries the same straddle: a clean-clone CI run of c3e6a02 (three tiers
        # on two cores, scrapes late, so fewer intervals a level and a larger share for the
        # straddling one) read 0.790 for 0.704 at n = 16 (+12 %): 15 % when loaded.
        assert bucket["speedup"] == pytest.approx(MODEL.speedup(n, K, tokens_per_step), rel=0.15)
        pays = MODEL.speedup(n, K, 1 + sum(SURVIVAL)) > 1
        assert (bucket["speedup"] > 1) is pays, (n, bucket)
        # The best k per load at each bucket's own c: off (0) where speculation costs time.
        assert (bucket["best_chain_length"] == 0) is not pays, (n, bucket)

    found = answer["crossover"]
    assert found is not None
    exported = metrics.value(
        "specmon_crossover_concurrency", target="spec", window="1m", baseline="twin"
    )
    assert exported == pytest.approx(found["concurrency"])
    # Between the last bucket that paid (8) and the first that did not (16), and within one
    # bucket of the truth (10.88, in bucket "8" = [6, 12)).
    assert found["pays_up_to"] == pytest.approx(buckets["8"]["concurrency"])
    assert found["costs_from"] == pytest.approx(buckets["16"]["concurrency"])
    true_bucket = DEFAULT_SCHEME.bucket_of(truth).index
    assert abs(DEFAULT_SCHEME.bucket_of(found["concurrency"]).index - true_bucket) <= 1
    # The daemon's crossover is read off the cost curve (the shape fixed + slope max(knee, n)
    # fitted to each side's buckets), not a straight line between the buckets' speed-ups
    # (8: 1.31x, 16: 0.71x: 12.1): within 0.3 of the truth, which its range holds.
    s8, s16 = MODEL.speedup(8, K, tokens_per_step), MODEL.speedup(16, K, tokens_per_step)
    straight = 8 + (s8 - 1) * 8 / (s8 - s16)
    assert found["concurrency"] == pytest.approx(truth, abs=0.3)
    assert abs(found["concurrency"] - truth) < abs(straight - truth) / 3
    assert found["low"] <= truth <= found["high"]


#: The TGI pair's two levels: speculation pays at 2 requests (2.68x) and costs time at 32
#: (0.69x). At 32 the speculative step takes T(32, 4) = 8.34 ms: 3 s give 360 decode steps.
TGI_LEVELS = (2, 32)


def test_the_daemon_realizes_a_tgi_pairs_speedup(tmp_path: Path) -> None:
    """The same, for a TGI pair (tgi-histogram pages): the daemon reads concurrency and step
    time from the router's decode-call timing and gives each load's realized speed-up within
    5 % of the constructed truth K T(n, 0) / T(n, k)."""
    levels = "\n".join(
        f"  - at: {i * PHASE:g}s\n    requests_running: {n}" for i, n in enumerate(TGI_LEVELS)
    )
    period = PHASE * len(TGI_LEVELS)  # repeating, as above

    def target(name: str, speculation: bool) -> Any:
        settings = SimSettings(
            survival=SURVIVAL, requests_running=TGI_LEVELS[0], speculation=speculation,
            load_model=MODEL,
        )  # fmt: skip
        return make_target(
            name=name, kind=PageKind.TGI_HISTOGRAM, settings=settings,
            scenario=parse_scenario(f"phases:\n{levels}\nrepeat: true\nperiod: {period:g}s\n"),
            seed=7 if speculation else 8,
        )  # fmt: skip

    pair = [target("tgi-spec", True), target("tgi-twin", False)]
    with running(pair) as engines:
        config = _pair_config(tmp_path, spec=("tgi-spec", engines.url("tgi-spec")),
                              twin=("tgi-twin", engines.url("tgi-twin")))  # fmt: skip
        with daemon(config, tmp_path) as d:

            def finished() -> dict[str, Any] | None:
                models = d.targets()["tgi-spec"]["models"]
                if not models:
                    return None
                window = models[0]["windows"][0]
                answer = window["verdict"]
                if answer is None:
                    return None
                measured = [b for b in answer["per_load"] if b.get("speedup") is not None]
                return window if len(measured) == len(TGI_LEVELS) else None

            window = d.wait_for(finished, timeout=3 * PHASE * len(TGI_LEVELS) + 15, interval=0.5)

    answer, report = window["verdict"], window["report"]
    assert answer["against"] == "tgi-twin"
    tokens_per_step = 1 + report["accepted_tokens"] / report["drafts"]
    # The drafts include the prefill observations TGI makes (none here: background load).
    assert tokens_per_step == pytest.approx(1 + sum(SURVIVAL), abs=0.05)
    buckets = [b for b in answer["per_load"] if b.get("speedup") is not None]
    for n, bucket in zip(TGI_LEVELS, sorted(buckets, key=lambda b: b["concurrency"]), strict=True):
        assert bucket["concurrency"] == pytest.approx(n, rel=0.12)
        truth = MODEL.speedup(n, K, 1 + sum(SURVIVAL))
        # The straddling interval mixes up to 1/30 of the other level's steps into a bucket.
        assert bucket["speedup"] == pytest.approx(truth, rel=0.05), (n, bucket)
        assert (bucket["speedup"] > 1) is (truth > 1)
        # TGI counts no drafted tokens: c assumes k per draft, and each load has its k.
        assert bucket["draft_cost"] is not None or truth > 1, bucket
        assert bucket["best_chain_length"] is not None and (bucket["best_chain_length"] == 0) is (
            truth < 1
        ), bucket
