"""``specmon measure`` against a real vLLM 0.32.0 (CPU) started with
``--per-request-spec-decode-metrics summary`` (slow tier): every response carries its own
speculative counts, measure uses them, and their sums equal the server's counter deltas.

One vLLM only (the machine runs one at a time): it serves both sides of the A/B run. The
baseline's traffic happens before each speculative run's first metrics read, so the counter
deltas cover the speculative side alone; measure warns that the baseline speculates too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specmon.cli.main import main

pytestmark = pytest.mark.realengine


@pytest.fixture(scope="module")
def vllm() -> Iterator[Any]:
    from tests.realengines.servers import vllm_server

    with vllm_server(extra_args=("--per-request-spec-decode-metrics", "summary")) as server:
        yield server


def own_counters(server: Any) -> tuple[int, int, int, tuple[int, ...]]:
    """The server's spec counters, read with regular expressions (not specmon's parser)."""
    from tests.realengines.servers import fetch

    text = fetch(server.metrics_url).text

    def scalar(name: str) -> int:
        values = re.findall(rf"^vllm:spec_decode_num_{name}_total\{{[^}}]*\}} (\S+)$", text, re.M)
        return sum(int(float(v)) for v in values)

    positions = re.findall(
        r'^vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="(\d+)"\} (\S+)$',
        text,
        re.M,
    )
    per_pos = tuple(int(float(v)) for _, v in sorted(positions, key=lambda p: int(p[0])))
    return scalar("drafts"), scalar("draft_tokens"), scalar("accepted_tokens"), per_pos


def test_real_vllm_per_request_metrics_equal_its_counters(
    vllm: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    labbook = tmp_path / "labbook.jsonl"
    before = own_counters(vllm)
    url = vllm.base_url + "/v1"
    code = main(["measure", "--baseline", url, "--speculative", url, "--model", "tiny-llama",
                 "--workloads", "copy,closed", "--concurrency", "1,2", "--max-tokens", "64",
                 "--warmup", "0", "--labbook", str(labbook), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    after = own_counters(vllm)
    assert code == 0, doc
    assert any("speculating too" in w for w in doc["warnings"])
    rows = [r for lv in doc["levels"] for r in lv["rows"] if r["workload"] != "all"]
    total = [0, 0, 0]
    per_pos = [0] * len(after[3])
    for row in rows:
        acc = row["acceptance"]
        assert acc["source"] == "per-request", acc["notes"]
        pr, c = acc["per_request"], acc["counters"]
        # each response's own counts, summed, are exactly the server's counter increase
        assert pr["agrees_with_counters"] is True, acc["notes"]
        for key in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position"):
            assert pr[key] == c[key], key
        assert len(pr["acceptance_histogram"]) == 4  # n-gram k = 3: histogram of length k + 1
        assert len(pr["requests"]) == row["prompts"]
        total = [total[0] + pr["drafts"], total[1] + pr["draft_tokens"],
                 total[2] + pr["accepted_tokens"]]  # fmt: skip
        per_pos = [a + b for a, b in zip(per_pos, pr["accepted_per_position"], strict=True)]
    assert total[0] > 0
    # nothing but the measured speculative runs moved the server's counters... except the
    # baseline side, which is the same server: its steps are in the difference too.
    baseline_steps = (after[0] - before[0]) - total[0]
    assert baseline_steps >= 0
    records = [json.loads(line) for line in labbook.read_text().splitlines()]
    assert all(r["acceptance_source"] == "per-request" for r in records)
    assert all(r["per_request_agrees_with_counters"] is True for r in records)
    assert all(sum(r["acceptance_histogram"]) == sum(
        sum(q["acceptance_histogram"]) for q in r["per_request"]) for r in records)  # fmt: skip
