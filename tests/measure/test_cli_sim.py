"""``specmon measure`` end to end against simulated engines: identical runs, divergence,
missing usage, failing requests, concurrency, API keys, metrics sources, the progress bar."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from specmon.cli.main import main
from specmon.measure.prompts import BUILTIN_WORKLOADS
from specmon.sim.engine import Mode
from specmon.sim.pages import PageKind
from specmon.sim.server import completion_text
from tests.measure.support import SimPair, sim_pair, sim_target
from tests.support.fake_engines import set_mode
from tests.support.strict_json import strict_loads


def measure(pair: SimPair, *extra: str) -> list[str]:
    return ["measure", "--baseline", pair.api("baseline"), "--speculative",
            pair.api("speculative"), "--model", "tiny-llama", "--warmup", "0", *extra]  # fmt: skip


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def flat(text: str) -> str:
    """Text with line wrapping undone, for phrase checks."""
    return " ".join(text.split())


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, _err = run_cli([*argv, "--json"], capsys)
    return code, strict_loads(out)


def rows(doc: dict[str, Any], *, include_all: bool = False) -> list[dict[str, Any]]:
    return [
        r for level in doc["levels"] for r in level["rows"] if include_all or r["workload"] != "all"
    ]


def test_identical_run_acceptance_equals_the_servers_counters_and_timings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    labbook = tmp_path / "labbook.jsonl"
    with sim_pair() as pair:
        code, doc = run_json(
            measure(pair, "--concurrency", "1,3", "--repeats", "2", "--max-tokens", "24",
                    "--labbook", str(labbook), "--label", "sim-pair"),
            capsys,
        )  # fmt: skip
        engine = pair.targets["speculative"].engine.counters
    assert code == 0 and doc["exit_code"] == 0
    assert doc["completions"] == {"compared": 48, "identical": 48, "differing": 0,
                                  "not_compared": 0, "all_identical": True}  # fmt: skip
    assert [lv["concurrency"] for lv in doc["levels"]] == [1, 3]
    assert [r["workload"] for r in doc["levels"][0]["rows"]] == ["copy", "closed", "open", "all"]
    drafts = draft_tokens = accepted = 0
    per_pos = [0, 0, 0]
    for row in rows(doc):
        acc = row["acceptance"]
        assert acc["source"] == "counters" and acc["sources_agree"] is True
        c = acc["counters"]
        assert acc["ratio"] == pytest.approx(c["accepted_tokens"] / c["draft_tokens"])
        assert acc["timings"]["draft_tokens"] == c["draft_tokens"]
        assert row["baseline"]["completion_tokens"] == 24 * 8  # 4 prompts x 2 repeats, from usage
        assert row["speed_ratio"] == pytest.approx(
            row["speculative"]["tokens_per_second"] / row["baseline"]["tokens_per_second"]
        )
        assert row["breakeven"]["tokens_per_iteration"] == pytest.approx(
            1 + c["accepted_tokens"] / c["drafts"]
        )
        drafts += c["drafts"]
        draft_tokens += c["draft_tokens"]
        accepted += c["accepted_tokens"]
        per_pos = [a + b for a, b in zip(per_pos, c["accepted_per_position"], strict=True)]
    # No warm-up and no background drafts: the server's lifetime counters are exactly the sum
    # of the per-workload deltas specmon read around each run.
    assert (drafts, draft_tokens, accepted, per_pos) == (
        engine.drafts, engine.draft_tokens, engine.accepted, engine.per_pos,
    )  # fmt: skip
    assert doc["speculative"]["engine"] == "llamacpp"
    assert "/metrics page" in doc["speculative"]["found_by"]
    lines = [strict_loads(line) for line in labbook.read_text().splitlines()]
    assert len(lines) == 8  # 2 levels x (3 workloads + all)
    assert {line["label"] for line in lines} == {"sim-pair"}
    assert all(line["engine"] == "llamacpp" and line["model"] == "tiny-llama" for line in lines)
    assert all(line["settings"]["repeats"] == 2 and line["recorded_at"] for line in lines)
    assert doc["labbook"] == {"path": str(labbook), "lines": 8}


def test_divergence_shows_the_exact_first_difference(capsys: pytest.CaptureFixture[str]) -> None:
    spec = sim_target("speculative", speculation=True, diverge_every=2)
    with sim_pair(speculative=spec) as pair:
        code, doc = run_json(measure(pair, "--max-tokens", "16", "--seed", "5"), capsys)
        code_allowed, text, _ = run_cli(
            measure(pair, "--max-tokens", "16", "--seed", "5", "--allow-divergence"), capsys
        )
    assert code == 1 and doc["exit_code"] == 1
    total = doc["completions"]
    assert total["differing"] > 0 and total["identical"] > 0
    assert total["differing"] + total["identical"] == 12
    for row in rows(doc):
        prompts = BUILTIN_WORKLOADS[row["workload"]]
        for d in row["completions"]["differences"]:
            # Greedy (temperature 0): the simulator's text ignores the seed, as an engine's.
            words = completion_text("tiny-llama", prompts[d["prompt_index"]], 16, 0)
            base = " ".join(words)
            cut = len(words) // 2
            spec_text = " ".join(words[:cut] + [w[::-1] for w in words[cut:]])
            at = d["char_offset"]
            assert base[:at] == spec_text[:at] and base[at] != spec_text[at]
            assert d["byte_offset"] == len(base[:at].encode())
            assert at >= len(" ".join(words[:cut]))  # the simulator changed only the tail
    assert code_allowed == 0
    assert "DIFFER between the servers" in text and "first difference at byte" in text
    assert "baseline:   …" in text and "with draft: …" in text
    assert "within hardware numerics" in flat(text) and "batch shape" in flat(text)
    assert "accepted with --allow-divergence (exit 0)" in text


def _spawn_sim(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "simulate", "--engine", "llamacpp", "--listen",
         "127.0.0.1:0", "--drafts-per-second", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+)/metrics", line)
    assert match, line
    return proc, match.group(1)


@contextmanager
def simulated(*args: str) -> Iterator[str]:
    proc, url = _spawn_sim(*args)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()


def test_divergence_exit_status_from_the_command_line() -> None:
    """As an operator runs it: two ``specmon simulate`` processes, ``specmon measure``."""
    with simulated("--no-speculation") as base, simulated("--diverge-every", "1") as spec:
        argv = [sys.executable, "-m", "specmon", "measure", "--baseline", base + "/v1",
                "--speculative", spec + "/v1", "--model", "tiny-llama", "--workloads", "closed",
                "--max-tokens", "12"]  # fmt: skip
        strict = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        allowed = subprocess.run([*argv, "--allow-divergence"], capture_output=True, text=True,
                                 timeout=60, check=False)  # fmt: skip
    assert strict.returncode == 1, strict.stderr
    assert "4 of 4 DIFFER" in strict.stdout and "first difference at byte" in strict.stdout
    assert "Why completions can differ" in strict.stdout
    assert "closed          " in strict.stdout and "NO 0/4" in strict.stdout
    assert allowed.returncode == 0, allowed.stderr
    assert "first difference at byte" in allowed.stdout


@pytest.mark.parametrize("side", ["speculative", "baseline"])
def test_missing_usage_means_no_tokens_per_second(
    side: str, capsys: pytest.CaptureFixture[str]
) -> None:
    targets = {
        "baseline": sim_target("baseline", speculation=False, usage=side != "baseline"),
        "speculative": sim_target("speculative", speculation=True, usage=side != "speculative"),
    }
    with sim_pair(**targets) as pair:
        code, doc = run_json(measure(pair, "--workloads", "copy,open"), capsys)
        code_text, text, _ = run_cli(measure(pair, "--workloads", "copy,open"), capsys)
    assert code == 0 and code_text == 0
    other = "baseline" if side == "speculative" else "speculative"
    for row in rows(doc, include_all=True):
        assert row[side]["tokens_per_second"] is None and row[side]["completion_tokens"] is None
        assert row[side]["usage_missing"] == row[side]["completed"] > 0
        assert row[other]["tokens_per_second"] is not None
        assert row["speed_ratio"] is None and row["breakeven"] is None
        assert row["acceptance"]["ratio"] is not None  # acceptance needs no usage
    label = "with-draft" if side == "speculative" else "baseline"
    assert f"the {label} server returned no usage in 4 of 4 responses" in flat(text)
    assert "its tokens/s is not computed (specmon never estimates token counts)" in flat(text)
    assert "no usage" in text.split("Concurrency 1")[1].splitlines()[2]


def test_failing_requests_are_counted_not_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    spec = sim_target("speculative", speculation=True, fail_every=4)
    with sim_pair(speculative=spec) as pair:
        code, doc = run_json(measure(pair, "--max-tokens", "8"), capsys)
        _, text, _ = run_cli(measure(pair, "--max-tokens", "8"), capsys)
    assert code == 0
    failed = [r["speculative"]["failed"] for r in rows(doc)]
    assert failed == [1, 1, 1]  # requests 4, 8 and 12 of 12, at concurrency 1
    for row in rows(doc):
        assert row["speculative"]["completed"] == 3
        assert row["speculative"]["first_error"].startswith("HTTP 500")
        assert row["completions"]["not_compared"] == 1 and row["completions"]["compared"] == 3
        assert row["speculative"]["tokens_per_second"] is not None
    assert doc["completions"]["all_identical"] is True
    assert "1 of 4 with-draft requests failed; first: HTTP 500" in flat(text)
    assert "yes 3/3 (+1 failed)" in text


def test_nothing_completed_is_fatal(capsys: pytest.CaptureFixture[str]) -> None:
    spec = sim_target("speculative", speculation=True, fail_every=1)
    with sim_pair(speculative=spec) as pair:
        code, out, _ = run_cli(measure(pair, "--workloads", "copy"), capsys)
    assert code == 3
    assert "all failed" in out
    assert "no request completed on one server for copy at concurrency 1 (exit 3)" in flat(out)


def test_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_pair() as pair:
        dead = pair.api("baseline")
    code, out, err = run_cli(
        ["measure", "--baseline", dead, "--speculative", dead, "--model", "m"], capsys
    )
    assert code == 3 and out == ""
    assert "baseline server" in err and "cannot connect to 127.0.0.1" in err


def test_requests_are_really_concurrent_and_bounded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prompts = tmp_path / "load.txt"
    prompts.write_text("".join(f"prompt number {i}\n" for i in range(8)))
    base = sim_target("baseline", speculation=False, step_seconds=0.01)
    spec = sim_target("speculative", speculation=True, step_seconds=0.01)
    with sim_pair(base, spec) as pair:
        code, doc = run_json(
            # Not streamed: a chunk at each simulated step would add the event loops' work
            # per token to what this compares (the requests' own time).
            measure(pair, "--prompts", str(prompts), "--workloads", "load",
                    "--concurrency", "1,4", "--max-tokens", "10", "--no-stream"),
            capsys,
        )  # fmt: skip
        seen = pair.seen
    assert code == 0
    serial, parallel = (lv["rows"][0] for lv in doc["levels"])
    for side in ("baseline", "speculative"):
        one, four = serial[side], parallel[side]
        # At concurrency 1 the run is the sum of its requests; at 4 it is about a quarter.
        assert one["seconds"] >= 8 * one["latency_seconds"]["p50"] * 0.8
        assert four["seconds"] < 0.5 * one["seconds"], (side, one["seconds"], four["seconds"])
        assert seen[side].max_in_flight == 4  # concurrent, and never more than asked
    assert serial["baseline"]["seconds"] >= 8 * 10 * 0.01  # 8 requests x 10 steps x 10 ms


def test_api_key_is_sent_and_never_shown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-measure-7f3a9c2e"
    labbook = tmp_path / "labbook.jsonl"
    monkeypatch.setenv("MEASURE_KEY", secret)
    with sim_pair(require_key=secret, echo_key_every=5) as pair:
        args = measure(pair, "--api-key-env", "MEASURE_KEY", "--labbook", str(labbook),
                       "--max-tokens", "8")  # fmt: skip
        code, out, err = run_cli(args, capsys)
        code_json, out_json, err_json = run_cli([*args, "--json"], capsys)
        seen = {name: list(s.authorization) for name, s in pair.seen.items()}
    assert code == 0 and code_json == 0
    for auths in seen.values():
        assert auths and all(a == f"Bearer {secret}" for a in auths)  # sent on every request
    doc = strict_loads(out_json)
    assert doc["settings"]["api_key_env"] == "MEASURE_KEY" and doc["settings"]["api_key_used"]
    # The server echoed the header in some errors: they are reported, redacted.
    assert "headers: Bearer <redacted>" in " ".join(out.split())
    for text in (out, err, out_json, err_json, labbook.read_text()):
        assert secret not in text
        assert secret[:12] not in text


def test_missing_api_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPECMON_API_KEY", raising=False)
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    with sim_pair(require_key="k") as pair:
        code, _, err = run_cli(measure(pair), capsys)
        assert code == 3 and "HTTP 401" in err and "--api-key-env" in err
        code, _, err = run_cli(measure(pair, "--api-key-env", "NO_SUCH_KEY"), capsys)
        assert code == 2 and "NO_SUCH_KEY is not set" in err


def test_without_metrics_acceptance_comes_from_timings(capsys: pytest.CaptureFixture[str]) -> None:
    spec = sim_target("speculative", speculation=True)
    set_mode(spec, Mode.NO_METRICS)
    with sim_pair(speculative=spec) as pair:
        code, doc = run_json(measure(pair, "--workloads", "copy"), capsys)
        counters = pair.targets["speculative"].engine.counters
        counted = (counters.draft_tokens, counters.accepted)
        _, text, _ = run_cli(measure(pair, "--workloads", "copy"), capsys)
    assert code == 0
    [row] = rows(doc)
    acc = row["acceptance"]
    assert acc["source"] == "timings" and acc["counters"] is None
    # The timings add up to the engine's own counts (it just does not publish them).
    assert (acc["timings"]["draft_tokens"], acc["timings"]["accepted_tokens"]) == counted
    assert any("--metrics" in w for w in doc["warnings"])
    assert "(timings)" in text and "started without --metrics" in flat(text)


def test_vllm_engines_give_counters_only(capsys: pytest.CaptureFixture[str]) -> None:
    base = sim_target("baseline", speculation=False, kind=PageKind.VLLM)
    spec = sim_target("speculative", speculation=True, kind=PageKind.VLLM)
    with sim_pair(base, spec) as pair:
        code, doc = run_json(measure(pair, "--workloads", "closed"), capsys)
        engine = pair.targets["speculative"].engine.counters
    assert code == 0
    [row] = rows(doc)
    assert row["acceptance"]["source"] == "counters" and row["acceptance"]["timings"] is None
    assert row["acceptance"]["counters"]["drafts"] == engine.drafts
    assert doc["baseline"]["engine"] == "vllm" and doc["speculative"]["engine"] == "vllm"


def test_prompts_file_replaces_and_adds_workloads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text(
        '{"workload": "copy", "prompt": "repeat: a b c a b c"}\n'
        '{"workload": "extract", "prompt": "name: x, port: 1"}\n'
        '{"workload": "extract", "prompt": "name: y, port: 2"}\n'
    )
    with sim_pair() as pair:
        code, doc = run_json(
            measure(pair, "--prompts", str(prompts), "--workloads", "extract,copy"), capsys
        )
        bad, _, err = run_cli(measure(pair, "--workloads", "code"), capsys)
    assert code == 0
    assert [(r["workload"], r["prompts"]) for r in rows(doc, include_all=True)] == [
        ("extract", 2), ("copy", 1), ("all", 3),
    ]  # fmt: skip
    assert doc["settings"]["prompts_file"] == str(prompts)
    assert bad == 2 and "unknown workload 'code'" in err


def test_progress_bar_only_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_pair() as pair:
        _, _, err = run_cli(measure(pair, "--max-tokens", "4"), capsys)
        assert "[#" not in err and "\r" not in err
        master, slave = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "specmon", *measure(pair, "--max-tokens", "4")],
            stdout=subprocess.PIPE, stderr=slave, text=True,
        )  # fmt: skip
        os.close(slave)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=30)
        os.close(master)
    assert proc.returncode == 0
    shown = seen.decode()
    assert "\r[" in shown and "/24  c=1 " in shown and "]" in shown
    assert "24/24" in shown or "baseline" in shown
    assert shown.endswith("\r\x1b[K")  # the bar is cleared before the table is printed
    assert "[#" not in out and "Concurrency 1" in out


def test_vllm_per_request_metrics_are_the_source_and_equal_the_counters(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With --per-request-spec-decode-metrics the responses carry each request's own counts
    (vLLM's metrics.speculative_decoding, in the exact format vLLM 0.32.0 sends): measure uses
    them, sums equal the counter deltas exactly, and the lab notebook keeps the histograms."""
    labbook = tmp_path / "labbook.jsonl"
    base = sim_target("baseline", speculation=False, kind=PageKind.VLLM)
    spec = sim_target("speculative", speculation=True, kind=PageKind.VLLM,
                      survival=(0.9, 0.6, 0.3), per_request_spec_metrics="summary")  # fmt: skip
    with sim_pair(base, spec) as pair:
        code, doc = run_json(
            measure(pair, "--concurrency", "1,2", "--max-tokens", "40",
                    "--labbook", str(labbook)),
            capsys,
        )  # fmt: skip
        engine = pair.targets["speculative"].engine.counters
        code_text, text, _ = run_cli(measure(pair, "--workloads", "copy"), capsys)
    assert code == 0 and code_text == 0
    total_steps = 0
    for row in rows(doc):
        acc = row["acceptance"]
        assert acc["source"] == "per-request"
        pr, c = acc["per_request"], acc["counters"]
        assert pr["agrees_with_counters"] is True
        for key in ("drafts", "draft_tokens", "accepted_tokens", "accepted_per_position"):
            assert pr[key] == c[key], key
        hist = pr["acceptance_histogram"]
        assert len(hist) == 4 and sum(hist) == pr["drafts"]
        assert sum(j * n for j, n in enumerate(hist)) == pr["accepted_tokens"]
        assert len(pr["requests"]) == row["prompts"]
        assert sum(sum(r["acceptance_histogram"]) for r in pr["requests"]) == pr["drafts"]
        assert acc["ratio"] == pytest.approx(pr["accepted_tokens"] / pr["draft_tokens"])
        assert acc["mean_acceptance_length"] == pytest.approx(
            1 + pr["accepted_tokens"] / pr["drafts"]
        )
        total_steps += pr["drafts"]
    # every verification step of the engine happened in a measured run (no background drafts)
    all_rows = [r for r in rows(doc, include_all=True) if r["workload"] == "all"]
    assert sum(r["acceptance"]["per_request"]["drafts"] for r in all_rows) == total_steps
    assert 0 < total_steps < engine.drafts  # the text run after the JSON one added more
    records = [strict_loads(line) for line in labbook.read_text().splitlines()]
    assert all(r["acceptance_source"] == "per-request" for r in records)
    assert all(r["acceptance_histogram"] and r["per_request"] for r in records)
    assert all(r["per_request_agrees_with_counters"] is True for r in records)
    assert "(per-request)" in text
    assert "metrics.speculative_decoding" in flat(text)
    assert "summed to exactly the counters' increase" in flat(text)
    assert "accepted draft tokens per step" in flat(text)


