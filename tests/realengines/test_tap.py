"""``specmon tap`` (a subprocess) in front of a real llama-server with its draft and a real vLLM
(CPU) with an n-gram draft and ``--per-request-spec-decode-metrics summary``, and the daemon
(``specmon run``) reading both the engine and the tap.

Two classes of prompts (repetitive, free-form), streaming and not. Checked against what the
test reads itself from the responses (its own JSON and SSE reading, not specmon's):

- every response through the tap equals the engine's direct answer to the same request
  (temperature 0, same seed) byte for byte once the per-response fields that differ between
  any two requests (id, created, timings, the prompt cache's counts) are masked; except
  vLLM's streams, whose chunking is the engine's timing (its output processor joins the
  tokens decoded while the API server was busy into one event, so two identical requests
  on a loaded machine get the same text in different events: seen in a CI run, "a" + "b"
  against "ab"): those are held to the same events' contents, every delta joined per
  choice, the finish reasons, the usage and the speculation metrics (the tap's own
  byte-for-byte passing of chunks is tests/tap's, against a recorded upstream);
- the tap's per-class counters equal the sums of the per-request fields of the responses;
- the daemon's per-class accepted / drafted equals those sums' ratio, its alpha the hand
  computation at the engine's k, and the two classes differ as the prompts do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.realengines import servers
from tests.realengines.conftest import hand_alpha, write_config
from tests.support.daemon import Daemon, Exported, daemon

pytestmark = pytest.mark.realengine

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("repetitive", "freeform")
FREEFORM_PROMPTS = (
    "Describe the harbour at dawn: gulls, ropes, a ferry leaving, fog lifting slowly.",
    "Write a short letter to a neighbour about a lost umbrella and a borrowed ladder.",
    "Explain why bread rises, in plain words, for someone who never baked anything.",
    "List three reasons a train might run late on a winter morning in the mountains.",
)
PROMPTS = {"repetitive": servers.REPETITIVE_PROMPTS, "freeform": FREEFORM_PROMPTS}
#: Fields that differ between any two requests to the same engine, masked before comparing.
_VOLATILE = (
    re.compile(rb'"id":"[^"]*"'),
    re.compile(rb'"created":\d+'),
    re.compile(rb'"timings":\{[^}]*\}'),
    re.compile(rb'"prompt_tokens_details":(\{[^}]*\}|null)'),
)


@dataclass
class Tally:
    requests: int = 0
    drafted: int = 0
    accepted: int = 0
    steps: int = 0


@dataclass
class Run:
    tallies: dict[str, Tally] = field(default_factory=lambda: {c: Tally() for c in CLASSES})
    compared: int = 0
    no_fields: int = 0


@contextmanager
def tap_process(upstream: str, tmp_path: Path) -> Iterator[str]:
    """``specmon tap`` on a free port in front of ``upstream``; yields its base URL."""
    port = servers.free_port()
    log = open(tmp_path / f"tap-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "tap", "--upstream", upstream,
         "--listen", f"127.0.0.1:{port}", "--class-header", "x-class",
         "--classes", ",".join(CLASSES), "--log.format", "json"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if servers.fetch(base + "/healthz", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / f"tap-{port}.log").read_text()
            assert time.monotonic() < deadline, "the tap did not start"
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _post(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        assert response.status == 200
        data: bytes = response.read()
        return data


def _masked(raw: bytes) -> bytes:
    for pattern in _VOLATILE:
        raw = pattern.sub(b"#", raw)
    return raw


def _stream_content(raw: bytes) -> tuple[Any, ...]:
    """A stream's content regardless of how it was chunked: per choice the deltas joined and
    the finish reasons, then every other event's fields (usage, metrics) masked, and the end."""
    text: dict[int, str] = {}
    finish: dict[int, list[str]] = {}
    rest: list[bytes] = []
    lines = [line for line in raw.split(b"\n") if line.startswith(b"data:")]
    assert lines and lines[-1].strip() == b"data: [DONE]", raw[-200:]
    for line in lines[:-1]:
        event: dict[str, Any] = json.loads(line[5:])
        for choice in event.pop("choices", []):
            index = choice["index"]
            text[index] = text.get(index, "") + ((choice.get("delta") or {}).get("content") or "")
            if choice.get("finish_reason"):
                finish.setdefault(index, []).append(choice["finish_reason"])
        event = {k: v for k, v in event.items() if k not in ("id", "created")}
        if event.get("usage") or event.get("metrics"):
            rest.append(_masked(json.dumps(event, sort_keys=True).encode()))
    return (sorted(text.items()), sorted(finish.items()), rest)


