"""``specmon run --state.dir``: the epochs survive a restart of specmon (SIGTERM, start again),
a change marked by hand among them; POST /-/mark is refused without --web.enable-lifecycle;
without a state_dir nothing is written."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from specmon.sim.engine import SimSettings
from specmon.sim.pages import PageKind
from specmon.sim.server import make_target
from tests.support.daemon import daemon, post
from tests.support.fake_engines import running


def _config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "specmon.yml"
    config.write_text(
        "global:\n  scrape_interval: 100ms\n  scrape_timeout: 100ms\n  windows: [1m]\n"
        f"targets:\n  - {{name: spec, url: '{url}'}}\n"
    )
    return config


def _epochs(d: Any) -> list[tuple[int, str, str | None]]:
    (model,) = d.targets()["spec"]["epochs"] or [{"epochs": []}]
    return [(e["epoch"], e["reason"], e["note"]) for e in model["epochs"]]


def test_epochs_and_a_mark_survive_a_restart_of_specmon(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    target = make_target(name="spec", kind=PageKind.VLLM, settings=SimSettings(), seed=1)
    with running([target]) as engines:
        config = _config(tmp_path, engines.url("spec"))
        extra = ["--state.dir", str(state_dir), "--web.enable-lifecycle"]
        with daemon(config, tmp_path, extra=extra) as d:
            d.wait_for(lambda: _epochs(d) == [(1, "first_seen", None)])
            status, body = post(d.base + "/-/mark?target=spec&note=draft%201B")
            assert (status, body) == (200, b"marked: epoch 2\n")
            assert _epochs(d) == [(1, "first_seen", None), (2, "manual", "draft 1B")]
            info = d.metrics().series("specmon_config_epoch_info", target="spec")
            assert sorted(dict(k)["epoch"] for k in info) == ["1", "2"]
            assert d.metrics().value("specmon_config_change_timestamp_seconds") is not None
            assert d.stop() == 0
        path = state_dir / "specmon-state.json"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert not (state_dir / ".specmon-state.json.tmp").exists()
        with daemon(config, tmp_path, extra=extra) as d:
            # Restored, and counted on after the next scrapes.
            assert _epochs(d) == [(1, "first_seen", None), (2, "manual", "draft 1B")]
            d.wait_for(lambda: d.targets()["spec"]["up"])
            assert _epochs(d) == [(1, "first_seen", None), (2, "manual", "draft 1B")]
            lines = [line.get("event") for line in d.log_lines()]
            assert "state_read" in lines and "state_refused" not in lines


def test_mark_needs_the_lifecycle_flag_and_nothing_is_written_without_a_state_dir(
    tmp_path: Path,
) -> None:
    target = make_target(name="spec", kind=PageKind.VLLM, settings=SimSettings(), seed=1)
    with running([target]) as engines:
        config = _config(tmp_path, engines.url("spec"))
        before = set(tmp_path.rglob("*"))
        with daemon(config, tmp_path) as d:
            d.wait_for(lambda: d.targets()["spec"]["up"])
            status, _ = post(d.base + "/-/mark?target=spec&note=x")
            assert status == 403
            assert d.stop() == 0
        written = {p for p in set(tmp_path.rglob("*")) - before if not p.name.endswith(".log")}
        assert written == set()
