"""specmon.recommend and ``specmon recommend``: hand computations, the vLLM schedule, both inputs."""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from specmon.answer import profile_crossover
from specmon.cli.main import main
from specmon.load import BucketScheme, profile_from_json
from specmon.recommend import (
    CostPoint,
    RecommendError,
    RecommendInput,
    input_from_profile,
    input_from_targets,
    recommend,
)
from tests.support.demo_fleet import DemoFleet
from tests.support.strict_json import strict_loads
from tests.test_load import profile_doc

SURVIVAL = (0.9, 0.7, 0.5, 0.3)


def speedup(k: int, c_eff: float) -> float:
    return (1 + sum(SURVIVAL[:k])) / (1 + k * c_eff)


def test_best_chain_per_bucket_by_hand() -> None:
    points = (CostPoint(1, 0.1, "a"), CostPoint(4, 0.5, "b"), CostPoint(8, 0.9, "c"))
    rec = recommend(RecommendInput(points, SURVIVAL, chain_length=4, drafted_per_draft=3.6))
    by_label = {a.bucket.label: a for a in rec.buckets}
    assert list(by_label) == ["1", "2", "4", "8"]
    # Bucket "2" has no measured point: c interpolated at 2 between 0.1 (1) and 0.5 (4).
    two = by_label["2"]
    assert two.draft_cost == pytest.approx(0.1 + 0.4 / 3) and two.draft_cost_how == "interpolated"
    # Shorter chains draft the measured proportion 3.6 / 4 = 0.9 of their length.
    for label, c in (("1", 0.1), ("2", 0.1 + 0.4 / 3), ("4", 0.5), ("8", 0.9)):
        advice = by_label[label]
        candidates = [speedup(k, 0.9 * c) for k in range(5)]
        best = max(range(5), key=lambda k: (candidates[k], -k))
        assert advice.best_chain_length == best
        assert advice.expected_speedup == pytest.approx(candidates[best])
        assert advice.current_speedup == pytest.approx(3.4 / (1 + 3.6 * c))
    assert [by_label[x].best_chain_length for x in ("1", "2", "4", "8")] == [4, 3, 2, 1]
    assert rec.vllm_schedule() == [[1, 1, 4], [2, 2, 3], [3, 5, 2], [6, 11, 1]]
    s4, s8 = 3.4 / (1 + 3.6 * 0.5), 3.4 / (1 + 3.6 * 0.9)
    assert rec.crossover is not None
    assert rec.crossover.concurrency == pytest.approx(4 + (s4 - 1) * 4 / (s4 - s8))


def test_equal_neighbours_merge_and_off_is_zero() -> None:
    points = (CostPoint(1, 0.05, "a"), CostPoint(2, 0.06, "b"), CostPoint(16, 3.0, "c"))
    rec = recommend(RecommendInput(points, SURVIVAL))
    schedule = rec.vllm_schedule()
    # Buckets "1" and "2" both take k = 4; "8" (c = 1.32 interpolated) and "16" are off.
    assert schedule[0] == [1, 2, 4] and schedule[-1] == [6, 23, 0]
    assert all(a[2] != b[2] for a, b in itertools.pairwise(schedule))


def test_nothing_outside_the_measured_range() -> None:
    rec = recommend(RecommendInput((CostPoint(3.5, 0.2, "a"), CostPoint(7, 0.4, "b")), SURVIVAL))
    assert [a.bucket.label for a in rec.buckets] == ["4", "8"]
    # vLLM needs the schedule to start at 1: the lowest measured bucket's value, with a note.
    assert rec.vllm_schedule()[0][0] == 1
    assert any("nothing was measured below concurrency 3.5" in n for n in rec.notes)


def test_configured_edges() -> None:
    scheme = BucketScheme.from_edges([3, 10])
    rec = recommend(
        RecommendInput((CostPoint(1, 0.1, "a"), CostPoint(12, 0.8, "b")), SURVIVAL, scheme=scheme)
    )
    assert [a.bucket.label for a in rec.buckets] == ["<3", "3-10", "10+"]


def test_no_input_is_an_error() -> None:
    with pytest.raises(RecommendError, match="no draft cost"):
        recommend(RecommendInput((), SURVIVAL))
    with pytest.raises(RecommendError, match="no per-position"):
        recommend(RecommendInput((CostPoint(1, 0.1, "a"),), ()))


