"""``specmon run --web.config.file`` as users run it: a subprocess, real TLS, and real clients
(curl, Python's ssl, raw sockets). Certificates are made per test (tests/support/tls.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from specmon.cli.main import main as specmon_main
from specmon.web.probe import probe
from tests.support.daemon import Daemon, daemon, get
from tests.support.tls import Pki, bcrypt_hash, make_pki

PASSWORD = "correct horse battery staple"
CONFIG = """\
global:
  scrape_interval: 500ms
  scrape_timeout: 400ms
targets:
  - name: nowhere
    url: http://127.0.0.1:9/metrics
"""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def curl_bin() -> str:
    found = shutil.which("curl")
    if found is None:
        pytest.fail("curl not found: apt-get install curl")
    return found


@dataclass(frozen=True)
class Reply:
    rc: int  # curl's exit status: 0 when an HTTP response came back
    status: int  # 0 when there was none
    headers: dict[str, str]
    body: str
    stderr: str


def curl(curl_bin: str, url: str, *args: str) -> Reply:
    result = subprocess.run(
        [curl_bin, "-sS", "-i", "--max-time", "10", *args, url],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    status, headers, body = 0, {}, ""
    if result.stdout.startswith("HTTP/"):
        head, _, body = result.stdout.replace("\r\n", "\n").partition("\n\n")
        first, *lines = head.splitlines()
        status = int(first.split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    return Reply(result.returncode, status, headers, body, result.stderr)


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def client_context(pki: Pki, *, cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.server_ca))
    if cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def config(tmp: Path) -> Path:
    return write(tmp, "specmon.yml", CONFIG)


def metric(d: Daemon, name: str, **labels: str) -> float | None:
    return d.metrics().value(name, **labels)


# --------------------------------------------------------------------------- TLS + basic auth


def test_tls_and_basic_auth_with_curl(tmp_path: Path, pki: Pki, curl_bin: str) -> None:
    hashed = bcrypt_hash(PASSWORD)
    web = write(
        tmp_path,
        "web.yml",
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        f"basic_auth_users:\n  prometheus: {hashed}\n"
        "http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n",
    )
    with daemon(
        config(tmp_path),
        tmp_path,
        extra=["--web.config.file", str(web)],
        context=client_context(pki),
        headers=basic("prometheus", PASSWORD),
    ) as d:
        url = f"https://127.0.0.1:{d.port}"
        ca = ["--cacert", str(pki.server_ca)]
        right = curl(curl_bin, url + "/metrics", *ca, "-u", f"prometheus:{PASSWORD}")
        assert right.status == 200 and "specmon_build_info" in right.body
        assert right.headers["x-content-type-options"] == "nosniff"
        for who in (["-u", "prometheus:wrong"], ["-u", "nobody:" + PASSWORD], []):
            denied = curl(curl_bin, url + "/metrics", *ca, *who)
            assert denied.status == 401, who
            assert denied.headers["www-authenticate"] == "Basic"
            assert denied.headers["x-content-type-options"] == "nosniff"
            assert "specmon_" not in denied.body
        for page in ("/", "/api/v1/targets"):
            assert curl(curl_bin, url + page, *ca).status == 401
        # The probes answer without a password (Kubernetes and Docker send none).
        assert curl(curl_bin, url + "/healthz", *ca).status == 200
        assert curl(curl_bin, url + "/readyz", *ca).status == 200
        # Only those exact paths: a path that merely starts with one still needs the password.
        for sneaky in ("/healthz/../metrics", "/readyz/..%2Fmetrics", "//healthz/../metrics"):
            assert curl(curl_bin, url + sneaky, *ca, "--path-as-is").status == 401, sneaky
        # So does the image's HEALTHCHECK, which asks over TLS when the port speaks it.
        assert probe(f"http://127.0.0.1:{d.port}/healthz") == (True, url + "/healthz: HTTP 200")
        # Without the CA curl refuses the certificate; plain HTTP gets no HTTP answer.
        unverified = curl(curl_bin, url + "/healthz")
        assert unverified.rc == 60 and unverified.status == 0, unverified
        plain = curl(curl_bin, f"http://127.0.0.1:{d.port}/healthz")
        assert plain.rc != 0 and plain.status == 0, plain
        # Lifecycle API off: 403 as in Prometheus, even with the right password.
        reload = curl(
            curl_bin, url + "/-/reload", *ca, "-X", "POST", "-u", f"prometheus:{PASSWORD}"
        )
        assert (reload.status, reload.body) == (403, "Lifecycle API is not enabled.\n")
        assert metric(d, "specmon_web_rejections_total", reason="unauthorized") == 8
        assert metric(d, "specmon_web_rejections_total", reason="lifecycle_disabled") == 1
        assert metric(d, "specmon_web_config_last_reload_successful") == 1
    log = d.log_text()
    assert PASSWORD not in log and hashed not in log and hashed[7:] not in log


def test_mutual_tls_with_curl(tmp_path: Path, pki: Pki, curl_bin: str) -> None:
    web = write(
        tmp_path,
        "web.yml",
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki.client_ca}\n"
        "  client_allowed_sans: [prometheus]\n",
    )
    with daemon(
        config(tmp_path),
        tmp_path,
        extra=["--web.config.file", str(web)],
        context=client_context(pki, cert=True),
    ) as d:
        url = f"https://127.0.0.1:{d.port}/metrics"
        ca = ["--cacert", str(pki.server_ca)]
        good = curl(
            curl_bin, url, *ca, "--cert", str(pki.client_cert), "--key", str(pki.client_key)
        )
        assert good.status == 200 and "specmon_build_info" in good.body
        # No certificate, one from another CA, one from the right CA without an allowed SAN:
        # the connection is refused before any HTTP.
        for cert, key in (
            (None, None),
            (pki.rogue_cert, pki.rogue_key),
            (pki.other_client_cert, pki.other_client_key),
        ):
            args = ["--cert", str(cert), "--key", str(key)] if cert else []
            refused = curl(curl_bin, url, *ca, *args)
            assert refused.rc != 0 and refused.status == 0, (cert, refused)
        assert metric(d, "specmon_web_rejections_total", reason="client_san") == 1

        # A reload changes the client-certificate policy for new connections, no restart.
        web.write_text(
            f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
            "  client_auth_type: VerifyClientCertIfGiven\n"
            f"  client_ca_file: {pki.client_ca}\n"
        )
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: curl(curl_bin, url, *ca).status == 200, timeout=10)
        rogue = curl(curl_bin, url, *ca, "--cert", str(pki.rogue_cert), "--key", str(pki.rogue_key))
        assert rogue.status == 0, "a certificate that is given is still verified"


# --------------------------------------------------------------------------- reloads


def _served_fingerprint(port: int, pki: Pki) -> str:
    context = client_context(pki)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return hashlib.sha256(der).hexdigest()


def _fingerprint(pem: Path) -> str:
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read_text())).hexdigest()


def test_web_config_reloads_keep_the_old_one_when_the_new_one_is_bad(
    tmp_path: Path, pki: Pki
) -> None:
    """Users and certificates change on SIGHUP, on POST /-/reload (with the lifecycle flag)
    and when the files change on disk; a bad new web config keeps the running one, says so
    in the metrics and the log, and shows no secret."""
    renewed = make_pki(tmp_path / "renewed")  # another server certificate (another CA)
    cert = tmp_path / "server.crt"
    key = tmp_path / "server.key"
    shutil.copy(pki.server_cert, cert)
    shutil.copy(pki.server_key, key)
    old, new = bcrypt_hash("old password"), bcrypt_hash("new password")
    web = write(
        tmp_path,
        "web.yml",
        f"tls_server_config: {{cert_file: server.crt, key_file: server.key}}\n"
        f"basic_auth_users: {{prometheus: {old}}}\n",
    )
    with daemon(
        config(tmp_path),
        tmp_path,
        extra=["--web.config.file", str(web), "--web.enable-lifecycle"],
        context=client_context(pki),
        headers=basic("prometheus", "old password"),
    ) as d:

        def status(password: str) -> int:
            return get(
                d.base + "/metrics", context=d.context, headers=basic("prometheus", password)
            )[0]

        assert status("old password") == 200
        # A bad new file: every problem logged, no secret, the old one kept.
        web.write_text(
            "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
            f"basic_auth_users: {{prometheus: {new}, admin: hunter2}}\nhttp_server_config: {{}}\n"
            "colour: blue\n"
        )
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: '"web_config_reload_failed"' in d.log_text(), timeout=10)
        failed = [e for e in d.log_lines() if e.get("event") == "web_config_reload_failed"]
        assert failed[0]["problems"] == [
            "'colour': unknown key",
            "basic_auth_users['admin']: not a bcrypt hash (expected $2y$ or $2b$, a two-digit "
            "cost and 53 characters, as `htpasswd -nBC 10 \"\" | tr -d ':\\n'` prints)",
        ]
        assert "hunter2" not in d.log_text() and new not in d.log_text()
        assert status("old password") == 200 and status("new password") == 401
        assert metric(d, "specmon_web_config_last_reload_successful") == 0
        # The bad file is reported once, not on every check for changes.
        time.sleep(6)
        assert d.log_text().count('"web_config_reload_failed"') == 1

        # Fixed on disk: picked up by the watch (every 5 s), no signal needed.
        web.write_text(
            "tls_server_config: {cert_file: server.crt, key_file: server.key}\n"
            f"basic_auth_users: {{prometheus: {new}}}\n"
        )
        d.wait_for(lambda: status("new password") == 200, timeout=15)
        assert status("old password") == 401
        d.headers = basic("prometheus", "new password")
        assert metric(d, "specmon_web_config_last_reload_successful") == 1

        # A renewed certificate on disk is served to new connections without a restart.
        assert _served_fingerprint(d.port, pki) == _fingerprint(pki.server_cert)
        shutil.copy(renewed.server_cert, cert)
        shutil.copy(renewed.server_key, key)
        reply = get(
            d.base + "/-/reload", context=d.context, headers=d.headers
        )  # GET is not the lifecycle API
        assert reply[0] == 405
        request = f"https://127.0.0.1:{d.port}/-/reload"
        code = _post(request, d.context, d.headers)
        assert code == 200
        assert _served_fingerprint(d.port, renewed) == _fingerprint(renewed.server_cert)

        # TLS cannot be switched off by a reload.
        web.write_text(f"basic_auth_users: {{prometheus: {new}}}\n")
        d.signal(signal.SIGHUP)
        d.wait_for(lambda: "TLS cannot be turned off by a reload" in d.log_text(), timeout=10)
        assert _served_fingerprint(d.port, renewed) == _fingerprint(renewed.server_cert)


def _post(url: str, context: ssl.SSLContext | None, headers: dict[str, str]) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=b"", method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_an_invalid_web_config_stops_the_start(tmp_path: Path, pki: Pki) -> None:
    web = write(
        tmp_path,
        "web.yml",
        "tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n"
        "basic_auth_users:\n  prometheus: hunter2\n",
    )
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "run", "--config.file", str(config(tmp_path)),
         "--web.listen-address", "127.0.0.1:0", "--log.format", "json",
         "--web.config.file", str(web)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = [json.loads(ln) for ln in result.stderr.splitlines() if "config_invalid" in ln]
    assert line["file"] == str(web)
    assert line["problems"] == [
        "basic_auth_users['prometheus']: not a bcrypt hash (expected $2y$ or $2b$, a two-digit "
        "cost and 53 characters, as `htpasswd -nBC 10 \"\" | tr -d ':\\n'` prints)",
        f"tls_server_config.cert_file: cannot read {tmp_path}/missing.crt: No such file or "
        "directory",
        f"tls_server_config.key_file: cannot read {tmp_path}/missing.key: No such file or "
        "directory",
    ]
    assert "hunter2" not in result.stderr + result.stdout


def test_check_web_config(tmp_path: Path, pki: Pki, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(
        tmp_path,
        "good.yml",
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        f"  client_ca_file: {pki.client_ca}\n"
        f"basic_auth_users:\n  prometheus: {bcrypt_hash('x')}\n",
    )
    assert specmon_main(["check-web-config", str(good)]) == 0
    assert capsys.readouterr().out == (
        f"OK {good}: TLS TLS12-TLS13, client certificates: RequireAndVerifyClientCert; "
        "1 basic-auth user(s)\n"
    )
    bad = write(
        tmp_path,
        "bad.yml",
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.client_key}\n"
        "http_server_config: {http2: true}\n",
    )
    assert specmon_main(["check-web-config", str(bad)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"FAILED {bad}: 2 problem(s):\n")
    assert "http_server_config.http2: HTTP/2 is not supported" in out
    assert "key_file is not the private key of cert_file's certificate" in out


# --------------------------------------------------------------------------- slow clients


def _closed_at(sock: socket.socket, deadline: float) -> float:
    """When (time.monotonic()) the server closed ``sock``; inf if not before ``deadline``."""
    now = time.monotonic()
    return now + _closed_within(sock, max(0.0, deadline - now))


def _closed_within(sock: socket.socket, limit: float) -> float:
    """Seconds until the server closed ``sock`` (reading and discarding); inf if it did not."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < limit:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - start
        except TimeoutError:
            continue
    return math.inf


