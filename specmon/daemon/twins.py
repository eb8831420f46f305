"""Where a target finds its baseline twin (``baseline: NAME``), and whether the twin may be
believed. Pure: the states are the daemon's; nothing here is I/O.

A twin is checked before its timings are: it must not speculate (its drafts or accepted-token
counter rises within the compared window; llama.cpp publishes ``spec_decode_*`` at 0 without a
draft, and such a twin is fine) and it must serve the same model (the pages' model names where
both carry one: vLLM, SGLang, TensorRT-LLM; llama.cpp and TGI pages carry none, so then the
configured ``model:`` values; else the check says "model not checked"). A twin refused is not
compared with: the verdict falls to the next basis and its note says why, and
``specmon_baseline_usable{target, baseline, reason}`` is 0.
"""

from __future__ import annotations

from typing import Protocol

from specmon.daemon.config import TargetConfig
from specmon.engines import Engine
from specmon.load import LoadWindow
from specmon.records import record

__all__ = ["NAMELESS", "TwinCheck", "TwinState", "Twins", "check_twin"]

#: Engines whose pages name no model (specmon reads one model, "default").
NAMELESS = frozenset({Engine.LLAMACPP, Engine.TGI})


@record
class TwinCheck:
    """Whether a twin may be compared with, and why (the ``reason`` label of
    ``specmon_baseline_usable``): "same_model", "model_not_checked" (usable), "speculates",
    "other_model" (refused)."""

    usable: bool
    reason: str
    #: One line for the notes (None for a twin checked and found usable).
    detail: str | None = None


class TwinState(Protocol):
    """What :class:`Twins` reads of a target's state."""

    @property
    def config(self) -> TargetConfig: ...

    @property
    def engine(self) -> Engine | None: ...

    def load_model(self, model: str) -> str | None: ...

    def load_window(self, model: str, seconds: float) -> LoadWindow | None: ...


class Twins:
    """Every target's state by name, scraped directly or read through a Prometheus source:
    where a target finds the twin it compares with (``baseline:``). The daemon hands one to
    every state it builds and keeps it current as targets come and go."""

    __slots__ = ("_compares", "_states", "_twin_of")

    def __init__(self) -> None:
        self._states: dict[str, TwinState] = {}
        #: Target name -> the twin it names as ``baseline:``.
        self._compares: dict[str, str] = {}
        #: Twin name -> the targets that compare with it, sorted (read at every scrape).
        self._twin_of: dict[str, tuple[str, ...]] = {}

    def put(self, state: TwinState) -> None:
        self._states[state.config.name] = state
        self._index(state.config.name, state.config.baseline)

    def update(self, state: TwinState) -> None:
        """``state``'s configuration changed (its ``baseline:`` may have)."""
        if self._states.get(state.config.name) is state:
            self._index(state.config.name, state.config.baseline)

    def drop(self, state: TwinState) -> None:
        """Forget ``state`` (not another state that took its name since)."""
        if self._states.get(state.config.name) is state:
            del self._states[state.config.name]
            self._index(state.config.name, None)

    def baseline_for(self, name: str) -> tuple[str, ...]:
        """The targets that name ``name`` as their ``baseline:`` twin, sorted."""
        return self._twin_of.get(name, ())

    def _index(self, name: str, baseline: str | None) -> None:
        before = self._compares.get(name)
        if before == baseline:
            return
        if before is not None:
            rest = tuple(n for n in self._twin_of.get(before, ()) if n != name)
            if rest:
                self._twin_of[before] = rest
            else:
                self._twin_of.pop(before, None)
            del self._compares[name]
        if baseline is not None:
            self._compares[name] = baseline
            self._twin_of[baseline] = tuple(sorted({*self._twin_of.get(baseline, ()), name}))

    def load_window(self, name: str, model: str, seconds: float) -> LoadWindow | None:
        """Target ``name``'s load window of ``model`` (None: no such target or model)."""
        state = self._states.get(name)
        return state.load_window(model, seconds) if state is not None else None

    def baseline(
        self,
        name: str,
        model: str,
        seconds: float,
        *,
        engine: Engine | None,
        configured: str | None,
    ) -> tuple[LoadWindow | None, TwinCheck | None]:
        """Twin ``name``'s window of ``model`` and its check (None, None: no such twin or
        model yet). ``engine``, ``configured``: the comparing target's engine and ``model:``."""
        state = self._states.get(name)
        if state is None:
            return None, None
        twin_model = state.load_model(model)
        if twin_model is None:
            return None, None
        window = state.load_window(twin_model, seconds)
        if window is None:
            return None, None
        check = check_twin(
            name=name,
            window=window,
            model=model,
            twin_model=twin_model,
            engine=engine,
            twin_engine=state.engine,
            configured=configured,
            twin_configured=state.config.model,
        )
        return window, check


def check_twin(
    *,
    name: str,
    window: LoadWindow,
    model: str,
    twin_model: str,
    engine: Engine | None,
    twin_engine: Engine | None,
    configured: str | None,
    twin_configured: str | None,
) -> TwinCheck:
    """The checks of the module's docstring, in order: speculation, then the model."""
    totals = window.totals
    if totals is not None and (totals.drafts > 0 or totals.accepted_tokens > 0):
        return TwinCheck(
            False,
            "speculates",
            f"the twin {name} speculates itself ({totals.drafts} drafts, "
            f"{totals.accepted_tokens} accepted tokens in the window): not a baseline",
        )
    named = engine not in NAMELESS and twin_engine not in NAMELESS
    if named and engine is not None and twin_engine is not None:
        if model != twin_model:
            return TwinCheck(
                False,
                "other_model",
                f"the twin {name} serves model {twin_model[:80]!r}, this target "
                f"{model[:80]!r}: not a baseline",
            )
        return TwinCheck(True, "same_model")
    if configured and twin_configured:
        if configured != twin_configured:
            return TwinCheck(
                False,
                "other_model",
                f"the twin {name} is configured with model {twin_configured[:80]!r}, this "
                f"target with {configured[:80]!r}: not a baseline",
            )
        return TwinCheck(True, "same_model")
    return TwinCheck(
        True,
        "model_not_checked",
        f"model not checked: the pages name no model; set model: on both targets to check "
        f"that the twin {name} serves the same one",
    )
