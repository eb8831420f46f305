"""Fleet mode in-process (specmon/daemon/prometheus_sources.py): a Prometheus source's reads turned into
targets, exported as the daemon exports them. Reads come from the real Prometheus's captured
answers moved in time (tests/promsource/moving.py) and grouped by the source's own code; the
failing reads come from the real PrometheusSource against a fake /api/v1/query on loopback
replaying the real Prometheus's failure answers (tests/fixtures/prometheus/)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter, generate_latest
from structlog.typing import EventDict

from specmon.daemon.config import Config, GlobalConfig, TargetConfig
from specmon.daemon.exposition import Exposition
from specmon.daemon.ingest import Ingest
from specmon.daemon.metrics import InstanceState
from specmon.daemon.prometheus_sources import Fleet, FleetCollector, SourceRunner, constant_labels
from specmon.daemon.target import TargetState
from specmon.logs import get_logger
from specmon.sharding import Shard
from specmon.sources import ScrapeResult
from specmon.sources.prometheus import PrometheusSource, ReadResult, ReadStatus
from specmon.sources.prometheus_config import PrometheusSourceConfig
from tests.promsource.fake_prometheus import FakePrometheus, Reply, load
from tests.promsource.moving import MovingFleet
from tests.support.daemon import Exported
from tests.support.reference import TargetCollector

T0 = 1_800_000_000.0
WINDOWS = (10.0, 60.0)
#: Series a down target may still export (docs/metrics.md).
HEALTH = {"specmon_up", "specmon_scrape_duration_seconds", "specmon_last_success_timestamp_seconds"}


class Harness:
    """A Fleet wired as the daemon wires it (instances' views into an Exposition, the source
    families in a registry of its own), reads applied by hand."""

    def __init__(
        self,
        *sources: PrometheusSourceConfig,
        direct: set[str] | None = None,
        shard: Shard | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.scrapes = Counter(
            "specmon_scrapes", "scrapes", ["target", "result"], registry=self.registry
        )
        self.rejected = Counter(
            "specmon_rejected_readings", "rejected", ["target", "reason"], registry=self.registry
        )
        self.direct = direct if direct is not None else set()
        self.exposition = Exposition()
        self.fleet = Fleet(
            session=lambda: None,
            direct=lambda: self.direct,
            ingest=Ingest(
                scrapes_total=self.scrapes, rejected_total=self.rejected, log=get_logger()
            ),
            log=get_logger(),
            shard=shard,
            on_view=self.exposition.update,
            on_remove=self.exposition.remove,
        )
        self.registry.register(FleetCollector(self.fleet))
        self.apply(*sources)

    def apply(self, *sources: PrometheusSourceConfig, windows: tuple[float, ...] = WINDOWS) -> None:
        config = Config(global_=GlobalConfig(windows=windows), targets=(), sources=sources)
        self.fleet.apply(config, start=False)

    def runner(self, name: str | None = None) -> SourceRunner:
        if name is None:
            (runner,) = self.fleet.runners.values()
            return runner
        return self.fleet.runners[name]

    def read(self, result: ReadResult, source: str | None = None) -> None:
        asyncio.run(self.runner(source).apply(result))

    def export(self) -> Exported:
        page = self.exposition.page(generate_latest(self.registry))
        return Exported.parse(page.decode())


@pytest.fixture
def logs() -> Iterator[list[EventDict]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def events(logs: list[EventDict], name: str) -> list[EventDict]:
    return [e for e in logs if e["event"] == name]


def moving(**changes: Any) -> MovingFleet:
    return MovingFleet.create(**changes)


def two_reads(h: Harness, fleet: MovingFleet, *, at: float = T0) -> None:
    """Step 0 then step 1, five seconds apart: every window holds the captured counts."""
    h.read(fleet.read(at))
    fleet.advance()
    h.read(fleet.read(at + 5))


def derived(m: Exported, target: str) -> set[str]:
    return {name for name, series in m.samples.items() for labels in series
            if ("target", target) in labels and not name.endswith("_created")} - HEALTH - {"specmon_scrapes_total"}  # fmt: skip


# ------------------------------------------------------------------------------ the happy path


def test_instances_export_the_same_figures_as_direct_targets_fed_the_same_pages() -> None:
    """Each instance is a TargetState fed its page at Prometheus's sample time: its series
    equal those of a direct target's state fed the same readings at the same times."""
    fleet = moving(draft_cost=0.2)
    h = Harness(fleet.config)
    direct = {name: TargetState(TargetConfig(name=name, url="http://x/metrics", draft_cost=0.2,
                                          draft_cost_configured=True),
                                windows=WINDOWS, retention=120.0)
              for name in fleet.instances}  # fmt: skip
    for step in range(3):
        at = T0 + 5 * step
        result = fleet.read(at)
        h.read(result)
        for inst in result.instances:
            reading = inst.reading()
            assert reading is not None and inst.newest_sample == at - fleet.lag
            direct[inst.name].observe(reading, mono=at - 0.5, wall=at - 0.5, duration=0.01)
        fleet.advance()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TargetCollector(lambda: [s.view for s in direct.values()]))
    want = Exported.parse(generate_latest(registry).decode())
    got = h.export()
    for name, series in want.samples.items():
        if name == "specmon_scrape_duration_seconds":
            continue
        assert got.samples[name] == series, name
    # Every instance is up with windows: two steps of the captured counters in the 10s window.
    assert len(got.series("specmon_up")) == 5
    assert all(v == 1 for v in got.series("specmon_up").values())
    llama = fleet.by_engine("llamacpp")
    drafts = fleet.captured(llama, "llamacpp:spec_decode_num_drafts_total")
    assert got.value("specmon_window_drafts", target=llama, window="10s") == 2 * drafts
    assert got.value("specmon_last_success_timestamp_seconds", target=llama) == T0 + 10 - 0.5
    runner = h.runner()
    assert runner.counts[InstanceState.CURRENT] == 5
    assert got.value("specmon_source_up", source=fleet.config.name) == 1
    assert got.value("specmon_source_reads_total", source=fleet.config.name, result="ok") == 3
    assert got.value("specmon_source_queries_total", source=fleet.config.name) == 6
    assert got.value("specmon_source_instances", state="current") == 5
    assert got.value("specmon_scrapes_total", target=llama, result="success") == 3
    assert got.value("specmon_shard_info", shard="0", shards="1") == 1


