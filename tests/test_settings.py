"""One defaults function for every way of naming a target: global -> source -> target."""

from __future__ import annotations

from pathlib import Path

import yaml

from specmon.daemon.config import FileSDConfig, parse_config
from specmon.daemon.file_sd import load_file_sd
from specmon.engines.model import Engine
from specmon.report import DEFAULT_DRAFT_COST
from specmon.settings import TargetSettings, settle


def test_later_layers_win_and_none_sets_nothing() -> None:
    assert settle() == TargetSettings(draft_cost=DEFAULT_DRAFT_COST)
    got = settle(
        {"draft_cost": 0.2, "chain_length": 4},
        {"draft_cost": None, "engine": Engine.VLLM},
        {"chain_length": 3, "model": "m", "ignored": 1},
    )
    assert got == TargetSettings(
        engine=Engine.VLLM, draft_cost=0.2, chain_length=3, model="m", draft_cost_configured=True
    )
    assert settle({"draft_cost": None}).draft_cost_configured is False


def test_static_file_sd_and_prometheus_targets_settle_alike(tmp_path: Path) -> None:
    """The same global block and the same per-target values give the same settings whichever
    way the target is named."""
    doc = {
        "global": {"draft_cost": 0.3, "chain_length": 5},
        "targets": [{"name": "a", "url": "http://127.0.0.1:1/metrics", "chain_length": 3}],
        "sources": [
            {
                "prometheus": {
                    "url": "http://127.0.0.1:9090",
                    "overrides": [{"match": '{pod="a"}', "chain_length": 3}],
                }
            }
        ],
    }
    config = parse_config(yaml.safe_dump(doc), source="specmon.yml")
    (static,) = config.targets
    (source,) = config.sources
    from_source = source.settings_for({"pod": "a"})
    sd_file = tmp_path / "sd.yml"
    sd_file.write_text(
        yaml.safe_dump([{"targets": ["127.0.0.1:1"], "labels": {"__specmon_chain_length__": "3"}}])
    )
    (from_sd,), problems = load_file_sd(
        sd_file, FileSDConfig(files=(str(sd_file),)), config.global_
    )
    assert not problems
    for target in (static, from_sd):
        assert (target.draft_cost, target.chain_length, target.engine) == (0.3, 3, None)
    assert (from_source.draft_cost, from_source.chain_length) == (0.3, 3)
    assert source.settings_for({"pod": "b"}).chain_length == 5
