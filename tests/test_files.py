"""The one capped file reader: regular files only, never more than the cap, and a FIFO, a
device or a directory refused without blocking; through it, config files, file_sd files and
token files."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from specmon import files
from specmon.config_values import ConfigError
from specmon.daemon.app import Daemon
from specmon.daemon.config import load_config


def _in_thread(call: Any, timeout: float = 5.0) -> Any:
    """Run ``call`` where a blocking open cannot hang the test: fail instead."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the read blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "targets.yml"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file \\(a FIFO\\)") as info:
        _in_thread(lambda: files.read_capped(fifo, max_bytes=1024))
    assert files.refused(info.value)


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null"])
def test_devices_are_refused(path: str) -> None:
    with pytest.raises(OSError, match="a character device"):
        _in_thread(lambda: files.read_capped(path, max_bytes=1024))


def test_directories_and_large_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="a directory"):
        files.read_capped(tmp_path, max_bytes=10)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(OSError, match="larger than the 10-byte limit") as info:
        files.read_capped(big, max_bytes=10)
    assert files.refused(info.value)
    assert files.read_capped(big, max_bytes=11) == b"x" * 11


def test_a_symlink_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """Kubernetes mounts secrets as symlinks into a timestamped directory."""
    (tmp_path / "real").write_text("s3cr3t-token\n")
    (tmp_path / "token").symlink_to(tmp_path / "real")
    assert files.read_text_capped(tmp_path / "token", max_bytes=100) == "s3cr3t-token\n"


@pytest.mark.parametrize("kind", ["zero", "fifo", "big"])
def test_a_token_file_that_is_not_a_token_is_a_config_error(tmp_path: Path, kind: str) -> None:
    if kind == "zero":
        token = "/dev/zero"
    elif kind == "fifo":
        os.mkfifo(tmp_path / "token")
        token = str(tmp_path / "token")
    else:
        (tmp_path / "token").write_text("t" * (files.MAX_SECRET_BYTES + 1))
        token = str(tmp_path / "token")
    config = tmp_path / "specmon.yml"
    config.write_text(
        yaml.safe_dump(
            {"targets": [{"name": "a", "url": "http://127.0.0.1:1/metrics",
                          "bearer_token_file": token}]}
        )
    )  # fmt: skip
    with pytest.raises(ConfigError) as info:
        _in_thread(lambda: load_config(config))
    (problem,) = info.value.problems
    assert "bearer_token_file" in problem
    assert ("not a regular file" in problem) if kind != "big" else ("larger than" in problem)


def test_a_fifo_among_file_sd_matches_does_not_freeze_the_daemon(tmp_path: Path) -> None:
    """The daemon reads file_sd files on its event loop: a FIFO matching the glob is refused
    (logged) and /healthz keeps answering at once; the regular files' targets are loaded."""
    sd = tmp_path / "sd"
    sd.mkdir()
    os.mkfifo(sd / "a-fifo.yml")
    (sd / "good.yml").write_text(yaml.safe_dump([{"targets": ["127.0.0.1:9"]}]))
    config = tmp_path / "specmon.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "5s", "windows": ["1m"]},
                "file_sd_configs": [{"files": [str(sd / "*.yml")], "refresh_interval": "1s"}],
            }
        )
    )

    async def go() -> tuple[float, list[str]]:
        daemon = Daemon(config_path=config, listen="127.0.0.1:0")
        await daemon.start()
        try:
            await asyncio.sleep(1.5)  # a refresh of the file_sd files or two
            slowest = 0.0
            async with aiohttp.ClientSession() as session:
                for _ in range(10):
                    started = time.perf_counter()
                    async with session.get(f"http://127.0.0.1:{daemon.bound_port}/healthz") as r:
                        assert r.status == 200
                    slowest = max(slowest, time.perf_counter() - started)
            return slowest, sorted(view.name for view in daemon.views())
        finally:
            await daemon.stop()

    slowest, names = _in_thread(lambda: asyncio.run(go()), timeout=30)
    assert slowest < 0.1
    assert names == ["127.0.0.1:9"]
