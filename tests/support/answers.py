"""Answers made by hand for tests of the surfaces (specmon.answer): every field named, so a
surface test can give each one an odd value and find it rendered as given."""

from __future__ import annotations

from typing import Any

from specmon.answer import Answer, Evidence, ReadState, Standing, standing

__all__ = ["make_answer"]


def make_answer(
    speedup: float | None = 1.5,
    *,
    basis: Evidence = Evidence.CONFIGURED,
    state: ReadState | None = None,
    margin: float | None = None,
    breakeven: float | None = 0.3,
    cost: float | None = 0.1,
    **fields: Any,
) -> Answer:
    """An answer with ``speedup`` on ``basis`` (its state the basis's usual one: a guess on
    the configured c, measured on a twin), margin ``speedup - 1`` unless given."""
    if state is None:
        state = (
            ReadState.GUESS
            if basis in (Evidence.CONFIGURED, Evidence.DEFAULT)
            else ReadState.MODELLED
            if basis is Evidence.ENGINE
            else ReadState.MEASURED
        )
    if margin is None and speedup is not None:
        margin = speedup - 1.0
    judged = Standing.MEASURING if state is ReadState.MEASURING else standing(speedup, margin)
    values: dict[str, Any] = {
        "basis": basis, "state": state, "speedup": speedup, "interval": None,
        "draft_cost": cost, "breakeven_alpha": breakeven, "alpha_margin": margin,
        "best_chain_length": None, "best_speedup": None, "standing": judged,
    }  # fmt: skip
    values.update(fields)
    return Answer(**values)
