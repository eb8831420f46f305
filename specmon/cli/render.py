"""Human-readable output for the CLI: aligned tables, bars, no colour unless asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from specmon.formatting import number

__all__ = ["bar", "fmt", "inspect_text", "signed"]

_BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(value: float | None, width: int = 20) -> str:
    """A horizontal bar for a 0..1 value, with eighth-block resolution."""
    if value is None:
        return ""
    value = min(max(value, 0.0), 1.0)
    eighths = round(value * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_BLOCKS[part] if part else "")).ljust(width)


def fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return number(value, digits, suffix=suffix)


def signed(value: float | None, digits: int = 3) -> str:
    return number(value, digits, signed=True)


def inspect_text(doc: Mapping[str, Any], out: TextIO) -> None:
    scope = doc["scope"]
    if scope == "interval":
        span = doc.get("interval_seconds")
        what = f"between the two pages ({span:.1f} s)" if span else "between the two pages"
    else:
        what = "over the server's lifetime (one page)"
    out.write(f"source  {doc['source']}\n")
    if doc.get("before"):
        out.write(f"before  {doc['before']}\n")
    out.write(f"engine  {doc['engine'] or 'unknown'}; figures {what}\n")
    for note in doc["page_notes"]:
        out.write(f"note    {note}\n")
    if doc["malformed_lines"]:
        out.write(f"warning {doc['malformed_lines']} malformed line(s) skipped:\n")
        for problem in doc["problems"]:
            out.write(f"          {problem}\n")
    if not doc["models"]:
        out.write(f"\n{doc['message']}\n")
        return
    for model in doc["models"]:
        out.write(f"\nmodel {model['model']}\n")
        if model["drafts"] is not None or model["draft_tokens"] is not None:
            drafts = "not counted" if model["drafts"] is None else model["drafts"]
            tokens = "not counted" if model["draft_tokens"] is None else model["draft_tokens"]
            out.write(
                f"  drafts {drafts}  draft tokens {tokens}  "
                f"accepted tokens {model['accepted_tokens']}\n"
            )
        k = model["chain_length"]
        k_text = f"{k} ({model['chain_length_source']})" if k is not None else "unknown"
        out.write(
            f"  chain length k {k_text}  draft cost c {model['draft_cost']:g} "
            f"({model['draft_cost_source']})\n"
        )
        if model.get("engine_draft_cost") is not None:
            out.write(
                f"  draft cost measured by the engine {model['engine_draft_cost']:.4f} "
                "(c = o / (k (1 - o)) from its draft overhead o, last iteration)\n"
            )
        if model["positions"]:
            out.write("\n  position  survival  conditional\n")
            for pos in model["positions"]:
                out.write(
                    f"  {pos['position']:>8}  {fmt(pos['survival']):>8}  "
                    f"{fmt(pos['conditional']):>11}  {bar(pos['survival'])}\n"
                )
            out.write("\n")
        out.write(
            f"  mean acceptance length {fmt(model['mean_acceptance_length'])}  "
            f"draft acceptance ratio {fmt(model['draft_acceptance_ratio'])}\n"
        )
        out.write(
            f"  alpha {fmt(model['alpha'])}  break-even {fmt(model['breakeven_alpha'])}  "
            f"margin {signed(model['alpha_margin'])}\n"
        )
        best = model["best_chain_length"]
        best_text = (
            "-"
            if best is None
            else (
                "0 (speculation does not pay)"
                if best == 0
                else f"{best} ({fmt(model['best_speedup'], 2, 'x')})"
            )
        )
        out.write(
            f"  expected speed-up {fmt(model['expected_speedup'], 2, 'x')}  "
            f"best chain length {best_text}\n"
        )
        for note in model["notes"]:
            out.write(f"  note: {note}\n")
