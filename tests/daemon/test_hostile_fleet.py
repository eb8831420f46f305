"""The running daemon against every hostile case at once, beside healthy simulated
engines: /metrics always answers 200, the healthy targets stay scraped on time and within
sampling error of the simulator's truth, no secret comes back, memory stays bounded."""

from __future__ import annotations

import math
import time
from pathlib import Path

from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import make_target
from tests.support.daemon import Exported, daemon, get
from tests.support.fake_engines import running
from tests.support.hostile import CASES, SECRET_HEADER, SECRET_TOKEN, HostileServer

SURVIVAL = (0.8, 0.55, 0.3)
Z = 4.5  # a sampling bound that a correct figure misses with negligible probability
RUN_SECONDS = 20.0


def _rss_peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_hostile_targets_leave_the_healthy_ones_correct_and_timely(tmp_path: Path) -> None:
    healthy = [
        make_target(
            name=f"h{i}", kind=kind,
            settings=SimSettings(survival=SURVIVAL, drafts_per_second=400, drafts_per_request=20),
            seed=30 + i,
        )
        for i, kind in enumerate((PageKind.VLLM, PageKind.LLAMACPP, PageKind.VLLM_MULTIPROC))
    ]  # fmt: skip
    with running(healthy) as engines, HostileServer() as hostile, HostileServer() as other:
        hostile.redirect_to = other.url("/landing")  # another origin (another port)
        lines = [
            "global:",
            "  scrape_interval: 1s",
            "  scrape_timeout: 800ms",
            "  windows: [10s, 30s]",
            "targets:",
        ]
        for t in healthy:
            lines.append(f"  - {{name: {t.name}, url: '{engines.url(t.name)}'}}")
        for path in (*CASES, "/hang"):
            lines.append(f"  - {{name: '{path[1:]}', url: '{hostile.url(path)}'}}")
        for path in ("/echo", "/redirect"):
            lines.append(
                f"  - {{name: '{path[1:]}', url: '{hostile.url(path)}', bearer_token_env: TOK,"
                f" headers: {{X-Tenant: {SECRET_HEADER}}}}}"
            )
        config = tmp_path / "specmon.yaml"
        config.write_text("\n".join(lines) + "\n")
        with daemon(config, tmp_path, env={"TOK": SECRET_TOKEN}, ready=False) as d:
            statuses: list[int] = []
            lags: list[float] = []
            successes: dict[str, list[tuple[float, float]]] = {t.name: [] for t in healthy}
            deadline = time.monotonic() + RUN_SECONDS
            m = Exported()
            while time.monotonic() < deadline:
                status, body, _ = get(d.base + "/metrics", timeout=5)
                statuses.append(status)
                if status == 200:
                    m = Exported.parse(body.decode())
                    now = time.time()
                    for t in healthy:
                        last = m.value("specmon_last_success_timestamp_seconds", target=t.name)
                        if last is not None:
                            lags.append(now - last)
                        ok = m.value("specmon_scrapes_total", target=t.name, result="success")
                        if ok is not None:
                            successes[t.name].append((time.monotonic(), ok))
                time.sleep(0.5)
            api = d.targets()
            status_page = get(d.base + "/")[1].decode()
            rss_kib = _rss_peak_kib(d.proc.pid)
            log = d.log_text()

    assert statuses and set(statuses) == {200}, statuses
    # Every healthy target scraped on time: at its 1 s interval (90 % of the scrapes the time
    # allows; the first scrape waits a random part of an interval), and its last success never
    # older than 3.5 s at any look (a stall of the event loop would show here).
    for name, seen in successes.items():
        (t0, c0), (t1, c1) = seen[0], seen[-1]
        assert c1 - c0 >= 0.9 * (t1 - t0) - 1, (name, c1 - c0, t1 - t0)
    assert lags and max(lags) < 3.5, max(lags)
    for t in healthy:
        labels = {"target": t.name, "window": "30s"}
        drafts = m.value("specmon_window_drafts", **labels)
        assert drafts is not None and drafts > 2000
        for position, truth in enumerate(SURVIVAL, start=1):
            got = m.value("specmon_position_survival_ratio", position=str(position), **labels)
            assert got is not None
            bound = Z * math.sqrt(truth * (1 - truth) / drafts)
            assert abs(got - truth) <= bound, (t.name, position, got, truth)
    # The hostile ones: up or down, but never an impossible figure.
    for name, series in m.samples.items():
        for key, value in series.items():
            assert math.isfinite(value), (name, key)
            if name.endswith("_ratio") and "speedup" not in name and "margin" not in name:
                assert 0.0 <= value <= 1.0, (name, key, value)
    # Each refusal counted with its reason, by the target that caused it.
    rejected = {
        (dict(labels)["target"], dict(labels)["reason"])
        for labels, value in m.series("specmon_rejected_readings_total").items()
        if value > 0
    }
    assert {
        ("overflow", "implausible"),
        ("huge-position", "position_limit"),
        ("above-drafts", "position_above_drafts"),
        ("partial-decrease", "partial_decrease"),
        ("duplicates", "duplicate_series"),
        ("sglang-huge", "gauge_out_of_range"),
        ("running-nan", "non_finite"),
        ("nan-counters", "non_finite"),
        ("many-models", "model_limit"),
    } <= rejected, rejected
    # A 1.5 MB model name is on lines longer than any line specmon reads: nothing usable.
    long_model = api["long-model"]
    assert long_model["models"] == [] and "line longer than 65536" in long_model["error"]
    assert [m["model"] for m in api["nan-counters"]["models"]] == ["good"]
    assert api["hang"]["error_kind"] == "timeout"
    # Secrets: never in the API, the status page or the logs; never sent across origins.
    for text in (str(api), status_page, log):
        assert SECRET_TOKEN not in text and SECRET_HEADER not in text
    landing = other.headers_seen.get("/landing", {})
    assert landing and "X-Tenant" not in landing and "Authorization" not in landing
    print(f"hostile fleet: peak RSS {rss_kib} KiB, max scrape lag {max(lags):.2f} s")
    assert rss_kib < 200 * 1024, f"peak RSS {rss_kib} KiB"
