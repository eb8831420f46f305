"""The web config parser and the TLS context builder: exporter-toolkit's format, strictly."""

from __future__ import annotations

import ssl
import textwrap
from pathlib import Path

import pytest

from specmon.web.config import (
    MAX_WEB_CONFIG_BYTES,
    ClientAuth,
    TLSVersion,
    WebConfigError,
    parse_web_config,
    read_web_config,
)
from specmon.web.security import build_ssl_context
from tests.support.tls import Pki, bcrypt_hash, make_pki

HASH = bcrypt_hash("right password")


def parse(text: str, base_dir: Path = Path("/etc/specmon")) -> object:
    return parse_web_config(textwrap.dedent(text), source="web.yml", base_dir=base_dir)


def problems(text: str, base_dir: Path = Path("/etc/specmon")) -> list[str]:
    with pytest.raises(WebConfigError) as info:
        parse(text, base_dir)
    assert info.value.source == "web.yml"
    return info.value.problems


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_empty_file_means_plain_http_without_auth() -> None:
    for text in ("", "# nothing\n", "{}\n"):
        config = parse(text)
        assert config.tls is None and not config.users and not config.http.headers  # type: ignore[attr-defined]


def test_full_config_parses_with_the_toolkit_defaults() -> None:
    config = parse(
        f"""\
        tls_server_config:
          cert_file: tls/server.crt
          key_file: /abs/server.key
          client_auth_type: RequireAndVerifyClientCert
          client_ca_file: clients.crt
          client_allowed_sans: [prometheus, 10.0.0.1]
          cipher_suites:
            - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
          prefer_server_cipher_suites: false
        http_server_config:
          http2: false
          headers:
            X-Frame-Options: deny
            X-Content-Type-Options: nosniff
            Strict-Transport-Security: max-age=31536000
            Content-Security-Policy: ""
        basic_auth_users:
          prometheus: {HASH}
          "grafana agent": {bcrypt_hash("other", prefix="$2b$")}
        """
    )
    tls = config.tls  # type: ignore[attr-defined]
    assert tls.cert_file == Path("/etc/specmon/tls/server.crt")  # relative to the file
    assert tls.key_file == Path("/abs/server.key")
    assert tls.client_ca_file == Path("/etc/specmon/clients.crt")
    assert tls.client_auth is ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT
    assert tls.client_allowed_sans == ("prometheus", "10.0.0.1")
    assert (tls.min_version, tls.max_version) == (TLSVersion.TLS12, TLSVersion.TLS13)
    assert tls.prefer_server_cipher_suites is False
    assert config.http.headers == (  # type: ignore[attr-defined]
        ("X-Frame-Options", "deny"),
        ("X-Content-Type-Options", "nosniff"),
        ("Strict-Transport-Security", "max-age=31536000"),
    )  # the blank one is unset, as the toolkit does
    assert set(config.users) == {b"prometheus", b"grafana agent"}  # type: ignore[attr-defined]
    assert "$2" not in repr(config) and HASH not in str(config.users)  # type: ignore[attr-defined]