def test_partial_or_broken_per_request_metrics_are_not_used() -> None:
    from specmon.measure.analysis import acceptance_of
    from specmon.measure.endpoints import parse_chat_response
    from specmon.measure.results import Outcome

    good = {"choices": [{"message": {"content": "x"}}],
            "metrics": {"speculative_decoding": {"acceptance_histogram": [1, 2, 3, 4],
                                                 "num_draft_tokens": 30, "num_spec_tokens": 3,
                                                 "num_spec_steps": 10,
                                                 "num_accepted_draft_tokens": 20}}}  # fmt: skip
    broken = json.loads(json.dumps(good))
    broken["metrics"]["speculative_decoding"]["num_spec_steps"] = 11
    plain = {"choices": [{"message": {"content": "x"}}]}
    answers = [parse_chat_response(b) for b in (good, broken, plain)]
    assert answers[0].spec is not None and answers[0].spec.accepted_per_position == (9, 7, 4)
    assert answers[1].spec is None and "disagrees" in (answers[1].spec_problem or "")
    assert answers[2].spec is None and answers[2].spec_problem is None
    outcomes = [Outcome("w", i, 0, 0.1, answer=a) for i, a in enumerate(answers)]
    acc = acceptance_of(None, outcomes)
    assert acc.source is None and acc.per_request is None
    assert any("not self-consistent" in n for n in acc.notes)
    assert any("1 of 3 responses" in n for n in acc.notes)
    only_good = acceptance_of(None, outcomes[:1])
    assert only_good.source == "per-request"
    assert only_good.per_request is not None and only_good.per_request.drafts == 10
    for hostile in ({"acceptance_histogram": [1] * 1000, "num_draft_tokens": 1,
                     "num_spec_tokens": 999},
                    {"acceptance_histogram": [-1, 2], "num_draft_tokens": 1, "num_spec_tokens": 1},
                    {"acceptance_histogram": [0, 5], "num_draft_tokens": 1, "num_spec_tokens": 1},
                    "nonsense"):  # fmt: skip
        body = {**plain, "metrics": {"speculative_decoding": hostile}}
        answer = parse_chat_response(body)
        assert answer.spec is None and answer.spec_problem


