"""``specmon tap``: a reverse proxy beside one engine that reads each response's
per-request speculation fields and counts them per request class (docs/tap.md)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from specmon.cli import web as web_cli  # security: --web.* flags (specmon/web)
from specmon.cli._args import command
from specmon.config_values import ConfigError, parse_listen_address
from specmon.logs import LEVELS, configure_logging, get_logger
from specmon.tap.app import Tap
from specmon.tap.config import read_tap_config

__all__ = ["add_parser"]

HELP = "a reverse proxy for one engine that counts acceptance per request class"
DESCRIPTION = (
    "Pass every request to the engine at --upstream and every response back, "
    "unchanged and unbuffered (server-sent events chunk by chunk); read each "
    "generation response's per-request speculation fields (vLLM "
    "metrics.speculative_decoding, llama.cpp timings.draft_n, TensorRT-LLM "
    "speculative_decoding, SGLang meta_info) and count them per class on the tap's "
    "own /metrics. The class comes from a request header against an allowlist "
    "(--class-header, --classes), or (--config.file) from the model name or a "
    "prompt-length bucket. SIGHUP reloads --config.file and --web.config.file. "
    "docs/tap.md"
)


def add_parser(sub: Any) -> None:
    tap = command(sub, "tap", help=HELP, description=DESCRIPTION)
    tap.add_argument("--upstream", default=None, metavar="URL", help="the engine, e.g. "
                     "http://127.0.0.1:8000 (or upstream: in --config.file)")  # fmt: skip
    tap.add_argument(
        "--listen",
        default="127.0.0.1:9410",
        metavar="HOST:PORT",
        help="address to serve on (default 127.0.0.1:9410)",
    )
    tap.add_argument(
        "--class-header", dest="class_header", default=None, metavar="NAME",
        help="the request header that names a request's class",
    )  # fmt: skip
    tap.add_argument(
        "--classes",
        default=None,
        metavar="A,B,...",
        help="the allowed classes (at most 31); any other value, or none, is 'other'",
    )
    tap.add_argument("--config.file", dest="config_file", type=Path, default=None,
                     metavar="FILE", help="the rest of the configuration (docs/tap.md)")  # fmt: skip
    tap.add_argument(
        "--check-config",
        dest="check_config",
        action="store_true",
        help="check the configuration, print it and exit (0: valid, 1: not)",
    )
    tap.add_argument(
        "--event-loop",
        dest="event_loop",
        choices=("auto", "uvloop", "asyncio"),
        default="auto",
        help="uvloop (pip install uvloop; about half the tap's CPU per streamed chunk, "
        "docs/tap.md), asyncio's own, or auto: uvloop when installed (default)",
    )
    web_cli.add_run_arguments(tap)  # security: --web.config.file, header timeout, connections
    tap.add_argument("--log.level", dest="log_level", choices=LEVELS, default="info")
    tap.add_argument("--log.format", dest="log_format", choices=("json", "console"),
                     default=None, help="default: console on a terminal, JSON otherwise")  # fmt: skip
    tap.set_defaults(func=_run)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    classes = None
    if args.classes is not None:
        classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    return {"upstream": args.upstream, "class_header": args.class_header, "classes": classes}


def _run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        listen = parse_listen_address(args.listen)
    except ValueError as exc:
        sys.stderr.write(f"specmon tap: --listen: {exc}\n")
        return 2
    overrides = _overrides(args)
    try:
        config = read_tap_config(args.config_file, overrides=overrides)
    except ConfigError as exc:
        (out if args.check_config else sys.stderr).write(f"FAILED {exc}\n")
        return 1
    if args.check_config:
        rule = config.classes
        out.write(
            f"OK upstream {config.upstream}; classes from {rule.source.value}: "
            + ", ".join(rule.classes())
            + f"; long requests from {config.long_request_tokens} tokens; "
            f"{config.max_parse_bytes} bytes kept per response\n"
        )
        return 0
    configure_logging(level=args.log_level, fmt=args.log_format)
    tap = Tap(
        config,
        listen=listen,
        web_options=web_cli.web_options(args),
        config_path=args.config_file,
        overrides=overrides,
        log=get_logger(component="tap"),
    )
    try:
        factory = loop_factory(args.event_loop)
    except ImportError:
        sys.stderr.write("specmon tap: --event-loop uvloop: uvloop is not installed\n")
        return 2
    tap.log.info("tap_event_loop", loop="asyncio" if factory is None else "uvloop")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(tap.serve())


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop's factory: uvloop's (``auto``: when it is installed) or None for
    asyncio's own. uvloop is optional: the tap runs the same without it, at a higher CPU cost
    per chunk; ``uvloop`` asked for and missing raises ImportError."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        if choice == "uvloop":
            raise
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
