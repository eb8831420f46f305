"""Target states fed by hand, in-process: a fleet of every kind of target the daemon can show,
for the golden /metrics page, the status page and the benchmarks. Deterministic: no clock, no
randomness, no I/O."""

from __future__ import annotations

from dataclasses import replace

from specmon.daemon.config import TargetConfig
from specmon.daemon.epoch_curves import ChangeView
from specmon.daemon.target import TargetState, TargetView, Twins
from specmon.engines import (
    Context,
    Engine,
    GaugeScope,
    ModelReading,
    PageReading,
    SpecCounters,
    SpecGauges,
)
from specmon.engines.classes import ClassCounts, ClassReading
from specmon.load import PROFILE_FORMAT, PROFILE_VERSION, Profile, profile_from_json
from specmon.load.matched import MatchedBucket
from specmon.sources import ScrapeResult

WINDOWS = (60.0, 300.0)
RETENTION = 310.0


def counters(
    drafts: int, draft_tokens: int, per_pos: tuple[int, ...], *, accepted: int | None = None
) -> SpecCounters:
    return SpecCounters(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=sum(per_pos) if accepted is None else accepted,
        accepted_per_position=per_pos,
    )


def page(
    engine: Engine | None,
    *models: ModelReading,
    malformed: int = 0,
    classes: ClassReading | None = None,
) -> PageReading:
    return PageReading(engine=engine, models=models, malformed=malformed, classes=classes)


def tapped(**classes: tuple[int, int, int, int]) -> ClassReading:
    """A tap's page: per class (requests, accepted, drafted, steps)."""
    return ClassReading(
        source="tap",
        classes=tuple(
            (name, ClassCounts(requests=r, accepted_tokens=a, draft_tokens=d, steps=s))
            for name, (r, a, d, s) in sorted(classes.items())
        ),
        engine="vllm",
    )


def state(name: str, *, fleet: Twins | None = None, **config: object) -> TargetState:
    """A target state; in ``fleet`` it finds its ``baseline`` twin (and is found)."""
    cfg = TargetConfig(name=name, url=f"http://127.0.0.1:9/{name}/metrics?token=x", **config)  # type: ignore[arg-type]
    twins = fleet if fleet is not None else Twins()
    made = TargetState(cfg, windows=WINDOWS, retention=RETENTION, twins=twins)
    twins.put(made)
    return made


def load_pair(
    phases: tuple[tuple[int, float, float, float], ...],
) -> tuple[list[PageReading], list[PageReading]]:
    """Pages of a speculating vLLM target and its twin without speculation, 5 s apart.

    Each phase is (intervals, concurrency, twin step seconds, speculative step seconds); every
    interval the twin runs 250 engine steps and the target 200 (at most 6 s of engine time
    in the 5 s: specmon.load.laws), each request-step of the target drafting 3 tokens and
    keeping 1.5 (survival 0.75 / 0.5 / 0.25).
    """
    spec: list[PageReading] = []
    base: list[PageReading] = []
    s = {"steps": 0, "itl": 0, "first": 0, "gen": 0, "d": 0, "p0": 0, "p1": 0, "p2": 0}
    b = {"steps": 0, "itl": 0, "first": 0, "gen": 0}
    seconds = {"s": 0.0, "b": 0.0}
    for intervals, concurrency, base_step, spec_step in phases:
        for _ in range(intervals):
            for side, steps in ((b, 250), (s, 200)):
                requests = round(steps * concurrency)
                side["steps"] += steps
                side["itl"] += requests
                side["first"] += requests // 100
                key = "s" if side is s else "b"
                seconds[key] += requests * (spec_step if side is s else base_step)
                side["gen"] += requests + requests // 100
            drafts = round(200 * concurrency)
            s["d"] += drafts
            s["p0"] += drafts * 3 // 4
            s["p1"] += drafts // 2
            s["p2"] += drafts // 4
            s["gen"] += drafts * 3 // 4 + drafts // 2 + drafts // 4
            spec.append(page(Engine.VLLM, ModelReading(
                "qwen",
                counters(s["d"], 3 * s["d"], (s["p0"], s["p1"], s["p2"])),
                context=Context(
                    requests_running=concurrency, generation_tokens=s["gen"],
                    inter_token_latency_sum_seconds=seconds["s"], inter_token_latency_count=s["itl"],
                    first_token_count=s["first"], engine_steps=s["steps"],
                ),
            )))  # fmt: skip
            base.append(
                PageReading(
                    engine=Engine.VLLM,
                    models=(),
                    plain_models=(
                        ModelReading(
                            "qwen",
                            context=Context(
                                requests_running=concurrency,
                                generation_tokens=b["gen"],
                                inter_token_latency_sum_seconds=seconds["b"],
                                inter_token_latency_count=b["itl"],
                                first_token_count=b["first"],
                                engine_steps=b["steps"],
                            ),
                        ),
                    ),
                )
            )
    return spec, base


