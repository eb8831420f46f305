"""WebServer's config handling in-process: load, reload, the file watch, TLS on/off."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from specmon.daemon import metrics as m
from specmon.web.config import WebConfigError
from specmon.web.server import WebMetrics, WebOptions, WebServer
from tests.support.tls import Pki, bcrypt_hash, make_pki


def web_metrics(registry: CollectorRegistry) -> WebMetrics:
    """The server's instruments from the daemon's metric table, in a registry of the test's."""

    def make(d: m.MetricDef) -> Any:
        cls = Counter if d.kind is m.Kind.COUNTER else Gauge
        return cls(d.name, d.help, list(d.labels), registry=registry)

    return WebMetrics(
        reload_ok=make(m.WEB_RELOAD_OK),
        reload_time=make(m.WEB_RELOAD_TIME),
        rejections=make(m.WEB_REJECTIONS),
    )


class Log:
    """A structlog stand-in that keeps the events."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, object]]] = []

    def _log(self, event: str, **kw: object) -> None:
        self.events.append((event, kw))

    info = warning = error = debug = exception = _log

    def names(self) -> list[str]:
        return [e for e, _ in self.events]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def server(web: Path, **options: object) -> tuple[WebServer, Log, CollectorRegistry]:
    log, registry = Log(), CollectorRegistry()
    opts = WebOptions(config_file=web, **options)  # type: ignore[arg-type]
    return WebServer(opts, metrics=web_metrics(registry), log=log), log, registry


def tls_config(cert: Path, key: Path, users: str = "") -> str:
    return f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n" + users


def test_a_bad_reload_keeps_the_running_config(tmp_path: Path, pki: Pki) -> None:
    web = tmp_path / "web.yml"
    first = bcrypt_hash("one")
    web.write_text(
        tls_config(pki.server_cert, pki.server_key, f"basic_auth_users: {{a: {first}}}\n")
    )
    srv, log, registry = server(web)
    srv.load()
    before = srv.settings
    assert before.tls and set(before.config.users) == {b"a"}
    web.write_text(tls_config(pki.server_cert, pki.client_key, "basic_auth_users: {b: nope}\n"))
    ok, message = srv.reload()
    assert not ok and "key_file is not the private key" in message and "nope" not in message
    assert srv.settings is before
    assert registry.get_sample_value("specmon_web_config_last_reload_successful") == 0
    ((_event, fields),) = [e for e in log.events if e[0] == "web_config_reload_failed"]
    assert fields["kept"] == "previous web configuration"
    assert len(fields["problems"]) == 2  # type: ignore[arg-type]
    # Turning TLS off is refused too.
    web.write_text(f"basic_auth_users: {{a: {first}}}\n")
    ok, message = srv.reload()
    assert not ok and "TLS cannot be turned off by a reload" in message
    web.write_text(tls_config(pki.server_cert, pki.server_key))
    assert srv.reload() == (True, f"loaded web config {web}")
    assert srv.settings.auth is None
    assert registry.get_sample_value("specmon_web_config_last_reload_successful") == 1


def test_an_invalid_file_at_start_raises_with_every_problem(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("tls_server_config: {cert_file: a.crt, key_file: b.key}\ncolour: red\n")
    srv, _, _ = server(web)
    with pytest.raises(WebConfigError) as info:
        srv.load()
    assert info.value.problems == [
        "'colour': unknown key",
        f"tls_server_config.cert_file: cannot read {tmp_path}/a.crt: No such file or directory",
        f"tls_server_config.key_file: cannot read {tmp_path}/b.key: No such file or directory",
    ]


def test_the_watch_follows_the_files(tmp_path: Path, pki: Pki) -> None:
    """Changes on disk are picked up without a signal: a renewed certificate, and a config
    naming a certificate that is written after it (refused, then accepted)."""
    renewed = make_pki(tmp_path / "renewed")
    cert, key = tmp_path / "s.crt", tmp_path / "s.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    web = tmp_path / "web.yml"
    web.write_text(tls_config(cert, key))
    srv, log, _ = server(web, watch_interval=0.05)

    async def main() -> None:
        srv.load()
        watch = asyncio.create_task(srv._watch())

        async def until(what: str, predicate: object, timeout: float = 5.0) -> None:
            deadline = time.monotonic() + timeout
            while not predicate():  # type: ignore[operator]
                assert time.monotonic() < deadline, (what, log.names())
                await asyncio.sleep(0.02)

        try:
            first = srv.settings
            shutil.copy(renewed.server_cert, cert)
            shutil.copy(renewed.server_key, key)
            await until("the renewed certificate", lambda: srv.settings is not first)
            later_cert, later_key = tmp_path / "later.crt", tmp_path / "later.key"
            web.write_text(tls_config(later_cert, later_key))
            await until("the refusal", lambda: "web_config_reload_failed" in log.names())
            loaded = srv.settings
            shutil.copy(pki.server_key, later_key)
            shutil.copy(pki.server_cert, later_cert)
            await until("the late certificate", lambda: srv.settings is not loaded)
            assert srv.settings.config.tls is not None
            assert srv.settings.config.tls.cert_file == later_cert
        finally:
            watch.cancel()
            await srv.close()

    asyncio.run(main())
