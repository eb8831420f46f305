"""The web configuration file (``--web.config.file``): exporter-toolkit's format, strictly.

The format is the one Prometheus and its exporters share
(https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)::

    tls_server_config:
      cert_file: server.crt            # relative paths: to this file's directory
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: clients-ca.crt
      client_allowed_sans: [prometheus.monitoring.svc]
      min_version: TLS12
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
      prefer_server_cipher_suites: true
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      prometheus: $2y$10$...           # bcrypt hashes

Every key the toolkit documents is recognised. Those Python's ``ssl`` module (or specmon)
cannot honour are rejected with the reason, never silently ignored: inline ``cert``/``key``,
``client_auth_type`` values that ask for a certificate without verifying it,
``curve_preferences``, ``http2: true`` and ``rate_limit``. Unknown keys are errors, every
problem is reported at once with its path, values of unbounded size are never quoted in full
and secrets (password hashes) never at all.

This module only parses; :mod:`specmon.web.security` turns a :class:`TLSServerConfig` into an
``ssl.SSLContext`` (reading the certificate files), and :mod:`specmon.web.server` does both.
"""

from __future__ import annotations

import enum
import errno
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from specmon import files
from specmon.config_values import ConfigError

__all__ = [
    "MAX_BCRYPT_COST",
    "MAX_WEB_CONFIG_BYTES",
    "ClientAuth",
    "HTTPServerConfig",
    "PasswordHash",
    "TLSServerConfig",
    "TLSVersion",
    "WebConfig",
    "WebConfigError",
    "parse_web_config",
    "read_web_config",
    "show",
]

#: The web config is a handful of lines; anything bigger is a mistake or an attack.
MAX_WEB_CONFIG_BYTES = 256 * 1024
#: YAML nesting deeper than this is refused before it can recurse (the format needs 3).
MAX_YAML_DEPTH = 16
#: bcrypt's cost is exponential: cost 10 takes about 64 ms here, each step doubles it. A check
#: that is not cached (a first login, every wrong password) pays it; above 16 (about 4 s) a
#: client guessing passwords would keep the checker busy for minutes per guess.
MAX_BCRYPT_COST = 16
MIN_BCRYPT_COST = 4
#: Longest username accepted (bytes of UTF-8).
MAX_USERNAME_BYTES = 256
#: Longest header value accepted in http_server_config.headers.
MAX_HEADER_VALUE = 4096


class WebConfigError(ConfigError):
    """A rejected web config: every problem, each with its path; no secret in any of them.

    ``tls`` is the file's tls_server_config when that section alone was valid, so that the
    certificate files can still be checked and their problems listed with the others.
    """

    tls: TLSServerConfig | None = None


def show(value: object, limit: int = 40) -> str:
    """A value quoted for an error message: repr, at most ``limit`` characters of it."""
    if isinstance(value, str):
        if len(value) > limit:
            return repr(value[:limit]) + f"... ({len(value)} characters)"
        return repr(value)
    return _kind(value)


def _kind(value: object) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


class ClientAuth(enum.Enum):
    """``client_auth_type`` values specmon can honour (Go's crypto/tls names)."""

    NO_CLIENT_CERT = "NoClientCert"
    VERIFY_CLIENT_CERT_IF_GIVEN = "VerifyClientCertIfGiven"
    REQUIRE_AND_VERIFY_CLIENT_CERT = "RequireAndVerifyClientCert"

    @property
    def verify_mode(self) -> ssl.VerifyMode:
        return {
            ClientAuth.NO_CLIENT_CERT: ssl.CERT_NONE,
            ClientAuth.VERIFY_CLIENT_CERT_IF_GIVEN: ssl.CERT_OPTIONAL,
            ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT: ssl.CERT_REQUIRED,
        }[self]


#: The toolkit's values that Python's ssl module cannot reproduce: OpenSSL, as Python exposes
#: it, verifies every certificate a client presents against the client CAs; it cannot ask for
#: one and accept it unverified.
_UNVERIFIED_CLIENT_AUTH = {
    "RequestClientCert": "asks for a client certificate without verifying it",
    "RequireAnyClientCert": "requires a client certificate without verifying it",
    "RequireClientCert": "requires a client certificate without verifying it",
}


class TLSVersion(enum.Enum):
    TLS10 = "TLS10"
    TLS11 = "TLS11"
    TLS12 = "TLS12"
    TLS13 = "TLS13"

    @property
    def ssl_version(self) -> ssl.TLSVersion:
        return {
            TLSVersion.TLS10: ssl.TLSVersion.TLSv1,
            TLSVersion.TLS11: ssl.TLSVersion.TLSv1_1,
            TLSVersion.TLS12: ssl.TLSVersion.TLSv1_2,
            TLSVersion.TLS13: ssl.TLSVersion.TLSv1_3,
        }[self]

    @property
    def rank(self) -> int:
        return list(TLSVersion).index(self)


