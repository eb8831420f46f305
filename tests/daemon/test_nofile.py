"""The open-files limit: raised at start as Go programs do, and a warning when it is too low
for the configuration (specmon/process/nofile.py)."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from specmon.process.nofile import (
    MAX_OPEN_FILES,
    SPARE_FILES,
    files_needed,
    files_short,
    raise_open_files_limit,
)
from tests.support.daemon import daemon


class Limits:
    """getrlimit and setrlimit by hand: the limits, every call, and an optional refusal."""

    def __init__(self, soft: int, hard: int, *, refuse: bool = False) -> None:
        self.limits = (soft, hard)
        self.refuse = refuse
        self.set_calls: list[tuple[int, int]] = []

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limits

    def set(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.set_calls.append(limits)
        if self.refuse:
            raise ValueError("not allowed")
        self.limits = limits


def _raise(fake: Limits) -> tuple[int, int]:
    return raise_open_files_limit(getrlimit=fake.get, setrlimit=fake.set)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    fake = Limits(1024, 524288)  # systemd's defaults
    assert _raise(fake) == (524288, 524288)
    assert fake.set_calls == [(524288, 524288)]


def test_an_unlimited_hard_limit_gives_the_cap() -> None:
    fake = Limits(1024, resource.RLIM_INFINITY)
    assert _raise(fake) == (MAX_OPEN_FILES, resource.RLIM_INFINITY)


@pytest.mark.parametrize(
    "limits",
    [(524288, 524288), (resource.RLIM_INFINITY, resource.RLIM_INFINITY), (4096, 4096)],
)
def test_a_limit_already_high_enough_is_left_alone(limits: tuple[int, int]) -> None:
    fake = Limits(*limits)
    assert _raise(fake) == limits
    assert fake.set_calls == []


def test_the_soft_limit_is_never_lowered_to_the_cap() -> None:
    fake = Limits(MAX_OPEN_FILES * 2, resource.RLIM_INFINITY)
    assert _raise(fake) == (MAX_OPEN_FILES * 2, resource.RLIM_INFINITY)
    assert fake.set_calls == []


def test_a_refusal_keeps_the_limits() -> None:
    fake = Limits(1024, 524288, refuse=True)
    assert _raise(fake) == (1024, 524288)
    assert fake.set_calls == [(524288, 524288)]


def test_files_needed_counts_targets_clients_and_spares() -> None:
    assert files_needed(targets=1000, web_connections=512) == 1512 + SPARE_FILES


def test_files_short_says_what_is_needed_only_when_the_soft_limit_is_below_it() -> None:
    needed = files_needed(targets=500, web_connections=512)
    for soft, expected in (
        (needed - 1, (needed, needed - 1)),
        (needed, None),
        (resource.RLIM_INFINITY, None),
    ):
        fake = Limits(soft, resource.RLIM_INFINITY)
        assert files_short(targets=500, web_connections=512, getrlimit=fake.get) == expected


def _config(tmp_path: Path, targets: int) -> Path:
    cfg = tmp_path / "specmon.yml"
    lines = ["global:", "  scrape_interval: 30s", "targets:"]
    for i in range(targets):  # nothing listens on port 9 (discard): connection refused
        lines += [f"  - name: t{i}", "    url: http://127.0.0.1:9/metrics"]
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def _soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def test_the_daemon_raises_its_limit_and_warns_when_the_hard_limit_is_too_low(
    tmp_path: Path,
) -> None:
    needed = files_needed(targets=100, web_connections=512)
    cfg = _config(tmp_path, 100)
    # The hard limit allows it: raised at start, no warning.
    with daemon(cfg, tmp_path, nofile=(needed - 50, 8192), ready=False) as d:
        assert _soft_limit(d.proc.pid) == 8192
        d.wait_for(lambda: any(x["event"] == "specmon_started" for x in d.log_lines()))
        assert not [x for x in d.log_lines() if x["event"] == "open_files_limit_low"]
    # It does not: one warning naming the limit and what the configuration needs.
    with daemon(cfg, tmp_path, nofile=(needed - 50, needed - 50), ready=False) as d:
        warning = d.wait_for(
            lambda: next((x for x in d.log_lines() if x["event"] == "open_files_limit_low"), None)
        )
        assert warning["limit"] == needed - 50 and warning["needed"] == needed
        assert warning["level"] == "warning"
