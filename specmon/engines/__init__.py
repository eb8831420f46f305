"""Engine adapters: one page in, typed per-model readings out.

``read_page`` is the single entry point used by the daemon, the CLI and the A/B tool. With
``engine="auto"`` the engine is recognised from marker names on the page.
"""

from __future__ import annotations

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
    "read_page",
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
    problems = list(page.problems)
    try:
        models, notes = adapter.read(page)
    except AdapterError as exc:
        models, notes = [], []
        problems.append(Problem(0, "", str(exc)))
    models = [m if m.model else _renamed(m, "default") for m in models]
    # Adapters may also return models without speculative data (a baseline server): their
    # load series go to ``plain_models``, so ``models`` keeps meaning "speculating".
    plain = [m for m in models if m.counters is None and m.gauges is None]
    models = [m for m in models if m.counters is not None or m.gauges is not None]
    if model is not None:
        if len(models) == 1:
            models = [_renamed(models[0], model)]
        elif models:
            notes.append(f"model override {model!r} ignored: the page has {len(models)} models")
        if len(plain) == 1 and not models:
            plain = [_renamed(plain[0], model)]
    return PageReading(
        engine=chosen,
        models=tuple(models),
        plain_models=tuple(plain),
        notes=tuple(notes),
        malformed=page.malformed + (len(problems) - len(page.problems)),
        problems=tuple(problems),
        is_exposition=_is_exposition(text, page),
    )


def _is_exposition(text: str, page: Page) -> bool:
    if page.valid_lines > 0 or page.types or page.saw_eof:
        return True
    return not text.strip()


def _renamed(reading: ModelReading, model: str) -> ModelReading:
    return ModelReading(
        model=model, counters=reading.counters, gauges=reading.gauges, context=reading.context
    )
