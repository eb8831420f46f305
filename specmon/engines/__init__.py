"""Engine adapters: one page in, typed per-model readings out.

``read_page`` is the single entry point used by the daemon, the CLI and the A/B tool. With
``engine="auto"`` the engine is recognised from marker names on the page. ``read_parsed`` reads
a :class:`~specmon.parser.Page` built elsewhere (the Prometheus query source builds one per
instance from query results) with the same adapters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from specmon.engines._common import AdapterError
from specmon.engines.llamacpp import LlamacppAdapter
from specmon.engines.model import (
    Context,
    Engine,
    GaugeScope,
    ModelReading,
    PageLimits,
    PageReading,
    Rejection,
    RejectReason,
    SpecCounters,
    SpecGauges,
)
from specmon.engines.sglang import SglangAdapter
from specmon.engines.tgi import TgiAdapter
from specmon.engines.trtllm import TrtllmAdapter
from specmon.engines.validate import check_model
from specmon.engines.vllm import VllmAdapter
from specmon.engines.vllm_v0 import VllmV0Adapter
from specmon.parser import Page, parse

__all__ = [
    "ENGINE_CHOICES",
    "MARKER_STEMS",
    "AdapterError",
    "Context",
    "Engine",
    "GaugeScope",
    "ModelReading",
    "PageLimits",
    "PageReading",
    "RejectReason",
    "Rejection",
    "SpecCounters",
    "SpecGauges",
    "check_engine",
    "detect_engine",
    "detect_engine_from_names",
    "identity_labels",
    "read_page",
    "read_parsed",
    "wanted_names",
]


class Adapter(Protocol):
    engine: Engine
    wanted: tuple[str, ...]
    markers: tuple[str, ...]
    #: Per wanted name, the labels that tell two of its series apart on one server's page
    #: (:func:`specmon.engines._common.labels_by_name`).
    series_labels: Mapping[str, tuple[str, ...]]

    def read(self, page: Page) -> tuple[list[ModelReading | Rejection], list[str]]:
        """Per model a reading, or a Rejection saying why its values cannot be used."""
        ...


ADAPTERS: dict[Engine, Adapter] = {
    Engine.VLLM: VllmAdapter(),
    Engine.VLLM_V0: VllmV0Adapter(),
    Engine.LLAMACPP: LlamacppAdapter(),
    Engine.SGLANG: SglangAdapter(),
    Engine.TRTLLM: TrtllmAdapter(),
    Engine.TGI: TgiAdapter(),
}

# Family prefixes that identify an engine even when it publishes no speculative data.
_FAMILY_HINTS: tuple[tuple[str, Engine], ...] = (
    ("\nvllm:", Engine.VLLM),
    ("\nvllm_", Engine.VLLM),
    ("\nllamacpp:", Engine.LLAMACPP),
    ("\nsglang:", Engine.SGLANG),
    ("\nsglang_", Engine.SGLANG),
    ("\ntrtllm_", Engine.TRTLLM),
    ("\ntrtllm:", Engine.TRTLLM),
    ("\ntgi_", Engine.TGI),
)


#: What a config's ``engine`` key accepts: ``auto`` (detect from the page) or an engine.
ENGINE_CHOICES = ("auto", *(e.value for e in Engine))


def check_engine(value: Any) -> Engine | None:
    """A config's ``engine`` value: None for ``auto``."""
    if not isinstance(value, str) or value not in ENGINE_CHOICES:
        raise ValueError(f"must be one of {', '.join(ENGINE_CHOICES)}")
    return None if value == "auto" else Engine(value)


#: Every engine's speculative markers contain one of these (a test holds it): a page with
#: none of them (a server without speculation) skips the scan for each marker.
MARKER_STEMS = ("spec_", "tgi_request_skipped")


def detect_engine(text: str) -> Engine | None:
    """The engine whose speculative-decoding series appear on the page, else the engine whose
    other families appear, else None. Substring checks only: no parsing."""
    if any(stem in text for stem in MARKER_STEMS):
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


def identity_labels(engine: Engine | None = None) -> dict[str, tuple[str, ...]]:
    """Per wanted sample name, the labels the adapters reading it tell its series apart by
    (their ``series_labels``, united; sorted). Two series of one name and one server that
    agree on all of them are the same series seen twice: fleet mode's grouping refuses
    them rather than count them twice."""
    adapters = ADAPTERS.values() if engine is None else (ADAPTERS[engine],)
    found: dict[str, set[str]] = {}
    for adapter in adapters:
        for name, labels in adapter.series_labels.items():
            found.setdefault(name, set()).update(labels)
    return {name: tuple(sorted(labels)) for name, labels in sorted(found.items())}


