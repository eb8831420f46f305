"""Argument types shared by the subcommands: clear messages for bad values."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "chain_length",
    "command",
    "draft_cost",
    "float_list",
    "int_at_least",
    "int_list",
    "integer",
    "numbers",
    "positive_float",
    "unit_ratio",
]

N = TypeVar("N", int, float)


def numbers(text: str, kind: Callable[[str], N], noun: str) -> list[N]:
    """A comma-separated list (empty items skipped), each item converted by ``kind``; the
    argparse error names the list as one of ``noun`` when an item is not one."""
    try:
        return [kind(item.strip()) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of {noun}"
        ) from None


def _number_list(text: str, kind: type[int] | type[float]) -> list[float] | list[int]:
    if not any(item.strip() for item in text.split(",")):
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return numbers(text, kind, f"{kind.__name__}s")


def int_list(text: str) -> list[int]:
    values = _number_list(text, int)
    if any(v < 1 or v > 64 for v in values):
        raise argparse.ArgumentTypeError("chain lengths must be between 1 and 64")
    return [int(v) for v in values]


def float_list(text: str) -> list[float]:
    values = [float(v) for v in _number_list(text, float)]
    if any(not 0.0 <= v <= 1.0 for v in values):
        raise argparse.ArgumentTypeError("draft costs must be between 0 and 1")
    return values


def integer(text: str) -> int:
    """``text`` as an integer, or the argparse error saying it is not one."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def convert(text: str) -> int:
        value = integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}")
        return value

    return convert


def positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0:  # also rejects NaN
        raise argparse.ArgumentTypeError("must be positive")
    return value


def unit_ratio(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


draft_cost = unit_ratio


def chain_length(text: str) -> int:
    value = int_at_least(1)(text)
    if value > 64:
        raise argparse.ArgumentTypeError("must be between 1 and 64")
    return value


def command(sub: Any, name: str, *, help: str, description: str) -> argparse.ArgumentParser:
    """Subcommand ``name`` of ``specmon``: its line in ``specmon --help`` and its description."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    return parser
