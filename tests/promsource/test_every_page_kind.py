"""Every engine page specmon knows, read through the Prometheus source as through a scrape:
each fixture page (tests/fixtures/pages) and each simulator page kind (specmon/sim), stored as
Prometheus stores a scrape and answered to the source's own queries. No series may be taken
for a duplicate (the labels an adapter tells its series apart by are identity labels, declared
by the adapters), and each instance must read exactly as its page read directly.

Also: histogram bounds as Prometheus 3 writes them (``le="1.0"`` for the exposition's
``le="1"``) read as today's, and an answer holding both forms for one instance (an upgrade from
Prometheus 2 to 3 within the lookback) is refused with that reason, not counted twice."""

from __future__ import annotations

import asyncio

import pytest

from specmon.engines import ADAPTERS, Engine, PageReading, identity_labels, read_page, wanted_names
from specmon.sim.pages import PageKind
from specmon.sources.prometheus import (
    InstanceRead,
    PrometheusSource,
    ReadResult,
    ReadStatus,
    build_instances,
)
from tests.promsource.fake_prometheus import FakePrometheus, source_for
from tests.promsource.pages_as_answers import (
    fixture_pages,
    go_number,
    responder,
    series_of,
    sim_page,
    value_answer,
)

AT = 1_700_000_000.0
FIXTURES = fixture_pages()


def _same(via: PageReading | None, direct: PageReading) -> None:
    """The instance read through Prometheus as the page read directly: the same engine, the
    same models with the same counters, gauges and load context, the same refusals."""
    assert via is not None
    assert via.engine == direct.engine
    assert via.models == direct.models
    assert via.plain_models == direct.plain_models
    assert via.rejected == direct.rejected


def _group(series: list[dict[str, str]]) -> tuple[list[InstanceRead], list[str]]:
    config = source_for(None, "http://prometheus.invalid:9090")
    doc = value_answer(series, AT)
    instances, problems, _ = build_instances([doc["data"]["result"]], None, config=config, at=AT)
    return instances, problems


def _read(series: list[dict[str, str]]) -> ReadResult:
    async def go() -> ReadResult:
        async with FakePrometheus() as fake:
            config = source_for(None, fake.url, selector='{job="fleet"}')
            fake.respond = responder(config, series, at=AT)
            async with PrometheusSource(config) as source:
                return await source.read(at=AT)

    return asyncio.run(go())


# --------------------------------------------------------------------------- declarations


def test_every_adapter_declares_the_labels_of_every_name_it_reads() -> None:
    for engine, adapter in ADAPTERS.items():
        assert set(adapter.series_labels) == set(adapter.wanted), engine
        for name, labels in adapter.series_labels.items():
            assert len(set(labels)) == len(labels), (engine, name)
            assert "__name__" not in labels and "instance" not in labels, (engine, name)
    assert set(identity_labels()) == set(wanted_names())
    table = identity_labels()
    # The labels of the bug reports: TGI's step timing by method (its load figures), TGI's
    # buckets by le, TensorRT-LLM's positions by token_position, sgl-router's workers.
    assert table["tgi_batch_inference_duration_count"] == ("method",)
    assert table["tgi_batch_inference_duration_sum"] == ("method",)
    assert table["tgi_request_skipped_tokens_bucket"] == ("le",)
    assert table["tgi_request_skipped_tokens_count"] == ()
    assert "token_position" in table["trtllm_spec_decode_accepted_tokens_total"]
    assert "worker_addr" in table["sglang_generation_tokens_total"]
    assert "position" not in table["vllm:spec_decode_num_drafts_total"]


# --------------------------------------------------------------------------- every page


@pytest.mark.parametrize("path", sorted(FIXTURES))
def test_fixture_page_through_the_grouping_reads_as_scraped(path: str) -> None:
    text = FIXTURES[path]
    (instance,), problems = _group(series_of({"10.0.0.1:8000": text}))
    assert problems == []
    assert instance.error is None, instance.error
    _same(instance.reading(), read_page(text))


