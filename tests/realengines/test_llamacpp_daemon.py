"""The daemon (``specmon run`` as a subprocess) against real llama-servers:
several windows equal a hand computation from raw pages, a server without ``--metrics`` is
reported down with the fix, and a server killed and restarted mid-run never makes specmon
export a negative or absurd value."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.realengines import servers
from tests.realengines.conftest import (
    Counters,
    assert_window_matches,
    scrape,
    settled,
    wait_target_up,
    wait_window_drafts,
    write_config,
)
from tests.support.daemon import Daemon, Exported, daemon

pytestmark = pytest.mark.realengine

K = 4
DRAFT_COST = 0.2


def _labels(target: str) -> dict[str, str]:
    return {"target": target, "engine": "llamacpp", "model": "tiny-llama"}


# --------------------------------------------------------------------------------------------
# Against a real engine: windows equal the hand computation
# --------------------------------------------------------------------------------------------


def test_windows_equal_hand_computation_over_real_llama_server(tmp_path: Path) -> None:
    """Two bursts of load separated by a pause longer than the short window.

    Config: scrape_interval 500ms, windows [5s, 1m]. Raw pages are scraped by the test before
    any load (p0), after the first burst (p1) and after the second (p2). After each burst, once
    the 5 s window holds no new drafts (it then exports no ratio at all), the 1 m window equals
    the hand computation from p1 - p0, then from p2 - p0: every reading since the start lies
    inside it, and the counters did not move between p0 and the daemon's first reading.
    """
    labels = _labels("llama")
    with servers.llama_spec_server(n_max=K) as srv:
        _, p0 = settled(srv.metrics_url, quiet=0.5)
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [("llama", srv.metrics_url, {"model": "tiny-llama"})],
            windows=["5s", "1m"],
            draft_cost=DRAFT_COST,
        )
        with daemon(cfg, tmp_path) as d:
            wait_target_up(d, "llama")
            started = time.monotonic()
            pages: list[Counters] = []
            for burst in (1, 2):
                servers.drive_load(srv.base_url, n_requests=4, concurrency=2, max_tokens=200)
                _, page = settled(srv.metrics_url, quiet=0.5)
                pages.append(page)
                m = _wait_short_window_idle(d, labels, page.minus(p0).drafts)
                elapsed = time.monotonic() - started
                assert elapsed < 55, (
                    f"too slow for a 1 m window ({elapsed:.0f}s); machine overloaded?"
                )
                assert m.value("specmon_window_drafts", window="5s", **labels) == 0
                for name in (
                    "specmon_alpha_ratio",
                    "specmon_draft_acceptance_ratio",
                    "specmon_position_survival_ratio",
                    "specmon_expected_speedup_ratio",
                    "specmon_best_chain_length",
                ):
                    assert not m.series(name, window="5s", **labels), name
                delta = page.minus(p0)
                assert_window_matches(m, labels, "1m", delta, k=K, c=DRAFT_COST)
                assert m.value("specmon_drafts_total", **labels) == delta.drafts
                print(
                    f"\nburst {burst}: 1m window drafts {delta.drafts} survival "
                    f"{[round(s, 4) for s in delta.survival()]} after {elapsed:.1f}s"
                )
            assert pages[1].drafts > pages[0].drafts


def _wait_short_window_idle(
    d: Daemon, labels: dict[str, str], long_drafts: int, *, timeout: float = 30.0
) -> Exported:
    """Until the 1 m window holds ``long_drafts`` and the 5 s window none."""

    def ready() -> Exported | None:
        m = d.metrics()
        ok = (
            m.value("specmon_window_drafts", window="1m", **labels) == long_drafts
            and m.value("specmon_window_drafts", window="5s", **labels) == 0
        )
        return m if ok else None

    result: Exported = d.wait_for(ready, timeout=timeout, interval=0.25)
    return result


# --------------------------------------------------------------------------------------------
# A server without --metrics
# --------------------------------------------------------------------------------------------

#: What a down target may still export (metrics.md: up, scrape duration, and scrape counts).
_DOWN_TARGET_SERIES = {"specmon_up", "specmon_scrape_duration_seconds", "specmon_scrapes_total"}


def test_llama_server_without_metrics_flag_is_down_with_the_fix(tmp_path: Path) -> None:
    """``specmon_up 0`` and /api/v1/targets' ``error`` saying to restart with ``--metrics``;
    the daemon keeps running and the other target is scraped and computed as usual."""
    with servers.llama_no_metrics_server() as bad, servers.llama_spec_server(n_max=K) as good:
        assert bad.metrics().status == 501
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [
                ("nometrics", bad.metrics_url, {"model": "tiny-llama"}),
                ("good", good.metrics_url, {"model": "tiny-llama"}),
            ],
            windows=["1m"],
        )
        with daemon(cfg, tmp_path) as d:
            d.wait_for(lambda: d.metrics().value("specmon_up", target="nometrics") == 0.0)
            wait_target_up(d, "good")
            servers.drive_load(good.base_url, n_requests=2, concurrency=2, max_tokens=100)
            d.wait_for(
                lambda: d.metrics().series("specmon_alpha_ratio", window="1m", target="good"),
                timeout=30,
            )
            m = d.metrics()
            target = d.targets()["nometrics"]
            log = d.log_lines()
            assert d.proc.poll() is None, "the daemon exited"

    assert m.value("specmon_up", target="nometrics") == 0
    exported = {name for name, series in m.samples.items() if m.series(name, target="nometrics")}
    assert exported <= _DOWN_TARGET_SERIES, exported - _DOWN_TARGET_SERIES
    failed = m.value("specmon_scrapes_total", target="nometrics", result="http_error")
    assert failed is not None and failed >= 1
    assert target["up"] is False
    assert target["error_kind"] == "http_error"
    assert "--metrics" in target["error"] and "501" in target["error"], target["error"]
    down = [
        ln for ln in log if ln.get("event") == "target_down" and ln.get("target") == "nometrics"
    ]
    assert down and "--metrics" in down[0]["error"]
    # the other target is unaffected
    assert m.value("specmon_up", target="good") == 1
    assert m.value("specmon_speculation_enabled", target="good") == 1
    assert m.value("specmon_chain_length", target="good") == K


# --------------------------------------------------------------------------------------------
# Killed and restarted mid-run
# --------------------------------------------------------------------------------------------


@dataclass
class Poller:
    """Reads the daemon's /metrics every ``interval`` seconds in a thread."""

    daemon: Daemon
    interval: float = 0.2
    snapshots: list[tuple[float, Exported]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.snapshots.append((time.monotonic(), self.daemon.metrics()))
            except Exception as exc:  # recorded, asserted on afterwards
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(self.interval)

    @contextmanager
    def running(self) -> Iterator[Poller]:
        thread = threading.Thread(target=self._run, name="specmon-poller", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(10)


_SPEEDUPS = {
    "specmon_expected_speedup_ratio",
    "specmon_best_speedup_ratio",
    "specmon_verdict_speedup_ratio",
}
#: Margins: alpha less a break-even alpha, so in [-1, 1].
_MARGINS = {"specmon_alpha_margin_ratio", "specmon_verdict_alpha_margin_ratio"}
_WINDOW_SECONDS = {"5s": 5.0, "1m": 60.0}


def insane_values(m: Exported, target: str, *, k: int, max_drafts: int) -> list[str]:
    """Every exported value of ``target`` outside what its meaning allows."""
    bad: list[str] = []
    for name, series in m.samples.items():
        for labels, value in series.items():
            lab = dict(labels)
            if lab.get("target") != target:
                continue
            where = f"{name}{lab}={value}"
            if not math.isfinite(value):
                bad.append(where)
            elif name in _SPEEDUPS:
                if not 0 < value <= k + 1:
                    bad.append(where)
            elif name in _MARGINS:
                if not -1 <= value <= 1:
                    bad.append(where)
            elif name.endswith("_ratio"):
                if not 0 <= value <= 1:
                    bad.append(where)
            elif name == "specmon_mean_acceptance_length":
                if not 1 <= value <= k + 1:
                    bad.append(where)
            elif name == "specmon_best_chain_length":
                if value not in range(k + 1):
                    bad.append(where)
            elif name == "specmon_window_drafts":
                total = m.value("specmon_drafts_total", target=target)
                if not 0 <= value <= (total or 0) <= max_drafts:
                    bad.append(f"{where} (drafts_total {total}, bound {max_drafts})")
            elif name == "specmon_window_seconds":
                if not 0 <= value <= _WINDOW_SECONDS[lab["window"]] + 1:
                    bad.append(where)
            elif name == "specmon_scrapes_total":
                if value < 0:
                    bad.append(where)
            elif name.endswith("_total") and not 0 <= value <= max_drafts * k:
                bad.append(where)
    return bad


def test_llama_server_killed_and_restarted_mid_run(tmp_path: Path) -> None:
    """Load runs, the server is SIGKILLed mid-request and restarted on the same port while
    the load keeps retrying, then more load. Throughout (the daemon's /metrics read every
    0.2 s): no ratio outside [0, 1] (margin [-1, 1], speed-ups (0, k+1]), window drafts never
    negative nor above ``specmon_drafts_total``, which never exceeds the drafts the engine can
    have made (one per generated token at most: completed tokens plus the requests lost in
    flight), counters never decrease. The reset is detected (``specmon_engine_resets_total``
    >= 1, a ``counter_reset`` log line), the target is seen down, and after the restart the
    short window has ratios again."""
    labels = _labels("llama")
    max_tokens, concurrency = 200, 2
    with servers.llama_spec_server(n_max=K) as srv:
        cfg = write_config(
            tmp_path / "specmon.yaml",
            [("llama", srv.metrics_url, {"model": "tiny-llama"})],
            windows=["5s", "1m"],
            draft_cost=DRAFT_COST,
        )
        with daemon(cfg, tmp_path) as d:
            wait_target_up(d, "llama")
            with Poller(d).running() as poller:
                first = servers.drive_load(
                    srv.base_url, n_requests=6, concurrency=concurrency, max_tokens=max_tokens
                )
                _, before_kill = settled(srv.metrics_url, quiet=0.5)
                d.wait_for(lambda: d.metrics().series("specmon_alpha_ratio", window="1m", **labels))
                with servers.BackgroundLoad(
                    srv.base_url,
                    n_requests=12,
                    concurrency=concurrency,
                    max_tokens=max_tokens,
                    retry_seconds=120,
                    raise_on_error=False,
                    timeout=300,
                ) as bg:
                    time.sleep(1.0)  # requests in flight
                    srv.kill()
                    killed_at = time.monotonic()
                    d.wait_for(lambda: d.metrics().value("specmon_up", target="llama") == 0.0)
                    srv.restart()
                    restarted_at = time.monotonic()
                second = bg.join(timeout=600)
                _assert_still_scraping(d, "llama")
                third = servers.drive_load(
                    srv.base_url, n_requests=4, concurrency=concurrency, max_tokens=max_tokens
                )
                _, final_page = settled(srv.metrics_url, quiet=0.5)
                d.wait_for(
                    lambda: (d.metrics().value("specmon_engine_resets_total", **labels) or 0) >= 1
                )
                # the short window has ratios again once post-restart requests have landed
                d.wait_for(
                    lambda: (
                        d.metrics().series("specmon_alpha_ratio", window="5s", **labels)
                        or _seen_after(poller, restarted_at, labels)
                    ),
                    timeout=30,
                )
                time.sleep(1.0)
            final = d.metrics()
            log = d.log_text()
            print(f"\nkill/restart: load errors {second.errors}, {len(poller.snapshots)} polls")

    # what the engine can have counted: one draft per generated token at most
    tokens = first.completion_tokens + second.completion_tokens + third.completion_tokens
    max_drafts = tokens + concurrency * max_tokens
    assert not poller.errors, poller.errors[:3]
    assert len(poller.snapshots) > 20
    problems: list[str] = []
    previous: dict[str, float] = {}
    for _, snap in [*poller.snapshots, (time.monotonic(), final)]:
        problems += insane_values(snap, "llama", k=K, max_drafts=max_drafts)
        for name in (
            "specmon_drafts_total",
            "specmon_draft_tokens_total",
            "specmon_accepted_tokens_total",
            "specmon_engine_resets_total",
        ):
            value = snap.value(name, **labels)
            if value is None:
                continue
            if value < previous.get(name, 0.0):
                problems.append(f"{name} went down: {previous[name]} -> {value}")
            previous[name] = value
    assert not problems, problems[:10]

    # the kill was seen: up 0 and, while down, no derived series
    down = [
        s
        for t, s in poller.snapshots
        if t > killed_at and s.value("specmon_up", target="llama") == 0
    ]
    assert down
    assert all(not s.series("specmon_alpha_ratio", target="llama") for s in down)
    # the reset was detected and logged
    assert (final.value("specmon_engine_resets_total", **labels) or 0) >= 1
    resets = [json.loads(ln) for ln in log.splitlines() if '"counter_reset"' in ln]
    assert resets and resets[0]["target"] == "llama"
    # windows recovered after the restart
    assert _seen_after(poller, restarted_at, labels)
    assert final.series("specmon_alpha_ratio", window="1m", **labels)
    # the totals count both lives of the engine, never the drop
    total = final.value("specmon_drafts_total", **labels) or 0
    assert before_kill.drafts + final_page.drafts <= total <= max_drafts
    assert 0 < (final.value("specmon_window_drafts", window="1m", **labels) or 0) <= total


def test_idle_llama_server_restart_keeps_scraping_and_window_figures(tmp_path: Path) -> None:
    """A llama-server restarted while idle (a crash, then systemd brings it back and no request
    has finished yet): its page has the three scalar counters at 0 and no per-position series
    at all until the first speculative request completes.

    specmon must go on scraping it, count one reset, and, since its windows still hold the
    drafts counted before the crash, keep exporting their figures (metrics.md: ratios are
    absent only for a window in which no draft was counted), equal to the hand computation
    over the first life, per-position ones included; once requests finish again, new drafts
    add to the window. (chain_length is configured, so k does not depend on the page.)"""
    labels = _labels("llama")
    with servers.llama_spec_server(n_max=K) as srv:
        _, p0 = settled(srv.metrics_url, quiet=0.5)
        cfg = write_config(
            tmp_path / "specmon.yaml",
            # k configured: the chain length is then known whatever the page shows
            [("llama", srv.metrics_url, {"model": "tiny-llama", "chain_length": K})],
            windows=["1m"],
            draft_cost=DRAFT_COST,
        )
        with daemon(cfg, tmp_path) as d:
            wait_target_up(d, "llama")
            servers.drive_load(srv.base_url, n_requests=4, concurrency=2, max_tokens=100)
            _, p1 = settled(srv.metrics_url, quiet=0.5)
            life1 = p1.minus(p0)
            wait_window_drafts(d, labels, "1m", life1.drafts)
            srv.kill()
            d.wait_for(lambda: d.metrics().value("specmon_up", target="llama") == 0.0)
            srv.restart()
            fresh = scrape(srv.metrics_url)[1]
            assert fresh == Counters(0, 0, 0, ()), fresh  # what an idle restarted server shows
            _assert_still_scraping(d, "llama")
            m = d.metrics()
            assert m.value("specmon_engine_resets_total", **labels) == 1
            assert m.value("specmon_drafts_total", **labels) == life1.drafts
            assert_window_matches(m, labels, "1m", life1, k=K, c=DRAFT_COST)
            servers.drive_load(srv.base_url, n_requests=2, concurrency=2, max_tokens=100)
            _, p2 = settled(srv.metrics_url, quiet=0.5)
            both = Counters(
                life1.drafts + p2.drafts,
                life1.draft_tokens + p2.draft_tokens,
                life1.accepted + p2.accepted,
                tuple(a + b for a, b in zip(life1.per_pos, p2.per_pos, strict=True)),
            )
            m = wait_window_drafts(d, labels, "1m", both.drafts)
            assert_window_matches(m, labels, "1m", both, k=K, c=DRAFT_COST)


def _assert_still_scraping(d: Daemon, target: str, *, scrapes: int = 4) -> None:
    """The daemon goes on scraping ``target`` after the engine came back (successful scrapes
    keep being counted)."""

    def successes() -> float:
        return d.metrics().value("specmon_scrapes_total", target=target, result="success") or 0.0

    start = successes()
    deadline = time.monotonic() + 15
    while successes() < start + scrapes:
        assert d.proc.poll() is None, "the daemon exited"
        assert time.monotonic() < deadline, (
            f"specmon stopped scraping {target} after the engine restarted: "
            f'specmon_scrapes_total{{result="success"}} stuck at {successes()} for 15 s '
            f"(scrape_interval 500ms)\n{d.log_text()[-1500:]}"
        )
        time.sleep(0.5)


def _seen_after(poller: Poller, since: float, labels: dict[str, str]) -> bool:
    """Some poll after ``since`` had ratios in the 5 s window with drafts > 0."""
    return any(
        t > since
        and (snap.value("specmon_window_drafts", window="5s", **labels) or 0) > 0
        and snap.series("specmon_alpha_ratio", window="5s", **labels)
        for t, snap in list(poller.snapshots)
    )