def test_every_problem_is_listed_at_once_with_its_path() -> None:
    found = problems(
        """\
        tls_server_config:
          cert_file: ""
          client_auth_type: RequireAnyClientCert
          client_allowed_sans: prometheus
          min_version: TLS13
          max_version: TLS12
          cipher_suites: [TLS_AES_128_GCM_SHA256, TLS_RSA_WITH_RC4_128_SHA, 7]
          prefer_server_cipher_suites: "yes"
          curve_preferences: [X25519]
          key: inline
          cert_flie: typo.crt
        http_server_config:
          http2: true
          headers:
            X-Frame-Options: allow-from-anywhere
            X-Powered-By: specmon
        basic_auth_users:
          "a:b": $2y$10$abcdefghijklmnopqrstuv1234567890123456789012345678901
          bob: not-a-hash
          carol: $2y$31$abcdefghijklmnopqrstuv1234567890123456789012345678901
          7: $2y$10$abcdefghijklmnopqrstuv1234567890123456789012345678901
        rate_limit: {interval: 1s, burst: 5}
        colour: blue
        """
    )
    expected = [
        "tls_server_config.curve_preferences: not supported by specmon",
        "tls_server_config.key: not supported by specmon",
        "tls_server_config.'cert_flie': unknown key (did you mean 'cert_file'?)",
        "tls_server_config.key_file: required when TLS is configured",
        "tls_server_config.cert_file: must not be empty",
        "tls_server_config.client_auth_type: RequireAnyClientCert requires a client certificate "
        "without verifying it",
        "tls_server_config.client_ca_file: required with RequireAndVerifyClientCert",
        "tls_server_config.client_allowed_sans: must be a list, not a string",
        "tls_server_config: min_version TLS13 is above max_version TLS12",
        "tls_server_config.cipher_suites[0]: TLS_AES_128_GCM_SHA256 is a TLS 1.3 suite",
        "tls_server_config.cipher_suites[1]: unknown cipher suite 'TLS_RSA_WITH_RC4_128_SHA'",
        "tls_server_config.cipher_suites[2]: must be a string, not an integer",
        "tls_server_config.prefer_server_cipher_suites: must be true or false, not a string",
        "http_server_config.http2: HTTP/2 is not supported",
        "http_server_config.headers.X-Frame-Options: 'allow-from-anywhere' is not one of deny, "
        "sameorigin",
        "http_server_config.headers: header 'X-Powered-By' can not be configured",
        "basic_auth_users['a:b']: a username cannot contain ':'",
        "basic_auth_users['bob']: not a bcrypt hash",
        "basic_auth_users['carol']: bcrypt cost 31 is outside 4..16",
        "basic_auth_users: usernames must be strings, not an integer (quote it)",
        "rate_limit: not supported by specmon",
        "'colour': unknown key",
    ]
    for fragment in expected:
        assert any(p.startswith(fragment) for p in found), (fragment, found)
    assert len(found) == len(expected), "\n".join(found)
    # The hashes are secrets: never quoted, not even the malformed one.
    joined = "\n".join(found)
    assert "not-a-hash" not in joined and "abcdefghijklmnop" not in joined


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- a\n- b\n", "the file must be a mapping"),
        ("tls_server_config: [a]\n", "tls_server_config: must be a mapping, not a list"),
        ("basic_auth_users: [a]\n", "basic_auth_users: must be a mapping of username"),
        (
            "tls_server_config: {min_version: TLS12}\n",
            "tls_server_config: TLS settings without cert_file and key_file",
        ),
        (
            "tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n",
            "tls_server_config.client_auth_type: client CAs are configured but "
            "client_auth_type is NoClientCert",
        ),
        (
            "tls_server_config: {cert_file: a, key_file: b, client_auth_type: Sometimes}\n",
            "tls_server_config.client_auth_type: 'Sometimes' is not one of NoClientCert, "
            "VerifyClientCertIfGiven, RequireAndVerifyClientCert",
        ),
        (
            "tls_server_config: {cert_file: a, key_file: b, client_auth_type: "
            "VerifyClientCertIfGiven, client_ca_file: c, client_allowed_sans: [x]}\n",
            "tls_server_config.client_allowed_sans: requires client_auth_type "
            "RequireAndVerifyClientCert",
        ),
        (
            "tls_server_config: {cert_file: a, key_file: b, min_version: TLS14}\n",
            "tls_server_config.min_version: 'TLS14' is not one of TLS10, TLS11, TLS12, TLS13",
        ),
        (
            "tls_server_config: {cert_file: a, key_file: b, client_ca: not pem, "
            "client_auth_type: RequireAndVerifyClientCert}\n",
            "tls_server_config.client_ca: is not a PEM certificate",
        ),
        ("basic_auth_users: {'': x}\n", "basic_auth_users['']: empty username"),
        ("basic_auth_users: {alice: 42}\n", "basic_auth_users['alice']: must be a bcrypt hash"),
        ("http_server_config: {http2: 1}\n", "http_server_config.http2: must be true or false"),
        (
            'http_server_config: {headers: {X-XSS-Protection: "1\\r\\nSet-Cookie: x"}}\n',
            "http_server_config.headers.X-XSS-Protection: must not contain control characters",
        ),
    ],
)
def test_single_problems(text: str, fragment: str) -> None:
    found = problems(text)
    assert any(p.startswith(fragment) for p in found), found


def test_yaml_errors_name_the_line_but_never_quote_it() -> None:
    secret_line = f"basic_auth_users:\n  prometheus: {HASH}\n  broken: [unclosed\n"
    found = problems(secret_line)
    assert len(found) == 1 and found[0].startswith("line "), found
    assert HASH not in found[0] and "$2y$" not in found[0]


def test_aliases_depth_and_duplicate_keys_are_refused() -> None:
    bomb = "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"
    assert problems(bomb) == ["line 2, column 8: aliases (*name) are not allowed here"]
    deep = "tls_server_config: " + "[" * 100_000 + "]" * 100_000 + "\n"
    (found,) = problems(deep)
    assert "nested deeper than 16 levels" in found
    dup = f"basic_auth_users:\n  prometheus: {HASH}\n  prometheus: {HASH}\n"
    assert problems(dup) == ["line 3, column 3: duplicate key 'prometheus'"]


