"""Target states fed by hand, in-process: a fleet of every kind of target the daemon can show,
for the golden /metrics page, the status page and the benchmarks. Deterministic: no clock, no
randomness, no I/O."""

from __future__ import annotations

from specmon.daemon.config import TargetConfig
from specmon.daemon.target import TargetState, TargetView
from specmon.engines import (
    Context,
    Engine,
    GaugeScope,
    ModelReading,
    PageReading,
    SpecCounters,
    SpecGauges,
)
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


def page(engine: Engine | None, *models: ModelReading, malformed: int = 0) -> PageReading:
    return PageReading(engine=engine, models=models, malformed=malformed)


def state(name: str, **config: object) -> TargetState:
    cfg = TargetConfig(name=name, url=f"http://127.0.0.1:9/{name}/metrics?token=x", **config)  # type: ignore[arg-type]
    return TargetState(cfg, windows=WINDOWS, retention=RETENTION)


def feed(target: TargetState, readings: list[PageReading], *, step: float = 5.0) -> TargetState:
    for i, reading in enumerate(readings):
        target.observe(reading, mono=i * step, wall=1_700_000_000.0 + i * step, duration=0.004)
    return target


def fleet() -> list[TargetState]:
    """Every kind of target: two vLLM models, llama.cpp with constant labels and a configured
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
            ),
            page(
                Engine.VLLM,
                ModelReading(
                    "qwen",
                    counters(1600, 4800, (1120, 640, 320)),
                    context=Context(requests_running=5.0, generation_tokens=8000),
                ),
                ModelReading("llama", counters(30, 120, (25, 20, 14, 5))),
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
    down = state("down")
    down.fail(
        kind=ScrapeResult.CONNECTION_ERROR, message="cannot connect to 127.0.0.1:9", duration=0.002
    )
    pending = state("pending")
    return [vllm, llama, idle, sglang, v0, off, down, pending]


def fleet_views() -> list[TargetView]:
    return [s.view for s in sorted(fleet(), key=lambda s: s.config.name)]
