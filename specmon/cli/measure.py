"""``specmon measure``: a server without speculation against its twin with it.

The classic two-server A/B measurement (``measure-speculative.py``) rebuilt on specmon's parser, adapters and arithmetic:
the same prompts, temperature 0, through both servers at each concurrency level; tokens per
second from the servers' ``usage``, acceptance from the speculative server's counters (and
llama.cpp's per-response timings), a byte-for-byte comparison of the completions, and the
measured break-even reading.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from specmon import jsontext
from specmon.cli._args import command, int_at_least, numbers, positive_float
from specmon.load import Profile, profile_to_json
from specmon.load.profile import physics
from specmon.measure.analysis import (
    EXIT_NOT_HELD,
    EXIT_NOTHING_COMPLETED,
    EXIT_USAGE,
    analyse,
)
from specmon.measure.breakeven import IMPLIED_COST_CAVEAT
from specmon.measure.compare import DIVERGENCE_CAVEAT
from specmon.measure.dataset import DatasetError, load_dataset
from specmon.measure.endpoints import endpoint
from specmon.measure.labbook import append_labbook, labbook_records
from specmon.measure.levels import AUTO_PER_LEVEL, AUTO_SECONDS, LoadLevel, too_few_requests
from specmon.measure.profile import build_profile, crossover_line, report_crossover
from specmon.measure.prompts import (
    PromptsError,
    Workload,
    available_workloads,
    load_prompts_file,
    select_workloads,
)
from specmon.measure.render import progress_line, render_text
from specmon.measure.results import Settings
from specmon.measure.runner import Plan, Unreachable, measure
from specmon.measure.synthetic import SYNTHETIC_PROMPTS, synthetic_name

__all__ = ["DEFAULT_API_KEY_ENV", "add_parser", "run"]

HELP = "measure speculation: a server without a draft against its twin with one"
DESCRIPTION = (
    "Send the same prompts at temperature 0 through a server without speculation "
    "(--baseline) and its twin with it (--speculative), at each concurrency level and "
    "request rate, and report per workload: tokens/s on both (from the servers' "
    "usage), the ratio, streamed time to first token and inter-token latency, the "
    "acceptance during the run (the speculative server's /metrics counters, or "
    "llama.cpp's per-response timings), whether the completions are byte-for-byte "
    "identical, and the measured break-even reading. Exit status: 0 ok, 1 completions "
    f"differ (unless --allow-divergence), {EXIT_USAGE} bad arguments (a concurrency "
    "level above the requests a workload sends is one), "
    f"{EXIT_NOTHING_COMPLETED} a server unreachable or a workload with no completed "
    f"request on one side, {EXIT_NOT_HELD} --profile-out asked and no concurrency level "
    "held its load."
)

DEFAULT_API_KEY_ENV = "SPECMON_API_KEY"
MAX_CONCURRENCY = 256


_positive = int_at_least(1)
_non_negative = int_at_least(0)
_seconds = positive_float


def _levels(text: str) -> list[int]:
    values = numbers(text, int, "integers")
    if not values:
        raise argparse.ArgumentTypeError("give at least one concurrency level")
    if any(not 1 <= v <= MAX_CONCURRENCY for v in values):
        raise argparse.ArgumentTypeError(
            f"concurrency levels must be between 1 and {MAX_CONCURRENCY}"
        )
    return list(dict.fromkeys(values))


MAX_RATE = 1000.0
MAX_INPUT_TOKENS = 1_000_000


def _rates(text: str) -> list[float]:
    values = numbers(text, float, "rates")
    if not values:
        raise argparse.ArgumentTypeError("give at least one rate")
    if any(not (math.isfinite(v) and 0 < v <= MAX_RATE) for v in values):
        raise argparse.ArgumentTypeError(
            f"rates must be above 0 and at most {MAX_RATE:g} per second"
        )
    return list(dict.fromkeys(values))


def _repeats(text: str) -> int | None:
    if text.strip() == "auto":
        return None
    return _positive(text)


def _token_lengths(text: str) -> list[int]:
    values = numbers(text, int, "integers")
    if not values or any(not 1 <= v <= MAX_INPUT_TOKENS for v in values):
        raise argparse.ArgumentTypeError(f"give token lengths between 1 and {MAX_INPUT_TOKENS}")
    return list(dict.fromkeys(values))


def _names(text: str) -> list[str]:
    names = [item.strip() for item in text.split(",") if item.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one workload")
    return names


def add_parser(sub: Any) -> None:
    p = command(sub, "measure", help=HELP, description=DESCRIPTION)
    p.add_argument(
        "--baseline",
        required=True,
        metavar="URL",
        help="OpenAI-compatible base URL of the server WITHOUT speculation (.../v1)",
    )
    p.add_argument(
        "--speculative",
        required=True,
        metavar="URL",
        help="base URL of the same model served WITH speculation (.../v1)",
    )
    p.add_argument("--model", required=True, metavar="NAME", help="model name to request")
    p.add_argument(
        "--workloads",
        type=_names,
        default=None,
        metavar="NAME[,NAME...]",
        help="workloads to run, in order (default: all; built-in: copy,closed,open; then "
        "those of --prompts, --dataset and --input-tokens)",
    )
    p.add_argument(
        "--dataset",
        type=Path,
        default=None,
        metavar="FILE",
        help='a workload of conversations in chat JSONL, one {"messages": [...]} a line, '
        "named after the file (trailing assistant messages dropped)",
    )
    p.add_argument(
        "--input-tokens",
        type=_token_lengths,
        default=[],
        metavar="N[,N...]",
        help="synthetic workloads in-N of prompts N tokens long as the baseline server counts "
        "them (calibrated against its usage.prompt_tokens)",
    )
    p.add_argument(
        "--prompts",
        type=Path,
        default=None,
        metavar="FILE",
        help='prompts, one per line, or JSON lines {"workload": ..., "prompt": '
        "...}; a built-in workload's name replaces it, another name adds one",
    )
    p.add_argument(
        "--concurrency",
        type=_levels,
        default=None,
        metavar="N[,N...]",
        help="concurrency levels; requests in flight at once (default 1, unless --rate only)",
    )
    p.add_argument(
        "--rate",
        type=_rates,
        default=[],
        metavar="R[,R...]",
        help="request rates per second, measured after the concurrency levels: requests sent "
        "at Poisson arrival times whatever the server does (open loop)",
    )
    p.add_argument(
        "--repeats",
        type=_repeats,
        default=1,
        metavar="N|auto",
        help="times each prompt is sent per server and level, each with its own seed (default "
        f"1; auto: per level, at least {AUTO_PER_LEVEL} x the concurrency, or {AUTO_SECONDS:g} "
        "s of arrivals at a rate)",
    )
    p.add_argument(
        "--no-stream",
        action="store_true",
        help="one JSON answer per request instead of a stream (no time to first token or "
        "inter-token latency)",
    )
    p.add_argument(
        "--max-tokens",
        type=_positive,
        default=128,
        metavar="N",
        help="max_tokens of every request (default 128)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed sent with every request (default 0)")
    p.add_argument(
        "--labbook",
        type=Path,
        default=None,
        metavar="FILE",
        help="append one JSON line per table row to this lab notebook",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    p.add_argument(
        "--allow-divergence", action="store_true", help="exit 0 even when completions differ"
    )
    p.add_argument(
        "--speculative-metrics",
        default=None,
        metavar="URL",
        help="metrics URL of the speculative server (default {scheme}://{host}/metrics)",
    )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help=f"environment variable holding the API key (default {DEFAULT_API_KEY_ENV}, "
        "if set); the key is sent as a bearer token and never printed or recorded",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="per-request timeout (default 300)",
    )
    p.add_argument(
        "--warmup",
        type=_non_negative,
        default=1,
        metavar="N",
        help="unmeasured requests per server before measuring (default 1)",
    )
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="send ignore_eos (llama.cpp, vLLM): every completion runs to max_tokens",
    )
    p.add_argument(
        "--profile-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the load profile (per concurrency level: both servers' step time and time "
        "per output token, acceptance, the draft cost) as JSON, for specmon recommend and the "
        "daemon's cost_profile (format: docs/measure.md)",
    )
    p.add_argument("--label", default=None, help="a tag recorded in the lab notebook")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (it is shown only on a terminal anyway)",
    )
    p.set_defaults(func=run)  # fmt: skip


class _ProgressBar:
    """A one-line progress bar on a terminal, redrawn at most ten times a second."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int, what: str) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        self._stream.write("\r" + progress_line(done, total, what) + "\033[K")
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self._stream.write("\r\033[K")
            self._stream.flush()


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        baseline = endpoint(args.baseline, what="--baseline")
        speculative = endpoint(
            args.speculative, metrics_url=args.speculative_metrics, what="--speculative"
        )
        extra = load_prompts_file(args.prompts) if args.prompts is not None else None
        available = available_workloads(extra, extra_source=str(args.prompts))
        if args.dataset is not None:
            dataset = load_dataset(args.dataset)
            dropped = (
                f", {dataset.answers_dropped} trailing assistant message(s) dropped"
                if dataset.answers_dropped
                else ""
            )
            available[dataset.name] = Workload(
                dataset.name, dataset.conversations, str(args.dataset),
                note=f"{len(dataset.conversations)} conversations from {args.dataset}{dropped}",
            )  # fmt: skip
        for tokens in args.input_tokens:
            name = synthetic_name(tokens)
            available[name] = Workload(name, (), "synthetic", input_tokens=tokens,
                                       synthetic_count=SYNTHETIC_PROMPTS)  # fmt: skip
        workloads = select_workloads(available, args.workloads)
        concurrency = args.concurrency
        if concurrency is None:
            concurrency = [] if args.rate else [1]
        levels = [*(LoadLevel(concurrency=c) for c in concurrency),
                  *(LoadLevel(rate=r) for r in args.rate)]  # fmt: skip
        refused = too_few_requests(
            levels, [(w.name, w.size) for w in workloads], repeats=args.repeats
        )
        if refused:
            raise PromptsError(
                "a level could never be held, nothing was sent:\n  " + "\n  ".join(refused)
            )
    except (ValueError, PromptsError, DatasetError) as exc:
        err.write(f"specmon measure: {exc}\n")
        return EXIT_USAGE
    if args.profile_out is not None:
        problem = _unwritable(args.profile_out)
        if problem is not None:
            err.write(f"specmon measure: --profile-out {args.profile_out}: {problem}\n")
            return EXIT_USAGE
    key_env = args.api_key_env or DEFAULT_API_KEY_ENV
    api_key = os.environ.get(key_env) or None
    if args.api_key_env and api_key is None:
        err.write(f"specmon measure: environment variable {key_env} is not set or empty\n")
        return EXIT_USAGE
    settings = Settings(
        model=args.model,
        max_tokens=args.max_tokens,
        seed=args.seed,
        repeats=args.repeats,
        concurrency=tuple(concurrency),
        rates=tuple(args.rate),
        stream=not args.no_stream,
        input_tokens=tuple(args.input_tokens),
        dataset_file=str(args.dataset) if args.dataset is not None else None,
        workloads=tuple(w.name for w in workloads),
        prompts_file=str(args.prompts) if args.prompts is not None else None,
        warmup=args.warmup,
        ignore_eos=args.ignore_eos,
        timeout=args.timeout,
        api_key_env=key_env if api_key else None,
        api_key_used=api_key is not None,
        label=args.label,
    )
    plan = Plan(baseline, speculative, settings, tuple(workloads), api_key=api_key)
    bar = _ProgressBar(err) if err.isatty() and not args.no_progress else None
    try:
        raw = asyncio.run(measure(plan, progress=bar))
    except Unreachable as exc:
        if bar is not None:
            bar.close()
        err.write(f"specmon measure: {exc}\n")
        return EXIT_NOTHING_COMPLETED
    if bar is not None:
        bar.close()
    report = analyse(raw)
    code = report.exit_code(allow_divergence=args.allow_divergence)
    written = 0
    if args.labbook is not None:
        records = labbook_records(report)
        try:
            append_labbook(args.labbook, records)
            written = len(records)
        except OSError as exc:
            err.write(f"specmon measure: cannot write the lab notebook {args.labbook}: {exc}\n")
    profile_written = None
    if args.profile_out is not None and not report.held_levels:
        err.write(
            f"specmon measure: {args.profile_out} not written: no concurrency level held its "
            "load (docs/measure.md; rates are not profiled)\n"
        )
        code = code or EXIT_NOT_HELD
    elif args.profile_out is not None:
        try:
            profile = build_profile(report)
            write_profile(args.profile_out, profile)
            profile_written = str(args.profile_out)
        except OSError as exc:
            err.write(f"specmon measure: cannot write the profile {args.profile_out}: {exc}\n")
            code = code or EXIT_USAGE
        else:
            refused = profile_problems(profile)
            if refused:
                err.write(
                    f"specmon measure: {args.profile_out} breaks the physics a profile must "
                    "obey, and specmon run and recommend will refuse it (docs/measure.md; "
                    "measure again on a quieter machine): " + "; ".join(refused[:5]) + "\n"
                )
    found = report_crossover(report)
    if args.json:
        document = report.as_dict()
        document["crossover"] = None if found is None else dataclasses.asdict(found)
        document["crossover_line"] = crossover_line(report)
        document["profile"] = profile_written
        document["exit_code"] = code
        document["allow_divergence"] = args.allow_divergence
        document["labbook"] = {"path": str(args.labbook), "lines": written} if written else None
        document["caveats"] = {
            "divergence": DIVERGENCE_CAVEAT,
            "implied_draft_cost": IMPLIED_COST_CAVEAT,
        }
        jsontext.dump(document, out, indent=2, ensure_ascii=False)
        out.write("\n")
    else:
        out.write(render_text(report, allow_divergence=args.allow_divergence))
        if written:
            out.write(f"Appended {written} line(s) to the lab notebook {args.labbook}\n")
        if profile_written:
            out.write(f"Wrote the load profile {profile_written}\n")
    return code


def _unwritable(path: Path) -> str | None:
    """Why the profile could not be written there, checked before a long run."""
    if path.is_dir():
        return "is a directory"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"no directory {parent}"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


def profile_problems(profile: Profile) -> list[str]:
    """What the profile breaks of :func:`specmon.load.profile.physics`, as loading it would
    say (``levels[i]`` in the order written)."""
    paths = {id(level): f"levels[{i}]" for i, level in enumerate(profile.levels)}
    return physics(profile.levels, chain_length=profile.chain_length, paths=paths)


def write_profile(path: Path, profile: Profile) -> None:
    """Write the profile JSON atomically (a temporary file renamed over ``path``)."""
    text = jsontext.dumps(profile_to_json(profile), indent=2, ensure_ascii=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
