"""The tap's web security (the daemon's, from specmon.web: basic auth and headers on its own
/metrics, never on the engine's traffic) and its strict configuration."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from specmon.cli.main import main as cli_main
from specmon.config_values import ConfigError
from specmon.tap.app import Tap
from specmon.tap.config import ClassSource, parse_tap_config
from specmon.web import WebOptions
from tests.support.tap_engine import FakeEngine
from tests.support.tls import bcrypt_hash


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_guards_the_tap_metrics_only(tmp_path: Path) -> None:
    web_config = tmp_path / "web.yml"
    web_config.write_text(
        f"basic_auth_users:\n  prom: {bcrypt_hash('secret')}\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    )

    async def main() -> None:
        engine = FakeEngine()
        runner = web.AppRunner(engine.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        tap = Tap(
            parse_tap_config(None, overrides={"upstream": f"http://127.0.0.1:{port}"}),
            listen=("127.0.0.1", 0),
            web_options=WebOptions(config_file=web_config),
        )
        tap_port = await tap.start()
        base = f"http://127.0.0.1:{tap_port}"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(base + "/metrics") as resp:
                    assert resp.status == 401 and resp.headers["X-Frame-Options"] == "deny"
                async with s.get(base + "/metrics", headers={"Authorization": _basic("prom", "x")}) as resp:  # fmt: skip
                    assert resp.status == 401
                async with s.get(
                    base + "/metrics", headers={"Authorization": _basic("prom", "secret")}
                ) as resp:
                    assert resp.status == 200
                    assert b"specmon_tap_requests_total" in await resp.read()
                async with s.get(base + "/healthz") as resp:  # probes send no password
                    assert resp.status == 200
                # The engine's traffic: the client's own Authorization passes through, no
                # tap auth and no extra header.
                async with s.post(
                    base + "/v1/chat/completions",
                    json={"max_tokens": 3},
                    headers={"Authorization": "Bearer engine-key"},
                ) as resp:
                    assert resp.status == 200 and "X-Frame-Options" not in resp.headers
                assert ("Authorization", "Bearer engine-key") in engine.seen[-1].headers
        finally:
            await tap.stop()
            await runner.cleanup()

    asyncio.run(main())


def test_config_file_and_flags() -> None:
    data = {
        "upstream": "http://engine:8000/",
        "classes": {"from": "prompt_tokens", "buckets": [512, 4096]},
        "long_request_tokens": 1000,
        "max_parse_bytes": "128KiB",
        "timeouts": {"connect": "2s", "idle": "1m"},
    }
    config = parse_tap_config(data)
    assert config.upstream == "http://engine:8000"
    assert config.classes.source is ClassSource.PROMPT_TOKENS
    assert config.classes.classes() == ("le512", "le4096", "gt4096", "other")
    assert (config.long_request_tokens, config.max_parse_bytes) == (1000, 131072)
    assert (config.connect_timeout, config.idle_timeout) == (2.0, 60.0)
    flags = parse_tap_config(
        data, overrides={"upstream": "http://other:1", "class_header": "X-Tenant",
                         "classes": ["a", "b"]},
    )  # fmt: skip
    assert flags.upstream == "http://other:1"
    assert flags.classes.header == "x-tenant" and flags.classes.classes() == ("a", "b", "other")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({}, "upstream: required"),
        ({"upstream": "ftp://x"}, "http:// or https://"),
        ({"upstream": "http://u:p@x"}, "no credentials"),
        ({"upstream": "http://x", "classes": {"header": "x-c"}}, "classes.allow: required"),
        ({"upstream": "http://x", "classes": {"header": "x-c", "allow": ["other"]}}, "'other'"),
        ({"upstream": "http://x", "classes": {"header": "x-c", "allow": ["a b"]}}, "a class is"),
        ({"upstream": "http://x", "classes": {"header": "x", "allow": [f"c{i}" for i in range(40)]}},
         "at most 31"),
        ({"upstream": "http://x", "classes": {"from": "prompt_tokens", "buckets": [9, 3]}},
         "ascending"),
        ({"upstream": "http://x", "classes": {"from": "tenant"}}, "header, model or prompt_tokens"),
        ({"upstream": "http://x", "max_parse_bytes": "1GiB"}, "at most 64MiB"),
        ({"upstream": "http://x", "timeouts": {"idle": "-1s"}}, "timeouts.idle"),
        ({"upstream": "http://x", "upsteam": "y"}, "did you mean 'upstream'"),
    ],
)  # fmt: skip
def test_bad_configs_list_their_problems(data: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_tap_config(data)
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_check_config_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "tap.yml"
    good.write_text("upstream: http://127.0.0.1:8000\nclasses:\n  from: model\n  allow: [a, b]\n")
    assert cli_main(["tap", "--config.file", str(good), "--check-config"]) == 0
    assert "classes from model: a, b, other" in capsys.readouterr().out
    bad = tmp_path / "bad.yml"
    bad.write_text("upstream: http://127.0.0.1:8000\nclasses: {header: x}\n")
    assert cli_main(["tap", "--config.file", str(bad), "--check-config"]) == 1
    assert "FAILED" in capsys.readouterr().out


def test_reload_keeps_the_running_config_when_the_new_one_fails(tmp_path: Path) -> None:
    path = tmp_path / "tap.yml"
    path.write_text("upstream: http://127.0.0.1:9\nclasses: {header: x-c, allow: [a]}\n")
    overrides: dict[str, Any] = {"upstream": None, "class_header": None, "classes": None}
    config = parse_tap_config(
        {"upstream": "http://127.0.0.1:9", "classes": {"header": "x-c", "allow": ["a"]}}
    )
    tap = Tap(config, listen=("127.0.0.1", 0), config_path=path, overrides=overrides)
    tap.counts.record("a", _figures())
    path.write_text("upstream: http://127.0.0.1:9\nclasses: {header: x-c, allow: [a, b]}\n")
    assert tap.reload()
    assert tap.counts.classes() == ("a", "b", "other") and tap.counts.totals("a")[0] == 1
    path.write_text("upstream: http://127.0.0.1:9\nclasses: {header: x-c}\n")
    assert not tap.reload()
    assert tap.config.classes.allow == ("a", "b")
    path.write_text("upstream: http://127.0.0.1:10\nclasses: {header: x-c, allow: [a]}\n")
    assert not tap.reload()  # a new upstream needs a restart
    assert tap.config.upstream == "http://127.0.0.1:9"


def _figures() -> Any:
    from specmon.tap.fields import Figures

    return Figures("vllm", 3, 1, 1)


def test_the_tap_serves_exactly_its_declared_samples() -> None:
    """SAMPLE_NAMES (which the alert rules and dashboards are checked against) is what the
    tap's collector writes."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specmon.tap.metrics import SAMPLE_NAMES

    tap = Tap(parse_tap_config(None, overrides={"upstream": "http://127.0.0.1:9"}),
              listen=("127.0.0.1", 0))  # fmt: skip
    tap.counts.record("all", _figures())
    text = generate_latest(tap.registry).decode()
    served = {
        s.name
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("specmon_tap_") and "web_" not in s.name and "config_" not in s.name
    }
    assert served == set(SAMPLE_NAMES)
