"""``specmon recommend``: the chain length per load level, as engine settings.

From a profile written by ``specmon measure --profile-out`` (``--profile FILE``) or from a
running daemon's per-bucket figures (``--from URL --target NAME``): per concurrency bucket
the best chain length (0 = off) with its expected speed-up, vLLM's
``num_speculative_tokens_per_batch_size`` schedule, llama.cpp's ``--spec-draft-n-max`` and a
table. Both inputs go through the same pure function (:func:`specmon.recommend.recommend`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import json
import sys
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlencode

from specmon import files, jsontext
from specmon.answer import words
from specmon.cli._args import command, int_at_least, positive_float
from specmon.load import ProfileError, profile_from_json
from specmon.recommend import (
    Recommendation,
    RecommendError,
    RecommendInput,
    input_from_profile,
    input_from_targets,
    recommend,
)
from specmon.sources import ScrapeResult
from specmon.sources.http import FetchError, fetch_page, open_session

__all__ = ["EXIT_NO_ADVICE", "EXIT_USAGE", "add_parser", "run"]

EXIT_NO_ADVICE = 1
EXIT_USAGE = 2
MAX_BYTES = 16 * 1024 * 1024


#: The subcommand's one line in ``specmon --help``, and its description.
HELP = "the best chain length per concurrency, from a load profile or a running daemon"
DESCRIPTION = (
    "Per concurrency bucket, the chain length (0 = speculation off) that maximises the "
    "expected speed-up at the draft cost measured there, with vLLM's "
    "num_speculative_tokens_per_batch_size schedule and llama.cpp's --spec-draft-n-max. "
    f"Exit status: 0 ok, {EXIT_NO_ADVICE} nothing to recommend from (a bad profile, no "
    f"measured cost, an unreachable daemon), {EXIT_USAGE} bad arguments."
)


def add_parser(sub: Any) -> None:
    p = command(sub, "recommend", help=HELP, description=DESCRIPTION)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--profile", type=Path, metavar="FILE", help="a profile from specmon measure --profile-out"
    )
    source.add_argument(
        "--from",
        dest="from_url",
        metavar="URL",
        help="a running specmon daemon (http://host:port; reads /api/v1/targets)",
    )
    p.add_argument("--target", metavar="NAME", help="with --from: the target to advise on")
    p.add_argument("--model", metavar="NAME", help="with --from: the model, if several")
    p.add_argument("--window", metavar="W", help="with --from: the window (default: longest)")
    p.add_argument(
        "--chain-length",
        type=int_at_least(1),
        default=None,
        metavar="K",
        help="the longest chain to consider (default: the engine's)",
    )
    p.add_argument(
        "--timeout", type=positive_float, default=10.0, metavar="SECONDS", help="with --from"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


async def _fetch_targets(url: str, name: str, timeout: float) -> object:
    """The daemon's document of target ``name`` alone (``?target=``): the whole of
    ``/api/v1/targets`` is 4.3 MB at 1,000 targets and outgrows MAX_BYTES at about 4,000. A
    daemon that ignores the parameter answers with every target; input_from_targets picks."""
    target = url.rstrip("/") + "/api/v1/targets?" + urlencode({"target": name})
    async with open_session(max_connections=1, purpose="recommend") as session:
        result = await fetch_page(session, target, timeout=timeout, max_bytes=MAX_BYTES)
    try:
        return json.loads(result.text)
    except (json.JSONDecodeError, RecursionError):
        raise FetchError(ScrapeResult.PARSE_ERROR, f"{target}: the answer is not JSON") from None


def _input(args: argparse.Namespace) -> tuple[RecommendInput, str]:
    if args.profile is not None:
        try:
            text = files.read_text_capped(args.profile, max_bytes=MAX_BYTES)
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise RecommendError([f"{args.profile}: larger than {MAX_BYTES} bytes"]) from None
            raise RecommendError([f"{args.profile}: {exc.strerror or exc}"]) from None
        except UnicodeDecodeError as exc:
            raise RecommendError([f"{args.profile}: {exc}"]) from None
        try:
            document = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise RecommendError([f"{args.profile}: not JSON ({exc})"]) from None
        try:
            profile = profile_from_json(document)
        except ProfileError as exc:
            raise RecommendError([f"{args.profile}: {p}" for p in exc.problems]) from None
        what = f"profile {args.profile}" + (f" (model {profile.model})" if profile.model else "")
        return input_from_profile(profile), what
    if not args.target:
        raise RecommendError(["--from needs --target NAME"])
    try:
        document = asyncio.run(_fetch_targets(args.from_url, args.target, args.timeout))
    except FetchError as exc:
        raise RecommendError([str(exc)]) from None
    data = input_from_targets(document, target=args.target, model=args.model, window=args.window)
    return data, f"daemon {args.from_url}, target {args.target}"


def _advice_text(rec: Recommendation, what: str) -> str:
    lines = [f"specmon recommend · {what}"]
    survival = " ".join(f"{s:.2f}" for s in rec.survival)
    lines.append(f"  acceptance  {rec.acceptance_source}: survival {survival}")
    lines.append(
        f"  draft cost  measured at concurrency {rec.measured_from:.1f} to {rec.measured_to:.1f}; "
        f"chain lengths 0 to {rec.chain_length} considered"
    )
    lines.append("")
    header = ["bucket", "batch sizes", "at concurrency", "c", "", "best k", "speed-up",
              f"at k={rec.chain_length}"]  # fmt: skip
    rows = []
    for a in rec.buckets:
        first, last = a.bucket.batch_sizes
        sizes = f"{first}" if last == first else f"{first}-{last if last is not None else ''}"
        rows.append(
            [
                a.bucket.label,
                sizes,
                f"{a.concurrency:.1f}",
                f"{a.draft_cost:.3f}",
                a.draft_cost_how,
                "off" if a.best_chain_length == 0 else str(a.best_chain_length),
                f"{a.expected_speedup:.2f}x",
                f"{a.current_speedup:.2f}x",
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    for row in [header, *rows]:
        lines.append(
            "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        )
    lines.append("")
    x = rec.crossover
    k = rec.chain_length
    if x is None:
        lines.append(f"  at k={k} speculation pays over the whole measured range")
    elif x.pays_up_to is None:
        lines.append(
            f"  at k={k} speculation does not pay at any measured concurrency "
            f"(costs {x.cost_percent:.0f} % from {x.costs_from:.1f})"
        )
    else:
        lines.append(
            f"  at k={k} speculation pays up to concurrency {words.crossover_words(x)}, costs "
            f"{x.cost_percent:.0f} % from {x.costs_from:.1f}"
            + (" (95 % range in brackets)" if x.low is not None else "")
        )
    lines += ["", "vLLM (inside --speculative-config, vLLM 0.32 dynamic speculative decoding):"]
    schedule = jsontext.dumps(rec.vllm_schedule())
    lines.append(f'  "num_speculative_tokens_per_batch_size": {schedule}')
    lines += [
        "",
        "TensorRT-LLM (YAML for trtllm-serve --extra_llm_api_options; merge into your "
        "speculative_config):",
    ]
    trtllm = rec.trtllm_config()
    if trtllm is None:
        lines.append("  none: speculation does not pay at the lowest measured load")
    else:
        lines.append("  speculative_config:")
        lines.append(f"    max_draft_len: {trtllm['max_draft_len']}")
        lines.append("    draft_len_schedule:")
        lines += [f"      {size}: {k}" for size, k in trtllm["draft_len_schedule"].items()]
    lines += [
        "",
        "SGLang (EAGLE/EAGLE3, topk 1: --speculative-adaptive --speculative-adaptive-config "
        "FILE, FILE holding):",
        "  " + jsontext.dumps(rec.sglang_adaptive_config()),
    ]
    lines += ["", "llama.cpp (one chain length for every load: the row of your usual load):"]
    for a in rec.buckets:
        setting = (
            f"--spec-draft-n-max {a.best_chain_length}"
            if a.best_chain_length
            else "no draft (leave out -md and --spec-type)"
        )
        lines.append(f"  concurrency {a.bucket.label:>5}: {setting}")
    if rec.notes:
        lines += ["", "Notes"]
        lines += [f"  - {n}" for n in rec.notes]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if args.from_url is None and (args.target or args.model or args.window):
        err.write("specmon recommend: --target, --model and --window go with --from\n")
        return EXIT_USAGE
    try:
        data, what = _input(args)
        if args.chain_length is not None:
            data = dataclasses.replace(data, chain_length=args.chain_length)
        rec = recommend(data)
    except RecommendError as exc:
        for problem in exc.problems:
            err.write(f"specmon recommend: {problem}\n")
        return EXIT_NO_ADVICE
    if args.json:
        jsontext.dump({"source": what, **rec.as_dict()}, out, indent=2)
        out.write("\n")
    else:
        out.write(_advice_text(rec, what))
    return 0
