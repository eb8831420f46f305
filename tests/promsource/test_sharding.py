"""--shard I/N: pure checks, and the assignment compared with a real Prometheus's ``hashmod``."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specmon.sharding import Shard, hashmod, parse_shard
from tests.e2e.stack import Proc, free_port, http_json, http_ok, require_binaries, wait_until

#: Target names of the kinds specmon makes: config names, file_sd host:port, Prometheus-mode
#: instance names (values joined by "/", percent-escaped), and awkward ones.
NAMES = [
    "vllm-a",
    "llamacpp-draft",
    "127.0.0.1:8000",
    "10.0.3.17:8080",
    "team-a/vllm-eagle-7d9f8c-x2k4q",
    "team-b/llama%2Fserver-0",
    "modèle-é/ünïcode-ß",
    "a;b",
    "a b",
    "x" * 300,
    *[f"vllm-{i}" for i in range(200)],
    *[f"ns-{i % 7}/pod-{i:04d}" for i in range(100)],
]


def test_known_values() -> None:
    # The definition spelled out: md5, last 8 bytes, big-endian.
    import hashlib

    digest = hashlib.md5(b"vllm-a", usedforsecurity=False).digest()
    assert hashmod("vllm-a", 3) == int.from_bytes(digest[8:], "big") % 3
    assert hashmod("anything", 1) == 0
    with pytest.raises(ValueError, match="modulus"):
        hashmod("x", 0)


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_shards_cover_every_target_exactly_once(count: int) -> None:
    shards = [Shard(i, count) for i in range(count)]
    kept = [shard.select(NAMES, key=lambda n: n) for shard in shards]
    flat = [name for names in kept for name in names]
    assert sorted(flat) == sorted(NAMES)
    assert len(set(flat)) == len(flat)
    # Order within a shard is the input order.
    for names in kept:
        assert names == [n for n in NAMES if n in set(names)]
    if count == 3:
        # Roughly balanced (310 names): each shard holds 20 to 47 % of them.
        assert all(0.2 < len(k) / len(NAMES) < 0.47 for k in kept), [len(k) for k in kept]


@given(st.lists(st.text(min_size=1, max_size=30), unique=True, max_size=60))
def test_three_shards_partition_any_list(names: list[str]) -> None:
    names = [n for n in names if not any(0xD800 <= ord(c) <= 0xDFFF for c in n)]
    shards = [Shard(i, 3) for i in range(3)]
    owners = {name: [s for s in shards if s.keeps(name)] for name in names}
    assert all(len(found) == 1 for found in owners.values())


def test_select_by_key_on_objects() -> None:
    targets = [{"name": n, "url": f"http://{n}/metrics"} for n in NAMES[:50]]
    shard = parse_shard("1/3")
    assert shard.select(targets, key=lambda t: t["name"]) == [
        t for t in targets if hashmod(t["name"], 3) == 1
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0/1", Shard(0, 1)), ("2/3", Shard(2, 3)), (" 1 / 4 ", Shard(1, 4))],
)
def test_parse(text: str, expected: Shard) -> None:
    assert parse_shard(text) == expected
    assert str(expected) == f"{expected.index}/{expected.count}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3/3", "shard 3 does not exist: shards of 3 are numbered 0 to 2"),
        ("0/0", "the shard count must be between 1 and 10000"),
        ("1", "is not a shard like 0/3"),
        ("-1/3", "is not a shard like 0/3"),
        ("a/b", "is not a shard like 0/3"),
        ("1/100001", "the shard count must be between 1 and 10000"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_shard(text)


@pytest.mark.prometheus
def test_assignment_equals_prometheus_hashmod(tmp_path: Path) -> None:
    """A real Prometheus computes ``hashmod`` of each name (modulus 3, 7 and 1000) through
    relabel_configs; its /api/v1/targets must show exactly what :func:`hashmod` computes."""
    require_binaries("prometheus")
    moduli = (3, 7, 1000)
    rng = random.Random(14)
    names = [*NAMES, *(f"t-{rng.getrandbits(64):x}" for _ in range(100))]
    config = {
        "global": {"scrape_interval": "1h", "scrape_timeout": "10s"},
        "scrape_configs": [
            {
                "job_name": "shards",
                "static_configs": [
                    {"targets": [f"127.0.0.1:{20000 + i}"], "labels": {"name": name}}
                    for i, name in enumerate(names)
                ],
                "relabel_configs": [
                    {
                        "source_labels": ["name"],
                        "modulus": m,
                        "target_label": f"shard_{m}",
                        "action": "hashmod",
                    }
                    for m in moduli
                ],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config, allow_unicode=True))
    port = free_port()
    proc = Proc.start(
        "prometheus",
        [
            "prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp_path / "prometheus.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("Prometheus ready", lambda: http_ok(base + "/-/ready"), timeout=30,
                   alive=proc.check_alive)  # fmt: skip

        def targets() -> list[dict[str, str]] | None:
            active = http_json(base + "/api/v1/targets")["data"]["activeTargets"]
            return [t["labels"] for t in active] if len(active) == len(names) else None

        started = time.monotonic()
        labels = wait_until("every target listed", targets, timeout=30, alive=proc.check_alive)
        print(f"Prometheus listed {len(labels)} targets after {time.monotonic() - started:.1f}s")
    finally:
        proc.stop()
    seen = {t["name"]: t for t in labels}
    assert set(seen) == set(names)
    mismatches = [
        (name, m, seen[name][f"shard_{m}"], hashmod(name, m))
        for name in names
        for m in moduli
        if seen[name][f"shard_{m}"] != str(hashmod(name, m))
    ]
    assert mismatches == []
    # And the 3-way split Prometheus made is a partition of the list.
    by_shard = {i: {n for n in names if seen[n]["shard_3"] == str(i)} for i in range(3)}
    assert sum(len(s) for s in by_shard.values()) == len(names)
    assert all(by_shard[i] == set(Shard(i, 3).select(names, key=str)) for i in range(3))