#: Go's ``tls.CipherSuites()`` (the suites the toolkit accepts) for TLS 1.0-1.2, with their
#: OpenSSL names. Go's insecure suites (``tls.InsecureCipherSuites()``) are unknown to the
#: toolkit too.
CIPHER_SUITES: Mapping[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
#: TLS 1.3's suites are in Go's list but cannot be chosen (Go ignores them in cipher_suites;
#: Python's ssl has no call for them).
TLS13_CIPHER_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)

#: http_server_config.headers: the toolkit's closed list, with the values it allows (None: any).
ALLOWED_HEADERS: Mapping[str, tuple[str, ...] | None] = {
    "Strict-Transport-Security": None,
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": None,
    "Content-Security-Policy": None,
}

_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


class PasswordHash:
    """A bcrypt hash from basic_auth_users. It is a secret: repr and str never show it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value.encode("ascii")

    def reveal(self) -> bytes:
        return self._value

    @property
    def cost(self) -> int:
        return int(self._value[4:6])

    def __repr__(self) -> str:
        return "PasswordHash('<hidden>')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PasswordHash) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TLSServerConfig:
    cert_file: Path
    key_file: Path
    client_auth: ClientAuth = ClientAuth.NO_CLIENT_CERT
    client_ca_file: Path | None = None
    client_ca: str | None = None  # inline PEM (public: CA certificates)
    client_allowed_sans: tuple[str, ...] = ()
    min_version: TLSVersion = TLSVersion.TLS12
    max_version: TLSVersion = TLSVersion.TLS13
    cipher_suites: tuple[str, ...] = ()  # Go names, in preference order
    prefer_server_cipher_suites: bool = True

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(
            p for p in (self.cert_file, self.key_file, self.client_ca_file) if p is not None
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class HTTPServerConfig:
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WebConfig:
    source: str = "<no web config>"
    tls: TLSServerConfig | None = None
    http: HTTPServerConfig = field(default_factory=HTTPServerConfig)
    #: username (UTF-8 bytes) -> bcrypt hash; empty: no basic authentication.
    users: Mapping[bytes, PasswordHash] = field(default_factory=dict)

    @property
    def files(self) -> tuple[Path, ...]:
        """The files this config was built from besides itself (watched for changes)."""
        return self.tls.files if self.tls is not None else ()


# --------------------------------------------------------------------------- YAML, safely


class _YAMLRejected(Exception):
    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.mark = mark


class _Loader(yaml.SafeLoader):
    """SafeLoader without aliases (no expansion bombs), with a depth limit (no recursion
    errors) and with duplicate keys refused (the toolkit's yaml.UnmarshalStrict refuses
    them too)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _YAMLRejected("aliases (*name) are not allowed here", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _YAMLRejected(f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: SafeConstructor reports it
                continue
            if duplicate:
                raise _YAMLRejected(f"duplicate key {show(key)}", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def _load_yaml(text: str) -> Any:
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except _YAMLRejected as exc:
        raise WebConfigError([f"{_where(exc.mark)}{exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        # Never str(exc): it quotes the offending line, which may hold a secret.
        raise WebConfigError(
            [f"{_where(exc.problem_mark)}invalid YAML: {str(exc.problem or exc.context)[:200]}"]
        ) from None
    except yaml.YAMLError:
        raise WebConfigError(["invalid YAML"]) from None
    finally:
        loader.dispose()


def _where(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


# --------------------------------------------------------------------------- checking


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)

    def mapping(
        self,
        value: object,
        path: str,
        known: Sequence[str],
        unsupported: Mapping[str, str],
    ) -> dict[str, Any]:
        """The keys of ``value`` that are known and supported; every other one reported."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.add(path, f"must be a mapping, not {_kind(value)}")
            return {}
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path and isinstance(key, str) else str(key)
            if not isinstance(key, str):
                self.add(path, f"keys must be strings, not {_kind(key)}")
            elif key in unsupported:
                self.add(where, f"not supported by specmon: {unsupported[key]}")
            elif key not in known:
                self.add(
                    f"{path}.{show(key)}" if path else show(key),
                    "unknown key" + _hint(key, [*known, *unsupported]),
                )
            else:
                out[key] = item
        return out


def _hint(key: str, known: Sequence[str]) -> str:
    import difflib

    found = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return f" (did you mean {found[0]!r}?)" if found else ""


def _string(problems: _Problems, value: object, path: str) -> str | None:
    if not isinstance(value, str):
        problems.add(path, f"must be a string, not {_kind(value)}")
        return None
    if not value:
        problems.add(path, "must not be empty")
        return None
    return value


def _path(problems: _Problems, value: object, path: str, base_dir: Path) -> Path | None:
    text = _string(problems, value, path)
    if text is None:
        return None
    if "\x00" in text:
        problems.add(path, "must not contain a NUL character")
        return None
    return base_dir / text  # an absolute path replaces base_dir


_E = TypeVar("_E", bound=enum.Enum)


def _enum_value(problems: _Problems, value: object, path: str, kind: type[_E]) -> _E | None:
    if not isinstance(value, str):
        problems.add(path, f"must be a string, not {_kind(value)}")
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(m.value for m in kind)
        problems.add(path, f"{show(value)} is not one of {choices}")
        return None


def _string_list(problems: _Problems, value: object, path: str) -> list[tuple[int, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        problems.add(path, f"must be a list, not {_kind(value)}")
        return []
    out = []
    for index, item in enumerate(value):
        text = _string(problems, item, f"{path}[{index}]")
        if text is not None:
            out.append((index, text))
    return out


_TLS_KEYS = (
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_ca",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "prefer_server_cipher_suites",
)
_TLS_UNSUPPORTED = {
    "cert": "an inline certificate (Python's ssl loads certificates from files): use cert_file",
    "key": "an inline private key (Python's ssl loads keys from files): use key_file",
    "curve_preferences": (
        "Python's ssl module cannot set a list of ECDHE curves; remove it to use "
        "OpenSSL's defaults (X25519, P-256, P-384, ...)"
    ),
}
#: Keys whose presence turns TLS on (the toolkit's TLSConfig.IsEnabled).
_TLS_ENABLING = ("cert_file", "key_file", "client_auth_type", "client_ca_file", "client_ca")


def _check_tls(problems: _Problems, raw: object, base_dir: Path) -> TLSServerConfig | None:
    path = "tls_server_config"
    before = len(problems.items)
    data = problems.mapping(raw, path, _TLS_KEYS, _TLS_UNSUPPORTED)
    if not data and not (isinstance(raw, dict) and raw):
        return None
    if not any(data.get(k) is not None for k in _TLS_ENABLING):
        if data and len(problems.items) == before:
            problems.add(
                path,
                "TLS settings without cert_file and key_file: TLS stays off unless both are "
                "set (remove the section to serve plain HTTP)",
            )
        return None

    cert = key = None
    for name in ("cert_file", "key_file"):
        if data.get(name) is None:
            problems.add(f"{path}.{name}", "required when TLS is configured")
    if data.get("cert_file") is not None:
        cert = _path(problems, data["cert_file"], f"{path}.cert_file", base_dir)
    if data.get("key_file") is not None:
        key = _path(problems, data["key_file"], f"{path}.key_file", base_dir)

    client_auth = ClientAuth.NO_CLIENT_CERT
    raw_auth = data.get("client_auth_type")
    if raw_auth is not None:
        if isinstance(raw_auth, str) and raw_auth in _UNVERIFIED_CLIENT_AUTH:
            problems.add(
                f"{path}.client_auth_type",
                f"{raw_auth} {_UNVERIFIED_CLIENT_AUTH[raw_auth]}, which Python's ssl module "
                "cannot do (it verifies every certificate a client sends): use "
                "RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file",
            )
            client_auth = ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT  # for the checks below
        else:
            found = _enum_value(problems, raw_auth, f"{path}.client_auth_type", ClientAuth)
            client_auth = found or client_auth

    ca_file = None
    if data.get("client_ca_file") is not None:
        ca_file = _path(problems, data["client_ca_file"], f"{path}.client_ca_file", base_dir)
    ca_text = None
    if data.get("client_ca") is not None:
        ca_text = _string(problems, data["client_ca"], f"{path}.client_ca")
        if ca_text is not None and "-----BEGIN CERTIFICATE-----" not in ca_text:
            problems.add(f"{path}.client_ca", "is not a PEM certificate")
            ca_text = None
    has_ca = data.get("client_ca_file") is not None or data.get("client_ca") is not None
    if data.get("client_ca_file") is not None and data.get("client_ca") is not None:
        problems.add(path, "set one of client_ca_file and client_ca, not both")
    if has_ca and client_auth is ClientAuth.NO_CLIENT_CERT:
        problems.add(
            f"{path}.client_auth_type",
            "client CAs are configured but client_auth_type is NoClientCert: set "
            "RequireAndVerifyClientCert (or VerifyClientCertIfGiven)",
        )
    if client_auth is not ClientAuth.NO_CLIENT_CERT and not has_ca:
        problems.add(
            f"{path}.client_ca_file",
            f"required with {client_auth.value}: specmon verifies client certificates "
            "against these CAs only, never the system's",
        )

    sans: list[str] = []
    if data.get("client_allowed_sans") is not None:
        sans = [
            s
            for _, s in _string_list(
                problems, data["client_allowed_sans"], f"{path}.client_allowed_sans"
            )
        ]
        if client_auth is not ClientAuth.REQUIRE_AND_VERIFY_CLIENT_CERT:
            problems.add(
                f"{path}.client_allowed_sans",
                "requires client_auth_type RequireAndVerifyClientCert (with the other types "
                "a client may send no certificate, leaving no SAN to match)",
            )

    versions: dict[str, TLSVersion] = {}
    for name, default in (("min_version", TLSVersion.TLS12), ("max_version", TLSVersion.TLS13)):
        versions[name] = default
        if data.get(name) is not None:
            found_version = _enum_value(problems, data[name], f"{path}.{name}", TLSVersion)
            versions[name] = found_version or default
    if versions["min_version"].rank > versions["max_version"].rank:
        problems.add(
            path,
            f"min_version {versions['min_version'].value} is above max_version "
            f"{versions['max_version'].value}: no TLS version is left",
        )

    suites: list[str] = []
    for index, name in _string_list(problems, data.get("cipher_suites"), f"{path}.cipher_suites"):
        where = f"{path}.cipher_suites[{index}]"
        if name in TLS13_CIPHER_SUITES:
            problems.add(
                where,
                f"{name} is a TLS 1.3 suite; TLS 1.3 suites cannot be chosen (the toolkit "
                "ignores them too): remove it",
            )
        elif name not in CIPHER_SUITES:
            problems.add(
                where,
                f"unknown cipher suite {show(name)} (Go's names, e.g. "
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256; insecure suites are not accepted)",
            )
        elif name in suites:
            problems.add(where, f"{name} is listed twice")
        else:
            suites.append(name)
    if suites and versions["min_version"] is TLSVersion.TLS13:
        problems.add(
            f"{path}.cipher_suites",
            "has no effect with min_version TLS13 (TLS 1.3 suites cannot be chosen)",
        )

    prefer = data.get("prefer_server_cipher_suites", True)
    if prefer is None:
        prefer = True
    if not isinstance(prefer, bool):
        problems.add(
            f"{path}.prefer_server_cipher_suites", f"must be true or false, not {_kind(prefer)}"
        )
        prefer = True

    if len(problems.items) != before or cert is None or key is None:
        return None
    return TLSServerConfig(
        cert_file=cert,
        key_file=key,
        client_auth=client_auth,
        client_ca_file=ca_file,
        client_ca=ca_text,
        client_allowed_sans=tuple(sans),
        min_version=versions["min_version"],
        max_version=versions["max_version"],
        cipher_suites=tuple(suites),
        prefer_server_cipher_suites=prefer,
    )


_HTTP_UNSUPPORTED: Mapping[str, str] = {}


def _check_http(problems: _Problems, raw: object) -> HTTPServerConfig:
    path = "http_server_config"
    data = problems.mapping(raw, path, ("http2", "headers"), _HTTP_UNSUPPORTED)
    http2 = data.get("http2")
    if http2 is not None and not isinstance(http2, bool):
        problems.add(f"{path}.http2", f"must be true or false, not {_kind(http2)}")
    elif http2 is True:
        problems.add(
            f"{path}.http2",
            "HTTP/2 is not supported (specmon serves HTTP/1.1, which clients negotiate through "
            "ALPN): set it to false or remove it",
        )
    headers: list[tuple[str, str]] = []
    raw_headers = data.get("headers")
    if raw_headers is not None and not isinstance(raw_headers, dict):
        problems.add(f"{path}.headers", f"must be a mapping, not {_kind(raw_headers)}")
    elif raw_headers:
        for name, value in raw_headers.items():
            if not isinstance(name, str) or name not in ALLOWED_HEADERS:
                problems.add(
                    f"{path}.headers",
                    f"header {show(name)} can not be configured (allowed: "
                    + ", ".join(ALLOWED_HEADERS)
                    + ")",
                )
                continue
            where = f"{path}.headers.{name}"
            if value is None or value == "":
                continue  # the toolkit: unset if blank
            if not isinstance(value, str):
                problems.add(where, f"must be a string, not {_kind(value)}")
                continue
            allowed = ALLOWED_HEADERS[name]
            if allowed is not None and value not in allowed:
                problems.add(where, f"{show(value)} is not one of " + ", ".join(allowed))
            elif len(value) > MAX_HEADER_VALUE:
                problems.add(where, f"longer than {MAX_HEADER_VALUE} characters")
            elif any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in value):
                problems.add(where, "must not contain control characters (CR, LF, ...)")
            else:
                headers.append((name, value))
    return HTTPServerConfig(headers=tuple(headers))


def _check_users(problems: _Problems, raw: object) -> dict[bytes, PasswordHash]:
    path = "basic_auth_users"
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.add(path, f"must be a mapping of username to bcrypt hash, not {_kind(raw)}")
        return {}
    users: dict[bytes, PasswordHash] = {}
    for name, value in raw.items():
        if not isinstance(name, str):
            problems.add(path, f"usernames must be strings, not {_kind(name)} (quote it)")
            continue
        where = f"{path}[{show(name)}]"
        encoded = name.encode("utf-8", "surrogatepass")
        if not name:
            problems.add(where, "empty username")
        elif ":" in name:
            problems.add(where, "a username cannot contain ':' (HTTP basic authentication)")
        elif len(encoded) > MAX_USERNAME_BYTES:
            problems.add(where, f"longer than {MAX_USERNAME_BYTES} bytes")
        elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            problems.add(where, "must not contain control characters")
        # The value is a secret: described, never quoted.
        if not isinstance(value, str):
            problems.add(where, f"must be a bcrypt hash (a string), not {_kind(value)}")
            continue
        match = _BCRYPT.fullmatch(value)
        if match is None:
            problems.add(
                where,
                "not a bcrypt hash (expected $2y$ or $2b$, a two-digit cost and 53 "
                "characters, as `htpasswd -nBC 10 \"\" | tr -d ':\\n'` prints)",
            )
            continue
        cost = int(match.group(1))
        if not MIN_BCRYPT_COST <= cost <= MAX_BCRYPT_COST:
            problems.add(
                where,
                f"bcrypt cost {cost} is outside {MIN_BCRYPT_COST}..{MAX_BCRYPT_COST} (each step "
                "doubles the time of a check; 10, about 64 ms, is usual)",
            )
            continue
        users[encoded] = PasswordHash(value)
    return users


_TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users")
_TOP_UNSUPPORTED = {
    "rate_limit": (
        "specmon has no request rate limiter; put a reverse proxy in front of it if you need one"
    ),
}


def parse_web_config(text: str, *, source: str, base_dir: Path) -> WebConfig:
    """Validate a web config document; raise :class:`WebConfigError` listing every problem.

    Relative file names are resolved against ``base_dir`` (the config file's directory, as the
    toolkit does). Certificate files are not read here: see :mod:`specmon.web.security`.
    """
    try:
        raw = _load_yaml(text)
    except WebConfigError as exc:
        raise WebConfigError(exc.problems, source=source) from None
    problems = _Problems()
    if raw is not None and not isinstance(raw, dict):
        problems.add("", f"the file must be a mapping (tls_server_config:, ...), not {_kind(raw)}")
        raise WebConfigError(problems.items, source=source)
    top = problems.mapping(raw, "", _TOP_KEYS, _TOP_UNSUPPORTED)
    tls = _check_tls(problems, top.get("tls_server_config"), base_dir)
    http = _check_http(problems, top.get("http_server_config"))
    users = _check_users(problems, top.get("basic_auth_users"))
    if problems.items:
        error = WebConfigError(problems.items, source=source)
        error.tls = tls
        raise error
    return WebConfig(source=source, tls=tls, http=http, users=users)


def read_web_config(path: Path) -> WebConfig:
    """Read and parse ``path`` (at most :data:`MAX_WEB_CONFIG_BYTES`)."""
    source = str(path)
    try:
        data = files.read_capped(path, max_bytes=MAX_WEB_CONFIG_BYTES)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            problem = f"larger than {MAX_WEB_CONFIG_BYTES // 1024} KiB: not a web config"
        elif files.refused(exc):
            problem = f"the file is {exc.strerror}"
        else:
            problem = f"cannot read the file: {exc.strerror or type(exc).__name__}"
        raise WebConfigError([problem], source=source) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WebConfigError(["the file is not UTF-8 text"], source=source) from None
    return parse_web_config(text, source=source, base_dir=path.parent)