def test_input_from_profile() -> None:
    data = input_from_profile(profile_from_json(profile_doc()))
    assert [(p.concurrency, p.draft_cost) for p in data.points] == [
        (1.0, 0.1),
        (4.0, 0.5),
        (8.0, 0.9),
    ]
    assert data.survival == pytest.approx(SURVIVAL)
    assert data.drafted_per_draft == pytest.approx(3.6)
    assert data.chain_length == 4


def daemon_doc() -> dict[str, Any]:
    return {
        "ready": True,
        "targets": [
            {"target": "other", "models": []},
            {
                "target": "vllm-a",
                "models": [
                    {
                        "model": "m",
                        "chain_length": 4,
                        "windows": [
                            {"window": "1m", "seconds": 60, "report": None},
                            {
                                "window": "15m",
                                "seconds": 900,
                                "report": {
                                    "drafts": 1000,
                                    "draft_tokens": 4000,
                                    "positions": [
                                        {"position": i + 1, "survival": s}
                                        for i, s in enumerate(SURVIVAL)
                                    ],
                                },
                                "verdict": {
                                    "against": "vllm-b",
                                    "crossover": None,
                                    "per_load": [
                                        {"label": "1", "concurrency": 1.0, "draft_cost": 0.1},
                                        {"label": "4", "concurrency": 3.9, "draft_cost": 0.5},
                                        {"label": "8", "concurrency": 7.8, "draft_cost": None},
                                    ],
                                },
                            },
                        ],
                    }
                ],
            },
        ],
    }


def test_input_from_the_daemon_document() -> None:
    data = input_from_targets(daemon_doc(), target="vllm-a")
    assert [(p.concurrency, p.draft_cost) for p in data.points] == [(1.0, 0.1), (3.9, 0.5)]
    assert data.points[0].source == "vllm-b bucket 1"
    assert data.survival == SURVIVAL and data.chain_length == 4
    assert data.drafted_per_draft == 4.0
    assert "15m" in data.acceptance_source


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "nope"}, "no target 'nope' (targets: other, vllm-a)"),
        ({"target": "other"}, "has 0 matching models"),
        ({"target": "vllm-a", "window": "1m"}, "no window with figures per load named '1m'"),
    ],
)
def test_daemon_document_problems(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(RecommendError) as exc:
        input_from_targets(daemon_doc(), **kwargs)
    assert message in str(exc.value)


def test_daemon_document_garbage() -> None:
    with pytest.raises(RecommendError, match="no 'targets' list"):
        input_from_targets([1, 2], target="x")
    doc = daemon_doc()
    window = doc["targets"][1]["models"][0]["windows"][1]
    window["verdict"]["per_load"] = ["x", {"concurrency": "high"}]
    window["report"]["positions"] = [{"survival": 7}]
    with pytest.raises(RecommendError) as exc:
        input_from_targets(doc, target="vllm-a")
    assert set(exc.value.problems) == {
        "verdict.per_load[0]: must be an object",
        "verdict.per_load[1].concurrency: must be a number >= 0",
        "report.positions: survival must be numbers within [0, 1]",
    }


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["recommend", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_from_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile_doc()))
    code, out, _ = run_cli(["--profile", str(path)], capsys)
    assert code == 0
    assert (
        '"num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 2, 3], [3, 5, 2], [6, 11, 1]]'
        in out
    )
    assert "concurrency     8: --spec-draft-n-max 1" in out
    # The profile's crossover is read as the daemon reads its own: off the cost curve of the
    # two servers' step times (specmon.answer.profile_crossover), with its range.
    x = profile_crossover(profile_from_json(profile_doc()))
    assert x is not None and x.low is not None and x.high is not None
    assert (
        f"at k=4 speculation pays up to concurrency {x.concurrency:.1f} "
        f"({x.low:.1f}-{x.high:.1f}), costs {x.cost_percent:.0f} % from 8.0" in out
    ), out
    code, out, _ = run_cli(["--profile", str(path), "--json"], capsys)
    doc = strict_loads(out)
    assert code == 0
    assert doc["vllm"]["num_speculative_tokens_per_batch_size"][0] == [1, 1, 4]
    assert [b["best_chain_length"] for b in doc["buckets"]] == [4, 3, 2, 1]
    code, out, _ = run_cli(["--profile", str(path), "--chain-length", "2", "--json"], capsys)
    assert max(b["best_chain_length"] for b in strict_loads(out)["buckets"]) <= 2