def small_profile() -> Profile:
    """A two-level profile: the baseline's speed at concurrency 1 and 8."""

    def side(step: float, tpot: float, concurrency: float) -> dict[str, object]:
        return {"time_per_output_token_seconds": tpot, "step_seconds": step,
                "tokens_per_second": None, "concurrency": concurrency, "engine_steps": 10000}  # fmt: skip

    levels = [
        {"concurrency": n, "baseline": side(step, step, float(n)),
         "speculative": side(step * 1.2, step * 1.2 / 2.5, float(n)),
         "tokens_per_step": 2.5, "drafted_tokens_per_step": 3.0,
         "acceptance": {"drafts": 1000, "draft_tokens": 3000, "accepted_tokens": 1500,
                        "accepted_per_position": [750, 500, 250]},
         "speed_ratio": 2.0, "draft_cost": {"value": 0.0667, "from_step_times": 0.0667}}
        for n, step in ((1, 0.008), (8, 0.011))
    ]  # fmt: skip
    return profile_from_json(
        {"format": PROFILE_FORMAT, "version": PROFILE_VERSION, "levels": levels}
    )


def feed(target: TargetState, readings: list[PageReading], *, step: float = 5.0) -> TargetState:
    for i, reading in enumerate(readings):
        feed_one(target, reading, i, step=step)
    return target


def feed_one(target: TargetState, reading: PageReading, i: int, *, step: float = 5.0) -> None:
    target.observe(reading, mono=i * step, wall=1_700_000_000.0 + i * step, duration=0.004)


