"""Secrets and TLS errors (issue 53): redaction replaces whole words, a certificate error names
its own remedy, a token that is not one line is refused, a device is not a token file."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from specmon.config_values import ConfigError
from specmon.daemon.config import parse_config
from specmon.secrets import REDACTED, redact
from specmon.sources.client_config import read_secret_file
from specmon.sources.http import describe_error


def test_redaction_replaces_whole_words() -> None:
    secret = "abc\r\nected"  # its 4-grams match inside "detected"
    text = redact("Newline or carriage return detected in headers: abc\r\nected", [secret])
    assert "det<" not in text and "ected" not in text and "abc" not in text
    assert text.startswith("Newline or carriage return <redacted> in headers"), text
    # A whole occurrence inside a word takes the word; punctuation around stays.
    assert redact("token=xx-s3cr3t-zq9xyy&x=1", ["s3cr3t-zq9x"]) == f"token={REDACTED}&x=1"


def _certificate_error(code: int, message: str) -> aiohttp.ClientConnectorCertificateError:
    error = ssl.SSLCertVerificationError(1, f"certificate verify failed: {message}")
    error.verify_code = code
    error.verify_message = message
    key = ConnectionKey("engine.example", 443, True, True, None, None, None, None)
    return aiohttp.ClientConnectorCertificateError(key, error)


@pytest.mark.parametrize(
    ("code", "message", "ca_file", "remedy"),
    [
        (10, "certificate has expired", True, "the server's certificate is expired: renew it"),
        (10, "certificate has expired", False, "the server's certificate is expired: renew it"),
        (62, "Hostname mismatch", True, "for another host name: use a name it carries"),
        (19, "self-signed certificate in certificate chain", True, "not signed by the CA in tls.ca_file"),
        (20, "unable to get local issuer certificate", False, "set tls.ca_file"),
    ],
)  # fmt: skip
def test_a_certificate_error_names_its_own_remedy(
    code: int, message: str, ca_file: bool, remedy: str
) -> None:
    text = describe_error(_certificate_error(code, message), ca_file=ca_file)
    assert text.endswith(remedy + ")"), text
    if code != 20:
        assert "set tls.ca_file" not in text


@pytest.mark.parametrize(("content", "reason"), [("sEcReT\r\nen", "a carriage return"),
                                                 ("sEcReT\x1ben", "U+001B"), ("  \n", "empty")])  # fmt: skip
def test_a_token_that_is_not_one_line_is_refused_naming_the_file(
    tmp_path: Path, content: str, reason: str
) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(OSError, match=re.escape(reason)) as caught:
        read_secret_file(path)
    assert caught.value.filename == str(path) and reason in str(caught.value.strerror)
    assert "sEcReT" not in str(caught.value)
    env = "targets:\n  - {name: a, url: 'http://127.0.0.1:1/metrics', bearer_token_env: TOKEN}\n"
    if content.strip():
        with pytest.raises(ConfigError) as config_error:
            parse_config(env, base_dir=tmp_path, environ={"TOKEN": content})
        assert "environment variable TOKEN" in str(config_error.value) and reason in str(
            config_error.value
        )


def test_dev_zero_is_not_a_regular_file(tmp_path: Path) -> None:
    text = (
        "targets:\n  - {name: a, url: 'http://127.0.0.1:1/metrics', bearer_token_file: /dev/zero}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, base_dir=tmp_path)
    assert "not a regular file (a character device)" in str(caught.value)
    assert "larger than" not in str(caught.value)
