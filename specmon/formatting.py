"""Numbers for people: one formatter for the terminal, the status page and the A/B tool."""

from __future__ import annotations

__all__ = ["number"]


def number(
    value: float | None,
    digits: int = 3,
    *,
    suffix: str = "",
    missing: str = "-",
    signed: bool = False,
) -> str:
    """``value`` with ``digits`` decimals (and a sign when ``signed``), or ``missing``."""
    if value is None:
        return missing
    sign = "+" if signed else ""
    return f"{value:{sign}.{digits}f}{suffix}"
