"""``specmon inspect``: acceptance figures from one page (lifetime) or two (an interval)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from specmon import jsontext
from specmon.cli import render
from specmon.cli._args import chain_length, command, draft_cost
from specmon.engines import Engine, ModelReading, PageReading, read_page
from specmon.report import (
    DEFAULT_DRAFT_COST,
    AcceptanceReport,
    detected_chain_length,
    engine_draft_cost,
    report_from_counters,
    report_from_gauges,
)
from specmon.sources.file import read_page_file
from specmon.sources.http import FetchError, fetch_page, open_session
from specmon.windows import increase

__all__ = ["add_parser", "run"]

MAX_BYTES = 16 * 1024 * 1024
EXIT_ERROR = 1
EXIT_NO_SPECULATION = 3


#: The subcommand's one line in ``specmon --help``, and its description.
HELP = "acceptance figures from a metrics page (URL or file), or between two pages"
DESCRIPTION = (
    "Read a vLLM, llama.cpp, SGLang, TensorRT-LLM or TGI metrics page and report "
    "per-position acceptance (where the engine publishes it), "
    "alpha, break-even, margin, expected speed-up and best chain length. With one page "
    "the figures cover the server's lifetime; with --before (an earlier page) or "
    "--interval (two scrapes of a URL) they cover the time between the two pages. "
    f"Exit status: 0 ok, {EXIT_ERROR} unreadable source, {EXIT_NO_SPECULATION} no "
    "speculative-decoding data on the page."
)


def add_parser(sub: Any) -> None:
    parser = command(sub, "inspect", help=HELP, description=DESCRIPTION)
    parser.add_argument("source", help="http(s) URL of a /metrics endpoint, or a saved page")
    parser.add_argument("--before", metavar="SOURCE", help="an earlier page of the same server")
    parser.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="scrape the URL twice, this many seconds apart, and report the interval",
    )
    parser.add_argument("--draft-cost", "-c", type=draft_cost, default=None, metavar="C")
    parser.add_argument(
        "--chain-length",
        "-k",
        type=chain_length,
        default=None,
        metavar="K",
        help="chain length (default: the number of position series on the page)",
    )
    parser.add_argument(
        "--engine",
        choices=[e.value for e in Engine],
        default=None,
        help="skip auto-detection",
    )
    parser.add_argument("--model", default=None, help="model name to report (llama.cpp has none)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class _Loaded:
    reading: PageReading
    taken_at: float | None


class _SourceError(Exception):
    pass


async def _load_url(url: str, timeout: float) -> str:
    async with open_session(max_connections=1, purpose="inspect") as session:
        try:
            result = await fetch_page(session, url, timeout=timeout, max_bytes=MAX_BYTES)
        except FetchError as exc:
            raise _SourceError(f"{url}: {exc}") from None
    return result.text


def _load(source: str, args: argparse.Namespace) -> _Loaded:
    engine = Engine(args.engine) if args.engine else None
    if source.startswith(("http://", "https://")):
        text = asyncio.run(_load_url(source, args.timeout))
        taken = time.time()
    else:
        try:
            text = read_page_file(Path(source), max_bytes=MAX_BYTES)
        except (OSError, ValueError) as exc:
            raise _SourceError(str(exc)) from None
        taken = None
    reading = read_page(text, engine=engine, validate_all=True, model=args.model)
    if not reading.is_exposition:
        raise _SourceError(f"{source}: {reading.message}")
    return _Loaded(reading, taken)


def _report(
    after: ModelReading, before: ModelReading | None, args: argparse.Namespace, cost: float
) -> tuple[AcceptanceReport, list[str]]:
    notes: list[str] = []
    if after.counters is not None:
        counters = after.counters
        if before is not None and before.counters is not None:
            try:
                window = increase(before.counters, after.counters)
            except ValueError as exc:
                notes.append(f"{exc}: lifetime figures of the later page shown")
            else:
                counters = window.as_counters()
                if window.resets:
                    notes.append(
                        "counters went down between the pages: the server restarted; the "
                        "figures cover the time since the restart"
                    )
        elif before is not None:
            notes.append("the earlier page has no data for this model; lifetime figures shown")
        return report_from_counters(
            counters,
            draft_cost=cost,
            configured_chain_length=args.chain_length,
            detected_chain_length=detected_chain_length(after),
            engine_acceptance_length=(
                after.gauges.mean_acceptance_length if after.gauges is not None else None
            ),
        ), notes
    assert after.gauges is not None
    if before is not None:
        notes.append("this engine publishes gauges, not counters: the later page is shown")
    return report_from_gauges(
        after.gauges,
        draft_cost=cost,
        configured_chain_length=args.chain_length,
        detected_chain_length=after.chain_length,
    ), notes


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    cost = args.draft_cost if args.draft_cost is not None else DEFAULT_DRAFT_COST
    cost_source = "given" if args.draft_cost is not None else "default"
    try:
        if args.interval is not None:
            if args.before is not None:
                raise _SourceError("--interval and --before exclude each other")
            if not args.source.startswith(("http://", "https://")):
                raise _SourceError("--interval needs a URL")
            first = _load(args.source, args)
            time.sleep(max(args.interval, 0.0))
            after = _load(args.source, args)
            before: _Loaded | None = first
        else:
            before = _load(args.before, args) if args.before else None
            after = _load(args.source, args)
    except _SourceError as exc:
        err.write(f"specmon inspect: {exc}\n")
        return EXIT_ERROR

    reading = after.reading
    interval: float | None = None
    if before is not None and before.taken_at is not None and after.taken_at is not None:
        interval = after.taken_at - before.taken_at
    previous = {m.model: m for m in before.reading.models} if before is not None else {}
    models_out: list[dict[str, Any]] = []
    for model in reading.models:
        report, notes = _report(model, previous.get(model.model) if before else None, args, cost)
        models_out.append(
            {
                "engine": reading.engine.value if reading.engine else None,
                "model": model.model,
                **report.as_dict(),
                "draft_cost_source": cost_source,
                "engine_draft_cost": engine_draft_cost(
                    model.gauges, chain_length=report.chain_length
                ),
                "notes": [*report.notes, *notes],
            }
        )
    document: dict[str, Any] = {
        "source": args.source,
        "before": args.before,
        "scope": "interval" if before is not None else "lifetime",
        "interval_seconds": interval,
        "engine": reading.engine.value if reading.engine else None,
        "page_notes": list(reading.notes),
        "malformed_lines": reading.malformed,
        "problems": [str(p) for p in reading.problems],
        "message": reading.message,
        "models": models_out,
    }
    if args.json:
        jsontext.dump(document, out, indent=2)
        out.write("\n")
    else:
        render.inspect_text(document, out)
    return 0 if reading.speculation else EXIT_NO_SPECULATION
