"""Operability: broken targets stay contained, reload keeps windows, endpoints, signals, secrets."""

from __future__ import annotations

import gzip
import json
import signal
import time
from pathlib import Path

import pytest

from specmon.sim.engine import Mode
from specmon.sim.pages import PageKind
from tests.support.daemon import daemon, get, post
from tests.support.fake_engines import manual_target, running, set_counters, set_mode
from tests.support.strict_json import strict_loads

BASE = """\
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
  windows: [3s, 20s]
targets:
"""


def _targets(*entries: tuple[str, str]) -> str:
    return "".join(f"  - name: {n}\n    url: {u}\n" for n, u in entries)


def _advance(target: object, step: int) -> None:
    set_counters(target, 100 * step, 300 * step, [80 * step, 50 * step, 20 * step])  # type: ignore[arg-type]


def test_broken_targets_leave_the_others_intact(tmp_path: Path) -> None:
    good = manual_target("good", PageKind.VLLM)
    hang = manual_target("hang", PageKind.VLLM)
    garbage = manual_target("garbage", PageKind.LLAMACPP)
    error = manual_target("error", PageKind.VLLM)
    nometrics = manual_target("nometrics", PageKind.LLAMACPP)
    for t in (good, hang, garbage, error, nometrics):
        _advance(t, 1)
    with running([good, hang, garbage, error, nometrics]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            BASE
            + _targets(
                *((n, engines.url(n)) for n in ("good", "hang", "garbage", "error", "nometrics")),
                ("refused", "http://127.0.0.1:9/metrics"),
            )
        )
        with daemon(cfg, tmp_path) as d:
            set_mode(hang, Mode.HANG)
            set_mode(garbage, Mode.GARBAGE)
            set_mode(error, Mode.ERROR)
            set_mode(nometrics, Mode.NO_METRICS)
            d.wait_for(lambda: d.metrics().value("specmon_up", target="good") == 1)
            for step in range(2, 8):
                _advance(good, step)
                time.sleep(0.5)
            # Counted, not timed: a loaded machine may scrape later than the sleeps.
            m = d.wait_for(
                lambda: (
                    got
                    if (got := d.metrics()).value(
                        "specmon_window_drafts", target="good", window="20s"
                    )
                    == 600
                    else None
                )
            )
            views = d.targets()
            assert d.proc.poll() is None
    assert m.value("specmon_up", target="good") == 1
    # the good target's window saw every step: 6 steps of 100 drafts
    assert m.value("specmon_window_drafts", target="good", window="20s") == 600
    assert m.value("specmon_alpha_ratio", target="good", window="20s") is not None
    # it was never held up by the hanging one: none of its scrapes timed out (counted, not
    # timed: a duration bound fails on a loaded machine)
    assert not m.value("specmon_scrapes_total", target="good", result="timeout")
    for bad in ("hang", "garbage", "error", "nometrics", "refused"):
        assert m.value("specmon_up", target=bad) == 0, bad
        assert not m.series("specmon_alpha_ratio", target=bad)
        assert not m.series("specmon_window_drafts", target=bad)
        assert not m.series("specmon_speculation_enabled", target=bad)
    # The timeout (400 ms) cut the hanging scrape: it lasted at least that, and not much more
    # (how much more depends on the machine's load: 0.51 s in one CI run, where an upper
    # bound of 0.5 s failed; the hang itself would last the whole test).
    hung = m.value("specmon_scrape_duration_seconds", target="hang")
    assert hung is not None and 0.4 - 0.01 <= hung < 2.0, hung
    assert m.value("specmon_scrapes_total", target="hang", result="timeout")
    assert m.value("specmon_scrapes_total", target="garbage", result="parse_error")
    assert m.value("specmon_scrapes_total", target="error", result="http_error")
    assert m.value("specmon_scrapes_total", target="refused", result="connection_error")
    assert "restart it with --metrics" in views["nometrics"]["error"]
    assert "not a Prometheus exposition page" in views["garbage"]["error"]
    assert views["error"]["error"].startswith("HTTP 500")