def read_parsed(
    page: Page,
    *,
    engine: Engine | None = None,
    model: str | None = None,
    limits: PageLimits | None = None,
) -> PageReading:
    """Read a page that is already parsed (or built from another source, e.g. a Prometheus
    query) with the adapter for ``engine`` (None = detect from the page's sample names),
    validated like :func:`read_page`. Never raises on bad values."""
    chosen = engine if engine is not None else detect_engine_from_names(page.samples)
    is_exposition = page.valid_lines > 0 or not page.samples
    return _read_with(
        chosen, page, model=model, limits=limits or PageLimits(), is_exposition=is_exposition
    )


def read_page(
    text: str,
    *,
    engine: Engine | None = None,
    openmetrics: bool | None = None,
    validate_all: bool = False,
    model: str | None = None,
    limits: PageLimits | None = None,
) -> PageReading:
    """Parse ``text`` and read it with the adapter for ``engine`` (None = detect).

    ``model`` overrides the model name (useful for llama.cpp, which publishes none). Every
    model's reading is validated (:mod:`specmon.engines.validate`) within ``limits``; refused
    ones are in ``PageReading.rejected`` with their reasons. Never raises on bad content.
    """
    lim = limits or PageLimits()
    chosen = engine if engine is not None else detect_engine(text)
    page = parse(
        text,
        wanted=ADAPTERS[chosen].wanted if chosen is not None else (),
        openmetrics=openmetrics,
        validate_all=validate_all,
        max_line_length=lim.max_line_length,
        max_samples=lim.max_samples,
    )
    return _read_with(
        chosen, page, model=model, limits=lim, is_exposition=_is_exposition(text, page)
    )


def _read_with(
    engine: Engine | None,
    page: Page,
    *,
    model: str | None,
    limits: PageLimits,
    is_exposition: bool,
) -> PageReading:
    """The adapter's validated models, notes and refusals for a parsed page (no engine: the
    page's parse results alone)."""
    if engine is None:
        return PageReading(
            engine=None,
            models=(),
            malformed=page.malformed,
            problems=tuple(page.problems),
            is_exposition=is_exposition,
        )
    notes: list[str] = []
    rejected: list[Rejection] = []
    models: list[ModelReading] = []
    if page.truncated:
        rejected.append(
            Rejection(
                "*",
                RejectReason.SERIES_LIMIT,
                f"more than {limits.max_samples} speculative-decoding samples on the page",
            )
        )
    else:
        try:
            read, notes = ADAPTERS[engine].read(page)
        except AdapterError as exc:
            read = [Rejection("*", exc.reason, str(exc)[:200])]
        models, rejected = _validated(read, page, limits)
    # Per-class counts, from the adapters that read them off the engine's page (SGLang).
    read_classes = getattr(ADAPTERS[engine], "read_classes", None)
    classes = read_classes(page) if read_classes is not None and not page.truncated else None
    # Adapters may also return models without speculative data (a baseline server): their
    # load series go to ``plain_models``, so ``models`` keeps meaning "speculating".
    plain = [m for m in models if m.counters is None and m.gauges is None]
    models = [m for m in models if m.counters is not None or m.gauges is not None]
    if model is not None:
        if len(models) == 1:
            models = [_renamed(models[0], model)]
        elif models:
            notes.append(
                f"model override {model[:60]!r} ignored: the page has {len(models)} models"
            )
        if len(plain) == 1 and not models:
            plain = [_renamed(plain[0], model)]
    return PageReading(
        engine=engine,
        models=tuple(models),
        plain_models=tuple(plain),
        notes=tuple(notes),
        malformed=page.malformed,
        problems=tuple(page.problems),
        is_exposition=is_exposition,
        rejected=tuple(rejected),
        classes=classes,
    )


def _validated(
    read: list[ModelReading | Rejection], page: Page, limits: PageLimits
) -> tuple[list[ModelReading], list[Rejection]]:
    """Split the adapter's output, refuse duplicated and invalid models, cap the count."""
    duplicated = {s.labels.get("model_name") for s in page.duplicates}
    unlabelled_duplicate = None in duplicated
    models: list[ModelReading] = []
    rejected: list[Rejection] = []
    for item in read:
        if isinstance(item, Rejection):
            rejected.append(item)
            continue
        if unlabelled_duplicate or item.model in duplicated:
            rejected.append(
                Rejection(
                    item.model or "default",
                    RejectReason.DUPLICATE,
                    "a series appears twice with the same labels",
                )
            )
            continue
        checked, refused = check_model(item if item.model else _renamed(item, "default"), limits)
        rejected.extend(refused)
        if checked is not None:
            models.append(checked)
    if len(models) > limits.max_models:
        models.sort(key=lambda m: m.model)
        for extra in models[limits.max_models :]:
            rejected.append(
                Rejection(
                    extra.model,
                    RejectReason.MODEL_LIMIT,
                    f"more than {limits.max_models} models on the page",
                )
            )
        models = models[: limits.max_models]
    return models, rejected


def _is_exposition(text: str, page: Page) -> bool:
    if page.valid_lines > 0 or page.declared or page.saw_eof:
        return True
    return not text.strip()


def _renamed(reading: ModelReading, model: str) -> ModelReading:
    return dataclasses.replace(reading, model=model)