def test_an_unchanged_sample_is_no_new_reading_and_no_failure(logs: list[EventDict]) -> None:
    fleet = moving()
    h = Harness(fleet.config)
    two_reads(h, fleet)
    llama = fleet.by_engine("llamacpp")
    before = h.export()
    # Prometheus has not scraped the llama.cpp engine since: same sample time, same numbers.
    fleet.sample_time[llama] = T0 + 5 - fleet.lag
    fleet.advance(*[i for i in fleet.instances if i != llama])
    h.read(fleet.read(T0 + 10))
    m = h.export()
    assert h.runner().counts[InstanceState.UNCHANGED] == 1
    assert h.runner().counts[InstanceState.CURRENT] == 4
    assert m.value("specmon_up", target=llama) == 1
    assert m.series("specmon_window_seconds", target=llama) == before.series(
        "specmon_window_seconds", target=llama
    )
    assert m.value("specmon_scrapes_total", target=llama, result="success") == 2
    assert not events(logs, "target_down")


def test_constant_labels_leave_out_prometheus_and_specmon_labels() -> None:
    assert constant_labels({"instance": "a:1", "job": "j", "namespace": "team-a", "pod": "p-0",
                            "model": "m", "target": "t", "__x": "y", "long": "x" * 2000}) == {
        "namespace": "team-a", "pod": "p-0"}  # fmt: skip


# ------------------------------------------------------------------------------ failures


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _failing_read(kind: str, fleet: MovingFleet) -> ReadResult:
    """The real PrometheusSource against a fake Prometheus that fails as the real one does
    (bodies captured from Debian's Prometheus, tests/fixtures/prometheus/)."""
    errors = load("errors")
    bad = load("bad-selector")
    port = _unused_port()

    async def go() -> ReadResult:
        fake = FakePrometheus()

        def respond(query: str) -> Reply | None:
            at = float(fake.requests[-1].params["time"])
            if kind == "slow":
                reply = fleet.reply(query, at)
                assert reply is not None
                return replace(reply, delay=5.0)
            if kind == "query_error":
                answer = bad["answers"][0]
                return Reply(status=answer["status"], body=answer["body"].encode())
            if kind == "timeout":
                answer = errors["timeout"]
                return Reply(status=answer["status"], body=answer["body"].encode())
            if kind == "not_found":
                answer = errors["not_found"]
                return Reply(status=answer["status"], body=answer["body"].encode(),
                             content_type=answer["content_type"])  # fmt: skip
            if kind == "partial":
                fleet.warnings = ["remote_read: connection refused (captured shape: warnings.json)"]
            if kind == "garbage":
                return Reply(body=b"<html>proxy error</html>", content_type="text/html")
            return fleet.reply(query, at)

        fake.respond = respond
        async with fake:
            url = f"http://127.0.0.1:{port}" if kind == "down" else fake.url
            config = replace(fleet.config, url=url, timeout=1.0)
            async with PrometheusSource(config) as source:
                return await source.read()

    return asyncio.run(go())


