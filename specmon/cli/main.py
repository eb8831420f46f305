"""The ``specmon`` command: one entry point, one subcommand per job."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specmon import __version__
from specmon.cli import (
    breakeven,
    demo,
    inspect,
    mark,
    measure,
    recommend,
    run,
    simulate,
    tap,
    web,
)

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specmon",
        description=(
            "Watch speculative decoding live: per-position acceptance, effective alpha, "
            "break-even, margin, expected speed-up and best chain length from vLLM, llama.cpp "
            "and SGLang metrics."
        ),
    )
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    breakeven.add_parser(sub)
    inspect.add_parser(sub)
    run.add_parsers(sub)
    web.add_parser(sub)  # check-web-config (security)
    simulate.add_parser(sub)
    demo.add_parser(sub)
    measure.add_parser(sub)
    recommend.add_parser(sub)
    mark.add_parser(sub)
    tap.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