def test_captured_vllm_response_with_per_request_metrics_parses() -> None:
    """The response of a real vLLM 0.32.0 started with --per-request-spec-decode-metrics
    summary (tests/fixtures/pages/README.md), and the simulator's answer in the same shape."""
    from specmon.measure.endpoints import parse_chat_response

    pages = Path(__file__).resolve().parent.parent / "fixtures" / "pages"
    body = json.loads((pages / "vllm-chat-completion-spec-metrics.json").read_text())
    answer = parse_chat_response(body)
    assert answer.spec is not None and answer.spec_problem is None
    assert answer.spec.histogram == (1, 0, 0, 0)
    assert (answer.spec.steps, answer.spec.draft_tokens, answer.spec.spec_tokens) == (1, 3, 3)
    spec = sim_target("speculative", speculation=True, kind=PageKind.VLLM,
                      per_request_spec_metrics="summary")  # fmt: skip
    with sim_pair(speculative=spec) as pair:
        from tests.realengines.servers import fetch

        simulated = json.loads(
            fetch(pair.api("speculative") + "/chat/completions", method="POST",
                  body={"model": "tiny-llama", "max_tokens": 30,
                        "messages": [{"role": "user", "content": "a b a b a b"}]}).text
        )  # fmt: skip
    assert set(simulated["metrics"]) == set(body["metrics"])
    assert set(simulated["metrics"]["speculative_decoding"]) == set(
        body["metrics"]["speculative_decoding"]
    )
    assert parse_chat_response(simulated).spec is not None