FAILURES = {
    # kind: (read status, every instance's scrape result, words in the message)
    "down": (ReadStatus.DOWN, ScrapeResult.CONNECTION_ERROR, "cannot connect"),
    "slow": (ReadStatus.TIMEOUT, ScrapeResult.TIMEOUT, "within 1s"),
    "timeout": (ReadStatus.TIMEOUT, ScrapeResult.TIMEOUT, "query timed out"),
    "query_error": (ReadStatus.QUERY_ERROR, ScrapeResult.QUERY_ERROR, "bad_data"),
    "not_found": (ReadStatus.HTTP_ERROR, ScrapeResult.HTTP_ERROR, "HTTP 404"),
    "garbage": (ReadStatus.BAD_RESPONSE, ScrapeResult.PARSE_ERROR, "JSON"),
    "partial": (ReadStatus.PARTIAL, ScrapeResult.PARTIAL, "warnings"),
}


@pytest.mark.parametrize("kind", list(FAILURES))
def test_a_failed_read_turns_every_instance_down_and_logs_once(
    kind: str, logs: list[EventDict]
) -> None:
    status, result_kind, words = FAILURES[kind]
    fleet = moving()
    h = Harness(fleet.config)
    two_reads(h, fleet)
    assert len(h.export().series("specmon_alpha_ratio")) > 0
    failed = _failing_read(kind, fleet)
    assert failed.status is status and not failed.usable, failed
    assert failed.message is not None and words in (failed.message or ""), failed.message
    fleet.warnings = []
    for _ in range(3):  # three failed rounds: one log line
        h.read(failed)
    m = h.export()
    name = fleet.config.name
    for inst in fleet.instances:
        assert m.value("specmon_up", target=inst) == 0
        assert derived(m, inst) == set(), (inst, derived(m, inst))
        assert m.value("specmon_scrapes_total", target=inst, result=result_kind.value) == 3
    assert m.value("specmon_source_up", source=name) == 0
    assert m.value("specmon_source_reads_total", source=name, result=status.value) == 3
    views = {v.name: v for v in h.fleet.views()}
    assert all(v.error_kind is result_kind and words in (v.error or "") for v in views.values())
    (down,) = events(logs, "source_down")
    assert down["status"] == status.value and down["instances"] == 5
    assert not events(logs, "target_down") and not events(logs, "source_error_changed")
    # Recovery: the windows come back whole (the sample times moved on), one line.
    fleet.advance()
    h.read(fleet.read(T0 + 20))
    m = h.export()
    assert all(m.value("specmon_up", target=i) == 1 for i in fleet.instances)
    assert m.value("specmon_alpha_ratio", target=fleet.by_engine("llamacpp"), window="1m")
    assert m.value("specmon_source_up", source=name) == 1
    assert len(events(logs, "source_up")) == 1
    assert not events(logs, "target_up")


def test_a_partial_answer_is_used_with_accept_partial(logs: list[EventDict]) -> None:
    fleet = moving(accept_partial=True)
    h = Harness(fleet.config)
    h.read(fleet.read(T0))
    fleet.advance()
    fleet.warnings = ["some store did not answer"]
    result = fleet.read(T0 + 5)
    assert result.status is ReadStatus.PARTIAL and result.usable
    h.read(result)
    m = h.export()
    assert all(m.value("specmon_up", target=i) == 1 for i in fleet.instances)
    assert m.value("specmon_source_reads_total", result="partial") == 1
    assert m.value("specmon_source_up") == 1
    assert events(logs, "source_partial_accepted")


def test_a_stale_instance_is_down_with_the_reason_and_the_others_are_not(
    logs: list[EventDict],
) -> None:
    fleet = moving(stale_after="30s")
    h = Harness(fleet.config)
    two_reads(h, fleet)
    llama = fleet.by_engine("llamacpp")
    # Prometheus stopped scraping it (killed and restarted without its job): still answered
    # (no staleness marker), its sample time stays behind.
    fleet.sample_time[llama] = T0 + 5 - fleet.lag
    for step in range(3, 12):
        fleet.advance()
        h.read(fleet.read(T0 + 5 * step))
    m = h.export()
    assert m.value("specmon_up", target=llama) == 0
    assert derived(m, llama) == set()
    assert (m.value("specmon_scrapes_total", target=llama, result="stale") or 0) >= 1
    assert m.value("specmon_source_instances", state="stale") == 1
    assert m.value("specmon_source_instances", state="current") == 4
    (view,) = [v for v in h.fleet.views() if v.name == llama]
    assert view.error_kind is ScrapeResult.STALE
    assert "stale_after (30s)" in (view.error or "")
    assert sum(1 for i in fleet.instances if m.value("specmon_up", target=i) == 1) == 4
    assert [e["target"] for e in events(logs, "target_down")] == [llama]


def test_duplicated_series_make_the_instance_down_not_double_counted() -> None:
    fleet = moving()
    h = Harness(fleet.config)
    two_reads(h, fleet)
    vllm = sorted(i for i in fleet.instances if fleet.series[i][0][0]["job"] == "vllm")[0]
    fleet.duplicate_a_series(vllm)
    fleet.advance()
    h.read(fleet.read(T0 + 10))
    m = h.export()
    assert m.value("specmon_up", target=vllm) == 0
    assert m.value("specmon_scrapes_total", target=vllm, result="bad_series") == 1
    (view,) = [v for v in h.fleet.views() if v.name == vllm]
    assert "would be counted twice" in (view.error or "")
    assert m.value("specmon_source_instances", state="bad_series") == 1


# ------------------------------------------------------------------------------ the fleet changes


def test_instances_appear_and_vanish_with_their_series(logs: list[EventDict]) -> None:
    fleet = moving()
    h = Harness(fleet.config)
    two_reads(h, fleet)
    assert not events(logs, "instance_appeared")  # the first listing is one summary line
    (summary,) = events(logs, "source_instances")
    assert summary["current"] == 5
    llama = fleet.by_engine("llamacpp")
    fleet.clone(llama, "10.0.0.9:8080")
    fleet.remove(fleet.by_engine("sglang"))
    sglang = next(i for i in MovingFleet.create().instances if i not in fleet.instances)
    fleet.advance()
    h.read(fleet.read(T0 + 10))
    m = h.export()
    assert m.value("specmon_up", target="10.0.0.9:8080") == 1
    assert not m.series("specmon_up", target=sglang)
    assert not m.series("specmon_scrapes_total", target=sglang)
    (appeared,) = events(logs, "instance_appeared")
    assert appeared["target"] == "10.0.0.9:8080" and appeared["engine"] == "llamacpp"
    assert [e["target"] for e in events(logs, "instance_vanished")] == [sglang]
    assert m.value("specmon_source_instances", state="current") == 5


def test_a_configured_target_wins_a_name_and_an_earlier_source_wins_over_a_later(
    logs: list[EventDict],
) -> None:
    first = moving(name="first")
    second = moving(name="second")
    llama = first.by_engine("llamacpp")
    h = Harness(first.config, second.config, direct={llama})
    for step in range(3):
        h.read(first.read(T0 + 5 * step), "first")
        h.read(second.read(T0 + 5 * step), "second")
    assert set(h.runner("first").instances) == set(first.instances) - {llama}
    assert h.runner("second").instances == {}
    assert h.runner("second").counts[InstanceState.NAME_TAKEN] == 5
    taken = events(logs, "instance_name_taken")
    assert len(taken) == 1 + 5  # once each, not once per read
    assert {e["kept"] for e in taken} == {"a configured target", "source first"}
    # The first source loses the instances: the second takes them at its next read.
    h.apply(second.config)
    h.read(second.read(T0 + 20), "second")
    assert set(h.runner("second").instances) == set(second.instances) - {llama}
    # The configured target goes: the instance takes the name.
    h.direct.clear()
    h.read(second.read(T0 + 25), "second")
    assert llama in h.runner("second").instances


