"""The answer in words: the same sentences on the status page, the target page, the terminal
view and the API. Pure: functions of an :class:`Answer` (HTML escaping is the page's).

Nothing here computes a figure; it words the ones the answer holds."""

from __future__ import annotations

from specmon.answer.crossover import Crossover
from specmon.answer.model import Answer, Evidence, ReadState, Standing

__all__ = [
    "advice",
    "basis_words",
    "best_words",
    "cost_words",
    "crossover_words",
    "detail",
    "measuring_words",
]

#: How a basis reads under the answer's figure.
_BASIS = {
    Evidence.TWIN: "vs its twin",
    Evidence.CANARY: "vs its group's pods on k = 0",
    Evidence.PROFILE: "vs its profile",
    Evidence.HISTORY: "vs its own past",
    Evidence.ENGINE: "engine's c",
    Evidence.CONFIGURED: "configured c: a guess",
    Evidence.DEFAULT: "default c: a guess",
}


def basis_words(answer: Answer) -> str:
    """What the figure rests on, short ("vs its twin, interpolated", "default c: a guess")."""
    text = _BASIS[answer.basis]
    if answer.basis is Evidence.CANARY and answer.against_detail:
        text = answer.against_detail  # "canary: 1 of 4 pods on k = 4, compared with the 3 ..."
    if answer.state is ReadState.INTERPOLATED:
        text += ", off the cost curve"
    elif answer.state is ReadState.MEASURING:
        text += ", measuring a new load"
    return text


def cost_words(answer: Answer) -> str:
    """Which c the figures beside the answer are at ("at measured c 0.402")."""
    c = answer.draft_cost
    value = "-" if c is None else f"{c:.3f}" if answer.measured_cost else f"{c:g}"
    if answer.basis is Evidence.ENGINE:
        return f"at the engine's c {value}"
    if answer.compared:
        return f"at measured c {value}"
    if answer.basis is Evidence.DEFAULT:
        return f"at default c {value} (a guess)"
    return f"at configured c {value} (a guess)"


def best_words(answer: Answer) -> str:
    """The best chain length and its speed-up ("2 (1.31x)", "0 (off)", "-")."""
    k = answer.best_chain_length
    if k is None:
        return "-"
    if k == 0:
        return "0 (off)"
    speed = f" ({answer.best_speedup:.2f}x)" if answer.best_speedup is not None else ""
    return f"{k}{speed}"


def crossover_words(crossover: Crossover) -> str:
    """The crossover with its 95 % range ("10.9 (10.2-11.6)")."""
    text = f"{crossover.concurrency:.1f}"
    if crossover.low is not None and crossover.high is not None:
        text += f" ({crossover.low:.1f}-{crossover.high:.1f})"
    return text


def measuring_words(answer: Answer) -> str:
    """While measuring: the new load and what it lacks, and the last answer with a number
    at its own load ("n ~ 16.0 not measured yet: 2 scrape intervals (needs 3); at n ~ 4.0:
    2.28x (2.23-2.32)")."""
    where = f"n ~ {answer.concurrency:.1f}" if answer.concurrency is not None else "this load"
    text = f"{where} not measured yet"
    if answer.progress:
        text += f": {answer.progress}"
    earlier = answer.earlier
    if earlier is not None:
        at = f"n ~ {earlier.concurrency:.1f}" if earlier.concurrency is not None else "earlier"
        span = (
            f" ({earlier.interval[0]:.2f}-{earlier.interval[1]:.2f})"
            if earlier.interval is not None
            else ""
        )
        text += f"; at {at}: {earlier.speedup:.2f}x{span}"
    return text


def detail(answer: Answer) -> str:
    """One line: what the answer rests on, and how to get better evidence."""
    refused = "; ".join(f"{r.basis.value} refused: {r.reason}" for r in answer.refused)
    prefix = f"{refused}; " if refused else ""
    if answer.state is ReadState.MEASURING:
        return prefix + measuring_words(answer)
    if answer.compared:
        against = {
            Evidence.TWIN: f"the twin {answer.against}",
            Evidence.CANARY: f"its group's pods without speculation ({answer.against_detail})",
            Evidence.PROFILE: "the cost profile",
            Evidence.HISTORY: answer.against_detail or "this server's own past",
        }[answer.basis]
        how = (
            f"bucket {answer.bucket}"
            if answer.state is ReadState.MEASURED
            else f"bucket {answer.bucket}, off the cost curve's last hour"
        )
        text = f"realized against {against} at this load ({how})"
    elif answer.basis is Evidence.ENGINE:
        text = f"at the draft cost the engine measures (c = {answer.draft_cost:.3g})"
    else:
        which = "configured" if answer.basis is Evidence.CONFIGURED else "default"
        text = (
            f"at the {which} draft cost c = {answer.draft_cost:g}, a guess"
            + ("" if which == "configured" else " (no draft_cost configured)")
            + "; a baseline twin (baseline:) or a cost profile (specmon measure "
            "--profile-out) would measure it at this load"
        )
    if answer.cut:
        text += f"; {answer.cut}"
    return prefix + text


def advice(answer: Answer) -> str:
    """One sentence for an operator: what the answer means, and what to do."""
    if answer.state is ReadState.MEASURING:
        return f"Measuring: {measuring_words(answer)}."
    if answer.speedup is None and answer.alpha_margin is None:
        return "Nothing to judge yet: no drafts counted in the window."
    at = f" at n ~ {answer.concurrency:.1f}" if answer.concurrency is not None else ""
    speed = f"{answer.speedup:.2f}x" if answer.speedup is not None else "an unknown speed-up"
    guess = (
        ""
        if answer.state is not ReadState.GUESS
        else (
            " The draft cost is a guess: a twin without speculation (baseline:) or a cost profile "
            "would measure it."
        )
    )
    x = answer.crossover
    paying = [p for p in answer.per_load if p.best_chain_length]
    if answer.standing in (Standing.SLOWER, Standing.BELOW):
        if x is not None and x.pays_up_to is not None:
            return (
                f"Speculation costs time{at} ({speed}); it pays below n ~ "
                f"{crossover_words(x)}: keep it at low load with a chain length per load "
                "(specmon recommend --from), rather than switching it off." + guess
            )
        if paying:
            loads = ", ".join(f"{p.label}: k = {p.best_chain_length}" for p in paying)
            return (
                f"Speculation costs time{at} ({speed}) but pays at other loads ({loads}): set "
                "a chain length per load (specmon recommend --from)." + guess
            )
        return (
            f"Speculation costs time{at} ({speed}) at every load measured: switch it off, "
            "shorten the chain, or use a cheaper draft." + guess
        )
    if answer.standing is Standing.NEAR:
        return f"Speculation barely pays{at} ({speed}): within 5 % of break-even." + guess
    tail = f"; it stops paying at n ~ {crossover_words(x)}" if x is not None else ""
    return f"Speculation pays{at}: {speed}{tail}." + guess