def fleet() -> list[TargetState]:
    """Every kind of target: two vLLM models (with a tap's classes beside them), llama.cpp with constant labels and a configured
    chain length, a target whose window has no drafts, SGLang gauges, vLLM V0 lifetime gauges,
    a page without speculation, a down target and one never scraped."""
    vllm = feed(
        state("vllm-a", draft_cost=0.12),
        [
            page(
                Engine.VLLM,
                ModelReading(
                    "qwen",
                    counters(1000, 3000, (700, 400, 200)),
                    context=Context(requests_running=3.0, generation_tokens=5000),
                ),
                ModelReading("llama", counters(10, 40, (9, 8, 6, 2))),
                classes=tapped(code=(10, 400, 1200, 400), chat=(20, 200, 1500, 500)),
            ),
            page(
                Engine.VLLM,
                ModelReading(
                    "qwen",
                    counters(1600, 4800, (1120, 640, 320)),
                    context=Context(requests_running=5.0, generation_tokens=8000),
                ),
                ModelReading("llama", counters(30, 120, (25, 20, 14, 5))),
                classes=tapped(code=(20, 700, 2100, 700), chat=(35, 420, 2400, 800)),
            ),
            page(
                Engine.VLLM,
                ModelReading(
                    "qwen",
                    counters(2000, 6000, (1300, 760, 380)),
                    context=Context(requests_running=4.0, generation_tokens=9500),
                ),
                ModelReading("llama", counters(70, 280, (60, 41, 30, 12))),
                malformed=2,
                classes=tapped(code=(25, 900, 2700, 900), chat=(40, 480, 2900, 960)),
            ),
        ],
    )
    llama = feed(
        state("llama-b", chain_length=4, labels={"cluster": "eu-1", "team": "search"}),
        [
            page(Engine.LLAMACPP, ModelReading("default", counters(50, 200, (40, 30, 20, 10)))),
            page(Engine.LLAMACPP, ModelReading("default", counters(90, 360, (75, 52, 33, 15)))),
        ],
    )
    idle = feed(
        state("vllm-idle"),
        [
            page(Engine.VLLM, ModelReading("m", counters(500, 1000, (300, 100)))),
            page(Engine.VLLM, ModelReading("m", counters(500, 1000, (300, 100)))),
        ],
    )
    sglang = feed(
        state("sglang-c", chain_length=3),
        [
            page(
                Engine.SGLANG,
                ModelReading(
                    "ds",
                    gauges=SpecGauges(scope=GaugeScope.LAST_INTERVAL, mean_acceptance_length=2.5),
                ),
            ),
            page(
                Engine.SGLANG,
                ModelReading(
                    "ds",
                    gauges=SpecGauges(scope=GaugeScope.LAST_INTERVAL, mean_acceptance_length=2.1),
                ),
            ),
        ],
    )
    v0 = feed(
        state("vllm-v0"),
        [
            page(
                Engine.VLLM_V0,
                ModelReading(
                    "old",
                    gauges=SpecGauges(
                        scope=GaugeScope.LIFETIME, acceptance_rate=0.6, efficiency=0.5
                    ),
                ),
            )
        ],
    )
    off = feed(state("vllm-off"), [page(Engine.VLLM)])
    # A load-aware pair: 12 intervals at concurrency 4 where speculation pays twice over, then
    # 12 at concurrency 16 where the speculative step costs 2.5x the twin's.
    pair = Twins()
    spec_pages, base_pages = load_pair(((12, 4.0, 0.010, 0.0125), (12, 16.0, 0.012, 0.030)))
    twin = state("vllm-twin", fleet=pair)
    loaded = state("vllm-loaded", fleet=pair, baseline="vllm-twin")
    for i, (spec_page, base_page) in enumerate(zip(spec_pages, base_pages, strict=True)):
        feed_one(twin, base_page, i)
        feed_one(loaded, spec_page, i)
    profiled = feed(state("vllm-profiled", cost_profile=small_profile()), spec_pages[:12])
    down = state("down")
    down.fail(
        kind=ScrapeResult.CONNECTION_ERROR, message="cannot connect to 127.0.0.1:9", duration=0.002
    )
    pending = state("pending")
    # A configuration change marked by hand: two epochs and the time of the change.
    llama.mark(wall=1_780_000_000.0, note="draft model: a 1B drafter")
    # ... and "did the change help?" at two loads (the change's series: a bucket each).
    (epochs,) = llama.view.epochs
    assert epochs.previous is not None
    buckets = tuple(
        MatchedBucket(
            index,
            label,
            (n, n),
            ratio,
            (ratio * 0.93, ratio * 1.07),
            (0.6, 0.55),
            -0.05,
            (-0.08, -0.02),
        )
        for index, label, n, ratio in ((2, "4", 4.1, 1.18), (4, "16", 15.8, 0.84))
    )
    llama.view = replace(llama.view, changes=(ChangeView(epochs.model, epochs.previous,
                                                         epochs.current, buckets, ("4", "16"),
                                                         ("4", "16")),))  # fmt: skip
    return [vllm, llama, idle, sglang, v0, off, twin, loaded, profiled, down, pending]


def fleet_views() -> list[TargetView]:
    return [s.view for s in sorted(fleet(), key=lambda s: s.config.name)]