def _trickled_until_closed(sock: socket.socket, data: bytes, gap: float, limit: float) -> float:
    """Send ``data`` a byte every ``gap`` seconds; seconds until the server closed, or inf."""
    start = time.monotonic()
    for byte in data:
        if time.monotonic() - start > limit:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return time.monotonic() - start
        readable, _, _ = select.select([sock], [], [], gap)
        if readable:
            try:
                if sock.recv(4096) == b"":
                    return time.monotonic() - start
            except OSError:
                return time.monotonic() - start
    return math.inf


@contextmanager
def _raw(port: int) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        yield sock
    finally:
        sock.close()


def test_unfinished_request_heads_are_dropped(tmp_path: Path) -> None:
    """--web.read-header-timeout 1s: half a request line, silence, a kept-alive connection
    that starts a second request and stops; all dropped after about a second while other
    clients are served. Oversized request lines and headers get 400."""
    with daemon(config(tmp_path), tmp_path, extra=["--web.read-header-timeout", "1s"]) as d:
        with _raw(d.port) as half, _raw(d.port) as silent, _raw(d.port) as kept:
            opened = time.monotonic()
            half.sendall(b"GET /metr")
            kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.3)
            assert kept.recv(4096).startswith(b"HTTP/1.1 200 OK")
            kept.sendall(b"GET /metrics HTTP/1.1\r\nHo")
            second = time.monotonic()
            # Meanwhile other clients are served.
            assert get(d.base + "/healthz")[0] == 200
            closed = [_closed_at(s, opened + 5) for s in (half, silent, kept)]
        lasted = [closed[0] - opened, closed[1] - opened, closed[2] - second]
        assert all(0.7 < t < 2.5 for t in lasted), lasted
        # A client that trickles its head a byte at a time is dropped all the same.
        with _raw(d.port) as trickle:
            head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            assert 0.5 < _trickled_until_closed(trickle, head, 0.1, 5) < 3
        # A kept-alive connection is not cut while it is idle between requests.
        with _raw(d.port) as idle:
            for _ in range(2):
                idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                time.sleep(0.2)
                assert idle.recv(4096).startswith(b"HTTP/1.1 200 OK")
                time.sleep(1.5)
        for head in (
            b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
            b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(101)) + b"\r\n",
        ):
            with _raw(d.port) as big:
                big.sendall(head)
                status_line = big.recv(4096).split(b"\r\n", 1)[0]
                assert status_line.split()[1:2] == [b"400"], (head[:30], status_line)
        assert (metric(d, "specmon_web_rejections_total", reason="header_timeout") or 0) >= 4
        assert probe(d.base + "/healthz") == (True, d.base + "/healthz: HTTP 200")
        assert probe(d.base + "/nothing")[0] is False


