"""A directly scraped target's HTTP client settings, from the config file to the request: the
same ``headers``, ``bearer_token_*``, ``basic_auth`` and ``tls`` keys and the same record as a
Prometheus source (specmon.sources.client_config), against a loopback HTTPS server that asks
for a client certificate, as an mTLS-protected engine behind a proxy does."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

from specmon.config_values import ConfigError
from specmon.daemon.config import TargetConfig, parse_config
from specmon.sources import ScrapeResult
from specmon.sources.http import FetchError, open_session
from specmon.sources.page import HttpPageSource
from tests.support.tls import Pki, make_pki

PAGE = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 1.0\n'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@asynccontextmanager
async def https_engine(pki: Pki, seen: list[str | None]) -> AsyncIterator[str]:
    """An engine page on HTTPS that requires a client certificate from the client CA and
    records each request's Authorization header."""

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(text=PAGE, content_type="text/plain")

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.client_ca))
    context.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    context.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}/metrics"
    finally:
        await runner.cleanup()


def target(text: str, tmp_path: Path, **environ: str) -> TargetConfig:
    (only,) = parse_config(text, base_dir=tmp_path, environ=environ).targets
    return only


async def read_twice(config: TargetConfig, between: object = None) -> list[str | FetchError]:
    out: list[str | FetchError] = []
    async with open_session() as session:
        for index in range(2):
            if index and callable(between):
                between()
            source = HttpPageSource(
                url=config.url, session=lambda: session, timeout=5.0, max_bytes=1 << 20,
                client=config.client, engine=config.engine,
            )  # fmt: skip
            try:
                reading = await source.read()
                out.append(f"{reading.size} bytes")
            except FetchError as exc:
                out.append(exc)
    return out


