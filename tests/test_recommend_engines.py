"""``specmon recommend`` in TensorRT-LLM's and SGLang's own syntax, read back as each engine
reads it.

Neither engine installs here (CUDA wheels), so each loader is written out below from its
source, rule for rule:

- TensorRT-LLM ``DecodingBaseConfig.draft_len_schedule`` (``tensorrt_llm/llmapi/llm_args.py``,
  NVIDIA/TensorRT-LLM @ fcd3f31682808ae56118ae43c1d7864a3a945e6f): a YAML mapping
  ``{batch size: draft length}``; keys >= 1, lengths >= 0 and <= ``max_draft_len``; the smallest
  key's length equal to ``max_draft_len`` (older releases: a key 1 equal to it); a key is the
  largest batch size of its range and batch sizes above the largest key draft 0.
- SGLang ``load_bs_config`` / ``_bisect_lookup`` (``python/sglang/srt/speculative/
  adaptive_spec_params.py``, the per-batch-size version): a JSON object whose integer keys are
  the smallest batch size of their range, each ``{"steps": [...]}``; a batch size takes the
  entry of the largest key <= it (the smallest key below the first).
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from specmon.cli.main import main
from specmon.recommend import CostPoint, Recommendation, RecommendInput, recommend
from tests.support.strict_json import strict_loads
from tests.test_load import profile_doc

SURVIVAL = (0.9, 0.7, 0.5, 0.3)


def trtllm_validate(config: dict[str, Any], *, older: bool) -> dict[int, int]:
    """TensorRT-LLM's field validator, as in its source; returns the sorted schedule."""
    schedule = config["draft_len_schedule"]
    max_draft_len = config["max_draft_len"]
    assert isinstance(schedule, dict)
    for size, length in schedule.items():
        assert isinstance(size, int) and isinstance(length, int)
        if size < 1 or length < 0:
            raise ValueError("threshold must be >= 1, draft length >= 0")
    if older:
        if 1 not in schedule or schedule[1] != max_draft_len:
            raise ValueError("draft_len_schedule must include batch_size=1 = max_draft_len")
    elif schedule[min(schedule)] != max_draft_len:
        raise ValueError("the smallest key must map to max_draft_len")
    if any(length > max_draft_len for length in schedule.values()):
        raise ValueError("all draft lengths must be <= max_draft_len")
    return dict(sorted(schedule.items()))


def trtllm_draft_len(schedule: dict[int, int], batch_size: int) -> int:
    """The documented lookup: the first key >= the batch size; 0 above the largest."""
    keys = sorted(schedule)
    index = bisect.bisect_left(keys, batch_size)
    return 0 if index == len(keys) else schedule[keys[index]]


def sglang_steps(config: dict[str, Any], batch_size: int) -> list[int]:
    """SGLang's load_bs_config then _bisect_lookup."""
    table: dict[int, dict[str, Any]] = {}
    for key, entry in config.items():
        try:
            size = int(key)
        except ValueError:
            continue
        table[size] = entry if isinstance(entry, dict) else {"steps": entry}
    keys = sorted(table)
    index = max(0, bisect.bisect_right(keys, batch_size) - 1)
    steps = table[keys[index]]["steps"]
    assert isinstance(steps, list)
    return steps


def sizes_of(rec: Recommendation) -> list[tuple[int, int]]:
    """(batch size, best k) for every batch size of every advised bucket."""
    out = []
    for advice in rec.buckets:
        first, last = advice.bucket.batch_sizes
        for size in range(first, (last if last is not None else first) + 1):
            out.append((size, advice.best_chain_length))
    return out


def by_hand() -> Recommendation:
    points = (CostPoint(1, 0.1, "a"), CostPoint(4, 0.5, "b"), CostPoint(8, 0.9, "c"))
    return recommend(RecommendInput(points, SURVIVAL, chain_length=4, drafted_per_draft=3.6))