def test_three_shards_keep_every_instance_exactly_once() -> None:
    fleet = moving()
    for i in range(40):
        fleet.clone(fleet.instances[i % 5], f"10.0.{i}.1:8000")
    harnesses = [Harness(fleet.config, shard=Shard(i, 3)) for i in range(3)]
    result = fleet.read(T0)
    kept = []
    for h in harnesses:
        h.read(result)
        kept.append(set(h.runner().instances))
        counts = h.runner().counts
        assert counts[InstanceState.CURRENT] == len(kept[-1])
        assert counts[InstanceState.OTHER_SHARD] == 45 - len(kept[-1])
        assert h.export().value("specmon_shard_info", shard=str(h.fleet.shard.index),
                                shards="3") == 1  # fmt: skip
    assert sorted(n for k in kept for n in k) == sorted(fleet.instances)
    assert all(kept), [len(k) for k in kept]


# ------------------------------------------------------------------------------ reloads


def test_a_reload_keeps_windows_applies_settings_at_once_and_restarts_on_a_model_change() -> None:
    fleet = moving(draft_cost=0.1)
    h = Harness(fleet.config)
    two_reads(h, fleet)
    llama = fleet.by_engine("llamacpp")
    drafts = fleet.captured(llama, "llamacpp:spec_decode_num_drafts_total")
    before = h.export().value("specmon_window_drafts", target=llama, window="10s")
    assert before == drafts
    changed = moving(
        draft_cost=0.1, overrides=[{"match": f'{{instance="{llama}"}}', "draft_cost": 0.3}]
    ).config
    h.apply(changed, windows=(10.0, 120.0))
    m = h.export()
    assert m.value("specmon_window_drafts", target=llama, window="10s") == drafts
    assert m.value("specmon_draft_cost_ratio", target=llama, source="configured") == 0.3
    assert m.value("specmon_window_drafts", target=llama, window="2m") == drafts
    other = next(i for i in fleet.instances if i != llama)
    assert m.value("specmon_draft_cost_ratio", target=other, source="configured") == 0.1
    # A model override changes what the counters mean: that instance's windows start again.
    renamed = moving(overrides=[{"match": f'{{instance="{llama}"}}', "model": "renamed"}]).config
    h.apply(renamed)
    fleet.advance()
    h.read(fleet.read(T0 + 10))
    m = h.export()
    assert m.value("specmon_up", target=llama) == 1
    assert not m.series("specmon_window_drafts", target=llama)  # one reading: no window yet
    assert m.value("specmon_window_drafts", target=other, window="10s") is not None
    # Removing the source removes its instances and their series.
    h.apply()
    m = h.export()
    assert not m.series("specmon_up") and not m.series("specmon_scrapes_total")
    assert not m.series("specmon_source_up")


def test_a_bug_costs_one_read_not_the_source(logs: list[EventDict]) -> None:
    fleet = moving()
    h = Harness(fleet.config)
    runner = h.runner()
    reads = iter([fleet.read(T0), None, fleet.read(T0 + 10)])

    class Source:
        display_url = "http://prometheus.invalid:9090"

        async def read(self) -> ReadResult:
            result = next(reads)
            if result is None:
                raise RuntimeError("boom")
            return result

    runner.source = Source()  # type: ignore[assignment]
    read_count: list[str] = []
    h.fleet._on_first_read = read_count.append

    async def three() -> None:
        task = asyncio.create_task(runner.run())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if runner.reads.get(ReadStatus.OK, 0) >= 2:
                break
        task.cancel()

    runner.config = replace(runner.config, interval=0.01)
    asyncio.run(three())
    assert runner.reads[ReadStatus.OK] == 2
    assert events(logs, "source_read_failed")
    assert read_count == [Fleet.pending_key(fleet.config.name)]


# ------------------------------------------------------------------------------ config and CLI