def test_mtls_and_basic_auth_with_a_rotated_password(pki: Pki, tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("first-pw\n")
    seen: list[str | None] = []

    async def go() -> list[str | FetchError]:
        async with https_engine(pki, seen) as url:
            config = target(
                f"targets:\n  - name: a\n    url: {url}\n    engine: vllm\n"
                "    basic_auth: {username: specmon, password_file: pw}\n"
                f"    tls: {{ca_file: {pki.server_ca}, cert_file: {pki.client_cert},"
                f" key_file: {pki.client_key}}}\n",
                tmp_path,
            )
            return await read_twice(config, between=lambda: password.write_text("second-pw"))

    assert asyncio.run(go()) == [f"{len(PAGE)} bytes"] * 2
    # The password file is read on every request: the rotated password is sent at once.
    assert seen == [
        "Basic " + base64.b64encode(f"specmon:{pw}".encode()).decode()
        for pw in ("first-pw", "second-pw")
    ]


def test_without_the_ca_the_server_is_not_trusted(pki: Pki, tmp_path: Path) -> None:
    async def go() -> list[str | FetchError]:
        async with https_engine(pki, []) as url:
            config = target(
                f"targets:\n  - name: a\n    url: {url}\n"
                f"    tls: {{cert_file: {pki.client_cert}, key_file: {pki.client_key}}}\n",
                tmp_path,
            )
            return await read_twice(config)

    for outcome in asyncio.run(go()):
        assert isinstance(outcome, FetchError)
        assert outcome.kind is ScrapeResult.CONNECTION_ERROR
        assert "certificate is not trusted" in str(outcome), outcome


def token_over_mtls(url: str, pki: Pki, directory: Path) -> TargetConfig:
    """One target at ``url`` with ``bearer_token_file: token`` (in ``directory``) and a client
    certificate: the token travels only inside mutual TLS."""
    return target(
        f"targets:\n  - name: a\n    url: {url}\n    bearer_token_file: token\n"
        f"    tls: {{ca_file: {pki.server_ca}, cert_file: {pki.client_cert},"
        f" key_file: {pki.client_key}}}\n",
        directory,
    )


def test_a_token_file_gone_after_load_is_a_credentials_error(pki: Pki, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token-value\n")
    seen: list[str | None] = []

    async def go() -> list[str | FetchError]:
        async with https_engine(pki, seen) as url:
            config = token_over_mtls(url, pki, tmp_path)
            return await read_twice(config, between=token.unlink)

    first, second = asyncio.run(go())
    assert first == f"{len(PAGE)} bytes" and seen == ["Bearer s3cret-token-value"]
    assert isinstance(second, FetchError) and second.kind is ScrapeResult.CREDENTIALS_ERROR
    assert str(second) == f"cannot read a credentials file: No such file or directory ({token})"


def test_target_and_source_share_the_checker(tmp_path: Path) -> None:
    """The same problems, in the same words, for a target and for a Prometheus source."""
    block = [
        "bearer_token_env: NOPE",
        "basic_auth: {username: 'a:b', password_env: PW}",
        "tls: {cert_file: missing.pem}",
        "headers: {Authorization: x}",
    ]
    text = "\n".join(
        [
            "targets:",
            "  - name: a",
            "    url: http://h/metrics",
            *(f"    {line}" for line in block),
            "sources:",
            "  - prometheus:",
            "      url: http://p:9090",
            *(f"      {line}" for line in block),
        ]
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, base_dir=tmp_path, environ={"PW": "pw"})
    problems = info.value.problems
    target_side = [p.removeprefix("targets[0]") for p in problems if p.startswith("targets")]
    source_side = [
        p.removeprefix("sources[0].prometheus") for p in problems if p.startswith("sources")
    ]
    assert len(target_side) == 6 and target_side == source_side, problems


def test_a_ca_file_that_does_not_sign_the_server_is_named_not_asked_for(
    pki: Pki, tmp_path: Path
) -> None:
    """With tls.ca_file set (here the client CA, which did not sign the server), the error
    ended "set tls.ca_file" (issue 53)."""

    async def go() -> list[str | FetchError]:
        async with https_engine(pki, []) as url:
            config = target(
                f"targets:\n  - name: a\n    url: {url}\n"
                f"    tls: {{ca_file: {pki.client_ca}, cert_file: {pki.client_cert},"
                f" key_file: {pki.client_key}}}\n",
                tmp_path,
            )
            return await read_twice(config)

    for outcome in asyncio.run(go()):
        assert isinstance(outcome, FetchError) and "certificate is not trusted" in str(outcome)
        assert "set tls.ca_file" not in str(outcome)
        assert str(outcome).endswith("not signed by the CA in tls.ca_file)"), outcome


def test_a_token_with_a_line_break_is_refused_before_any_request(pki: Pki, tmp_path: Path) -> None:
    """A token file holding CRLF inside gave a raw ValueError garbled by the redaction
    ("det<redacted>"): now refused at check-config, and at request time (a file rewritten
    after load) before anything is sent, naming the file and the reason."""
    token = tmp_path / "token"
    token.write_text("s3cret-token\r\nected-more\r\n")
    text = "targets:\n  - name: a\n    url: https://127.0.0.1:1/metrics\n    bearer_token_file: token\n"
    with pytest.raises(ConfigError) as caught:
        target(text, tmp_path)
    (problem,) = caught.value.problems
    assert str(token) in problem and "a carriage return" in problem, problem
    assert "s3cret" not in problem
    token.write_text("s3cret-token-value\n")
    seen: list[str | None] = []

    async def go() -> list[str | FetchError]:
        async with https_engine(pki, seen) as url:
            config = token_over_mtls(url, pki, tmp_path)
            return await read_twice(config, between=lambda: token.write_text("a\x00b-token\n"))

    first, second = asyncio.run(go())
    assert first == f"{len(PAGE)} bytes" and seen == ["Bearer s3cret-token-value"]
    assert isinstance(second, FetchError) and second.kind is ScrapeResult.CREDENTIALS_ERROR
    assert str(token) in str(second) and "a NUL" in str(second), second
    assert "<redacted>" not in str(second)
