"""``specmon breakeven``: the break-even table (rows k, columns c; docs/background.md#break-even)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from specmon import arithmetic, jsontext
from specmon.cli._args import command, float_list, int_list, unit_ratio

__all__ = ["add_parser", "run"]


#: The subcommand's one line in ``specmon --help``, and its description.
HELP = "print the break-even acceptance rate for chain lengths and draft costs"
DESCRIPTION = (
    "Break-even alpha: the acceptance rate at which speculation with chain length k and "
    "draft cost c neither gains nor loses (S = 1). Below it, speculation costs time."
)


def add_parser(sub: Any) -> None:
    parser = command(sub, "breakeven", help=HELP, description=DESCRIPTION)
    parser.add_argument(
        "--chain-length", "-k", type=int_list, default=[2, 4, 8], metavar="K[,K...]"
    )
    parser.add_argument(
        "--draft-cost", "-c", type=float_list, default=[0.1, 0.2, 0.35], metavar="C[,C...]"
    )
    parser.add_argument(
        "--alpha", type=unit_ratio, default=None, help="also show the speed-up S at this alpha"
    )
    parser.add_argument(
        "--precision", type=int, default=3, choices=range(1, 10), help="decimals (default 3)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def table(
    chain_lengths: list[int], draft_costs: list[float], alpha: float | None
) -> list[dict[str, Any]]:
    rows = []
    for k in chain_lengths:
        for c in draft_costs:
            row: dict[str, Any] = {
                "chain_length": k,
                "draft_cost": c,
                "breakeven_alpha": arithmetic.breakeven_alpha(k, c),
            }
            if alpha is not None:
                row["alpha"] = alpha
                row["speedup"] = arithmetic.speedup(alpha, k, c)
            rows.append(row)
    return rows


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    rows = table(args.chain_length, args.draft_cost, args.alpha)
    if args.json:
        jsontext.dump({"rows": rows}, out, indent=2)
        out.write("\n")
        return 0
    p = args.precision
    costs = args.draft_cost
    width = max(8, p + 4)
    out.write("Break-even acceptance rate alpha (speculation pays above it)\n\n")
    out.write("k \\ c".ljust(7) + "".join(f"{c:>{width}g}" for c in costs) + "\n")
    by_key = {(r["chain_length"], r["draft_cost"]): r for r in rows}
    for k in args.chain_length:
        cells = []
        for c in costs:
            value = by_key[(k, c)]["breakeven_alpha"]
            cells.append(f"{value:>{width}.{p}f}" if value is not None else "never".rjust(width))
        out.write(f"{k:<7}" + "".join(cells) + "\n")
    if args.alpha is not None:
        out.write(f"\nSpeed-up S at alpha = {args.alpha:g}\n\n")
        out.write("k \\ c".ljust(7) + "".join(f"{c:>{width}g}" for c in costs) + "\n")
        for k in args.chain_length:
            cells = [f"{by_key[(k, c)]['speedup']:>{width - 1}.{p}f}x" for c in costs]
            out.write(f"{k:<7}" + "".join(cells) + "\n")
    out.write("\nS = (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)); break-even solves S = 1.\n")
    return 0
