"""``specmon measure`` against two simulators for what AIPerf and GuideLLM users expect, and
for load it cannot fake: a level above the requests sent refused before anything is sent, a
level the server cannot hold flagged and left out; streamed time to first token and
inter-token latency checked against the simulator's known step times; a request-rate sweep
whose arrivals follow the Poisson schedule; a chat JSONL dataset; synthetic prompts of a
given token length."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmon.measure.analysis import EXIT_NOT_HELD, EXIT_USAGE
from specmon.measure.dataset import parse_dataset
from specmon.measure.levels import LoadLevel, poisson_arrivals
from specmon.measure.results import Settings
from specmon.measure.runner import arrival_seed
from specmon.sim.engine import SimSettings
from specmon.sim.load_model import DEMO_LOAD_MODEL
from specmon.sim.pages import PageKind
from specmon.sim.server import VirtualTarget, make_target
from tests.measure.support import sim_pair
from tests.measure.test_cli_sim import flat, measure, rows, run_cli, run_json
from tests.support.strict_json import strict_loads

DATASET = Path(__file__).parents[1] / "fixtures" / "measure" / "chat-20.jsonl"
SURVIVAL = (0.9, 0.7, 0.5, 0.3)


def loaded(
    name: str, *, speculation: bool, time_scale: float, max_batch: int = 256,
    survival: tuple[float, ...] = SURVIVAL,
) -> VirtualTarget:  # fmt: skip
    """A simulated vLLM whose answers take the load model's step times (DEMO_LOAD_MODEL:
    T(n, k) known by construction), scaled to the wall clock by ``time_scale``."""
    settings = SimSettings(survival=survival, drafts_per_second=0.0, requests_running=0,
                           speculation=speculation, load_model=DEMO_LOAD_MODEL)  # fmt: skip
    return make_target(name=name, kind=PageKind.VLLM, settings=settings, model="tiny-llama",
                       seed=11 if speculation else 12, time_scale=time_scale,
                       max_batch=max_batch)  # fmt: skip


def test_a_level_above_the_requests_sent_is_refused_before_anything_is_sent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with sim_pair() as pair:
        code, out, err = run_cli(measure(pair, "--concurrency", "1,4,16"), capsys)
        seen = {name: len(s.authorization) for name, s in pair.seen.items()}
    assert code == EXIT_USAGE and out == ""
    assert "nothing was sent" in err
    assert "--concurrency 16: workload 'copy' sends 4 request(s)" in err
    assert "--repeats 4" in err and "--repeats auto" in err and "--concurrency 4" not in err
    assert seen == {"baseline": 0, "speculative": 0}, "not even a probe or a metrics read"


def test_a_level_the_server_cannot_hold_is_flagged_everywhere_and_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Enough requests (32 at 16), but engines that decode at most 4 sequences at once: the
    level is run, then flagged in every table and in --json, and left out of the crossover
    and the profile."""
    profile = tmp_path / "profile.json"
    args = ("--concurrency", "2,16", "--repeats", "8", "--workloads", "copy",
            "--max-tokens", "24", "--profile-out", str(profile))  # fmt: skip
    targets = [loaded(n, speculation=n == "speculative", time_scale=0.5, max_batch=4)
               for n in ("baseline", "speculative")]  # fmt: skip
    with sim_pair(*targets) as pair:
        code, doc = run_json(measure(pair, *args), capsys)
        code_text, text, _ = run_cli(measure(pair, *args), capsys)
    assert code == code_text == 0
    low, high = doc["levels"]
    assert low["held"]["held"] is True and high["held"]["held"] is False
    measured = high["held"]["measured_concurrency"]
    assert measured["source"] == "engine counters"
    assert measured["baseline"] <= 4.0 + 1e-9 and measured["speculative"] <= 4.0 + 1e-9
    assert doc["levels_not_held"] == [16]
    assert "16 left out, not held" in doc["crossover_line"]
    written = strict_loads(profile.read_text())
    assert [lv["concurrency"] for lv in written["levels"]] == [2]
    assert written["meta"]["levels_not_held"] == [16]
    # The text: the level's header says so, and so does every table of the level.
    section = text.split("\nConcurrency 16\n", 1)[1].split("\nLoad (", 1)[0]
    assert flat(section).startswith("NOT HELD: not held: measured concurrency baseline")
    headers = [
        ln for ln in section.splitlines()
        if ln.startswith(("  workload", "  measured break-even", "  latency (s)",
                          "  time to first token", "  inter-token latency"))
    ]  # fmt: skip
    assert len(headers) >= 5 and all("(not held)" in h for h in headers), headers
    assert "\n  16 not held " in text
    two = text.split("\nConcurrency 2\n", 1)[1].split("\nConcurrency 16\n", 1)[0]
    assert "not held" not in two


