"""Configuration and figures an operator could get wrong without a word: keys given twice,
names that are not plain text, a measured draft cost below zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specmon.answer import read_comparison
from specmon.config_values import ConfigError
from specmon.daemon.config import FileSDConfig, load_config, parse_config
from specmon.daemon.file_sd import load_file_sd
from specmon.engines import SpecCounters
from specmon.load import LoadCounters, LoadHistory
from specmon.sources.prometheus import instance_name


def test_keys_given_twice_are_every_one_named(tmp_path: Path) -> None:
    text = (
        "global:\n  scrape_interval: 5s\n"
        "targets:\n"
        "- name: a\n  url: http://127.0.0.1:1/metrics\n  name: b\n"
        "global:\n  windows: [1m]\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="specmon.yml")
    assert info.value.problems == [
        "line 6: key 'name' is given twice in one mapping (first on line 4); YAML would keep "
        "only the last",
        "line 7: key 'global' is given twice in one mapping (first on line 1); YAML would keep "
        "only the last",
    ]


def test_a_merge_key_is_not_a_duplicate() -> None:
    text = "targets:\n- &t {name: a, url: 'http://127.0.0.1:1/metrics'}\n- <<: *t\n  name: b\n"
    config = parse_config(text, source="specmon.yml")
    assert [t.name for t in config.targets] == ["a", "b"]


@pytest.mark.parametrize("name", ["a\nb", "a\x00b", "vllm\u202egnp.exe", "a\u200bb", "a\tb"])
def test_names_that_are_not_plain_text_are_refused(name: str, tmp_path: Path) -> None:
    doc = {"targets": [{"name": name, "url": "http://127.0.0.1:1/metrics"}]}
    with pytest.raises(ConfigError) as info:
        parse_config(yaml.safe_dump(doc), source="specmon.yml")
    (problem,) = info.value.problems
    assert problem.startswith("targets[0].name: contains the control or formatting character")
    sd = tmp_path / "sd.json"
    sd.write_text(json.dumps([{"targets": ["127.0.0.1:9"], "labels": {"__specmon_name__": name}}]))
    config = load_config(_minimal(tmp_path))
    targets, problems = load_file_sd(sd, FileSDConfig(files=(str(sd),)), config.global_)
    assert not targets
    assert any("formatting character" in p for p in problems), problems


def _minimal(tmp_path: Path) -> Path:
    path = tmp_path / "specmon.yml"
    path.write_text(yaml.safe_dump({"targets": [{"name": "x", "url": "http://127.0.0.1:1/m"}]}))
    return path


def test_prometheus_instance_names_show_invisible_characters_escaped() -> None:
    assert instance_name(["vllm\u202egnp", "a\nb"]) == "vllm%E2%80%AEgnp/a%0Ab"
    assert instance_name(["plain-name:8000"]) == "plain-name:8000"


def test_a_measured_cost_below_zero_is_not_exported() -> None:
    """The speculative step measured faster than the twin's (noise, or two servers that
    differ): no measured cost is exported, and the comparison says why."""
    histories = {spec: LoadHistory(retention=600.0) for spec in (True, False)}
    totals = {spec: [0.0] * 6 for spec in histories}
    for tick in range(60):
        for spec, history in histories.items():
            t = totals[spec]
            slots = 200.0 * 4
            t[0] += slots
            t[1] += slots * (0.009 if spec else 0.010)  # the speculating step is the faster
            t[2] += slots * (2.0 if spec else 1.0)
            t[3] += 200.0
            t[4] += slots
            t[5] += slots if spec else 0.0
            drafts = int(t[5])
            history.add(
                5.0 * tick,
                LoadCounters(
                    request_steps=t[0], decode_seconds=t[1], decode_tokens=t[2],
                    engine_steps=t[3], slot_steps=t[4], drafts=drafts,
                    draft_tokens=3 * drafts, accepted_tokens=drafts,
                    accepted_per_position=(drafts,) if spec else (), requests_running=4.0,
                ),
            )  # fmt: skip
    window, twin = histories[True].window(300.0), histories[False].window(300.0)
    acceptance = SpecCounters(1000, 3000, 1000, (1000,))
    read = read_comparison(window, base=twin, acceptance=acceptance, survival=(1 / 3,),
                           drafted_per_draft=3.0, chain_length=3, at=4.0)  # fmt: skip
    assert read.state == "measured" and read.speedup is not None
    assert read.draft_cost is None
    assert any("faster than the baseline" in n for n in read.notes), read.notes
    assert all(b.draft_cost is None or b.draft_cost >= 0 for b in read.per_load)
