"""The Prometheus query source against a fake /api/v1/query on loopback that replays answers
captured from the real Debian Prometheus (tests/fixtures/prometheus/README.md), and hostile
answers derived from them in code. Every failure the source classifies is exercised here."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import gzip
import json
import math
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specmon.engines import Engine, read_page
from specmon.sources.prometheus import (
    PrometheusSource,
    QueryStrategy,
    ReadResult,
    ReadStatus,
    build_instances,
    freshness_query,
    instance_name,
    value_queries,
)
from tests.promsource.fake_prometheus import FakePrometheus, Reply, load, replies, source_for

FLEET = load("fleet")


def read(
    fixture: dict[str, Any] | None,
    *,
    answers: dict[str, Reply] | None = None,
    respond: Callable[[str], Reply | None] | None = None,
    at: float | None = None,
    strategy: QueryStrategy = QueryStrategy.SINGLE,
    reads: int = 1,
    between: Callable[[], None] | None = None,
    url: str | None = None,
    **changes: Any,
) -> tuple[ReadResult, FakePrometheus]:
    fake = FakePrometheus(answers if answers is not None else replies(fixture) if fixture else {})
    fake.respond = respond
    if at is None and fixture is not None:
        at = fixture["at"]

    async def go() -> ReadResult:
        async with fake:
            config = source_for(fixture, url or fake.url, **changes)
            async with PrometheusSource(config, strategy=strategy) as source:
                result = await source.read(at=at)
                for _ in range(reads - 1):
                    if between is not None:
                        between()
                    result = await source.read(at=at)
                return result

    return asyncio.run(go()), fake


def answer_doc(fixture: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return dict(json.loads(fixture["answers"][index]["body"]))


def instances_in(fixture: dict[str, Any]) -> set[str]:
    return {s["metric"]["instance"] for s in answer_doc(fixture)["data"]["result"]}


def value_answer_for(fixture: dict[str, Any], doc: dict[str, Any]) -> Callable[[str], Reply | None]:
    """Serve ``doc`` for the single value query, the captured answers otherwise."""
    value_query = fixture["answers"][0]["query"]

    def respond(query: str) -> Reply | None:
        if query == value_query:
            return Reply(body=json.dumps(doc).encode())
        return None

    return respond


# --------------------------------------------------------------------------- real answers


def test_fleet_one_instance_per_instance_label() -> None:
    result, fake = read(FLEET)
    assert result.status is ReadStatus.OK, result.message
    assert result.usable and not result.problems and not result.warnings
    assert {i.name for i in result.instances} == instances_in(FLEET)
    engines = sorted(i.engine.value for i in result.instances if i.engine)
    assert engines == ["llamacpp", "sglang", "vllm", "vllm", "vllm"]
    assert all(i.speculation and i.page is not None and i.error is None for i in result.instances)
    assert not result.stale
    # Two queries for the whole fleet: the value query and the freshness query.
    assert result.queries == 2 and len(fake.requests) == 2
    body_bytes = sum(len(a["body"].encode()) for a in FLEET["answers"][:1])
    assert result.bytes == body_bytes + len(FLEET["answers"][-1]["body"].encode())
    assert result.series == len(answer_doc(FLEET)["data"]["result"])
    for instance in result.instances:
        assert instance.labels == {"instance": instance.name}
        assert instance.newest_sample is not None and instance.oldest_sample is not None
        assert 0 <= FLEET["at"] - instance.newest_sample < 1.5  # scraped every second
        assert instance.age_seconds == pytest.approx(FLEET["at"] - instance.newest_sample)


def test_a_consumed_answer_builds_the_same_instances() -> None:
    """The daemon's read lets each decoded result element go once grouped (its peak memory
    at fleet size): the instances are the same as from an answer left intact."""
    config = source_for(FLEET, "http://prometheus.invalid:9090")
    (query,) = value_queries(config)
    (values,) = [a for a in FLEET["answers"] if a["query"] == query]
    (fresh,) = [a for a in FLEET["answers"] if a["query"] == freshness_query(config)]

    def build(consume: bool) -> tuple[Any, list[Any]]:
        result = json.loads(values["body"])["data"]["result"]
        freshness = json.loads(fresh["body"])["data"]["result"]
        built = build_instances([result], freshness, config=config, at=FLEET["at"],
                                consume=consume)  # fmt: skip
        return built, result

    (kept, _, series), intact = build(False)
    (consumed, _, same_series), released = build(True)
    assert consumed == kept and same_series == series > 0
    assert all(item is not None for item in intact)
    assert released == [None] * len(intact)


def test_pages_carry_the_engine_labels_and_drop_the_grouping_ones() -> None:
    result, _ = read(FLEET)
    vllm = next(i for i in result.instances if i.engine is Engine.VLLM)
    assert vllm.page is not None
    (drafts,) = vllm.page.get("vllm:spec_decode_num_drafts_total")
    # model_name and engine as vLLM printed them; job stays (adapters ignore it).
    assert dict(drafts.labels) == {"engine": "0", "job": "vllm", "model_name": "tiny-llama"}
    assert drafts.timestamp is None
    positions = vllm.page.get("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    assert sorted(s.labels["position"] for s in positions) == ["0", "1", "2"]
    llama = next(i for i in result.instances if i.engine is Engine.LLAMACPP)
    assert llama.page is not None
    assert {x.name for group in llama.page.samples.values() for x in group} >= {
        "llamacpp:spec_decode_num_drafts_total",
        "llamacpp:spec_decode_num_accepted_tokens_per_pos_total",
    }


def test_readings_equal_those_of_the_same_numbers_printed_as_a_page() -> None:
    """The adapters see the same thing as on a page: render each instance's series as an
    exposition page (the values exactly as Prometheus returned them) and read it directly."""
    result, _ = read(FLEET)
    doc = answer_doc(FLEET)
    for instance in result.instances:
        lines = []
        for series in doc["data"]["result"]:
            metric = dict(series["metric"])
            if metric.pop("instance") != instance.name:
                continue
            name = metric.pop("__name__")
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()))
            lines.append(f"{name}{{{labels}}} {series['value'][1]}")
        direct = read_page("\n".join(lines) + "\n")
        via_prometheus = instance.reading()
        assert via_prometheus is not None
        assert via_prometheus.engine == direct.engine
        assert via_prometheus.models == direct.models
        assert via_prometheus.models, instance.name


@pytest.mark.parametrize("strategy", list(QueryStrategy))
def test_every_strategy_builds_the_same_pages(strategy: QueryStrategy) -> None:
    reference, _ = read(FLEET)
    result, fake = read(FLEET, strategy=strategy)
    assert result.status is ReadStatus.OK, result.message
    assert result.queries == len(value_queries(source_for(FLEET, "http://x"), strategy)) + 1
    assert len(fake.requests) == result.queries

    def content(r: ReadResult) -> dict[str, Any]:
        return {
            i.name: {
                name: sorted((sorted(s.labels.items()), s.raw_value) for s in samples)
                for name, samples in (i.page.samples.items() if i.page else ())
            }
            for i in r.instances
        }

    assert content(result) == content(reference)
    # One value query for the fleet (or one per engine), plus the freshness query.
    expected = {QueryStrategy.SINGLE: 2, QueryStrategy.PER_ENGINE: len(Engine) + 1}
    if strategy in expected:
        assert result.queries == expected[strategy]
    else:
        assert result.queries > 30


def test_request_shape_and_credentials(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")

    def rotate() -> None:
        token.write_text("rotated-token\n")

    result, fake = read(
        FLEET,
        reads=2,
        between=rotate,
        bearer_token_file=str(token),
        headers={"X-Scope-OrgID": "team-a"},
        timeout="7s",
        interval="30s",
    )
    assert result.status is ReadStatus.OK
    first, *_, last = fake.requests
    assert first.method == "POST"
    assert first.params["time"] == f"{FLEET['at']:.3f}"
    assert first.params["timeout"].endswith("ms") and 0 < int(first.params["timeout"][:-2]) <= 7000
    assert first.headers["X-Scope-OrgID"] == "team-a"
    assert first.headers["Accept"] == "application/json"
    # The token file is read on every read: a rotated token is used at once.
    assert first.headers["Authorization"] == "Bearer first-token"
    assert last.headers["Authorization"] == "Bearer rotated-token"
    assert {r.params["query"] for r in fake.requests} == {
        a["query"] for a in (FLEET["answers"][0], FLEET["answers"][-1])
    }


def test_get_and_basic_auth(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("s3cret-pw")
    result, fake = read(
        FLEET,
        method="GET",
        basic_auth={"username": "specmon", "password_file": str(password)},
    )
    assert result.status is ReadStatus.OK
    request = fake.requests[0]
    assert request.method == "GET"
    assert request.headers["Authorization"] == "Basic " + base64.b64encode(
        b"specmon:s3cret-pw"
    ).decode("ascii")


def test_no_cookies_kept_and_specmon_user_agent() -> None:
    """A query API that sets a new cookie on every answer: none is kept or sent back (the
    source's own session had aiohttp's default jar, which keeps every cookie without bound)."""
    served = iter(range(1000))
    captured = replies(FLEET)

    def respond(query: str) -> Reply | None:
        reply = captured.get(query)
        if reply is None:
            return None
        return dataclasses.replace(reply, headers={"Set-Cookie": f"c{next(served)}=v; Path=/"})

    fake = FakePrometheus(captured)
    fake.respond = respond

    async def go() -> ReadResult:
        async with fake:
            # By name: aiohttp's default jar refuses cookies from an IP address only.
            url = fake.url.replace("127.0.0.1", "localhost")
            async with PrometheusSource(source_for(FLEET, url)) as source:
                for _ in range(2):
                    await source.read(at=FLEET["at"])
                return await source.read(at=FLEET["at"])

    result = asyncio.run(go())
    assert result.status is ReadStatus.OK
    assert len(fake.requests) >= 3
    assert all("Cookie" not in r.headers for r in fake.requests)
    assert all(r.headers["User-Agent"].startswith("specmon/") for r in fake.requests)


def test_url_with_a_path_prefix() -> None:
    async def go() -> ReadResult:
        async with FakePrometheus(replies(FLEET), prefix="/prometheus") as fake:
            config = source_for(FLEET, fake.url)
            async with PrometheusSource(config) as source:
                return await source.read(at=FLEET["at"])

    assert asyncio.run(go()).status is ReadStatus.OK


def test_names_from_several_instance_labels() -> None:
    fixture = load("fleet-by-pod-labels")
    result, _ = read(fixture)
    assert result.status is ReadStatus.OK
    for instance in result.instances:
        job, host = instance.labels["job"], instance.labels["instance"]
        assert instance.name == f"{job}/{host}"
        assert instance.page is not None
        for samples in instance.page.samples.values():
            assert all("job" not in s.labels and "instance" not in s.labels for s in samples)


def test_overrides_match_instance_labels() -> None:
    result, _ = read(
        FLEET,
        draft_cost=0.2,
        overrides=[
            {"match": '{job="llamacpp"}', "model": "qwen-draft", "chain_length": 3},
            {"match": '{job=~"llama.*"}', "draft_cost": 0.3, "baseline": "plain-0"},
            {"match": '{job="vllm"}', "draft_cost": 0.05},
        ],
    )
    by_engine = {i.engine: i for i in result.instances}
    llama = by_engine[Engine.LLAMACPP]
    assert llama.settings.model == "qwen-draft"
    assert llama.settings.draft_cost == 0.3 and llama.settings.chain_length == 3
    assert llama.settings.baseline == "plain-0"
    reading = llama.reading()
    assert reading is not None and [m.model for m in reading.models] == ["qwen-draft"]
    assert by_engine[Engine.SGLANG].settings.draft_cost == 0.2
    vllms = [i for i in result.instances if i.engine is Engine.VLLM]
    assert all(i.settings.draft_cost == 0.05 and i.settings.model is None for i in vllms)


# --------------------------------------------------------------------------- colliding series


def test_instance_labels_too_coarse_make_the_instance_unusable() -> None:
    result, _ = read(load("by-job"))
    assert result.status is ReadStatus.OK
    by_name = result.by_name()
    vllm = by_name["vllm"]
    assert vllm.page is None and vllm.reading() is None
    assert vllm.error is not None
    assert "differing only in ['instance']" in vllm.error
    assert "counted twice" in vllm.error
    assert by_name["llamacpp"].page is not None and by_name["sglang"].page is not None


def test_one_engine_scraped_by_two_jobs_is_caught() -> None:
    fixture = load("duplicate-jobs")
    result, _ = read(fixture)
    doubled = [i for i in result.instances if i.error is not None]
    assert len(doubled) == 1
    (instance,) = doubled
    assert instance.error is not None and "differing only in ['job']" in instance.error
    assert sum(i.page is not None for i in result.instances) == len(result.instances) - 1


# --------------------------------------------------------------------------- failures


def test_empty_selector_result() -> None:
    result, _ = read(load("empty"))
    assert result.status is ReadStatus.OK and result.instances == ()


def test_query_error_bad_data() -> None:
    result, _ = read(load("bad-selector"))
    assert result.status is ReadStatus.QUERY_ERROR
    assert result.error_type == "bad_data" and result.http_status == 400
    assert result.message is not None and "error parsing regexp" in result.message
    assert result.instances == () and not result.usable


def test_query_error_execution() -> None:
    result, _ = read(load("max-samples"))
    assert result.status is ReadStatus.QUERY_ERROR
    assert result.error_type == "execution" and result.http_status == 422
    assert result.message is not None and "too many samples" in result.message


def test_prometheus_query_timeout() -> None:
    captured = load("errors")["timeout"]
    reply = Reply(status=captured["status"], body=captured["body"].encode())
    result, _ = read(FLEET, respond=lambda q: reply)
    assert result.status is ReadStatus.TIMEOUT
    assert result.error_type == "timeout" and result.http_status == 503


def test_slow_prometheus_times_out_on_our_side() -> None:
    slow = {q: Reply(body=r.body, delay=5.0) for q, r in replies(FLEET).items()}
    result, _ = read(FLEET, answers=slow, timeout="300ms")
    assert result.status is ReadStatus.TIMEOUT
    assert result.message is not None and "within 0.3s" in result.message
    assert result.duration_seconds < 2.0


def test_prometheus_down() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result, _ = read(FLEET, url=f"http://127.0.0.1:{port}")
    assert result.status is ReadStatus.DOWN
    assert result.message is not None and "cannot connect" in result.message


def test_wrong_path_gives_http_error() -> None:
    captured = load("errors")["not_found"]
    reply = Reply(
        status=captured["status"], body=captured["body"].encode(), content_type="text/plain"
    )
    result, _ = read(FLEET, respond=lambda q: reply)
    assert result.status is ReadStatus.HTTP_ERROR and result.http_status == 404
    assert (
        result.message
        == "HTTP 404 (check url: the base URL of the API, with any path prefix): 404 page not found"
    )


def test_partial_response_from_warnings() -> None:
    fixture = load("warnings")
    result, _ = read(fixture)
    assert result.status is ReadStatus.PARTIAL
    assert not result.usable
    assert result.warnings and "remote_read" in result.warnings[0]
    assert len(result.warnings) == 1  # the same warning on both answers, reported once
    assert [i.page is not None for i in result.instances] == [True]
    accepted, _ = read(fixture, accept_partial=True)
    assert accepted.status is ReadStatus.PARTIAL and accepted.usable


def test_victoriametrics_is_partial() -> None:
    """Derived: VictoriaMetrics cluster marks partial answers with "isPartial": true."""
    doc = answer_doc(FLEET)
    doc["isPartial"] = True
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.PARTIAL and not result.usable
    assert result.warnings == ("isPartial: some storage nodes did not answer",)


def test_stale_instance_after_prometheus_stopped_scraping_it() -> None:
    fixture = load("stale")
    result, _ = read(fixture)
    assert result.status is ReadStatus.OK
    stale = [i for i in result.instances if i.stale]
    assert [i.engine for i in stale] == [Engine.LLAMACPP]
    (llama,) = stale
    # Prometheus still answers with its last numbers, stamped with the evaluation time ...
    doc = answer_doc(fixture)
    stamps = {s["value"][0] for s in doc["data"]["result"]}
    assert stamps == {fixture["at"]}
    # ... but timestamp() shows they are from before the kill.
    assert llama.newest_sample is not None and llama.newest_sample <= fixture["killed_at"]
    assert llama.age_seconds is not None and llama.age_seconds > 5.0
    assert result.stale == (llama.name,)
    assert all(not i.stale for i in result.instances if i is not llama)


def test_every_instance_stale_when_the_evaluation_time_moves_on() -> None:
    result, _ = read(FLEET, at=FLEET["at"] + 121.0)
    assert result.status is ReadStatus.OK
    assert len(result.stale) == len(result.instances) == 5


def test_missing_freshness_means_stale() -> None:
    fresh_query = FLEET["answers"][-1]["query"]
    empty = {"status": "success", "data": {"resultType": "vector", "result": []}}

    def respond(query: str) -> Reply | None:
        return Reply(body=json.dumps(empty).encode()) if query == fresh_query else None

    result, _ = read(FLEET, respond=respond)
    assert result.status is ReadStatus.OK
    assert all(i.stale and i.newest_sample is None for i in result.instances)
    assert all(i.page is not None and i.page.problems for i in result.instances)


# --------------------------------------------------------------------------- hostile answers


def test_wrong_result_type() -> None:
    doc = answer_doc(FLEET)
    doc["data"]["resultType"] = "matrix"
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.BAD_RESPONSE
    assert result.message is not None and "resultType" in result.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"[" * 200_000, "nested too deeply"),
        (b'{"status":"success","data":{"resultType":"vector","result":[NaN]}}', "NaN"),
        (b"<html>502 Bad Gateway</html>", "not JSON"),
        (b'{"status":"success","data":{"resultType":"vector","result":[]}', "not JSON"),
        (b'"success"', "JSON str"),
        (b'{"status":"pending"}', "not \"success\""),
        (b'{"status":"success","data":[]}', '"data" is not an object'),
        (b'{"status":"success","data":{"resultType":"vector","result":{}}}', "not a list"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b'{"status":"success","data":{"resultType":"vector","result":[]},"warnings":"x"}',
         '"warnings" is not a list'),
        (b'{"a":' + b"1" * 5000 + b"}", "not JSON"),
    ],
)  # fmt: skip
def test_broken_json_is_a_clear_error(body: bytes, expected: str) -> None:
    result, _ = read(FLEET, respond=lambda q: Reply(body=body))
    assert result.status is ReadStatus.BAD_RESPONSE
    assert result.message is not None and expected in result.message


def test_huge_answer_is_cut_off() -> None:
    huge = b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * 2_000_000
    result, _ = read(FLEET, respond=lambda q: Reply(body=huge), max_response_bytes="256KiB")
    assert result.status is ReadStatus.TOO_LARGE
    assert result.bytes <= 256 * 1024 + 65536


def test_gzip_bomb_is_cut_off_by_decoded_size() -> None:
    bomb = b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * 20_000_000
    reply = Reply(body=gzip.compress(bomb), headers={"Content-Encoding": "gzip"})
    result, _ = read(FLEET, respond=lambda q: reply, max_response_bytes="1MiB")
    assert len(reply.body) < 100_000  # 20 MB decoded
    assert result.status is ReadStatus.TOO_LARGE
    assert result.bytes <= 2**20 + 2**17


def test_the_byte_cap_counts_every_query_of_a_read() -> None:
    single = len(FLEET["answers"][0]["body"])
    result, _ = read(FLEET, max_response_bytes=max(1024, single - 100))
    assert result.status is ReadStatus.TOO_LARGE
    ok, _ = read(FLEET, max_response_bytes=single + len(FLEET["answers"][-1]["body"]) + 10)
    assert ok.status is ReadStatus.OK


def test_series_and_instance_caps() -> None:
    series = len(answer_doc(FLEET)["data"]["result"])
    too_many, _ = read(FLEET, max_series=series - 1)
    assert too_many.status is ReadStatus.TOO_LARGE
    assert too_many.message is not None and "max_series" in too_many.message
    assert read(FLEET, max_series=series)[0].status is ReadStatus.OK
    instances, _ = read(FLEET, max_instances=4)
    assert instances.status is ReadStatus.TOO_LARGE
    assert instances.message is not None and "max_instances" in instances.message


def _vllm_series(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        s for s in doc["data"]["result"] if s["metric"]["__name__"].startswith("vllm:spec_decode")
    ]


def test_non_finite_values_reach_the_adapters_like_a_page_would() -> None:
    doc = answer_doc(FLEET)
    target = _vllm_series(doc)[0]
    host = target["metric"]["instance"]
    target["value"][1] = "+Inf"
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.OK
    instance = result.by_name()[host]
    assert instance.page is not None
    reading = instance.reading()
    assert reading is not None
    # Refused by the same validation as a page's (docs/security.md), not a crash.
    assert reading.models == () and reading.rejected[0].reason == "non_finite"
    # Other instances are unaffected.
    others = [i for i in result.instances if i.name != host]
    assert others and all(
        (r := i.reading()) is not None and not r.rejected and r.models
        for i in others
        if i.speculation
    )
    # NaN too.
    target["value"][1] = "NaN"
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    reading = result.by_name()[host].reading()
    assert reading is not None and reading.rejected[0].reason == "non_finite"
    assert math.isnan(result.by_name()[host].page.get(target["metric"]["__name__"])[0].value)  # type: ignore[union-attr]


def test_duplicated_series_makes_only_its_instance_unusable() -> None:
    doc = answer_doc(FLEET)
    copy = json.loads(json.dumps(_vllm_series(doc)[0]))
    doc["data"]["result"].append(copy)
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.OK
    bad = result.by_name()[copy["metric"]["instance"]]
    assert bad.page is None and bad.error is not None and "identical" in bad.error
    assert sum(i.page is not None for i in result.instances) == 4


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda s: s["value"].__setitem__(1, "abc"), "is not a number"),
        (lambda s: s["value"].__setitem__(1, 12), "not a number string"),
        (lambda s: s["value"].__setitem__(0, "now"), "sample time"),
        (lambda s: s.__setitem__("value", [1.0]), "pair"),
        (lambda s: s["metric"].__setitem__("model_name", "x" * 5000), "longer than"),
        (lambda s: s["metric"].__setitem__("model_name", 7), "not a string"),
        (lambda s: s["metric"].__setitem__("bad-label", "v"), "invalid label name"),
        (lambda s: s["metric"].__setitem__("model_name", "\ud800"), "not valid UTF-8"),
        (lambda s: s["metric"].update({f"l{i}": "v" for i in range(70)}), "more than 64"),
        (lambda s: s["metric"].__setitem__("__name__", "up"), "not asked for"),
    ],
)  # fmt: skip
def test_malformed_series_make_their_instance_unusable(
    mutate: Callable[[dict[str, Any]], None], expected: str
) -> None:
    doc = answer_doc(FLEET)
    series = _vllm_series(doc)[0]
    mutate(series)
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.OK
    bad = result.by_name()[series["metric"]["instance"]]
    assert bad.page is None and bad.error is not None and expected in bad.error, bad.error
    assert sum(i.page is not None for i in result.instances) == 4


def test_series_that_belong_to_no_instance_are_reported_and_skipped() -> None:
    doc = answer_doc(FLEET)
    orphan = json.loads(json.dumps(_vllm_series(doc)[0]))
    del orphan["metric"]["instance"]
    doc["data"]["result"] += [orphan, "junk", {"metric": {"instance": ["x"]}, "value": [1, "1"]}]
    result, _ = read(FLEET, respond=value_answer_for(FLEET, doc))
    assert result.status is ReadStatus.OK
    assert result.problems[0] == "3 series skipped (no instance)"
    assert len(result.instances) == 5 and all(i.page is not None for i in result.instances)


def test_error_answers_are_truncated_cleaned_and_never_echo_secrets(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-abcdef-123456")
    echo = Reply(
        status=502,
        content_type="text/html",
        body=(
            "<html>Bad gateway. Your request headers: Authorization: Bearer tok-abcdef-123456 "
            "X-Scope-OrgID: tenant-secret-42 \x00\x1b[31m" + "x" * 5000 + "</html>"
        ).encode(),
    )
    result, _ = read(
        FLEET,
        respond=lambda q: echo,
        bearer_token_file=str(token),
        headers={"X-Scope-OrgID": "tenant-secret-42"},
    )
    assert result.status is ReadStatus.HTTP_ERROR and result.http_status == 502
    message = result.message or ""
    assert "tok-abcdef-123456" not in message and "tenant-secret-42" not in message
    assert "<redacted>" in message
    assert "\x00" not in message and "\x1b" not in message
    assert len(message) < 300
    long_error = json.dumps(
        {"status": "error", "errorType": "execution", "error": "boom " * 100_000}
    ).encode()
    result, _ = read(FLEET, respond=lambda q: Reply(status=422, body=long_error))
    assert result.status is ReadStatus.QUERY_ERROR and len(result.message or "") < 700


def test_status_error_with_http_200() -> None:
    body = b'{"status":"error","errorType":"internal","error":"something broke"}'
    result, _ = read(FLEET, respond=lambda q: Reply(body=body))
    assert result.status is ReadStatus.QUERY_ERROR and result.error_type == "internal"


def test_redirect_is_not_followed() -> None:
    reply = Reply(status=302, headers={"Location": "https://sso.example/login?token=abc"})
    result, _ = read(FLEET, respond=lambda q: reply)
    assert result.status is ReadStatus.HTTP_ERROR and result.http_status == 302
    message = result.message or ""
    assert "https://sso.example/login" in message and "token=abc" not in message


def test_unauthorized_hint() -> None:
    result, _ = read(FLEET, respond=lambda q: Reply(status=401, body=b"Unauthorized\n"))
    assert result.status is ReadStatus.HTTP_ERROR
    assert result.message == "HTTP 401 (check bearer_token_file or basic_auth): Unauthorized"


def test_connection_closed_mid_answer() -> None:
    async def go() -> ReadResult:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b'Content-Length: 100000\r\n\r\n{"status":"success"'
            )
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            config = source_for(FLEET, f"http://127.0.0.1:{port}")
            async with PrometheusSource(config) as source:
                return await source.read(at=FLEET["at"])

    result = asyncio.run(go())
    assert result.status in (ReadStatus.BAD_RESPONSE, ReadStatus.DOWN)
    assert result.message


def test_unreadable_credentials_file_at_read_time(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-1234567")
    config_holder: list[Any] = []

    async def go() -> ReadResult:
        async with FakePrometheus(replies(FLEET)) as fake:
            config = source_for(FLEET, fake.url, bearer_token_file=str(token))
            config_holder.append(config)
            token.unlink()
            async with PrometheusSource(config) as source:
                return await source.read(at=FLEET["at"])

    result = asyncio.run(go())
    assert result.status is ReadStatus.CREDENTIALS_ERROR
    assert result.message is not None and str(token) in result.message
    assert "tok-1234567" not in result.message


def test_queries_are_what_the_fixture_recorded() -> None:
    """The captured answers are keyed by query text; if the query builders change, the
    fixtures must be captured again (python -m tests.promsource.capture)."""
    config = source_for(FLEET, "http://x")
    recorded = [a["query"] for a in FLEET["answers"]]
    for strategy in QueryStrategy:
        assert set(value_queries(config, strategy)) <= set(recorded)
    assert freshness_query(config) == recorded[-1]


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("values", "prefix", "expected"),
    [
        (("10.0.0.7:8000",), "", "10.0.0.7:8000"),
        (("team-a", "vllm-0"), "", "team-a/vllm-0"),
        (("a/b", "c"), "", "a%2Fb/c"),
        (("a", "b/c"), "", "a/b%2Fc"),
        (("50%", "x\ny\x7f"), "", "50%25/x%0Ay%7F"),
        (("", "pod"), "", "/pod"),
        (("vllm-0",), "eu-1/", "eu-1/vllm-0"),
        (("modèle-é",), "", "modèle-é"),
    ],
)
def test_instance_names(values: tuple[str, ...], prefix: str, expected: str) -> None:
    assert instance_name(values, prefix=prefix) == expected


def test_instance_names_are_unambiguous_and_bounded() -> None:
    assert instance_name(("a/b", "c")) != instance_name(("a", "b/c"))
    assert instance_name(("a%2Fb",)) != instance_name(("a/b",))
    long_a, long_b = instance_name(("x" * 500 + "a",)), instance_name(("x" * 500 + "b",))
    assert len(long_a) == len(long_b) == 200
    assert long_a != long_b and long_a.startswith("x" * 183 + "~")
    assert instance_name(("x" * 500 + "a",)) == long_a  # stable


def test_name_prefix_applies_to_every_instance() -> None:
    result, _ = read(FLEET, name_prefix="eu-1/")
    assert all(i.name.startswith("eu-1/") for i in result.instances)
    assert {i.labels["instance"] for i in result.instances} == instances_in(FLEET)


def test_an_internal_error_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    import specmon.sources.prometheus.client as module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(module, "build_instances", broken)
    result, _ = read(FLEET)
    assert result.status is ReadStatus.INTERNAL_ERROR
    assert result.message == "internal error: KeyError: 'a bug'"