def test_reload_keeps_windows_and_rejects_bad_config(tmp_path: Path) -> None:
    a = manual_target("a", PageKind.VLLM)
    b = manual_target("b", PageKind.LLAMACPP)
    _advance(a, 1)
    _advance(b, 1)
    with running([a, b]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(BASE + _targets(("a", engines.url("a"))))
        # POST /-/reload needs --web.enable-lifecycle (tests/web covers the 403 without it).
        with daemon(cfg, tmp_path, extra=["--web.enable-lifecycle"]) as d:
            d.wait_for(lambda: d.metrics().value("specmon_up", target="a") == 1)
            for step in range(2, 6):
                _advance(a, step)
                time.sleep(0.5)
            # Every advance scraped (a loaded machine may take longer than the sleeps).
            d.wait_for(
                lambda: d.metrics().value("specmon_window_drafts", target="a", window="20s") == 400
            )
            # A valid change: a's draft cost changes (windows kept), b is added.
            cfg.write_text(
                BASE.replace("targets:\n", "targets:\n")
                + "  - name: a\n    url: "
                + engines.url("a")
                + "\n    draft_cost: 0.3\n"
                + _targets(("b", engines.url("b")))
            )
            d.signal(signal.SIGHUP)
            d.wait_for(lambda: d.metrics().value("specmon_up", target="b") == 1)
            m = d.metrics()
            assert m.value("specmon_window_drafts", target="a", window="20s") == 400
            assert m.value("specmon_draft_cost_ratio", target="a") == 0.3
            assert m.value("specmon_config_last_reload_successful") == 1
            # An invalid change over HTTP: rejected, old config kept, said in logs and metrics.
            cfg.write_text(BASE + "  - name: a\n    url: nope\n    colour: red\n")
            status, body = post(d.base + "/-/reload")
            assert status == 500
            assert b"targets[0].url" in body and b"targets[0].colour: unknown key" in body
            m = d.metrics()
            assert m.value("specmon_config_last_reload_successful") == 0
            assert m.value("specmon_up", target="b") == 1
            assert m.value("specmon_window_drafts", target="a", window="20s") == 400
            assert '"config_reload_failed"' in d.log_text()
            # Removing a target drops its series, including its scrape counters.
            cfg.write_text(BASE + _targets(("b", engines.url("b"))))
            status, _ = post(d.base + "/-/reload")
            assert status == 200
            m = d.metrics()
            assert not m.series("specmon_up", target="a")
            assert not m.series("specmon_scrapes_total", target="a")
            assert m.value("specmon_config_last_reload_successful") == 1
            # Hostile files by SIGHUP: an alias bomb and 100,000-deep nesting are
            # refused at once, said in the logs and the metric; the daemon keeps answering.
            for hostile_file, problem in (
                (ALIAS_BOMB, "an alias bomb?"),
                ("targets: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 32"),
            ):
                cfg.write_text(BASE + _targets(("b", engines.url("b"))))
                d.signal(signal.SIGHUP)
                d.wait_for(lambda: d.metrics().value("specmon_config_last_reload_successful") == 1)
                cfg.write_text(hostile_file)
                d.signal(signal.SIGHUP)
                d.wait_for(
                    lambda: d.metrics().value("specmon_config_last_reload_successful") == 0,
                    timeout=5,
                )
                assert get(d.base + "/healthz", timeout=2)[0] == 200
                assert d.metrics().value("specmon_up", target="b") == 1
                assert problem in d.log_text()
            assert "Task exception was never retrieved" not in d.log_text()


ALIAS_BOMB = (
    "".join(
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 10) + "]\n" for i in range(10)
    )
    + "global: {max_response_bytes: *a9}\n"
)