def test_tls_handshakes_and_heads_are_bounded_too(tmp_path: Path, pki: Pki) -> None:
    web = write(
        tmp_path,
        "web.yml",
        f"tls_server_config:\n  cert_file: {pki.server_cert}\n  key_file: {pki.server_key}\n",
    )
    with daemon(
        config(tmp_path),
        tmp_path,
        extra=["--web.config.file", str(web), "--web.read-header-timeout", "1s"],
        context=client_context(pki),
    ) as d:
        with _raw(d.port) as no_handshake:
            assert 0.5 < _closed_within(no_handshake, 5) < 3
        context = client_context(pki)
        with (
            socket.create_connection(("127.0.0.1", d.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            tls.sendall(b"GET /metr")
            start = time.monotonic()
            tls.settimeout(5)
            try:
                data = tls.recv(4096)
            except (ssl.SSLError, OSError):
                data = b""
            assert data == b""
            assert 0.5 < time.monotonic() - start < 3


def test_connections_beyond_the_limit_are_refused(tmp_path: Path) -> None:
    with daemon(
        config(tmp_path),
        tmp_path,
        extra=["--web.max-connections", "2", "--web.read-header-timeout", "10s"],
    ) as d:
        with _raw(d.port), _raw(d.port):
            time.sleep(0.2)
            with _raw(d.port) as third:
                assert _closed_within(third, 2) < 1
        d.wait_for(lambda: get(d.base + "/healthz")[0] == 200)
        assert metric(d, "specmon_web_rejections_total", reason="too_many_connections") == 1