def _same_answer(tapped: bytes, direct: bytes, *, regrouped: bool) -> bool:
    if regrouped:
        return _stream_content(tapped) == _stream_content(direct)
    return _masked(tapped) == _masked(direct)


def _carrier(raw: bytes) -> dict[str, Any] | None:
    """The document that carries the per-request fields: the body, or a stream's last event
    with ``timings`` or ``metrics`` (read here independently of specmon)."""
    if not raw.startswith(b"data:"):
        doc: dict[str, Any] = json.loads(raw)
        return doc
    for line in reversed(raw.split(b"\n")):
        if line.startswith(b"data:") and line.strip() != b"data: [DONE]":
            event: dict[str, Any] = json.loads(line[5:])
            if "timings" in event or "metrics" in event:
                return event
    return None


def _fields(doc: dict[str, Any]) -> tuple[int, int, int]:
    """(drafted, accepted, steps) of one response."""
    if "metrics" in doc:
        spec = doc["metrics"]["speculative_decoding"]
        return spec["num_draft_tokens"], spec["num_accepted_draft_tokens"], spec["num_spec_steps"]
    timings = doc["timings"]
    drafted = timings.get("draft_n", 0)
    accepted = min(timings.get("draft_n_accepted", 0), timings["predicted_n"])
    return drafted, accepted, 0


def _drive(engine: str, tap: str, *, model: str, rounds: int, vllm: bool) -> Run:
    """Each class's prompts, streamed and not, through the tap and straight to the engine."""
    run = Run()
    for i in range(rounds):
        for name in CLASSES:
            prompt = PROMPTS[name][i % len(PROMPTS[name])]
            for stream in (False, True):
                body = servers.chat_request_body(prompt, model=model, max_tokens=48)
                body.update(seed=1234, stream=stream)
                if stream and vllm:
                    body["stream_options"] = {"include_usage": True}
                tapped = _post(tap + "/v1/chat/completions", body, {"x-class": name})
                direct = _post(engine + "/v1/chat/completions", body)
                same = _same_answer(tapped, direct, regrouped=stream and vllm)
                assert same, (name, stream, tapped[:400], direct[:400])
                run.compared += 1
                doc = _carrier(tapped)
                assert doc is not None
                drafted, accepted, steps = _fields(doc)
                t = run.tallies[name]
                t.requests += 1
                t.drafted += drafted
                t.accepted += accepted
                t.steps += steps
    if vllm:  # a stream without include_usage: passed on, no fields to read
        body = servers.chat_request_body(FREEFORM_PROMPTS[0], model=model, max_tokens=8)
        body.update(stream=True)
        assert b'"usage"' not in _post(tap + "/v1/chat/completions", body, {"x-class": "freeform"})
        run.no_fields += 1
    return run


def _tap_totals(tap: str) -> tuple[dict[str, Tally], float]:
    page = Exported.parse(servers.fetch(tap + "/metrics").text)
    totals = {}
    for name in CLASSES:
        totals[name] = Tally(
            requests=int(page.value("specmon_tap_requests_total", **{"class": name}) or 0),
            drafted=int(page.value("specmon_tap_draft_tokens_total", **{"class": name}) or 0),
            accepted=int(page.value("specmon_tap_accepted_tokens_total", **{"class": name}) or 0),
            steps=int(page.value("specmon_tap_spec_steps_total", **{"class": name}) or 0),
        )
    return totals, page.value("specmon_tap_unparsed_responses_total", reason="no_fields") or 0.0


def _check(d: Daemon, tap: str, run: Run, *, k: int, target: str) -> dict[str, Any]:
    totals, no_fields = _tap_totals(tap)
    assert totals == run.tallies
    assert no_fields == run.no_fields

    def ready() -> Exported | None:
        m = d.metrics()
        counts = [
            m.value("specmon_class_requests", target=target, window="10m", **{"class": c})
            for c in CLASSES
        ]
        return m if counts == [run.tallies[c].requests for c in CLASSES] else None

    m: Exported = d.wait_for(ready, timeout=60, interval=0.5)
    figures: dict[str, Any] = {}
    for name, t in run.tallies.items():
        labels = {"target": target, "window": "10m", "class": name}
        ratio = m.value("specmon_class_draft_acceptance_ratio", **labels)
        assert ratio == pytest.approx(t.accepted / t.drafted, rel=1e-12), name
        steps = t.steps if t.steps else t.drafted / k  # llama.cpp: drafts assumed drafted / k
        alpha = m.value("specmon_class_alpha_ratio", **labels)
        assert alpha == pytest.approx(hand_alpha(t.accepted / steps, k), abs=1e-9), name
        length = m.value("specmon_class_mean_acceptance_length", **labels)
        assert length == pytest.approx(1 + t.accepted / steps), name
        figures[name] = {"requests": t.requests, "drafted": t.drafted, "accepted": t.accepted,
                         "steps": t.steps, "ratio": ratio, "alpha": alpha, "length": length}  # fmt: skip
    coverage = m.value("specmon_class_coverage_ratio", target=target, window="10m")
    assert coverage is not None and 0.0 < coverage <= 1.0
    figures["coverage"] = coverage
    figures["compared"] = run.compared
    return figures


def _report(name: str, figures: dict[str, Any]) -> None:
    path = os.environ.get("SPECMON_TAP_REPORT")
    line = json.dumps({"engine": name, **figures}, sort_keys=True)
    print(line)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def test_llama_server_with_its_draft_behind_the_tap(tmp_path: Path) -> None:
    k = 4
    with servers.llama_spec_server(n_max=k) as srv, tap_process(srv.base_url, tmp_path) as tap:
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [("llama", srv.metrics_url, {"model": "tiny-llama", "tap": tap + "/metrics"})],
            windows=["10m"],
        )
        with daemon(cfg, tmp_path) as d:
            d.wait_for(lambda: d.metrics().value("specmon_class_source_up", target="llama") == 1)
            run = _drive(srv.base_url, tap, model="tiny-llama", rounds=4, vllm=False)
            figures = _check(d, tap, run, k=k, target="llama")
    # The draft model drafts for both classes; the prompts change what it gets right.
    assert figures["repetitive"]["ratio"] != figures["freeform"]["ratio"]
    _report("llamacpp", figures)


def test_vllm_with_an_ngram_draft_behind_the_tap(tmp_path: Path) -> None:
    k = servers.VLLM_NGRAM_K
    extra = ("--per-request-spec-decode-metrics", "summary")
    with servers.vllm_server(extra_args=extra) as srv, tap_process(srv.base_url, tmp_path) as tap:
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [("vllm", srv.metrics_url, {"tap": tap + "/metrics"})],
            windows=["10m"],
        )
        with daemon(cfg, tmp_path) as d:
            d.wait_for(lambda: d.metrics().value("specmon_class_source_up", target="vllm") == 1)
            run = _drive(srv.base_url, tap, model="tiny-llama", rounds=4, vllm=True)
            figures = _check(d, tap, run, k=k, target="vllm")
    # n-gram drafts come from repetition in the prompt and output: the repetitive class
    # drafts more per request than the free-form one.
    per = {c: figures[c]["drafted"] / figures[c]["requests"] for c in CLASSES}
    assert per["repetitive"] > per["freeform"], per
    _report("vllm", figures)