def test_cli_bad_profile_lists_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = profile_doc()
    doc["version"] = 2
    doc["levels"][0]["concurrency"] = -1  # type: ignore[index]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(["--profile", str(path)], capsys)
    assert code == 1
    assert f"{path}: version:" in err and f"{path}: levels[0].concurrency" in err
    path.write_text("{not json")
    code, _, err = run_cli(["--profile", str(path)], capsys)
    assert code == 1 and "not JSON" in err
    code, _, err = run_cli(["--profile", str(tmp_path / "missing.json")], capsys)
    assert code == 1 and "missing.json" in err


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile_doc()))
    code, _, err = run_cli(["--profile", str(path), "--target", "x"], capsys)
    assert code == 2 and "go with --from" in err
    code, _, err = run_cli(["--from", "http://127.0.0.1:1"], capsys)
    assert code == 1 and "--from needs --target" in err


@contextmanager
def fake_daemon(body: bytes | Callable[[], bytes], asked: list[str] | None = None) -> Iterator[str]:
    """A stand-in for the daemon's /api/v1/targets, serving the documented shape: the whole
    ``body`` (or what it returns now) whatever the query (as a daemon that ignores
    ``?target=`` would); each request's path and query go to ``asked``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if asked is not None:
                asked.append(self.path)
            if urlsplit(self.path).path != "/api/v1/targets":
                self.send_error(404)
                return
            answer = body() if callable(body) else body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_cli_from_a_daemon(capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []
    with fake_daemon(json.dumps(daemon_doc()).encode(), asked) as url:
        code, out, err = run_cli(["--from", url, "--target", "vllm-a", "--json"], capsys)
        assert code == 0, err
        # Only the target's document is asked for (the whole is megabytes at fleet size).
        assert asked == ["/api/v1/targets?target=vllm-a"]
        doc = strict_loads(out)
        assert doc["source"] == f"daemon {url}, target vllm-a"
        assert [b["bucket"] for b in doc["buckets"]] == ["1", "2", "4"]
        code, _, err = run_cli(["--from", url, "--target", "nope"], capsys)
        assert code == 1 and "no target 'nope'" in err
    with fake_daemon(b"<html>") as url:
        code, _, err = run_cli(["--from", url, "--target", "vllm-a"], capsys)
        assert code == 1 and "not JSON" in err


def test_cli_from_nothing_listening(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run_cli(
        ["--from", f"http://127.0.0.1:{port}", "--target", "x", "--timeout", "2"], capsys
    )
    assert code == 1 and "specmon recommend:" in err


def test_cli_hostile_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    code, _, err = run_cli(["--profile", str(deep)], capsys)
    assert code == 1 and "not JSON" in err
    with fake_daemon(("[" * 100_000 + "]" * 100_000).encode()) as url:
        code, _, err = run_cli(["--from", url, "--target", "x"], capsys)
        assert code == 1 and "not JSON" in err


# --------------------------------------------------------------------------------------------
# Against the demo's own daemon: thin buckets are skipped, never refused
# --------------------------------------------------------------------------------------------


def test_a_bucket_without_figures_is_skipped_with_a_note() -> None:
    """A bucket the daemon has no figures for (label, edges and a reason, as the daemon
    publishes it; or the older ``"concurrency": null`` with a reason) is skipped and said so;
    a bucket with neither a concurrency nor a reason is still an error."""
    doc = daemon_doc()
    buckets = doc["targets"][1]["models"][0]["windows"][1]["verdict"]["per_load"]
    buckets.append({"label": "16", "low": 12.0, "high": 24.0, "reason": "too little data: x"})
    buckets.append({"label": "32", "concurrency": None, "reason": "no matching baseline yet"})
    data = input_from_targets(doc, target="vllm-a")
    assert [p.concurrency for p in data.points] == [1.0, 3.9]
    assert data.notes == (
        "bucket 8 skipped: no measured draft cost",
        "bucket 16 skipped: too little data: x",
        "bucket 32 skipped: no matching baseline yet",
    )
    assert recommend(data).notes[:3] == data.notes
    buckets.append({"label": "64", "concurrency": None})
    with pytest.raises(
        RecommendError, match=r"verdict.per_load\[5\].concurrency: must be a number"
    ):
        input_from_targets(doc, target="vllm-a")


def test_a_reason_is_printed_tamed() -> None:
    """A reason from the document reaches the terminal without its control characters and
    at most MAX_TEXT long."""
    doc = daemon_doc()
    buckets = doc["targets"][1]["models"][0]["windows"][1]["verdict"]["per_load"]
    buckets.append({"label": "16\x1b[2J", "reason": "x" * 10_000})
    [*_, note] = input_from_targets(doc, target="vllm-a").notes
    assert note.startswith("bucket 16?[2J skipped: xxx") and "\x1b" not in note
    assert len(note) == len("bucket 16?[2J skipped: ") + 200 and note.endswith("...")


#: (simulated second, a bucket of the moment thin): ten moments over the demo's first load
#: cycle after the first twin comparison: the first second of each level (1, 4, 16, 8, 2,
#: 24 requests for 20 s each), whose bucket has too little data yet, and the middle of each.
MOMENTS = ((21, "4"), (30, None), (41, "16"), (50, None), (61, None), (70, None),
           (81, None), (101, "32"), (110, None), (121, None))  # fmt: skip


def test_from_the_demo_daemon_at_ten_moments_of_a_cycle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``specmon recommend --from URL --target vllm-loaded``, the documented form, against
    the demo's own daemon's answer (its engines, config and target states on a simulated
    clock, /api/v1/targets as the daemon makes it): exit 0 at every moment, the buckets with
    too little data skipped with a note; figures rounded for people, full precision in
    --json."""
    fleet = DemoFleet(names=("vllm-loaded", "vllm-baseline"))
    answer = [b""]
    with fake_daemon(lambda: answer[0]) as url:
        thin_seen = _ten_moments(fleet, url, answer, capsys)
    assert thin_seen == 3


