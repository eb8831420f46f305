"""TLS options of the Prometheus source against a fake Prometheus that serves HTTPS with a
certificate from a throwaway CA (made with the openssl command line) and requires client
certificates, as an mTLS-protected Prometheus or Mimir gateway does."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specmon.sources.prometheus import PrometheusSource, ReadResult, ReadStatus
from tests.promsource.fake_prometheus import FakePrometheus, load, replies, source_for

FLEET = load("fleet")
EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make test certificates")
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=specmon test CA", cwd=d)  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", *EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                 "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return d


def _server_context(pki: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.pem"))
    context.load_cert_chain(str(pki / "server.pem"), str(pki / "server.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _read(pki: Path, **changes: Any) -> ReadResult:
    async def go() -> ReadResult:
        async with FakePrometheus(replies(FLEET), ssl_context=_server_context(pki)) as fake:
            config = source_for(FLEET, fake.url, **changes)
            async with PrometheusSource(config) as source:
                return await source.read(at=FLEET["at"])

    return asyncio.run(go())


def test_ca_and_client_certificate(pki: Path) -> None:
    tls = {
        "ca_file": str(pki / "ca.pem"),
        "cert_file": str(pki / "client.pem"),
        "key_file": str(pki / "client.key"),
    }
    result = _read(pki, tls=tls)
    assert result.status is ReadStatus.OK, result.message
    assert len(result.instances) == 5


def test_unknown_ca_is_refused(pki: Path) -> None:
    result = _read(
        pki, tls={"cert_file": str(pki / "client.pem"), "key_file": str(pki / "client.key")}
    )
    assert result.status is ReadStatus.DOWN
    assert result.message is not None and "certificate" in result.message


def test_insecure_skip_verify(pki: Path) -> None:
    result = _read(
        pki,
        tls={
            "insecure_skip_verify": True,
            "cert_file": str(pki / "client.pem"),
            "key_file": str(pki / "client.key"),
        },
    )
    assert result.status is ReadStatus.OK, result.message


def test_missing_client_certificate(pki: Path) -> None:
    result = _read(pki, tls={"ca_file": str(pki / "ca.pem")})
    # The server rejects the handshake (or resets the connection right after it).
    assert result.status in (ReadStatus.DOWN, ReadStatus.BAD_RESPONSE)
    assert result.message


def test_invalid_pem_is_a_config_problem(pki: Path, tmp_path: Path) -> None:
    from specmon.sources.prometheus_config import check_sources

    bogus = tmp_path / "bogus.pem"
    bogus.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    _, problems = check_sources(
        [{"prometheus": {"url": "https://p:9090", "tls": {"ca_file": str(bogus)}}}], environ={}
    )
    assert len(problems) == 1
    assert problems[0].startswith("sources[0].prometheus.tls: cannot use these files: ")
    _, problems = check_sources(
        [{"prometheus": {"url": "https://p:9090", "tls": {
            "cert_file": str(pki / "client.pem"), "key_file": str(pki / "server.key")}}}],
        environ={},
    )  # fmt: skip
    assert len(problems) == 1 and "cannot use these files" in problems[0]


def test_tls_files_broken_after_the_config_was_loaded(pki: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes((pki / "ca.pem").read_bytes())

    async def go() -> ReadResult:
        async with FakePrometheus(replies(FLEET), ssl_context=_server_context(pki)) as fake:
            config = source_for(FLEET, fake.url, tls={"ca_file": str(ca)})
            ca.write_text("garbage\n")
            async with PrometheusSource(config) as source:
                return await source.read(at=FLEET["at"])

    result = asyncio.run(go())
    assert result.status is ReadStatus.CREDENTIALS_ERROR
    assert result.message is not None and result.message.startswith("cannot use the tls files")