@pytest.mark.parametrize("kind", list(PageKind))
def test_sim_page_kind_through_a_prometheus_source(kind: PageKind) -> None:
    """Two engines of the kind behind one (fake, loopback) Prometheus, read by the source."""
    pages = {f"127.0.0.1:{9000 + seed}": sim_page(kind, seed=seed) for seed in (1, 2)}
    result = _read(series_of(pages))
    assert result.status is ReadStatus.OK, result.message
    assert result.problems == ()
    assert [i.name for i in result.instances] == sorted(pages)
    for instance in result.instances:
        assert instance.error is None, instance.error
        assert not instance.stale and instance.speculation
        direct = read_page(pages[instance.name])
        assert direct.models, kind
        _same(instance.reading(), direct)
        (model,) = direct.models
        assert model.counters is not None or model.gauges is not None
        if direct.engine is Engine.TGI:
            # The load figures read the step timing by method: prefill and decode kept apart.
            assert model.context.engine_step_seconds is not None
            assert model.context.engine_steps


def test_a_fleet_of_every_page_reads_with_no_duplicate() -> None:
    pages = {f"sim-{kind}:80": sim_page(kind) for kind in PageKind}
    pages.update({f"fixture-{i}:80": text for i, text in enumerate(FIXTURES.values())})
    instances, problems = _group(series_of(pages))
    assert problems == []
    assert len(instances) == len(pages)
    assert [i.name for i in instances if i.error is not None] == []


def test_series_seen_twice_are_refused_without_splitting_the_server() -> None:
    """A second job scraping one vLLM engine: refused, and the advice names the scrape or the
    server, never the engine's own labels (adding one to instance_labels would split one server
    into two targets)."""
    page = sim_page(PageKind.VLLM)
    series = series_of({"10.0.0.1:8000": page}) + series_of({"10.0.0.1:8000": page}, job="again")
    (instance,), _ = _group(series)
    assert instance.error is not None and instance.page is None
    assert "differing only in ['job']" in instance.error
    assert "one engine scraped twice" in instance.error
    assert "add the label that tells them apart" not in instance.error


# --------------------------------------------------------------------------- Prometheus 3 bounds


def _prometheus3(value: str) -> str:
    """A bound as Prometheus 3 stores it: a float's text (``1`` -> ``1.0``; ``+Inf`` kept)."""
    text = go_number(float(value))
    return text if not text.lstrip("-").isdigit() else text + ".0"


def _bounds_as_prometheus3(series: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{**s, "le": _prometheus3(s["le"])} if "le" in s else s for s in series]


@pytest.mark.parametrize(
    "page",
    [sim_page(PageKind.TGI_HISTOGRAM), FIXTURES["written/tgi-histogram.txt"]],
    ids=["sim", "fixture"],
)
def test_bounds_in_prometheus_3_form_read_as_today(page: str) -> None:
    series = _bounds_as_prometheus3(series_of({"10.0.0.1:3000": page}))
    bounds = {s["le"] for s in series if "le" in s}
    assert "1.0" in bounds and "1" not in bounds and "+Inf" in bounds
    result = _read(series)
    (instance,) = result.instances
    assert instance.error is None, instance.error
    _same(instance.reading(), read_page(page))
    reading = instance.reading()
    assert reading is not None and reading.models[0].counters is not None
    assert reading.models[0].counters.accepted_per_position  # read from the buckets


def test_both_bound_forms_for_one_instance_are_refused_not_counted_twice() -> None:
    """Samples from before an upgrade to Prometheus 3 (``le="1"``) and after (``le="1.0"``)
    within the lookback: one bound written two ways."""
    page = sim_page(PageKind.TGI_HISTOGRAM)
    old = series_of({"10.0.0.1:3000": page})
    new = _bounds_as_prometheus3(old)
    extra = [s for s in new if "le" in s]
    other = series_of({"10.0.0.2:3000": page})
    result = _read(old + extra + other)
    by_name = result.by_name()
    refused = by_name["10.0.0.1:3000"]
    assert refused.page is None and refused.reading() is None
    assert refused.error is not None
    assert "one bound written two ways" in refused.error
    assert "le='0' and le='0.0'" in refused.error
    assert "lookback" in refused.error
    assert f"{len(extra)} series appear more than once" in refused.error
    # The other instance of the answer is unaffected.
    assert by_name["10.0.0.2:3000"].error is None
    _same(by_name["10.0.0.2:3000"].reading(), read_page(page))