def _ten_moments(
    fleet: DemoFleet, url: str, answer: list[bytes], capsys: pytest.CaptureFixture[str]
) -> int:
    thin_seen = 0
    for moment, thin in MOMENTS:
        fleet.advance(moment)
        api = fleet.api("vllm-loaded")
        [window] = [w for w in api["targets"][0]["models"][0]["windows"] if w["window"] == "2m"]
        published = {b["label"]: b for b in window["verdict"]["per_load"]}
        if thin is not None:
            # The moment is what it claims: the new level's bucket is there, without figures.
            assert set(published[thin]) == {"label", "low", "high", "reason"}, published
            assert published[thin]["reason"].startswith("too little data"), published
            thin_seen += 1
        answer[0] = json.dumps(api).encode()
        code, out, err = run_cli(["--from", url, "--target", "vllm-loaded"], capsys)
        assert code == 0, (moment, err)
        code, text, err = run_cli(["--from", url, "--target", "vllm-loaded", "--json"], capsys)
        assert code == 0, (moment, err)
        doc = json.loads(text)
        if thin is not None:
            assert f"bucket {thin} skipped: too little data" in out, out
            assert any(n.startswith(f"bucket {thin} skipped") for n in doc["notes"])
        # People read n with 1 decimal, c with 3, speed-ups with 2; --json has them whole.
        rows = _table_rows(out)
        assert [r[0] for r in rows] == [b["bucket"] for b in doc["buckets"]]
        for row, advice in zip(rows, doc["buckets"], strict=True):
            _, _sizes, n, c, _how, _best, speed, current = row
            assert n == f"{advice['concurrency']:.1f}" and c == f"{advice['draft_cost']:.3f}"
            assert speed == f"{advice['expected_speedup']:.2f}x"
            assert current == f"{advice['current_chain_length_speedup']:.2f}x"
            if advice["draft_cost_how"] == "measured":
                measured = published[advice["bucket"]]
                assert advice["draft_cost"] == measured["draft_cost"]  # not rounded
                assert advice["concurrency"] == measured["concurrency"]
    return thin_seen


def _table_rows(text: str) -> list[list[str]]:
    """The advice table's rows (after its header), split into columns."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["bucket"])
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows
