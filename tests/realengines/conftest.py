"""Fixtures and hand computations shared by the real-engine tier (tests marked ``realengine``).

Everything here is independent of specmon's own code: engine pages are read with
prometheus_client's parser, and every figure the daemon exports is recomputed from the raw
counters with closed forms and bisections written out below.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.realengines import models, provision, servers
from tests.support.daemon import Daemon, Exported

#: Scalar counter name suffixes (after the ``vllm:`` / ``llamacpp:`` prefix).
_DRAFTS = "spec_decode_num_drafts_total"
_DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
_ACCEPTED = "spec_decode_num_accepted_tokens_total"
_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"

#: vLLM prints its ``SpecDecoding metrics`` line every this many seconds (default 10 s); the
#: session's vLLM uses a shorter interval so the log-vs-counters test waits less.
VLLM_LOG_INTERVAL = 3.0


# --------------------------------------------------------------------------------------------
# Engine versions in the CI log
# --------------------------------------------------------------------------------------------


def pytest_report_header(config: pytest.Config) -> list[str]:
    """``pytest tests/realengines`` names every real engine's version in its header."""
    try:
        found = provision.versions()
    except Exception as exc:  # never break collection over a version probe
        return [f"real engines: version probe failed: {exc}"]
    return [f"real engine {name}: {version}" for name, version in found.items()]


@pytest.fixture(scope="session", autouse=True)
def _engine_versions(
    request: pytest.FixtureRequest, record_testsuite_property: Any
) -> dict[str, str]:
    """Once per session (also when the header hook did not run, e.g. plain ``pytest``): one
    line per real engine on the terminal and a property in the JUnit XML."""
    found = provision.versions()
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for name, version in found.items():
        record_testsuite_property(f"realengine.{name}", version)
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(f"[realengines] {name}: {version}")
    return found


# --------------------------------------------------------------------------------------------
# Counters read from raw engine pages
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counters:
    """An engine's speculative-decoding counters (summed over every label but ``position``)."""

    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: tuple[int, ...]  # index 0 = the engines' position 0 = specmon's position 1

    def minus(self, before: Counters) -> Counters:
        """The increase since ``before`` (same engine process; positions absent count 0)."""
        size = max(len(self.per_pos), len(before.per_pos))
        mine = self.per_pos + (0,) * (size - len(self.per_pos))
        theirs = before.per_pos + (0,) * (size - len(before.per_pos))
        out = Counters(
            drafts=self.drafts - before.drafts,
            draft_tokens=self.draft_tokens - before.draft_tokens,
            accepted=self.accepted - before.accepted,
            per_pos=tuple(a - b for a, b in zip(mine, theirs, strict=True)),
        )
        assert min(out.drafts, out.draft_tokens, out.accepted, *out.per_pos, 0) >= 0, (
            f"counters went down: {before} -> {self}"
        )
        return out

    def survival(self) -> list[float]:
        return [p / self.drafts for p in self.per_pos]


def _integral(value: float, what: str) -> int:
    assert math.isfinite(value) and value >= 0 and value == round(value), f"{what} = {value!r}"
    return round(value)


def page_counters(text: str) -> Counters:
    """Read the four counters from an engine page with prometheus_client's parser."""
    drafts = draft_tokens = accepted = 0.0
    per_pos: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name
            if name.endswith(_PER_POS):
                pos = int(sample.labels["position"])
                per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
            elif name.endswith(_DRAFTS):
                drafts += sample.value
            elif name.endswith(_DRAFT_TOKENS):
                draft_tokens += sample.value
            elif name.endswith(_ACCEPTED):
                accepted += sample.value
    size = max(per_pos) + 1 if per_pos else 0
    return Counters(
        drafts=_integral(drafts, "drafts"),
        draft_tokens=_integral(draft_tokens, "draft_tokens"),
        accepted=_integral(accepted, "accepted"),
        per_pos=tuple(_integral(per_pos.get(i, 0.0), f"per_pos[{i}]") for i in range(size)),
    )


def scrape(url: str) -> tuple[str, Counters]:
    resp = servers.fetch(url, timeout=30)
    assert resp.status == 200, (url, resp.status, resp.body[:300])
    return resp.text, page_counters(resp.text)