def test_unbounded_values_are_never_quoted_in_full() -> None:
    long_key = "k" * 100_000
    # YAML's implicit keys stop at 1024 characters; explicit ones (``? key``) do not.
    found = problems(
        f"? {long_key}\n: 1\nhttp_server_config:\n  headers:\n    ? {long_key}\n    : x\n"
        f"tls_server_config: {{cert_file: a, key_file: b, client_auth_type: {long_key}}}\n"
    )
    assert all(len(p) < 300 for p in found), [len(p) for p in found]
    assert len(found) == 3 and all("(100000 characters)" in p for p in found), found


def test_file_size_is_capped_and_encoding_checked(tmp_path: Path) -> None:
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (MAX_WEB_CONFIG_BYTES + 1))
    with pytest.raises(WebConfigError, match="larger than 256 KiB"):
        read_web_config(big)
    latin = tmp_path / "latin.yml"
    latin.write_bytes(b"basic_auth_users: {caf\xe9: x}\n")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        read_web_config(latin)
    with pytest.raises(WebConfigError, match="cannot read the file"):
        read_web_config(tmp_path / "missing.yml")


# --------------------------------------------------------------------------- the TLS context


def _tls(pki: Pki, extra: str = "", **files: Path) -> object:
    cert = files.get("cert", pki.server_cert)
    key = files.get("key", pki.server_key)
    config = parse(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n{textwrap.indent(extra, '  ')}"
    )
    return config.tls  # type: ignore[attr-defined]


def test_ssl_context_follows_the_config(pki: Pki) -> None:
    context = build_ssl_context(
        _tls(  # type: ignore[arg-type]
            pki,
            f"client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: {pki.client_ca}\n"
            "min_version: TLS13\n",
        )
    )
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    assert [c["subject"] for c in context.get_ca_certs()] == [
        ((("commonName", "specmon test client CA"),),)
    ]
    optional = build_ssl_context(
        _tls(  # type: ignore[arg-type]
            pki,
            "client_auth_type: VerifyClientCertIfGiven\nclient_ca: |\n"
            + textwrap.indent(pki.client_ca.read_text(), "  "),
        )
    )
    assert optional.verify_mode == ssl.CERT_OPTIONAL
    plain = build_ssl_context(_tls(pki))  # type: ignore[arg-type]
    assert plain.verify_mode == ssl.CERT_NONE
    assert plain.minimum_version == ssl.TLSVersion.TLSv1_2
    assert plain.options & ssl.OP_CIPHER_SERVER_PREFERENCE


def test_cipher_suites_become_openssl_names(pki: Pki) -> None:
    context = build_ssl_context(
        _tls(  # type: ignore[arg-type]
            pki,
            "max_version: TLS12\ncipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n",
        )
    )
    tls12 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {"ECDHE-ECDSA-AES256-GCM-SHA384"}


def test_file_problems_are_listed_together(pki: Pki, tmp_path: Path) -> None:
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_text(
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nxx\n-----END ENCRYPTED PRIVATE KEY-----\n"
    )
    tls = _tls(
        pki,
        f"client_auth_type: RequireAndVerifyClientCert\nclient_ca_file: {pki.server_key}\n",
        cert=tmp_path / "missing.crt",
        key=encrypted,
    )
    with pytest.raises(WebConfigError) as info:
        build_ssl_context(tls, source="web.yml")  # type: ignore[arg-type]
    found = info.value.problems
    assert found[0].startswith(f"tls_server_config.cert_file: cannot read {tmp_path}/missing.crt")
    assert found[1].startswith("tls_server_config.key_file:") and "is encrypted" in found[1]
    assert found[2].startswith("tls_server_config.client_ca_file:")
    assert "holds no PEM certificate" in found[2]
    assert len(found) == 3
    # No line of the private key (used as a CA file by mistake) is echoed.
    key_body = pki.server_key.read_text().splitlines()[1]
    assert all(key_body not in p for p in found)


def test_a_key_that_does_not_match_the_certificate(pki: Pki) -> None:
    with pytest.raises(WebConfigError) as info:
        build_ssl_context(_tls(pki, key=pki.client_key))  # type: ignore[arg-type]
    assert info.value.problems == [
        "tls_server_config: key_file is not the private key of cert_file's certificate"
    ]
