"""Exposition pages as Prometheus would answer for them: each page's wanted series stored under
``instance`` and ``job`` labels, as Prometheus stores a scrape, and answered to the source's own
value and freshness queries in the instant-query JSON (numbers formatted as Prometheus
formats them: Go's shortest decimal, no exponent). For tests that read every fixture and
simulator page kind through the Prometheus source, in-process or over loopback."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from specmon.engines import detect_engine, wanted_names
from specmon.parser import parse
from specmon.sim.engine import SimEngine, SimSettings
from specmon.sim.pages import PageKind, load_template
from specmon.sources.prometheus import FRESHNESS_LABEL, freshness_query, value_queries
from specmon.sources.prometheus_config import PrometheusSourceConfig
from tests.promsource.fake_prometheus import Reply

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "pages"
JOB = "fleet"


def go_number(value: float) -> str:
    """``value`` as Prometheus's API writes it (``strconv.FormatFloat(v, 'f', -1, 64)``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = format(Decimal(repr(value)), "f")
    return text.removesuffix(".0") if "." in text and text.endswith(".0") else text


def fixture_pages() -> dict[str, str]:
    """Every engine page among the fixtures (tests/fixtures/pages and its written/), by path."""
    found = {}
    for path in sorted([*PAGES.glob("*.txt"), *PAGES.glob("written/*.txt")]):
        if path.name.endswith(".headers.txt"):
            continue
        text = path.read_text("utf-8")
        if detect_engine(text) is not None:
            found[str(path.relative_to(PAGES))] = text
    return found


def sim_page(kind: PageKind, *, seed: int = 1) -> str:
    """The simulator's page of ``kind`` after 30 s of traffic at its default settings."""
    engine = SimEngine(settings=SimSettings(drafts_per_second=200.0), seed=seed)
    engine.advance(30.0)
    return load_template(kind).render(engine, model="sim-model")


def series_of(pages: Mapping[str, str], *, job: str = JOB) -> list[dict[str, str]]:
    """Each page's wanted series as Prometheus stores them (``instance`` = the page's key)."""
    wanted = wanted_names()
    out = []
    for instance, text in pages.items():
        page = parse(text, wanted=wanted)
        for name, samples in page.samples.items():
            for sample in samples:
                metric = {"__name__": name, **sample.labels, "instance": instance, "job": job}
                out.append({**metric, "__value__": go_number(sample.value)})
    return out


def value_answer(series: list[dict[str, str]], at: float) -> dict[str, Any]:
    result = [
        {
            "metric": {k: v for k, v in s.items() if k != "__value__"},
            "value": [at, s["__value__"]],
        }
        for s in series
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def freshness_answer(
    config: PrometheusSourceConfig, series: list[dict[str, str]], stamp: float
) -> dict[str, Any]:
    keys = {tuple(s.get(label, "") for label in config.instance_labels) for s in series}
    result: list[dict[str, Any]] = []
    for which in ("newest", "oldest"):
        for key in sorted(keys):
            metric = {k: v for k, v in zip(config.instance_labels, key, strict=True) if v}
            metric[FRESHNESS_LABEL] = which
            result.append({"metric": metric, "value": [stamp, f"{stamp:.3f}"]})
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def responder(
    config: PrometheusSourceConfig, series: list[dict[str, str]], *, at: float, lag: float = 0.5
) -> Callable[[str], Reply | None]:
    """Answers the source's value and freshness queries for ``series`` evaluated at ``at``
    (the newest sample ``lag`` seconds before), None for any other query."""
    (value_query,) = value_queries(config)
    fresh_query = freshness_query(config)

    def respond(query: str) -> Reply | None:
        if query == value_query:
            doc = value_answer(series, at)
        elif query == fresh_query:
            doc = freshness_answer(config, series, at - lag)
        else:
            return None
        return Reply(body=json.dumps(doc).encode("utf-8"))

    return respond
