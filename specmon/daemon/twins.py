"""Where a target finds its baseline twin (``baseline: NAME``), and whether the twin may be
believed. Pure: the states are the daemon's; nothing here is I/O.

A twin is checked before its timings are: it must not speculate (its drafts or accepted-token
counter rises within the compared window; llama.cpp publishes ``spec_decode_*`` at 0 without a
draft, and such a twin is fine) and it must serve the same model (the pages' model names where
both carry one: vLLM, SGLang, TensorRT-LLM; llama.cpp and TGI pages carry none, so then the
configured ``model:`` values; else the check says "model not checked"). A twin refused is not
compared with: the verdict falls to the next basis and its note says why, and
``specmon_baseline_usable{target, baseline, reason}`` is 0.

The same checks pick a canary's baseline (:meth:`Twins.canary`): the members of its group
(``group``, specmon.state.groups) that run without speculation, each checked as a twin,
their windows pooled; which members, and whether a canary at all, is
:func:`specmon.answer.canary`'s decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specmon.answer import Canary, Member, Refusal, canary
from specmon.daemon.config import TargetConfig
from specmon.engines import Engine
from specmon.load import LoadWindow
from specmon.load.pool import pool_windows
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

    def configuration(self, model: str) -> int | None:
        """Its chain length for ``model`` now: 0 without speculation, -1 speculating with k
        unknown, None not known (no page yet, or a change being confirmed)."""
        ...


class Twins:
    """Every target's state by name, scraped directly or read through a Prometheus source:
    where a target finds the twin it compares with (``baseline:``). The daemon hands one to
    every state it builds and keeps it current as targets come and go."""

    __slots__ = ("_compares", "_groups", "_member_of", "_pools", "_states", "_twin_of")

    def __init__(self) -> None:
        self._states: dict[str, TwinState] = {}
        #: Group -> its live members' names, sorted (specmon.state.groups: read at every
        #: scrape of a speculating member), and each name's group.
        self._groups: dict[str, tuple[str, ...]] = {}
        self._member_of: dict[str, str] = {}
        #: (group, model, seconds) -> the windows last pooled for a canary and their pool,
        #: kept while they stay the same objects (a member's window is, until its next page).
        self._pools: dict[tuple[str, str, float], tuple[tuple[LoadWindow, ...], LoadWindow]] = {}
        #: Target name -> the twin it names as ``baseline:``.
        self._compares: dict[str, str] = {}
        #: Twin name -> the targets that compare with it, sorted (read at every scrape).
        self._twin_of: dict[str, tuple[str, ...]] = {}

    def put(self, state: TwinState) -> None:
        self._states[state.config.name] = state
        self._index(state.config.name, state.config.baseline)
        self._group(state.config.name, state.config.group)

    def update(self, state: TwinState) -> None:
        """``state``'s configuration changed (its ``baseline:`` or group may have)."""
        if self._states.get(state.config.name) is state:
            self._index(state.config.name, state.config.baseline)
            self._group(state.config.name, state.config.group)

    def drop(self, state: TwinState) -> None:
        """Forget ``state`` (not another state that took its name since)."""
        if self._states.get(state.config.name) is state:
            del self._states[state.config.name]
            self._index(state.config.name, None)
            self._group(state.config.name, "")

    def members(self, group: str) -> tuple[str, ...]:
        """The live members of ``group``, sorted ("": none: a target in no group)."""
        return self._groups.get(group, ()) if group else ()

    def _group(self, name: str, group: str) -> None:
        before = self._member_of.get(name)
        if before == (group or None):
            return
        if before is not None:
            rest = self._groups[before] = tuple(n for n in self._groups[before] if n != name)
            if not rest:
                del self._groups[before]
                for key in [k for k in self._pools if k[0] == before]:
                    del self._pools[key]
            del self._member_of[name]
        if group:
            self._groups[group] = tuple(sorted({*self._groups.get(group, ()), name}))
            self._member_of[name] = group

    def canary(
        self,
        name: str,
        model: str,
        seconds: float,
        *,
        k: int | None,
        engine: Engine | None,
        configured: str | None,
    ) -> Canary | Refusal | None:
        """The canary baseline of target ``name`` speculating on ``model`` with chain length
        ``k``: its group's members on k = 0, checked as twins are, their windows pooled
        (the decision is :func:`specmon.answer.canary`'s; None: in no group, or none of
        its members runs without speculation)."""
        group = self._member_of.get(name)
        if group is None:
            return None
        members: list[Member] = []
        for other in self._groups.get(group, ()):
            state = self._states.get(other)
            if state is None:
                continue
            if other == name:
                members.append(Member(other, k if k else -1))
                continue
            chain = state.configuration(model)
            if chain != 0:
                members.append(Member(other, chain))
                continue
            window, check = self.baseline(
                other, model, seconds, engine=engine, configured=configured
            )
            if check is not None and not check.usable:
                members.append(Member(other, 0, window, check.detail or check.reason))
            else:
                note = check.detail if check is not None else None
                members.append(Member(other, 0, window, None, note))
        if len(members) < 2:
            self._pools.pop((group, model, seconds), None)
            return None

        def pool(windows: Sequence[LoadWindow]) -> LoadWindow:
            key = (group, model, seconds)
            kept = self._pools.get(key)
            if (
                kept is not None
                and len(kept[0]) == len(windows)
                and all(a is b for a, b in zip(kept[0], windows, strict=True))
            ):
                return kept[1]
            pooled = pool_windows(windows)
            self._pools[key] = (tuple(windows), pooled)
            return pooled

        found = canary(k=k, members=members, pool=pool)
        if not isinstance(found, Canary):
            self._pools.pop((group, model, seconds), None)  # the rollout done: let it go
        return found

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