def test_endpoints_and_sigterm(tmp_path: Path) -> None:
    hostile = manual_target("h", PageKind.VLLM, model='<script>alert("x")</script>')
    _advance(hostile, 3)
    with running([hostile]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(BASE + _targets(("<b>t</b>", engines.url("h"))))
        with daemon(cfg, tmp_path) as d:
            _advance(hostile, 4)
            d.wait_for(lambda: d.metrics().value("specmon_alpha_ratio", window="20s") is not None)
            assert get(d.base + "/healthz")[0] == 200
            assert get(d.base + "/readyz")[0] == 200
            status, body, headers = get(d.base + "/")
            html = body.decode()
            assert status == 200 and headers["Content-Type"].startswith("text/html")
            assert "<script>" not in html and "&lt;script&gt;" in html
            assert "<b>t</b>" not in html and "&lt;b&gt;t&lt;/b&gt;" in html
            status, body, headers = get(
                d.base + "/metrics",
                headers={
                    "Accept": "application/openmetrics-text; version=1.0.0",
                    "Accept-Encoding": "gzip",
                },
            )
            assert headers.get("Content-Encoding") == "gzip"
            assert headers["Content-Type"].startswith("application/openmetrics-text")
            text = gzip.decompress(body).decode()
            assert text.rstrip().endswith("# EOF")
            assert "specmon_alpha_ratio{" in text
            api = strict_loads(get(d.base + "/api/v1/targets")[1])
            assert api["ready"] is True
            paged = strict_loads(get(d.base + "/api/v1/targets?per_page=1&page=1")[1])
            assert paged["total"] == len(api["targets"]) and paged["per_page"] == 1
            assert paged["targets"] == api["targets"][:1]
            status, body, headers = get(d.base + "/api/v1/targets?page=-1&sort=x")
            assert status == 400 and headers["Content-Type"].startswith("application/json")
            error = json.loads(body)["error"]
            assert "unknown parameter(s) 'sort'" in error and "page: expected" in error
            started = time.monotonic()
            code = d.stop()
            took = time.monotonic() - started
    assert code == 0
    assert took < 5
    assert '"specmon_stopped"' in d.log_text()


def test_default_config_reports_missing_engines_as_down(tmp_path: Path) -> None:
    """Without a config file the daemon watches :8000 and :8080; nothing listens there in
    tests (if something does, it must not be an engine we break)."""
    with daemon(None, tmp_path) as d:
        m = d.metrics()
        views = d.targets()
        assert set(views) == {"127.0.0.1:8000", "127.0.0.1:8080"}
        for name, view in views.items():
            if view["up"]:
                continue  # a real engine happens to run here
            assert m.value("specmon_up", target=name) == 0
            assert view["error"]


def test_bearer_token_is_sent_and_never_shown(tmp_path: Path) -> None:
    secret = "s3cr3t-token-value-0123456789"
    eng = manual_target("e", PageKind.VLLM)
    _advance(eng, 1)
    seen: list[str] = []
    with running([eng]) as engines:
        app_server = engines.server
        original = app_server._metrics

        async def checking(target, request):  # type: ignore[no-untyped-def]
            seen.append(request.headers.get("Authorization", ""))
            return await original(target, request)

        app_server._metrics = checking  # type: ignore[method-assign]
        (tmp_path / "token").write_text(secret + "\n")
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            BASE + f"  - name: env\n    url: {engines.url('e')}?token=hidden-query\n"
            "    bearer_token_env: SPECMON_TEST_TOKEN\n"
            "    headers: {X-Api-Key: header-secret-987}\n"
            f"  - name: file\n    url: {engines.url('e')}\n    bearer_token_file: token\n"
        )
        with daemon(cfg, tmp_path, env={"SPECMON_TEST_TOKEN": secret}) as d:
            time.sleep(1.5)
            pages = [
                get(d.base + path)[1].decode() for path in ("/", "/metrics", "/api/v1/targets")
            ]
            log = d.log_text()
    assert f"Bearer {secret}" in seen
    for text in (*pages, log):
        assert secret not in text
        assert "header-secret-987" not in text
        assert "hidden-query" not in text


def test_file_sd_targets_appear_change_and_vanish(tmp_path: Path) -> None:
    a = manual_target("a", PageKind.VLLM)
    b = manual_target("b", PageKind.LLAMACPP)
    _advance(a, 1)
    _advance(b, 1)
    with running([a, b]) as engines:
        host_a = engines.server.addresses["a"].removeprefix("http://")
        host_b = engines.server.addresses["b"].removeprefix("http://")
        sd_dir = tmp_path / "sd"
        sd_dir.mkdir()
        (sd_dir / "one.json").write_text(
            json.dumps([{"targets": [host_a], "labels": {"team": "x", "__specmon_name__": "sd-a"}}])
        )
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            BASE.replace("targets:\n", "")
            + "file_sd_configs:\n  - files: [sd/*.json, sd/*.yaml]\n    refresh_interval: 500ms\n"
        )
        with daemon(cfg, tmp_path) as d:
            m = d.metrics()
            assert m.value("specmon_up", target="sd-a", team="x") == 1
            # a new file appears
            (sd_dir / "two.yaml").write_text(f"- targets: ['{host_b}']\n")
            d.wait_for(lambda: d.metrics().value("specmon_up", target=host_b) == 1)
            # a broken edit keeps the previous targets
            (sd_dir / "one.json").write_text("[{not json")
            d.wait_for(lambda: '"file_sd_invalid"' in d.log_text())
            assert d.metrics().value("specmon_up", target="sd-a") == 1
            assert (d.metrics().value("specmon_file_sd_read_errors_total") or 0) >= 1
            # the file disappears: its targets go
            (sd_dir / "one.json").unlink()
            d.wait_for(lambda: not d.metrics().series("specmon_up", target="sd-a"))
            assert d.metrics().value("specmon_up", target=host_b) == 1


