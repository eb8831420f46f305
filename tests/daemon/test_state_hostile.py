"""Issue 61's acceptance case: a `specmon run` with one hostile target among 100 healthy ones,
stopped and started again 10 times on one state directory, keeps every healthy target's
configuration epochs each time. The hostile target's counters alternate between 0 (two
position series) and 2^53 - 1 (four): before, its epoch counted each rise whole, the daemon
wrote the sums, and at the next start its own reader refused the whole file, every target's
epochs with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import make_target
from tests.support.daemon import daemon
from tests.support.fake_engines import running
from tests.support.hostile import HostileServer

HEALTHY = 100
RESTARTS = 10

Epochs = list[tuple[int, str, float, bool | None, int | None]]


def _epochs(target: dict[str, Any]) -> dict[str, Epochs]:
    return {
        m["model"]: [
            (e["epoch"], e["reason"], e["start_timestamp_seconds"], e["speculation"],
             e["chain_length"])
            for e in m["epochs"]
        ]
        for m in target["epochs"] or []
    }  # fmt: skip


def _within_bounds(target: dict[str, Any]) -> None:
    for model in target["epochs"] or []:
        for e in model["epochs"]:
            counts = (e["drafts"], e["draft_tokens"], e["accepted_tokens"], e["generated_tokens"])
            assert max(counts) <= 2**53, e
            if e["drafts"]:
                k = e["chain_length"] or 64
                assert 1 + e["accepted_tokens"] / e["drafts"] <= k + 1 + 1e-9, e


def test_one_hostile_target_among_100_keeps_every_healthy_targets_epochs(
    tmp_path: Path,
) -> None:
    healthy = [
        make_target(name=f"h{i:03d}", kind=PageKind.VLLM, seed=100 + i,
                    settings=SimSettings(survival=(0.8, 0.6, 0.4), drafts_per_second=50))
        for i in range(HEALTHY)
    ]  # fmt: skip
    state_dir = tmp_path / "state"
    with running(healthy, shared=True) as engines, HostileServer() as hostile:
        lines = ["global:", "  scrape_interval: 250ms", "  scrape_timeout: 200ms",
                 "  windows: [10s]", "targets:"]  # fmt: skip
        lines += [f"  - {{name: {t.name}, url: '{engines.url(t.name)}'}}" for t in healthy]
        lines.append(f"  - {{name: hostile, url: '{hostile.url('/alternating')}'}}")
        config = tmp_path / "specmon.yml"
        config.write_text("\n".join(lines) + "\n")
        kept: dict[str, dict[str, Epochs]] = {}
        for run in range(RESTARTS + 1):
            seen_before = hostile.scrapes.get("/alternating", 0)
            with daemon(config, tmp_path, extra=["--state.dir", str(state_dir)]) as d:
                events = {line.get("event"): line for line in d.log_lines()}
                if run:
                    assert "state_refused" not in events, events["state_refused"]
                    assert "state_target_refused" not in events
                    assert events["state_read"]["targets"] == HEALTHY + 1
                    # Restored, listed before the first scrape: each healthy target's epochs
                    # as they were written at the last stop.
                    api = d.targets()
                    for name, epochs in kept.items():
                        assert _epochs(api[name]) == epochs, (run, name)

                # Every target counted, the hostile one through many of its alternations.
                def counted(d: Any = d, since: int = seen_before) -> bool:
                    return hostile.scrapes.get("/alternating", 0) >= since + 8 and all(
                        t["epochs"] for t in d.targets().values()
                    )

                d.wait_for(counted, timeout=60)
                api = d.targets()
                _within_bounds(api["hostile"])
                kept = {t.name: _epochs(api[t.name]) for t in healthy}
                assert all(kept.values())
                assert d.stop() == 0  # SIGTERM writes the state
