"""``specmon demo``: a simulated fleet, the daemon watching it, and a live terminal view.

Thirteen simulated engines (two vLLM, one llama.cpp, one vLLM whose draft stops matching after
about 45 seconds; from pages written from their source, TensorRT-LLM, SGLang, sgl-router and
TGI; two pairs of a speculating target and its twin under cycling load, on vLLM and on TGI;
and ``vllm-switched``, restarted with its draft after ``--switch-at`` seconds, whose verdict
then rests on its own past) are served on loopback; the real daemon scrapes them and serves its status page and
/metrics; the terminal shows what it computes. No engine, GPU or network needed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from specmon.answer import Answer, ReadState, words
from specmon.cli._args import command, positive_float
from specmon.config_values import parse_listen_address
from specmon.daemon.app import Daemon
from specmon.daemon.target import TargetView
from specmon.logs import configure_logging
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL, LoadModel
from specmon.sim.noise import Classes, Drift, share_for_tokens
from specmon.sim.pages import PageKind
from specmon.sim.scenario import Phase, Scenario
from specmon.sim.server import SimServer, VirtualTarget, make_target

__all__ = ["add_parser", "demo_fleet", "render_rows"]

HELP = "watch a simulated fleet live: no engine or GPU needed"
DESCRIPTION = __doc__

DEMO_WINDOWS = ("10s", "30s", "2m")
DEMO_PRIMARY = "30s"
DROP_AT = 45.0
#: When vllm-switched is restarted with its draft (it runs without speculation until then).
SWITCH_AT = 60.0

_GREEN, _RED, _YELLOW, _DIM, _BOLD, _RESET = (
    "\033[32m", "\033[31m", "\033[33m", "\033[2m", "\033[1m", "\033[0m",
)  # fmt: skip
_SPARK = " ▁▂▃▄▅▆▇█"


def add_parser(sub: Any) -> None:
    p = command(sub, "demo", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:10920",
        metavar="ADDR",
        help="where the daemon serves its status page and /metrics",
    )
    p.add_argument(
        "--no-tui",
        action="store_true",
        help="print plain status lines instead of the live view (automatic when "
        "stdout is not a terminal)",
    )
    p.add_argument(
        "--drop-at",
        type=positive_float,
        default=DROP_AT,
        metavar="SECONDS",
        help=f"when vllm-degrading's draft stops matching (default {DROP_AT:g})",
    )
    p.add_argument(
        "--load-phase",
        type=positive_float,
        default=LOAD_PHASE,
        metavar="SECONDS",
        help=f"how long the pairs (vllm-loaded, tgi-loaded and their baselines) stay at each "
        f"load level (default "
        f"{LOAD_PHASE:g}; levels {', '.join(map(str, LOAD_CYCLE))} requests, repeated)",
    )
    p.add_argument(
        "--noise",
        choices=NOISE_CHOICES,
        default="none",
        help="realistic noise on the loaded pairs (specmon.sim.noise): 'drift', each engine's "
        "step time drifting (sd 3 %%, about a minute's persistence); 'classes', traffic "
        "mixing acceptance 0.9 and 0.5 requests in a moving share; 'both'; default 'none' "
        "(off by default: with it the crossover strays past 10.5-11.3, bench/RESULTS.md)",
    )
    p.add_argument(
        "--switch-at",
        type=positive_float,
        default=SWITCH_AT,
        metavar="SECONDS",
        help=f"when vllm-switched is restarted with speculation on (default {SWITCH_AT:g}): "
        "a new configuration epoch on its target page",
    )
    p.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="terminal refresh interval (default 2)",
    )
    p.set_defaults(func=_run)


#: The load the demo's pair goes through, each for LOAD_PHASE seconds, over and over.
#: The top level is 32, not 24: 24.0 is the edge between buckets "16" and "32", and a
#: concurrency measured exactly there (the simulator's is exact) put each interval of that
#: phase in one bucket or the other by a rounding's whim, mixing a loss into bucket "16".
LOAD_CYCLE = (1, 4, 16, 8, 2, 32)
LOAD_PHASE = 20.0
#: The coefficient of variation of one simulated step's time in the demo's load-aware pairs.
STEP_NOISE = 0.3
#: The demo's load model: the simulator's bandwidth-bound model run four times faster (the
#: same ratios, so the same crossover near 10.9 requests), so that every load level gives the
#: daemon enough engine steps within one phase.
FAST_LOAD_MODEL = LoadModel(
    **{
        name: getattr(DEMO_LOAD_MODEL, name) / 4
        for name in ("weights_seconds", "token_seconds", "fixed_seconds", "draft_fixed_seconds",
                     "draft_weights_seconds", "draft_token_seconds")
    }
)  # fmt: skip


#: The loaded pairs' survival without the realistic noise (K = 3.4 tokens per step).
PLAIN_SURVIVAL = (0.9, 0.7, 0.5, 0.3)
#: With it (``noise`` "classes" or "both"; off by default, see bench/RESULTS.md): two request classes, per-token acceptance 0.9 and 0.5,
#: the second's share of the drafts set so that the mix keeps K = 3.4 (0.322) and swinging
#: by 0.1 either side over NOISE_CLASS_PERIOD seconds (not a multiple of the 120 s load
#: cycle, so every level meets every mix); and (``noise`` "drift" or "both") each engine's step time drifting by
#: NOISE_DRIFT (sd 3 %, correlation time 60 s), the twins independently: in the story a
#: twin pair is two engines on separate hardware, and independent drifts are the harder case
#: (a shared drift would cancel in the ratio).
NOISE_SURVIVAL = tuple(0.9**i for i in range(1, 5))
NOISE_CLASS_SURVIVAL = tuple(0.5**i for i in range(1, 5))
NOISE_CLASS_PERIOD = 90.0
NOISE_DRIFT = Drift(sd=0.03, seconds=60.0)
#: The demo's --noise choices.
NOISE_CHOICES = ("none", "drift", "classes", "both")
NOISE_CLASSES = Classes(
    survival=NOISE_CLASS_SURVIVAL,
    share=share_for_tokens(NOISE_SURVIVAL, NOISE_CLASS_SURVIVAL, tokens_per_step=3.4),
    swing=0.1,
    period=NOISE_CLASS_PERIOD,
)


def demo_fleet(
    *, seed: int = 7, drop_at: float = DROP_AT, load_phase: float = LOAD_PHASE,
    switch_at: float = SWITCH_AT, noise: str = "none",
) -> list[VirtualTarget]:  # fmt: skip
    """The demo's engines. ``vllm-degrading`` loses acceptance at ``drop_at`` seconds;
    ``vllm-switched`` runs without speculation until ``switch_at``, then is restarted with its
    draft (a new configuration epoch, its own past the baseline);
    ``vllm-loaded`` and its twin without speculation ``vllm-baseline`` run the same traffic,
    whose concurrency cycles through LOAD_CYCLE, on a bandwidth-bound load model: speculation
    pays at low load and costs time above about 11 requests (specmon/sim/load_model.py).
    ``noise`` (NOISE_CHOICES): the loaded pairs' step times drift (NOISE_DRIFT), their traffic
    mixes two request classes (NOISE_CLASSES; the same expected tokens per step), or both."""
    if noise not in NOISE_CHOICES:
        raise ValueError(f"noise must be one of {', '.join(NOISE_CHOICES)}")
    drift, classes = noise in ("drift", "both"), noise in ("classes", "both")
    degrading = Scenario(
        phases=(
            Phase(at=0.0, changes={"survival": (0.85, 0.7, 0.55, 0.4)}),
            Phase(at=drop_at, changes={"survival": (0.12, 0.02, 0.004, 0.001)}),
        )
    )
    cycle = Scenario(
        phases=tuple(
            Phase(at=i * load_phase, changes={"requests_running": n})
            for i, n in enumerate(LOAD_CYCLE)
        ),
        repeat=True,
        period=load_phase * len(LOAD_CYCLE),
    )
    # Each step's time varies by 30 % (STEP_NOISE), as real steps do (specmon.load.Thresholds).
    loaded = SimSettings(
        survival=NOISE_SURVIVAL if classes else PLAIN_SURVIVAL, requests_running=1,
        load_model=FAST_LOAD_MODEL, step_noise=STEP_NOISE,
        drift=NOISE_DRIFT if drift else None, classes=NOISE_CLASSES if classes else None,
    )  # fmt: skip
    pairs = [
        make_target(
            name=f"{engine}-{role}",
            kind=kind,
            model="llama-3.1-8b",
            settings=loaded if speculating else replace(loaded, speculation=False),
            scenario=cycle,
            seed=seed + offset + (0 if speculating else 1),
        )
        # vLLM's pair, and the same on TGI (pages written from its source: the router's
        # decode-call timing gives the load figures).
        for engine, kind, offset in (
            ("vllm", PageKind.VLLM, 8),
            ("tgi", PageKind.TGI_HISTOGRAM, 10),
        )
        for role, speculating in (("loaded", True), ("baseline", False))
    ]
    switched = Scenario(phases=(Phase(at=switch_at, changes={"speculation": True}, restart=True),))
    return [
        *pairs,
        make_target(
            name="vllm-switched", kind=PageKind.VLLM, model="llama-3.1-8b",
            settings=replace(loaded, requests_running=4, speculation=False),
            scenario=switched, seed=seed + 12,
        ),
        make_target(
            name="vllm-eagle", kind=PageKind.VLLM, model="llama-3.1-70b",
            settings=SimSettings(survival=(0.88, 0.74, 0.61, 0.49, 0.38), drafts_per_second=40),
            seed=seed,
        ),
        make_target(
            name="vllm-ngram", kind=PageKind.VLLM, model="qwen3-32b",
            settings=SimSettings(survival=(0.62, 0.35, 0.16), drafts_per_second=30,
                                 draft_tokens_per_draft=2.6),
            seed=seed + 1,
        ),
        make_target(
            name="llamacpp-draft", kind=PageKind.LLAMACPP, model="qwen3-8b",
            settings=SimSettings(survival=(0.9, 0.7, 0.5, 0.3), drafts_per_second=25,
                                 drafts_per_request=20),
            seed=seed + 2,
        ),
        make_target(
            name="vllm-degrading", kind=PageKind.VLLM, model="mistral-large",
            settings=SimSettings(survival=(0.85, 0.7, 0.55, 0.4), drafts_per_second=30),
            scenario=degrading, seed=seed + 3,
        ),
        # Engines that cannot run here: pages written from their source.
        make_target(
            name="trtllm-draft", kind=PageKind.TRTLLM, model="llama-3.3-70b",
            settings=SimSettings(survival=(0.86, 0.7, 0.55, 0.42), drafts_per_second=30,
                                 drafts_per_request=20),
            seed=seed + 4, draft_cost=0.07,
        ),
        make_target(
            name="sglang-eagle", kind=PageKind.SGLANG_CURRENT, model="qwen3-32b",
            settings=SimSettings(survival=(0.8, 0.6, 0.42), drafts_per_second=30,
                                 drafts_per_request=20),
            seed=seed + 5,
        ),
        make_target(
            name="sglang-router", kind=PageKind.SGLANG_ROUTER, model="deepseek-v3",
            settings=SimSettings(survival=(0.9, 0.78, 0.64), drafts_per_second=30,
                                 drafts_per_request=20),
            seed=seed + 6,
        ),
        make_target(
            name="tgi-medusa", kind=PageKind.TGI_HISTOGRAM, model="mixtral-8x7b",
            settings=SimSettings(survival=(0.7, 0.45, 0.25), drafts_per_second=30),
            seed=seed + 7,
        ),
    ]  # fmt: skip


def _config_yaml(server: SimServer) -> str:
    lines = [
        "global:",
        "  scrape_interval: 1s",
        "  scrape_timeout: 800ms",
        f"  windows: [{', '.join(DEMO_WINDOWS)}]",
        "  draft_cost: 0.1",
        "targets:",
    ]
    costs = {
        "vllm-eagle": 0.08,
        "vllm-ngram": 0.02,
        "llamacpp-draft": 0.12,
        "vllm-degrading": 0.1,
        "trtllm-draft": 0.07,
        "sglang-eagle": 0.05,
        "sglang-router": 0.05,
        "tgi-medusa": 0.03,
    }
    paths = {"trtllm-draft": "/prometheus/metrics", "sglang-router": "/engine_metrics"}
    for name, address in server.addresses.items():
        lines += [
            f"  - name: {name}",
            f"    url: {address}{paths.get(name, '/metrics')}",
            f"    draft_cost: {costs.get(name, 0.1)}",
            "    labels: {fleet: demo}",
        ]
        if name == "llamacpp-draft":
            lines.append("    model: qwen3-8b")
        if name == "tgi-medusa":
            lines.append("    model: mixtral-8x7b")  # TGI's page has no model label
        if name == "vllm-loaded":
            lines.append("    baseline: vllm-baseline")
        if name in ("tgi-loaded", "tgi-baseline"):
            lines.append("    model: llama-3.1-8b")  # TGI's page has no model label
        if name == "tgi-loaded":
            lines.append("    baseline: tgi-baseline")
    return "\n".join(lines) + "\n"


def _spark(values: list[float | None]) -> str:
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            out.append(_SPARK[min(len(_SPARK) - 1, max(0, round(v * (len(_SPARK) - 1))))])
    return "".join(out)


def render_rows(views: list[TargetView], *, window: str, color: bool) -> list[str]:
    """One line per target and model: the terminal view (also used for plain output)."""

    def paint(text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if color else text

    header = (
        f"{'target':<16} {'engine':<9} {'state':<6} {'alpha':>6} {'b-even':>6} {'margin':>7} "
        f"{'verdict (95 % interval)':<23} {'basis':<10} {'k':>2} {'best':>4}  survival by position"
    )
    rows = [paint(header, _BOLD) if color else header]
    for view in views:
        engine = view.engine.value if view.engine else "-"
        if not view.up:
            state = "down" if view.scraped else "wait"
            down = paint(f"{state:<6}", _RED)
            rows.append(f"{view.name:<16} {engine:<9} {down} {view.error or ''}")
            continue
        if not view.models:
            rows.append(
                f"{view.name:<16} {engine:<9} {paint('nospec', _YELLOW)} {view.message or ''}"
            )
            continue
        for model in view.models:
            w = model.window(window)
            r = w.report if w else None
            if not model.speculating:
                load = w.load if w else None
                n = f"{load.concurrency:.1f}" if load and load.concurrency is not None else "-"
                tpot = load.time_per_output_token_seconds if load else None
                per_token = f"{tpot * 1000:.1f} ms/token" if tpot is not None else "-"
                # A twin says whose; a server merely without speculation is not a baseline.
                role = (
                    f" (baseline for {', '.join(view.baseline_for)})" if view.baseline_for else ""
                )
                rows.append(
                    f"{view.name:<16} {engine:<9} {paint('up    ', _GREEN)} "
                    + paint(f"no speculation{role}: load n={n}, {per_token}", _DIM)
                )
                continue
            if r is None:  # filling, or held at a configuration change (window_rules says why)
                why = w.straddle.text() if w and w.straddle else "(window filling)"
                rows.append(f"{view.name:<16} {engine:<9} {'up':<6} {why}")
                continue
            a = w.answer if w else None
            margin = a.alpha_margin if a else None
            margin_text = f"{margin:+7.3f}" if margin is not None else f"{'-':>7}"
            if margin is not None:
                margin_text = paint(
                    margin_text, _GREEN if margin >= 0.05 else (_YELLOW if margin >= 0 else _RED)
                )
            best = "-" if a is None or a.best_chain_length is None else str(a.best_chain_length)
            speedup = a.speedup if a else None
            if a is not None and a.state is ReadState.MEASURING:
                speed = "measuring"
            else:
                speed = f"{speedup:.2f}x" if speedup is not None else "-"
            if a is not None and speedup is not None and a.interval is not None:
                speed += f" ({a.interval[0]:.2f}-{a.interval[1]:.2f})"
            speed = f"{speed:<23}"
            # The API's basis words (specmon_verdict_info's).
            basis = a.basis.value if a else "-"
            if a is not None and a.state is ReadState.GUESS:
                basis = paint(f"{basis:<10}", _YELLOW)
            else:
                basis = f"{basis:<10}"
            alpha = f"{r.alpha:6.3f}" if r.alpha is not None else f"{'-':>6}"
            breakeven = a.breakeven_alpha if a else None
            be = f"{breakeven:6.3f}" if breakeven is not None else f"{'-':>6}"
            k = "-" if model.basis.chain_length is None else str(model.basis.chain_length)
            spark = _spark([p.survival for p in r.positions])
            survival = " ".join(f"{p.survival:.2f}" for p in r.positions if p.survival is not None)
            if not r.positions:
                survival = paint("(engine publishes no per-position data)", _DIM)
            up = paint("up    ", _GREEN)
            rows.append(
                f"{view.name:<16} {engine:<9} {up} {alpha} {be} "
                f"{margin_text} {speed} {basis} {k:>2} {best:>4}  {spark:<6} {survival}"
            )
            if w is not None and w.straddle is not None:  # read since the change only
                rows.append(f"{'':<16} {'':<9} " + paint(w.straddle.text(), _DIM))
            if a is not None and a.compared:
                rows.append(_load_line(a, paint))
    return rows


def _load_line(answer: Answer, paint: Callable[[str, str], str]) -> str:
    """Under a target compared with a baseline: the load and speed of the answer's own bucket
    (the window's time average beside it, labelled), the realized speed-up, measured c,
    crossover and its range, best k at that c and by load."""
    mean = f"{answer.mean_concurrency:.1f}" if answer.mean_concurrency is not None else "-"
    tpot = answer.time_per_output_token_seconds
    if answer.concurrency is not None:
        ms = f", {tpot * 1000:.1f} ms/token" if tpot is not None else ""
        where = f"now n~{answer.concurrency:.1f} in bucket {answer.bucket}{ms}"
        parts = [f"{'':<16} {'':<9} {where} " + paint(f"(window average n={mean})", _DIM)]
    else:
        parts = [f"{'':<16} {'':<9} window average n={mean}"]
    if answer.state is ReadState.MEASURING:
        parts.append(paint(f"vs {answer.against}: {words.measuring_words(answer)}", _DIM))
    elif answer.speedup is not None:
        text = f"{answer.speedup:.2f}x"
        if answer.interval is not None:
            text += f" ({answer.interval[0]:.2f}-{answer.interval[1]:.2f})"
        code = _GREEN if answer.speedup >= 1.05 else (_YELLOW if answer.speedup >= 1.0 else _RED)
        how = ", off the cost curve" if answer.state is ReadState.INTERPOLATED else ""
        parts.append(f"realized {paint(text, code)} vs {answer.against}{how}")
        if answer.draft_cost is not None:
            parts.append(f"measured c {answer.draft_cost:.3f}")
    if answer.crossover is not None:
        parts.append(f"stops paying at n~{words.crossover_words(answer.crossover)}")
    if answer.best_chain_length is not None:
        parts.append(f"best k {answer.best_chain_length} {words.cost_words(answer)}")
    best = [f"{p.label}:{p.best_chain_length}" for p in answer.per_load
            if p.best_chain_length is not None]  # fmt: skip
    if best:
        parts.append("best k by load (measured c) " + " ".join(best))
    return "  ".join(parts)


async def _demo(args: argparse.Namespace, out: TextIO) -> int:
    fleet = demo_fleet(
        drop_at=args.drop_at, load_phase=args.load_phase, switch_at=args.switch_at,
        noise=args.noise,
    )  # fmt: skip
    server = SimServer(fleet)
    await server.start_each("127.0.0.1")
    workdir = Path(tempfile.mkdtemp(prefix="specmon-demo-"))
    config = workdir / "specmon.yaml"
    config.write_text(_config_yaml(server))
    daemon = Daemon(config_path=config, listen=args.listen, shutdown_timeout=1.0)
    tui = not args.no_tui and out.isatty()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await daemon.start()
    except OSError as exc:
        await server.stop()
        out.write(f"specmon demo: cannot listen on {args.listen}: {exc}\n")
        return 1
    host, _ = parse_listen_address(args.listen)
    base = f"http://{host or '127.0.0.1'}:{daemon.bound_port}"
    intro = [
        f"specmon demo: {len(fleet)} simulated engines on loopback, watched by the specmon daemon.",
        f"  status page   {base}/",
        f"  metrics       {base}/metrics",
        f"  config        {config}",
        f"  vllm-degrading's draft stops matching after {args.drop_at:.0f}s: watch its margin "
        "go red.",
        f"  vllm-switched is restarted with its draft after {args.switch_at:.0f}s: its target "
        "page lists the epoch before and the one after.",
        f"  figures over the {DEMO_PRIMARY} window; Ctrl-C stops everything.",
    ]
    out.write("\n".join(intro) + "\n\n")
    out.flush()
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    last_plain = 0.0
    try:
        while not stop.is_set():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            rows = render_rows(daemon.views(), window=DEMO_PRIMARY, color=tui)
            elapsed = now - started
            if tui:
                out.write("\033[H\033[J" + "\n".join(intro) + "\n\n")
                out.write(f"t = {elapsed:5.0f}s\n" + "\n".join(rows) + "\n")
                out.flush()
            elif now - last_plain >= 10.0 or last_plain == 0.0:
                last_plain = now
                out.write(f"--- t = {elapsed:.0f}s\n" + "\n".join(rows) + "\n")
                out.flush()
            wait = args.refresh
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
    finally:
        rows = render_rows(daemon.views(), window=DEMO_PRIMARY, color=False)
        await daemon.stop()
        await server.stop()
        out.write(f"--- final (t = {time.monotonic() - started:.0f}s)\n" + "\n".join(rows) + "\n")
        out.write("specmon demo: stopped cleanly\n")
        out.flush()
    return 0


def _run(args: argparse.Namespace) -> int:
    tui = not args.no_tui and sys.stdout.isatty()
    if tui:
        # Logs would tear the live view: send them to a file next to the config.
        log_path = Path(tempfile.gettempdir()) / f"specmon-demo-{os.getpid()}.log"
        stream = log_path.open("a", encoding="utf-8")
        configure_logging(level="info", fmt="json", stream=stream)
    else:
        configure_logging(level="warning", fmt="console" if sys.stderr.isatty() else "json")
    return asyncio.run(_demo(args, sys.stdout))