def test_sources_in_the_daemon_config_and_check_config(tmp_path: Path) -> None:
    import argparse
    import io

    from specmon.cli.run import _check
    from specmon.daemon.config import ConfigError, parse_config

    text = (
        "global: {windows: [1m, 5m]}\n"
        "sources:\n"
        "  - prometheus:\n"
        "      url: http://prometheus:9090\n"
        "      selector: '{job=\"vllm\"}'\n"
        "      instance_labels: [namespace, pod]\n"
        "      name_prefix: eu/\n"
        "      overrides: [{match: '{pod=\"a\"}', draft_cost: 0.2}]\n"
    )
    config = parse_config(text, base_dir=tmp_path, environ={})
    (source,) = config.sources
    assert not config.targets and source.name == "prometheus:9090" and source.draft_cost is None
    path = tmp_path / "c.yml"
    path.write_text(text)
    out = io.StringIO()
    assert _check(argparse.Namespace(file=path), out) == 0
    assert out.getvalue().splitlines() == [
        f"OK {path}: 0 target(s), 1 Prometheus source(s); scrape every 5s (timeout 3s); "
        "windows 1m, 5m",
        '  source prometheus:9090: http://prometheus:9090 selector {job="vllm"} instances by '
        "[namespace, pod] named eu/...; read every 30s (timeout 10s, stale after 2m); "
        "1 override(s)",
    ]
    # Every problem at once: the source's, a window its interval cannot fill, the others.
    with pytest.raises(ConfigError) as info:
        parse_config(
            "global: {windows: [1m, 90s]}\n"
            "targets: [{name: a, url: 'http://h:1/metrics', colour: red}]\n"
            "sources:\n"
            "  - prometheus: {url: 'http://p:9090', interval: 45s}\n"
            "  - prometheus: {url: 'http://q:9090', selectr: x}\n"
            "  - prometheus: {url: 'http://r:9090', interval: 10s, timeout: 20s}\n",
            base_dir=tmp_path,
            environ={},
        )
    assert info.value.problems == [
        "targets[0].colour: unknown key",
        "sources[1].prometheus.selectr: unknown key (did you mean 'selector'?)",
        "sources[2].prometheus.timeout: must not exceed interval",
        "sources[0].prometheus.interval: 45s is more than half the shortest window (1m): its "
        "windows would never hold two readings",
    ]


def test_an_override_baseline_makes_an_instance_compare_with_its_twin() -> None:
    """``baseline`` in an override applies to the matched instance as to a configured target:
    exported as specmon_baseline_info, and its answers are against that twin."""
    plain = moving()
    vllm = [i for i in plain.instances if plain.series[i][0][0]["__name__"].startswith("vllm:")]
    spec, twin = vllm[0], vllm[1]
    fleet = moving(overrides=[{"match": f'{{instance="{spec}"}}', "baseline": twin}])
    h = Harness(fleet.config)
    two_reads(h, fleet)
    m = h.export()
    assert m.value("specmon_baseline_info", target=spec, baseline=twin) == 1
    assert not m.series("specmon_baseline_info", target=twin)
    (view,) = [v for v in h.fleet.views() if v.name == spec]
    answers = [w.answer for model in view.models for w in model.windows if w.answer is not None]
    assert answers and all(a.against == twin for a in answers)


def test_instances_keep_their_epochs_in_the_state_dir(tmp_path: Path) -> None:
    """A Prometheus source's instances are kept in the same state file as direct targets:
    each new instance state is restored as it is made (Fleet.on_state), each is written."""
    from specmon.daemon.persist import StateKeeper

    def keeper() -> StateKeeper:
        # The clock of the fake Prometheus's sample times (T0 on): restored times are checked
        # against it, none may lie more than a day ahead.
        k = StateKeeper(directory=tmp_path, shard=Shard(), log=get_logger(), max_age=86400.0,
                        clock=lambda: T0 + 60)  # fmt: skip
        assert k.open()
        return k

    source = moving()
    first, saving = Harness(source.config), keeper()
    first.fleet.on_state = saving.restore
    two_reads(first, source)
    before = {s.config.name: s.epochs.view() for s in first.fleet.states()}
    assert before and all(before.values())
    asyncio.run(saving.save(first.fleet.states))
    saving.close()
    again, reading = Harness(source.config), keeper()
    again.fleet.on_state = reading.restore
    source.advance()
    again.read(source.read(T0 + 10))
    after = {s.config.name: s.epochs.view() for s in again.fleet.states()}
    assert {n: [e.epochs for e in v] for n, v in after.items()} == {
        n: [e.epochs for e in v] for n, v in before.items()
    }