def test_streamed_ttft_and_itl_match_the_simulator_s_step_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One request at a time: the first token comes after one engine step (the prefill), and
    each later step gives 1 token without the draft, 1 + accepted with it. The step times are
    the load model's T(1, 0) and T(1, 4), times the scale. The draft is always right here
    (survival 1 at every position: 5 tokens a step), so each request's 15 tokens after the
    first take exactly 3 steps with it and 15 without: the truth is exact per request."""
    scale = 3.0
    targets = [
        loaded(n, speculation=n == "speculative", time_scale=scale, survival=(1.0,) * 4)
        for n in ("baseline", "speculative")
    ]
    tokens = 16
    with sim_pair(*targets) as pair:
        code, doc = run_json(
            measure(pair, "--workloads", "copy", "--repeats", "2", "--max-tokens", str(tokens)),
            capsys,
        )
    assert code == 0
    (row,) = rows(doc)
    base, spec = row["baseline"], row["speculative"]
    step0 = DEMO_LOAD_MODEL.step_seconds(1, 0) * scale  # 27 ms
    step4 = DEMO_LOAD_MODEL.step_seconds(1, 4) * scale  # 34.2 ms
    counters = row["acceptance"]["counters"]
    assert counters["drafts"] == 3 * spec["completed"]  # 3 decode steps per request
    truth = {
        ("baseline", "ttft"): step0,
        ("baseline", "itl"): step0,
        ("speculative", "ttft"): step4,
        ("speculative", "itl"): step4 * 3 / (tokens - 1),
    }
    for side, figures in (("baseline", base), ("speculative", spec)):
        assert figures["streamed_requests"] == figures["itl_requests"] == 8
        for key in ("ttft", "itl"):
            p50 = figures[f"{key}_seconds"]["p50"]
            expected = truth[(side, key)]
            # Sleeps never end early; a loaded machine only adds time.
            assert 0.97 * expected <= p50 <= 1.5 * expected + 0.01, (side, key, p50, expected)
            assert figures[f"{key}_seconds"]["p50"] <= figures[f"{key}_seconds"]["p99"]
    itl_ratio = row["timing_ratio"]["itl"]["p50"]
    wanted = truth[("speculative", "itl")] / truth[("baseline", "itl")]  # 0.253
    assert itl_ratio == pytest.approx(wanted, rel=0.25)
    ttft_ratio = row["timing_ratio"]["ttft"]["p50"]
    assert ttft_ratio == pytest.approx(step4 / step0, rel=0.25)  # 1.27: the draft's prefill


def test_a_request_rate_sweep_keeps_the_poisson_schedule_open_loop(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Three rates: each side's requests arrive at the schedule's times, whatever the server
    does (slow answers overlap: open loop); rates are neither crossover nor profile. A closed
    loop of one request would put each arrival after the previous answer (about 0.15 s):
    the schedule's gaps at 20/s average 0.05 s."""
    rates = (5.0, 10.0, 20.0)
    targets = [loaded(n, speculation=n == "speculative", time_scale=1.0)
               for n in ("baseline", "speculative")]  # fmt: skip
    profile = tmp_path / "profile.json"
    with sim_pair(*targets) as pair:
        code, doc = run_json(
            measure(pair, "--rate", ",".join(f"{r:g}" for r in rates), "--repeats", "3",
                    "--workloads", "copy", "--max-tokens", "16", "--profile-out", str(profile)),
            capsys,
        )  # fmt: skip
        seen = pair.seen
    assert code == EXIT_NOT_HELD and not profile.exists()
    assert [(lv["mode"], lv["rate_per_second"], lv["held"]) for lv in doc["levels"]] == [
        ("rate", r, None) for r in rates
    ]
    assert doc["crossover"] is None
    settings = Settings(model="tiny-llama", max_tokens=16, seed=0, repeats=3, concurrency=(),
                        workloads=("copy",))  # fmt: skip
    for name in ("baseline", "speculative"):
        arrivals = seen[name].arrivals
        assert len(arrivals) == 12 * len(rates)
        for i, rate in enumerate(rates):
            got = arrivals[12 * i : 12 * (i + 1)]
            level = LoadLevel(rate=rate)
            want = poisson_arrivals(rate, 12, seed=arrival_seed(settings, level, "copy"))
            offsets = [t - got[0] for t in got]
            errors = sorted(sent - planned for sent, planned in zip(offsets, want, strict=True))
            # Never much early; late only by what a loaded machine adds (the server's thread
            # and the client share this process), mostly by little.
            assert errors[0] >= -0.05 and errors[-1] <= 0.5, (name, rate, offsets, want)
            assert errors[len(errors) // 2] <= 0.1, (name, rate, offsets, want)
    # At 20/s, answers of about 16 steps of 9-11 ms overlapped: the loop did not wait.
    assert max(s.max_in_flight for s in seen.values()) >= 2
    for level in doc["levels"]:
        (row,) = [r for r in level["rows"] if r["workload"] == "copy"]
        assert row["baseline"]["ttft_seconds"]["p50"] is not None
        assert row["speculative"]["itl_seconds"]["p99"] is not None
        # tokens/s follow the arrivals there: no draft cost is read from their ratio.
        assert row["breakeven"] is None and row["acceptance"]["ratio"] is not None


def test_a_chat_jsonl_dataset_of_20_conversations(capsys: pytest.CaptureFixture[str]) -> None:
    dataset = parse_dataset(DATASET.read_text(), name="chat-20")
    with sim_pair() as pair:
        code, doc = run_json(
            measure(pair, "--dataset", str(DATASET), "--workloads", "copy,chat-20",
                    "--max-tokens", "8"),
            capsys,
        )  # fmt: skip
        code_text, text, _ = run_cli(
            measure(pair, "--dataset", str(DATASET), "--workloads", "chat-20", "--max-tokens", "8"),
            capsys,
        )  # fmt: skip
        bodies = pair.seen["speculative"].bodies
    assert code == code_text == 0
    copy, chat = rows(doc)
    assert (copy["workload"], chat["workload"]) == ("copy", "chat-20")
    assert chat["baseline"]["requests"] == chat["speculative"]["requests"] == 20
    assert chat["completions"]["identical"] == 20
    # Every conversation went out as it is (reference answers dropped): the simulator counts
    # a prompt token per word of the messages' contents.
    sent = [b["messages"] for b in bodies if b["max_tokens"] == 8 and len(b["messages"]) > 1]
    assert [(m["role"], m["content"]) for m in sent[0]] == list(
        next(c for c in dataset.conversations if len(c) > 1)
    )
    words = [len("\n".join(content for _, content in c).split()) for c in dataset.conversations]
    assert chat["baseline"]["prompt_tokens_mean"] == pytest.approx(sum(words) / 20)
    assert chat["acceptance"]["ratio"] is not None and copy["acceptance"]["ratio"] is not None
    assert "chat-20: 20 conversations from" in flat(text)
    assert "2 trailing assistant message(s) dropped" in flat(text)


def test_synthetic_prompts_of_a_given_token_length(capsys: pytest.CaptureFixture[str]) -> None:
    """The simulator counts one prompt token per word and no template: calibrated prompts
    come out at exactly the length asked, and each length is its own workload."""
    with sim_pair() as pair:
        code, doc = run_json(
            measure(pair, "--input-tokens", "32,256", "--workloads", "in-32,in-256",
                    "--max-tokens", "8"),
            capsys,
        )  # fmt: skip
    assert code == 0
    short, long = rows(doc)
    assert (short["workload"], long["workload"]) == ("in-32", "in-256")
    assert short["baseline"]["prompt_tokens_mean"] == 32.0
    assert long["baseline"]["prompt_tokens_mean"] == 256.0
    assert short["baseline"]["requests"] == 8 and short["completions"]["identical"] == 8
    notes = " ".join(doc["workload_notes"])
    assert "8 synthetic prompts of 256 prompt tokens asked, 256-256 made" in notes
    assert doc["settings"]["input_tokens"] == [32, 256]


def test_without_streaming_there_is_no_token_timing(capsys: pytest.CaptureFixture[str]) -> None:
    with sim_pair() as pair:
        code, doc = run_json(measure(pair, "--workloads", "copy", "--no-stream"), capsys)
        code_text, text, _ = run_cli(measure(pair, "--workloads", "copy", "--no-stream"), capsys)
        bodies: list[Any] = pair.seen["baseline"].bodies
    assert code == code_text == 0
    (row,) = rows(doc)
    assert row["baseline"]["streamed_requests"] == 0
    assert row["baseline"]["ttft_seconds"]["p50"] is None
    assert "time to first token" not in text and "not streamed" in text
    assert all(b["stream"] is False for b in bodies)
    assert json.dumps(doc["settings"]["stream"]) == "false"
