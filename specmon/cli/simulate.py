"""``specmon simulate``: serve simulated engines whose acceptance you set."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from specmon.cli._args import chain_length, command, positive_float, unit_ratio
from specmon.config_values import ConfigError, parse_listen_address
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import load_model_from
from specmon.sim.noise import Classes, Drift
from specmon.sim.pages import PageKind
from specmon.sim.scenario import Scenario, load_scenario
from specmon.sim.server import SimServer, VirtualTarget, make_target

__all__ = ["add_parser"]

HELP = "serve simulated vLLM / llama.cpp / SGLang / TensorRT-LLM / TGI metrics and OpenAI endpoints"
DESCRIPTION = (
    "Serve engines whose speculative acceptance you control: their /metrics pages are "
    "rendered from pages captured from real servers (vLLM, llama.cpp) or written from "
    "the engines' source (SGLang, sgl-router, TensorRT-LLM, TGI: see "
    "specmon/sim/templates/README.md), their counters advance from a stochastic model, "
    "and /v1/chat/completions answers in the OpenAI shape."
)

ENGINES = {
    "vllm": PageKind.VLLM,
    "vllm-multiproc": PageKind.VLLM_MULTIPROC,
    "llamacpp": PageKind.LLAMACPP,
    "sglang": PageKind.SGLANG_CURRENT,
    "sglang-legacy": PageKind.SGLANG,
    "sglang-router": PageKind.SGLANG_ROUTER,
    "trtllm": PageKind.TRTLLM,
    "tgi": PageKind.TGI,
    "tgi-histogram": PageKind.TGI_HISTOGRAM,
}
#: Where each engine serves its Prometheus page (the simulator also serves it on /metrics).
METRICS_PATHS = {PageKind.TRTLLM: "/prometheus/metrics", PageKind.SGLANG_ROUTER: "/engine_metrics"}


def _survival(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of rates") from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one rate")
    return values


def add_parser(sub: Any) -> None:
    p = command(sub, "simulate", help=HELP, description=DESCRIPTION)
    p.add_argument("--engine", choices=sorted(ENGINES), default="vllm")
    p.add_argument(
        "--listen",
        default="127.0.0.1:8000",
        metavar="HOST:PORT",
        help="address of the first target; further targets take the next ports",
    )
    p.add_argument(
        "--targets",
        type=int,
        default=1,
        metavar="N",
        help="number of simulated targets (default 1)",
    )
    p.add_argument(
        "--shared-port",
        action="store_true",
        help="serve all targets on one port under /t/NAME/ instead of a port each",
    )
    p.add_argument("--chain-length", "-k", type=chain_length, default=None, metavar="K")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--survival",
        type=_survival,
        default=None,
        metavar="S1,S2,...",
        help="per-position survival rates (default 0.8,0.6,0.4)",
    )
    group.add_argument(
        "--alpha",
        type=unit_ratio,
        default=None,
        help="a single per-token acceptance rate: survival alpha^i",
    )
    p.add_argument("--drafts-per-second", type=float, default=20.0, metavar="R")
    p.add_argument("--model", default=None, metavar="NAME")
    p.add_argument("--scenario", type=Path, default=None, metavar="FILE")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--no-speculation", action="store_true", help="a baseline server")
    p.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="simulated time per decode step in chat completions",
    )
    p.add_argument(
        "--draft-cost",
        type=unit_ratio,
        default=0.1,
        help="draft cost used to time speculative steps (default 0.1)",
    )
    p.add_argument(
        "--load-model",
        default=None,
        metavar="SPEC",
        help="step time from concurrency and chain length: 'demo' or "
        "'weights_seconds=S,token_seconds=S[,fixed_seconds=S,draft_fixed_seconds=S,...]' "
        "(specmon.sim.load_model); background traffic then runs --requests-running sequences "
        "at that speed and chat completions are batched and answered at it",
    )
    p.add_argument(
        "--requests-running",
        type=int,
        default=None,
        metavar="N",
        help="background sequences decoding at once (default 4; 0 with --load-model: only "
        "chat requests)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        metavar="X",
        help="with --load-model: wall seconds per simulated second for chat completions",
    )
    p.add_argument(
        "--drift-sd",
        type=float,
        default=0.0,
        metavar="SD",
        help="with --load-model: each engine's step time drifts by a factor of mean 1 whose "
        "log has this standard deviation (e.g. 0.03), each target independently "
        "(specmon.sim.noise; default 0: no drift)",
    )
    p.add_argument(
        "--drift-seconds",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="the drift's correlation time: AR(1) per simulated second with coefficient "
        "exp(-1/S) (default 60)",
    )
    p.add_argument(
        "--class-alpha",
        type=unit_ratio,
        default=None,
        metavar="A",
        help="a second request class with per-token acceptance A (survival A^i) drafting "
        "--class-share of the drafts (default: one class)",
    )
    p.add_argument(
        "--class-share",
        type=unit_ratio,
        default=0.3,
        metavar="F",
        help="the second class's mean share of the drafts (default 0.3)",
    )
    p.add_argument(
        "--class-swing",
        type=unit_ratio,
        default=0.0,
        metavar="F",
        help="the share moves by F either side, a sine over --class-period (default 0)",
    )
    p.add_argument(
        "--class-period",
        type=positive_float,
        default=300.0,
        metavar="S",
        help="seconds per swing of the class share (default 300)",
    )
    p.add_argument("--no-usage", action="store_true", help="omit usage from chat responses")
    p.add_argument(
        "--per-request-spec-decode-metrics",
        choices=("none", "summary"),
        default="none",
        help="vLLM engines: return metrics.speculative_decoding in each chat response, as "
        "vLLM does with this flag (default none)",
    )
    p.add_argument(
        "--fail-every",
        type=int,
        default=0,
        metavar="N",
        help="answer every Nth chat request with HTTP 500",
    )
    p.add_argument(
        "--diverge-every",
        type=int,
        default=0,
        metavar="N",
        help="change the completion of about 1 prompt in N (speculative side)",
    )
    p.set_defaults(func=_run)


def build_targets(args: argparse.Namespace, scenario: Scenario | None) -> list[VirtualTarget]:
    k = args.chain_length
    if args.alpha is not None:
        settings = SimSettings.from_alpha(args.alpha, k or 3)
    else:
        survival = args.survival or (0.8, 0.6, 0.4)
        if k is not None and k != len(survival):
            raise ValueError(f"--chain-length {k} but {len(survival)} survival rates given")
        settings = SimSettings(survival=survival)
    load_model = load_model_from(args.load_model) if args.load_model else None
    running = args.requests_running
    if running is None:
        running = 0 if load_model is not None else SimSettings().requests_running
    if args.time_scale < 0:
        raise ValueError("--time-scale must be >= 0")
    settings = SimSettings(
        survival=settings.survival,
        drafts_per_second=args.drafts_per_second,
        speculation=not args.no_speculation,
        requests_running=running,
        load_model=load_model,
        drift=Drift(sd=args.drift_sd, seconds=args.drift_seconds) if args.drift_sd else None,
        classes=None
        if args.class_alpha is None
        else Classes(
            survival=tuple(args.class_alpha**i for i in range(1, len(settings.survival) + 1)),
            share=args.class_share,
            swing=args.class_swing,
            period=args.class_period,
        ),
    )
    settings.validate()
    kind = ENGINES[args.engine]
    targets = []
    for index in range(args.targets):
        name = f"{args.engine}-{index}" if args.targets > 1 else args.engine
        targets.append(
            make_target(
                name=name,
                kind=kind,
                settings=settings,
                model=args.model,
                scenario=scenario,
                seed=None if args.seed is None else args.seed + index,
                step_seconds=args.step_seconds,
                draft_cost=args.draft_cost,
                usage=not args.no_usage,
                per_request_spec_metrics=args.per_request_spec_decode_metrics,
                fail_every=args.fail_every,
                diverge_every=args.diverge_every,
                time_scale=args.time_scale,
            )
        )
    return targets


async def _serve(args: argparse.Namespace, targets: list[VirtualTarget]) -> int:
    host, port = parse_listen_address(args.listen)
    server = SimServer(targets)
    if args.shared_port:
        await server.start_shared(host or "127.0.0.1", port)
    else:
        ports = [port + i if port else 0 for i in range(len(targets))]
        await server.start_each(host or "127.0.0.1", ports)
    for name, address in server.addresses.items():
        path = METRICS_PATHS.get(server.targets[name].kind, "/metrics")
        print(f"{name}: {address}{path}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
    return 0


def _run(args: argparse.Namespace) -> int:
    scenario = None
    if args.scenario is not None:
        try:
            scenario = load_scenario(args.scenario)
        except ConfigError as exc:
            sys.stderr.write(f"specmon simulate: {exc}\n")
            return 2
    try:
        targets = build_targets(args, scenario)
    except ValueError as exc:
        sys.stderr.write(f"specmon simulate: {exc}\n")
        return 2
    try:
        return asyncio.run(_serve(args, targets))
    except OSError as exc:
        sys.stderr.write(f"specmon simulate: cannot listen on {args.listen}: {exc}\n")
        return 1
