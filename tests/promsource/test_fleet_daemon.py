"""Fleet mode wired into the daemon: ``specmon run`` (a subprocess) reading a Prometheus source
served by a fake /api/v1/query (tests/promsource/moving.py: the real Prometheus's captured
answers, moved in time, and its captured failure answers) beside directly scraped simulated
engines; and three ``--shard`` replicas splitting one target list and one fleet."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import yaml

from specmon.sim.pages import PageKind
from tests.promsource.fake_prometheus import load
from tests.promsource.moving import MovingFleet, PrometheusThread
from tests.support.daemon import Daemon, Exported, daemon, get, post
from tests.support.fake_engines import manual_target, running, set_counters

SELECTOR = load("fleet")["source"]["selector"]
#: What a down target may still export, besides its scrape counters.
HEALTH = {"specmon_up", "specmon_scrape_duration_seconds", "specmon_last_success_timestamp_seconds"}


def _config(path: Path, prometheus: str, targets: list[tuple[str, str]], **source: Any) -> Path:
    doc: dict[str, Any] = {
        "global": {"scrape_interval": "500ms", "scrape_timeout": "400ms", "windows": ["3s", "20s"]},
        "targets": [{"name": n, "url": u} for n, u in targets],
        "sources": [
            {
                "prometheus": {
                    "url": prometheus,
                    "name": "fleet",
                    "selector": SELECTOR,
                    "interval": "500ms",
                    "timeout": "400ms",
                    "stale_after": "3s",
                    **source,
                }
            }
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _derived(m: Exported, target: str) -> set[str]:
    return (
        {
            name
            for name, series in m.samples.items()
            for labels in series
            if ("target", target) in labels
        }
        - HEALTH
        - {"specmon_scrapes_total"}
    )


def _all_down(d: Daemon, instances: list[str], result: str) -> Exported | None:
    m = d.metrics()
    ok = (
        m.value("specmon_source_up", source="fleet") == 0
        and all(m.value("specmon_up", target=i) == 0 for i in instances)
        and all(m.value("specmon_scrapes_total", target=i, result=result) for i in instances)
    )
    return m if ok else None


def _all_up(d: Daemon, instances: list[str]) -> Exported | None:
    """Every instance up, with figures in the short window (the counters move)."""
    m = d.metrics()
    ok = m.value("specmon_source_up", source="fleet") == 1 and all(
        m.value("specmon_up", target=i) == 1
        and m.value("specmon_mean_acceptance_length", target=i, window="3s") is not None
        for i in instances
    )
    return m if ok else None


def test_the_daemon_serves_source_instances_like_targets_through_every_failure(
    tmp_path: Path,
) -> None:
    fleet = MovingFleet.create()
    llama = fleet.by_engine("llamacpp")
    engine = manual_target("direct-a", PageKind.VLLM)
    set_counters(engine, 100, 300, [80, 50, 20])
    with running([engine]) as engines, PrometheusThread(fleet) as prometheus:
        # A configured target with the llama.cpp instance's name: the configured one wins.
        cfg = _config(
            tmp_path / "c.yaml",
            prometheus.url,
            [("direct-a", engines.url("direct-a")), (llama, engines.url("direct-a"))],
        )
        instances = [i for i in fleet.instances if i != llama]
        with daemon(cfg, tmp_path, extra=["--web.enable-lifecycle"]) as d:
            # Ready once every target and the source were read; instances up with windows.
            m = d.wait_for(lambda: _all_up(d, instances), timeout=20)
            assert m.value("specmon_targets") == 2 + 4
            assert m.value("specmon_source_instances", source="fleet", state="name_taken") == 1
            assert m.value("specmon_speculation_enabled", target=llama, engine="vllm") == 1
            assert m.value("specmon_shard_info", shard="0", shards="1") == 1
            api = d.targets()
            assert set(api) == {"direct-a", *fleet.instances}
            assert api[instances[0]]["url"] == prometheus.url
            assert api[llama]["url"] == engines.url("direct-a")
            html = get(d.base + "/")[1].decode()
            assert all(i in html for i in instances)
            taken = [x for x in d.log_lines() if x.get("event") == "instance_name_taken"]
            assert [x["target"] for x in taken] == [llama]
            # Each failure in turn: every instance down with the read's result, nothing
            # derived, the direct target untouched; one log line per change.
            for mode, result, read_status in (
                ("slow", "timeout", "timeout"),
                ("query_error", "query_error", "query_error"),
                ("partial", "partial", "partial"),
            ):
                prometheus.mode = mode
                m = d.wait_for(lambda r=result: _all_down(d, instances, r), timeout=10)
                assert m.value("specmon_source_reads_total", source="fleet", result=read_status)
                for inst in instances:
                    assert _derived(m, inst) == set(), (mode, inst, _derived(m, inst))
                assert m.value("specmon_up", target="direct-a") == 1
                api = d.targets()
                assert all(api[i]["up"] is False for i in instances)
                prometheus.mode = "ok"
                d.wait_for(lambda: _all_up(d, instances), timeout=10)
            logs = d.log_lines()
            changes = [x["status"] for x in logs if x.get("event") == "source_down"]
            assert changes == ["timeout", "query_error", "partial"], changes
            assert len([x for x in logs if x.get("event") == "source_up"]) == 3
            assert not [x for x in logs if x.get("event") == "target_down"
                        and x.get("target") in instances]  # fmt: skip

            # A stale instance (Prometheus no longer scrapes it): that one down, said why.
            stale = instances[0]
            with prometheus.lock:
                fleet.sample_time[stale] = time.time() - 10
            m = d.wait_for(lambda: d.metrics().value("specmon_up", target=stale) == 0 and d.metrics(),
                           timeout=10)  # fmt: skip
            assert m.value("specmon_scrapes_total", target=stale, result="stale")
            assert "stale_after (3s)" in d.targets()[stale]["error"]
            assert all(m.value("specmon_up", target=i) == 1 for i in instances[1:])
            with prometheus.lock:
                del fleet.sample_time[stale]
            d.wait_for(lambda: _all_up(d, instances), timeout=10)

            # Reload: a per-instance draft cost applies at once and the windows stay; a
            # broken sources block is refused and the old config kept.
            before = d.metrics().value("specmon_window_seconds", target=stale, window="20s")
            assert before is not None and before > 2
            _config(cfg, prometheus.url,
                    [("direct-a", engines.url("direct-a")), (llama, engines.url("direct-a"))],
                    overrides=[{"match": f'{{instance="{stale}"}}', "draft_cost": 0.3}])  # fmt: skip
            d.signal(signal.SIGHUP)
            m = d.wait_for(
                lambda: (
                    (x := d.metrics()).value(
                        "specmon_draft_cost_ratio", target=stale, source="configured"
                    )
                    == 0.3
                    and x
                ),
                timeout=10,
            )
            assert (m.value("specmon_window_seconds", target=stale, window="20s") or 0) >= before
            assert m.value("specmon_config_last_reload_successful") == 1
            broken = yaml.safe_load(cfg.read_text())
            broken["sources"][0]["prometheus"]["selectr"] = "{}"
            broken["sources"].append({"prometheus": {"url": "ftp://x"}})
            cfg.write_text(yaml.safe_dump(broken))
            status, body = post(d.base + "/-/reload")
            assert status == 500
            assert b"sources[0].prometheus.selectr: unknown key (did you mean 'selector'?)" in body
            assert b"sources[1].prometheus.url" in body
            m = d.metrics()
            assert m.value("specmon_config_last_reload_successful") == 0
            assert m.value("specmon_draft_cost_ratio", target=stale, source="configured") == 0.3
            assert all(m.value("specmon_up", target=i) == 1 for i in instances)

            # Prometheus gone: every instance down, "cannot connect", the source says so.
            prometheus.stop()
            m = d.wait_for(lambda: _all_down(d, instances, "connection_error"), timeout=10)
            assert "cannot connect" in d.targets()[stale]["error"]
            assert m.value("specmon_source_reads_total", source="fleet", result="down")
            assert m.value("specmon_up", target="direct-a") == 1
            assert "Task exception was never retrieved" not in d.log_text()
            assert '"source_read_failed"' not in d.log_text()


def test_three_shards_split_direct_targets_and_source_instances(tmp_path: Path) -> None:
    fleet = MovingFleet.create()
    for i in range(25):
        fleet.clone(fleet.instances[i % 5], f"10.0.{i}.1:8000")
    direct = [(f"t{i}", f"http://127.0.0.1:9/{i}/metrics") for i in range(30)]
    with PrometheusThread(fleet) as prometheus:
        cfg = _config(tmp_path / "c.yaml", prometheus.url, direct)
        kept: list[set[str]] = []
        for index in range(3):
            with daemon(cfg, tmp_path, extra=["--shard", f"{index}/3"]) as d:
                m = d.metrics()
                assert m.value("specmon_shard_info", shard=str(index), shards="3") == 1
                names = set(d.targets())
                kept.append(names)
                counts = {
                    state: m.value("specmon_source_instances", source="fleet", state=state)
                    for state in ("current", "other_shard")
                }
                mine = len([n for n in names if not n.startswith("t")])
                assert counts == {"current": mine, "other_shard": 30 - mine}, counts
                assert m.value("specmon_targets") == len(names)
                started = next(x for x in d.log_lines() if x.get("event") == "specmon_started")
                assert started["shard"] == f"{index}/3"
        everything = {n for n, _ in direct} | set(fleet.instances)
        assert sorted(n for names in kept for n in names) == sorted(everything)
        assert all(kept), [len(k) for k in kept]


def test_a_bad_shard_is_refused_before_anything_starts(tmp_path: Path) -> None:
    import subprocess
    import sys

    for shard, message in (
        ("3/3", "shard 3 does not exist: shards of 3 are numbered 0 to 2"),
        ("1", "'1' is not a shard like 0/3 (index/count, index from 0)"),
        ("0/0", "the shard count must be between 1 and 10000"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "specmon", "run", "--shard", shard],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, result
        assert result.stderr == f"specmon run: --shard: {message}\n"
