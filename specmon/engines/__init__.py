"""Engine adapters: one page in, typed per-model readings out.

``read_page`` is the single entry point used by the daemon, the CLI and the A/B tool. With
``engine="auto"`` the engine is recognised from marker names on the page. ``read_parsed`` reads
a :class:`~specmon.exposition.Page` built elsewhere (the Prometheus query source builds one per
instance from query results) with the same adapters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from specmon.engines._common import AdapterError
from specmon.engines.llamacpp import LlamacppAdapter
from specmon.engines.model import (
    Context,
    Engine,
    ModelReading,
    PageReading,
    SpecCounters,
    SpecGauges,
)
from specmon.engines.sglang import SglangAdapter
from specmon.engines.vllm import VllmAdapter
from specmon.engines.vllm_v0 import VllmV0Adapter
from specmon.exposition import Page, Problem, parse

__all__ = [
    "AdapterError",
    "Context",
    "Engine",
    "ModelReading",
    "PageReading",
    "SpecCounters",
    "SpecGauges",
    "detect_engine",
    "detect_engine_from_names",
    "read_page",
    "read_parsed",
    "wanted_names",
]


class Adapter(Protocol):
    engine: Engine
    wanted: tuple[str, ...]
    markers: tuple[str, ...]

    def read(self, page: Page) -> tuple[list[ModelReading], list[str]]: ...


ADAPTERS: dict[Engine, Adapter] = {
    Engine.VLLM: VllmAdapter(),
    Engine.VLLM_V0: VllmV0Adapter(),
    Engine.LLAMACPP: LlamacppAdapter(),
    Engine.SGLANG: SglangAdapter(),
}

# Family prefixes that identify an engine even when it publishes no speculative data.
_FAMILY_HINTS: tuple[tuple[str, Engine], ...] = (
    ("\nvllm:", Engine.VLLM),
    ("\nvllm_", Engine.VLLM),
    ("\nllamacpp:", Engine.LLAMACPP),
    ("\nsglang:", Engine.SGLANG),
)


def detect_engine(text: str) -> Engine | None:
    """The engine whose speculative-decoding series appear on the page, else the engine whose
    other families appear, else None. Substring checks only: no parsing."""
    for engine, adapter in ADAPTERS.items():
        if any(marker in text for marker in adapter.markers):
            return engine
    framed = "\n" + text
    for hint, engine in _FAMILY_HINTS:
        if hint in framed:
            return engine
    return None


def detect_engine_from_names(names: Iterable[str]) -> Engine | None:
    """:func:`detect_engine` for sample names already known (no page text): the engine whose
    speculative-decoding marker starts one of the names, else the engine whose family prefix
    does, else None. Same precedence as :func:`detect_engine`."""
    present = tuple(names)
    for engine, adapter in ADAPTERS.items():
        if any(name.startswith(adapter.markers) for name in present):
            return engine
    for hint, engine in _FAMILY_HINTS:
        if any(name.startswith(hint[1:]) for name in present):
            return engine
    return None


def wanted_names(engine: Engine | None = None) -> tuple[str, ...]:
    """Every sample name the adapter for ``engine`` reads (None: every adapter), sorted."""
    adapters = ADAPTERS.values() if engine is None else (ADAPTERS[engine],)
    return tuple(sorted({name for adapter in adapters for name in adapter.wanted}))


def read_parsed(
    page: Page, *, engine: Engine | None = None, model: str | None = None
) -> PageReading:
    """Read a page that is already parsed (or built from another source) with the adapter
    for ``engine`` (None = detect from the page's sample names). Never raises on bad values."""
    chosen = engine if engine is not None else detect_engine_from_names(page.samples)
    if chosen is None:
        return PageReading(
            engine=None,
            models=(),
            malformed=page.malformed,
            problems=tuple(page.problems),
            is_exposition=page.valid_lines > 0 or not page.sample_lines,
        )
    reading = _read_with(ADAPTERS[chosen], page, model=model)
    return PageReading(
        engine=chosen,
        models=reading.models,
        notes=reading.notes,
        malformed=reading.malformed,
        problems=reading.problems,
        is_exposition=page.valid_lines > 0 or not page.sample_lines,
    )


def read_page(
    text: str,
    *,
    engine: Engine | None = None,
    openmetrics: bool | None = None,
    validate_all: bool = False,
    model: str | None = None,
) -> PageReading:
    """Parse ``text`` and read it with the adapter for ``engine`` (None = detect).

    ``model`` overrides the model name (useful for llama.cpp, which publishes none).
    Never raises on bad content: problems are reported in the result.
    """
    chosen = engine if engine is not None else detect_engine(text)
    if chosen is None:
        page = parse(text, wanted=(), openmetrics=openmetrics, validate_all=validate_all)
        return PageReading(
            engine=None,
            models=(),
            malformed=page.malformed,
            problems=tuple(page.problems),
            is_exposition=_is_exposition(text, page),
        )
    adapter = ADAPTERS[chosen]
    page = parse(text, wanted=adapter.wanted, openmetrics=openmetrics, validate_all=validate_all)
    reading = _read_with(adapter, page, model=model)
    return PageReading(
        engine=chosen,
        models=reading.models,
        notes=reading.notes,
        malformed=reading.malformed,
        problems=reading.problems,
        is_exposition=_is_exposition(text, page),
    )


def _read_with(adapter: Adapter, page: Page, *, model: str | None) -> PageReading:
    """The adapter's models, notes and problems for a parsed page (engine and is_exposition
    are the caller's)."""
    problems = list(page.problems)
    try:
        models, notes = adapter.read(page)
    except AdapterError as exc:
        models, notes = [], []
        problems.append(Problem(0, "", str(exc)))
    models = [m if m.model else _renamed(m, "default") for m in models]
    if model is not None:
        if len(models) == 1:
            models = [_renamed(models[0], model)]
        elif models:
            notes.append(f"model override {model!r} ignored: the page has {len(models)} models")
    return PageReading(
        engine=adapter.engine,
        models=tuple(models),
        notes=tuple(notes),
        malformed=page.malformed + (len(problems) - len(page.problems)),
        problems=tuple(problems),
    )


def _is_exposition(text: str, page: Page) -> bool:
    if page.valid_lines > 0 or page.types or page.saw_eof:
        return True
    return not text.strip()


def _renamed(reading: ModelReading, model: str) -> ModelReading:
    return ModelReading(
        model=model, counters=reading.counters, gauges=reading.gauges, context=reading.context
    )