def settled(url: str, *, quiet: float = 1.0, timeout: float = 60.0) -> tuple[str, Counters]:
    """The page once its counters have not moved for ``quiet`` seconds (no traffic in flight:
    vLLM records a step's stats after the response may already have gone out)."""
    deadline = time.monotonic() + timeout
    text, last = scrape(url)
    since = time.monotonic()
    while True:
        time.sleep(0.25)
        text, now = scrape(url)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return text, now
        assert time.monotonic() < deadline, f"counters of {url} still moving after {timeout}s"


# --------------------------------------------------------------------------------------------
# The arithmetic, written out independently of specmon.arithmetic
# --------------------------------------------------------------------------------------------


def _bisect(f: Any, target: float) -> float:
    """x in [0, 1] with f(x) = target for an increasing f."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def hand_alpha(mean_accepted: float, k: int) -> float:
    """alpha with alpha + alpha^2 + ... + alpha^k = mean accepted tokens per draft."""
    if mean_accepted >= k:
        return 1.0
    return _bisect(lambda a: sum(a**i for i in range(1, k + 1)), mean_accepted)


def hand_breakeven(k: int, c: float) -> float:
    """alpha with S = (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)) = 1, i.e. sum_1^k a^i = k c."""
    return _bisect(lambda a: sum(a**i for i in range(1, k + 1)), k * c)


def closed_form_speedup(alpha: float, k: int, c: float) -> float:
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (1 + k * c))


def hand_best_chain(survival: Sequence[float], c: float) -> tuple[int, float]:
    """k' in 0..k maximising (1 + s_1 + ... + s_k') / (1 + k' c); ties to the shorter chain."""
    values = [(1 + sum(survival[:j])) / (1 + j * c) for j in range(len(survival) + 1)]
    best = max(range(len(values)), key=lambda j: (values[j], -j))
    return best, values[best]


def expected_window(delta: Counters, k: int, c: float) -> dict[str, Any]:
    """Every per-window figure specmon must export for a window whose increase is ``delta``."""
    d = delta.drafts
    survival = delta.survival()
    conditional = [
        delta.per_pos[i] / (d if i == 0 else delta.per_pos[i - 1]) for i in range(len(survival))
    ]
    mean_accepted = delta.accepted / d
    alpha = hand_alpha(mean_accepted, k)
    breakeven = hand_breakeven(k, c)
    # A chain of k' drafts k' x drafted / k tokens (llama.cpp's draft stops early at low
    # probability): the cost per position is c x drafted / k, as specmon.report.best_chain.
    best_k, best_s = hand_best_chain(survival[:k], c * (delta.draft_tokens / d) / k)
    return {
        "drafts": d,
        "draft_acceptance_ratio": delta.accepted / delta.draft_tokens,
        "mean_acceptance_length": 1 + mean_accepted,
        "survival": survival,
        "conditional": conditional,
        "alpha": alpha,
        "breakeven": breakeven,
        "margin": alpha - breakeven,
        "expected_speedup": (1 + mean_accepted) / (1 + c * delta.draft_tokens / d),
        "best_chain_length": best_k,
        "best_speedup": best_s,
    }


def assert_window_matches(
    m: Exported,
    labels: Mapping[str, str],
    window: str,
    delta: Counters,
    *,
    k: int,
    c: float,
) -> dict[str, Any]:
    """The daemon's exported window equals the hand computation from ``delta``."""
    want = expected_window(delta, k, c)
    w = {**labels, "window": window}

    def got(name: str, **extra: str) -> float:
        value = m.value(name, **w, **extra)
        assert value is not None, f"{name}{w}{extra} missing"
        return value

    assert got("specmon_window_drafts") == delta.drafts
    assert m.value("specmon_chain_length", **labels) == k
    assert m.value("specmon_draft_cost_ratio", source="configured", **labels) == c
    breakeven = m.value("specmon_breakeven_alpha_ratio", **labels)
    assert breakeven == pytest.approx(want["breakeven"], abs=1e-9)
    assert closed_form_speedup(want["breakeven"], k, c) == pytest.approx(1.0, abs=1e-9)
    assert got("specmon_draft_acceptance_ratio") == pytest.approx(want["draft_acceptance_ratio"])
    assert got("specmon_mean_acceptance_length") == pytest.approx(want["mean_acceptance_length"])
    for i, (s, cond) in enumerate(zip(want["survival"], want["conditional"], strict=True), 1):
        assert got("specmon_position_survival_ratio", position=str(i)) == pytest.approx(s)
        assert got("specmon_position_conditional_ratio", position=str(i)) == pytest.approx(cond)
    assert not m.series(
        "specmon_position_survival_ratio", **w, position=str(len(delta.per_pos) + 1)
    )
    assert got("specmon_alpha_ratio") == pytest.approx(want["alpha"], abs=1e-9)
    assert got("specmon_alpha_margin_ratio") == pytest.approx(want["margin"], abs=1e-9)
    assert got("specmon_expected_speedup_ratio") == pytest.approx(want["expected_speedup"])
    assert got("specmon_best_chain_length") == want["best_chain_length"]
    assert got("specmon_best_speedup_ratio") == pytest.approx(want["best_speedup"])
    return want


# --------------------------------------------------------------------------------------------
# The daemon
# --------------------------------------------------------------------------------------------


def write_config(
    path: Path,
    targets: Sequence[tuple[str, str, Mapping[str, object]]],
    *,
    windows: Sequence[str],
    interval: str = "500ms",
    timeout: str | None = None,
    draft_cost: float = 0.2,
) -> Path:
    lines = [
        "global:",
        f"  scrape_interval: {interval}",
        f"  scrape_timeout: {timeout or interval}",
        f"  windows: [{', '.join(windows)}]",
        f"  draft_cost: {draft_cost}",
        "targets:",
    ]
    for name, url, extra in targets:
        lines += [f"  - name: {name}", f"    url: {url}"]
        lines += [f"    {key}: {value}" for key, value in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def wait_target_up(d: Daemon, target: str, *, timeout: float = 30.0) -> None:
    d.wait_for(lambda: d.metrics().value("specmon_up", target=target) == 1.0, timeout=timeout)


def wait_window_drafts(
    d: Daemon, labels: Mapping[str, str], window: str, drafts: int, *, timeout: float = 30.0
) -> Exported:
    """Poll until the daemon's window holds exactly ``drafts`` drafts; return that export."""

    def ready() -> Exported | None:
        m = d.metrics()
        return m if m.value("specmon_window_drafts", window=window, **labels) == drafts else None

    result: Exported = d.wait_for(ready, timeout=timeout, interval=0.25)
    return result


# --------------------------------------------------------------------------------------------
# Engines shared across tests
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def eos_free_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 5%-noise draft with the end-of-sequence row of its output matrix zeroed.

    Its EOS logit is then always 0 while the other 319 logits are spread around 0, so the
    draft never proposes EOS. Why it matters: llama.cpp's synthetic acceptance
    (``--spec-synth-rates``) rejects every drafted end-of-generation token whatever the random
    draw says ("do not accept a drafted EOG token", tools/server/server-context.cpp), and the
    stock draft proposes EOS often enough (measured with all rates 1.0: survival 0.99 at
    position 1 and 0.90 at position 6 for k = 6) to bias the synthetic ground truth low.
    """
    import gguf

    path = tmp_path_factory.mktemp("models") / "tiny-llama-draft-no-eos.gguf"
    shutil.copyfile(models.ensure_tiny_gguf(noise=0.05), path)
    reader = gguf.GGUFReader(path, "r+")
    field = reader.get_field("tokenizer.ggml.eos_token_id")
    assert field is not None
    eos = int(field.contents())
    output = next(t for t in reader.tensors if t.name == "output.weight")
    output.data[eos, :] = 0.0
    reader.data.flush()
    del reader
    check = gguf.GGUFReader(path)
    output = next(t for t in check.tensors if t.name == "output.weight")
    assert not output.data[eos].any() and output.data[eos + 1].any()
    return path


@pytest.fixture(scope="session")
def vllm_single() -> Iterator[servers.VllmServer]:
    """One vLLM (single API server, n-gram k = 3) for the whole session: it takes 25-80 s to
    start. Its stats-log interval is shortened (``VLLM_LOG_STATS_INTERVAL``)."""
    srv = servers.vllm_server(env={"VLLM_LOG_STATS_INTERVAL": str(VLLM_LOG_INTERVAL)})
    with srv:
        yield srv