@pytest.mark.parametrize("kind", [PageKind.SGLANG_CURRENT, PageKind.TGI_HISTOGRAM, PageKind.TRTLLM])
def test_engines_without_some_counters(kind: PageKind, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang and TGI count no draft tokens, TensorRT-LLM's per-position family is complete:
    measure reports what each engine's counters allow, from the servers' own counters."""
    base = sim_target("baseline", speculation=False, kind=PageKind.VLLM)
    spec = sim_target("speculative", speculation=True, kind=kind, survival=(0.9, 0.6, 0.3))
    with sim_pair(base, spec) as pair:
        engine = pair.targets["speculative"].engine
        before = (engine.counters.drafts, engine.counters.draft_tokens, engine.counters.accepted)
        code, doc = run_json(measure(pair, "--workloads", "closed"), capsys)
        after = (engine.counters.drafts, engine.counters.draft_tokens, engine.counters.accepted)
        code_text, text, _ = run_cli(measure(pair, "--workloads", "closed"), capsys)
    assert code == 0 and code_text == 0
    [row] = rows(doc)
    acc = row["acceptance"]
    assert acc["source"] == "counters", acc
    steps, tokens, accepted = (a - b for a, b in zip(after, before, strict=True))
    assert acc["counters"]["drafts"] == steps and acc["counters"]["accepted_tokens"] == accepted
    assert acc["mean_acceptance_length"] == pytest.approx(1 + accepted / steps)
    if kind is PageKind.TRTLLM:
        assert acc["ratio"] == pytest.approx(accepted / tokens)
        assert row["breakeven"] is not None
    else:
        assert acc["ratio"] is None and row["breakeven"] is None
        assert "K " in text and "(counters)" in text