def test_trtllm_schedule_by_hand_reads_back_as_the_engine_reads_it() -> None:
    rec = by_hand()
    # vLLM: [[1, 1, 4], [2, 2, 3], [3, 5, 2], [6, 11, 1]] (tests/test_recommend.py).
    assert rec.trtllm_schedule() == {1: 4, 2: 3, 5: 2, 11: 1}
    config = rec.trtllm_config()
    assert config is not None
    for older in (False, True):
        schedule = trtllm_validate(config, older=older)
        for size, k in sizes_of(rec):
            assert trtllm_draft_len(schedule, size) == k, size
        assert trtllm_draft_len(schedule, 12) == 0  # above the largest key: off


def test_trtllm_first_range_wider_than_one_gets_a_key_1() -> None:
    points = (CostPoint(3, 0.1, "a"), CostPoint(8, 0.9, "b"))
    rec = recommend(RecommendInput(points, SURVIVAL, chain_length=4))
    schedule = rec.trtllm_schedule()
    assert schedule is not None and schedule[1] == rec.buckets[0].best_chain_length
    config = rec.trtllm_config()
    assert config is not None
    for older in (False, True):
        validated = trtllm_validate(config, older=older)
        for size, k in sizes_of(rec):
            assert trtllm_draft_len(validated, size) == k


def test_trailing_off_is_implicit_and_sglang_cannot_switch_off() -> None:
    points = (CostPoint(1, 0.1, "a"), CostPoint(4, 0.5, "b"), CostPoint(16, 3.0, "c"))
    rec = recommend(RecommendInput(points, SURVIVAL, chain_length=4))
    assert rec.vllm_schedule()[-1][2] == 0
    schedule = rec.trtllm_schedule()
    assert schedule is not None and 0 not in schedule.values()
    config = rec.trtllm_config()
    assert config is not None
    validated = trtllm_validate(config, older=False)
    for size, k in sizes_of(rec):
        assert trtllm_draft_len(validated, size) == k
    sglang = rec.sglang_adaptive_config()
    for size, k in sizes_of(rec):
        assert sglang_steps(sglang, size) == [max(k, 1)]
    assert any("cannot switch speculation off" in n for n in rec.notes)


def test_no_trtllm_schedule_when_speculation_never_pays() -> None:
    points = (CostPoint(1, 3.0, "a"), CostPoint(4, 4.0, "b"))
    rec = recommend(RecommendInput(points, SURVIVAL, chain_length=4))
    assert all(a.best_chain_length == 0 for a in rec.buckets)
    assert rec.trtllm_schedule() is None and rec.trtllm_config() is None
    assert any("no TensorRT-LLM schedule" in n for n in rec.notes)


def test_sglang_config_by_hand() -> None:
    rec = by_hand()
    config = rec.sglang_adaptive_config()
    assert config == {
        "1": {"steps": [4]},
        "2": {"steps": [3]},
        "3": {"steps": [2]},
        "6": {"steps": [1]},
    }
    parsed = json.loads(json.dumps(config))
    for size, k in sizes_of(rec):
        assert sglang_steps(parsed, size) == [k]
    assert sglang_steps(parsed, 500) == [1]  # past the last key: the last entry


def test_cli_prints_both_formats_ready_to_paste(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile_doc()))
    assert main(["recommend", "--profile", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = lines.index("  speculative_config:")
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line)
    parsed = yaml.safe_load("\n".join(block))
    config = trtllm_validate(parsed["speculative_config"], older=True)
    assert config == {1: 4, 2: 3, 5: 2, 11: 1}
    sglang_line = lines[lines.index(next(x for x in lines if x.startswith("SGLang"))) + 1]
    assert json.loads(sglang_line) == {
        "1": {"steps": [4]},
        "2": {"steps": [3]},
        "3": {"steps": [2]},
        "6": {"steps": [1]},
    }
    assert main(["recommend", "--profile", str(path), "--json"]) == 0
    doc = strict_loads(capsys.readouterr().out)
    spec = doc["trtllm"]["speculative_config"]
    # JSON keys are strings; TensorRT-LLM's pydantic dict[int, int] reads them as integers.
    schedule = {int(k): v for k, v in spec["draft_len_schedule"].items()}
    assert trtllm_validate({**spec, "draft_len_schedule": schedule}, older=False) == config
    assert doc["sglang"]["speculative_adaptive_config"]["1"] == {"steps": [4]}