def test_gzip_from_targets_and_the_size_cap(tmp_path: Path) -> None:
    """With ``enable_compression: true`` (off by default) the daemon asks for gzip, and the
    size cap counts the inflated bytes."""
    small = manual_target("small", PageKind.LLAMACPP)
    big = manual_target("big", PageKind.VLLM)  # ~55 KB uncompressed, ~8 KB gzipped
    _advance(small, 1)
    _advance(big, 1)
    with running([small, big]) as engines:
        cfg = tmp_path / "c.yaml"
        cfg.write_text(
            BASE.replace(
                "  windows: [3s, 20s]\n",
                "  windows: [3s, 20s]\n  max_response_bytes: 20KiB\n  enable_compression: true\n",
            )
            + _targets(("small", engines.url("small")), ("big", engines.url("big")))
        )
        with daemon(cfg, tmp_path) as d:
            m = d.metrics()
            views = d.targets()
        headers = engines.server.last_metrics_headers
    assert "gzip" in headers.get("Accept-Encoding", "")
    assert m.value("specmon_up", target="small") == 1
    # The cap counts decompressed bytes: a gzipped page that inflates past it is refused.
    assert m.value("specmon_up", target="big") == 0
    assert m.value("specmon_scrapes_total", target="big", result="too_large")
    assert "exceeds the 20480-byte cap" in views["big"]["error"]


def test_wake_ups_on_a_grid_keep_each_schedule_exact() -> None:
    from specmon.daemon.scraper import MAX_TICK, next_due, wake_time

    assert wake_time(12.34, interval=5.0) == pytest.approx(12.4)
    assert wake_time(12.4, interval=5.0) == pytest.approx(12.4)  # on the grid: no delay
    assert wake_time(1.001, interval=0.2) == pytest.approx(1.01)  # a twentieth of 0.2 s
    assert wake_time(3.3, interval=0.0) == 3.3
    # Many scrapes: every wake-up within a tick after its due time, the due times exactly one
    # interval apart (the grid never shifts the schedule), scrapes taking up to 4 s.
    interval, due, first = 5.0, 1000.0137, 1000.0137
    for n in range(1, 2001):
        wake = wake_time(due, interval=interval)
        assert 0.0 <= wake - due < MAX_TICK + 1e-9
        assert round(wake / MAX_TICK, 6) == round(wake / MAX_TICK)  # on the grid
        now = wake + (n % 5) * 0.8 + 0.001  # the scrape's own duration
        due = next_due(due, wait=interval, now=now)
        assert due == pytest.approx(first + n * interval, abs=1e-6)
    # A scrape that overran (or a stalled loop): the next one starts at once, no catch-up.
    assert next_due(100.0, wait=5.0, now=107.5) == 107.5
    assert next_due(100.0, wait=5.0, now=101.0) == 105.0


def test_failing_target_backs_off(tmp_path: Path) -> None:
    from specmon.daemon.scraper import backoff_delay

    assert [backoff_delay(5.0, n) for n in range(6)] == [5.0, 5.0, 10.0, 20.0, 40.0, 40.0]
    assert backoff_delay(60.0, 10) == 120.0  # at most a minute beyond the interval
    cfg = tmp_path / "c.yaml"
    cfg.write_text(BASE + _targets(("refused", "http://127.0.0.1:9/metrics")))
    with daemon(cfg, tmp_path) as d:
        time.sleep(4.0)
        attempts = d.metrics().value(
            "specmon_scrapes_total", target="refused", result="connection_error"
        )
    # 0.5 s interval without backoff would be ~8 attempts in 4 s; with it: 0.5, 1, 2, 4 ...
    assert attempts is not None and 2 <= attempts <= 5
