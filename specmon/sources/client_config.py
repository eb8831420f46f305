"""What an HTTP client sends besides its URL, one record and one checker for directly scraped
targets and for Prometheus sources alike.

```yaml
headers: {X-Scope-OrgID: team-a}               # values are secrets
bearer_token_file: /var/run/secrets/token      # or bearer_token_env: NAME; or basic_auth
basic_auth: {username: u, password_file: pw}   # or password_env: NAME
tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: false}
```

Secrets live in :class:`~specmon.secrets.Secret`. Token and password *files* are checked when
the configuration is loaded and read again on every request (Kubernetes rotates projected
service-account tokens); environment values are read once. The TLS files are checked at load
and made into an SSL context on first use, once per loaded configuration (a reload picks up
renewed certificates).
"""

from __future__ import annotations

import base64
import os
import re
import ssl
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon import files
from specmon.config_values import Checker, check_bool, join_path, kind_of
from specmon.secrets import Secret

__all__ = [
    "CLIENT_KEYS",
    "BasicAuth",
    "ClientConfig",
    "Credentials",
    "FileChecker",
    "TLSConfig",
    "build_ssl_context",
    "check_client",
    "check_headers",
    "read_secret_file",
]

#: An HTTP header name (RFC 9110's token), bounded.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
#: Certificates, keys and CA bundles are a few KiB; a larger file is not one.
MAX_TLS_FILE_BYTES = 1024 * 1024
#: The keys of a config block that configure its HTTP client.
CLIENT_KEYS = ("headers", "bearer_token_env", "bearer_token_file", "basic_auth", "tls")
#: Where the Authorization header comes from, said wherever one is set another way.
_AUTH_HINT = "use bearer_token_env, bearer_token_file or basic_auth for Authorization"


@dataclass(frozen=True, slots=True)
class BasicAuth:
    username: str
    #: From ``password_env`` (read once) ...
    password: Secret | None = None
    #: ... or ``password_file`` (read on every request).
    password_file: Path | None = None


@dataclass(frozen=True, slots=True)
class TLSConfig:
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    insecure_skip_verify: bool = False


@dataclass(frozen=True, slots=True)
class Credentials:
    """What one request sends: its headers, and every secret value in them (to redact from
    whatever the server answers)."""

    headers: dict[str, str]
    secrets: list[str]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    headers: Mapping[str, Secret] = field(default_factory=dict)
    #: From ``bearer_token_env`` (read once) ...
    bearer_token: Secret | None = None
    #: ... or ``bearer_token_file`` (read on every request).
    bearer_token_file: Path | None = None
    basic_auth: BasicAuth | None = None
    tls: TLSConfig | None = None
    #: The SSL context, built on first use (a one-element list: the record is frozen).
    _context: list[ssl.SSLContext | None] = field(
        default_factory=list, init=False, compare=False, repr=False
    )

    @property
    def sends_credentials(self) -> bool:
        return (
            bool(self.headers)
            or self.bearer_token is not None
            or (self.bearer_token_file is not None or self.basic_auth is not None)
        )

    def credentials(self) -> Credentials:
        """The headers to send now, with token and password files read now. Raises OSError
        when a file cannot be used (its message names the file, never its content)."""
        out = Credentials(headers={}, secrets=[])
        for name, value in self.headers.items():
            out.headers[name] = value.reveal()
            out.secrets.append(value.reveal())
        token: str | None = None
        if self.bearer_token is not None:
            token = self.bearer_token.reveal()
        elif self.bearer_token_file is not None:
            token = read_secret_file(self.bearer_token_file)
        if token is not None:
            out.headers["Authorization"] = f"Bearer {token}"
            out.secrets.append(token)
        auth = self.basic_auth
        if auth is not None:
            if auth.password is not None:
                password = auth.password.reveal()
            else:
                assert auth.password_file is not None
                password = read_secret_file(auth.password_file)
            pair = base64.b64encode(f"{auth.username}:{password}".encode()).decode("ascii")
            out.headers["Authorization"] = f"Basic {pair}"
            out.secrets.extend([password, pair])
        return out

    def secrets(self) -> list[Secret]:
        """The secrets known without reading a file: redacted from whatever a server says."""
        found = list(self.headers.values())
        if self.bearer_token is not None:
            found.append(self.bearer_token)
        if self.basic_auth is not None and self.basic_auth.password is not None:
            found.append(self.basic_auth.password)
        return found

    def ssl_context(self) -> ssl.SSLContext | None:
        """The SSL context for ``tls`` (None: the default verification), built once. Raises
        OSError or ssl.SSLError when the files no longer make one (they did at load)."""
        if not self._context:
            self._context.append(build_ssl_context(self.tls))
        return self._context[0]


def secret_problem(value: str) -> str | None:
    """Why a token or password (stripped) cannot be sent in a header, or None: empty, or
    holding a control character (a line break or carriage return inside it, a NUL, ...),
    which would end the header or be refused by the HTTP client with an error that quotes
    it."""
    if not value:
        return "it is empty"
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        return (
            f"it holds a control character ({_CONTROL.get(bad, f'U+{ord(bad):04X}')}) inside "
            "the value: a token or password is one line of printable text"
        )
    return None


_CONTROL = {"\r": "a carriage return", "\n": "a line break", "\t": "a tab", "\0": "a NUL"}


def read_secret_file(path: os.PathLike[str]) -> str:
    """A token or password file's stripped text. Raises OSError (naming the file, never its
    content) when it is unreadable, not UTF-8, too large, empty or holds a control
    character (:func:`secret_problem`)."""
    try:
        value = files.read_text_capped(path, max_bytes=files.MAX_SECRET_BYTES).strip()
    except UnicodeDecodeError:
        raise OSError(0, "the file is not UTF-8 text", str(path)) from None
    problem = secret_problem(value)
    if problem is not None:
        raise OSError(0, problem.replace("it is", "the file is", 1), str(path))
    return value


def build_ssl_context(tls: TLSConfig | None) -> ssl.SSLContext | None:
    """An SSL context for ``tls`` (None: the default verification). Raises OSError or
    ssl.SSLError for unreadable or invalid files."""
    if tls is None:
        return None
    context = ssl.create_default_context(
        cafile=str(tls.ca_file) if tls.ca_file is not None else None
    )
    if tls.cert_file is not None:
        context.load_cert_chain(
            str(tls.cert_file), str(tls.key_file) if tls.key_file is not None else None
        )
    if tls.insecure_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def ssl_reason(exc: OSError | ssl.SSLError) -> str:
    """Why an SSL context could not be built: the ssl module's messages name the failing
    step, not the file contents."""
    return str(getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc)


# --------------------------------------------------------------------------- validation


class FileChecker(Checker):
    """The problem list, plus files resolved against the config file's folder and secrets
    read from the daemon's environment."""

    def __init__(self, base_dir: Path, environ: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.base_dir = base_dir
        self.environ: Mapping[str, str] = {} if environ is None else environ

    def readable_file(self, value: Any, path: str, *, secret: bool) -> Path | None:
        if not isinstance(value, str) or not value:
            self.add(path, "must be a file path")
            return None
        file = self.base_dir / value
        try:
            limit = files.MAX_SECRET_BYTES if secret else MAX_TLS_FILE_BYTES
            text = files.read_text_capped(file, max_bytes=limit)
        except OSError as exc:
            self.add(path, f"cannot read {file}: {exc.strerror or exc}")
            return None
        except UnicodeDecodeError:
            self.add(path, f"{file} is not UTF-8 text")
            return None
        problem = secret_problem(text.strip()) if secret else None
        if problem is not None:
            self.add(path, f"{file} is empty" if not text.strip() else f"{file}: {problem}")
            return None
        return file

    def env_secret(self, value: Any, path: str) -> Secret | None:
        if not isinstance(value, str) or not value:
            self.add(path, "must be the name of an environment variable")
            return None
        secret = self.environ.get(value)
        if not secret or not secret.strip():
            self.add(path, f"environment variable {value} is not set or empty")
            return None
        problem = secret_problem(secret.strip())
        if problem is not None:
            self.add(path, f"environment variable {value}: {problem}")
            return None
        return Secret(secret.strip())


def check_client(
    checker: FileChecker, data: Mapping[str, Any], path: str, *, url: str, reserved: Collection[str]
) -> ClientConfig:
    """The :data:`CLIENT_KEYS` of a checked block (``data``, at ``path``): at most one way to
    authenticate, readable secret files, usable TLS files, and none of the ``reserved``
    header names (lower case), which specmon sets itself. Problems go to ``checker``."""
    headers = check_headers(
        checker, data.get("headers"), join_path(path, "headers"), reserved=reserved
    )
    auth_kinds = [k for k in ("bearer_token_env", "bearer_token_file", "basic_auth") if k in data]
    if len(auth_kinds) > 1:
        checker.add(path, f"set one of {', '.join(auth_kinds)}, not several")
    env_name, file_name = data.get("bearer_token_env"), data.get("bearer_token_file")
    bearer_token = (
        checker.env_secret(env_name, join_path(path, "bearer_token_env"))
        if env_name is not None
        else None
    )
    bearer_token_file = (
        checker.readable_file(file_name, join_path(path, "bearer_token_file"), secret=True)
        if file_name is not None
        else None
    )
    basic_auth = _check_basic_auth(checker, data.get("basic_auth"), join_path(path, "basic_auth"))
    tls = _check_tls(checker, data.get("tls"), join_path(path, "tls"))
    if tls is not None and url.startswith("http://"):
        checker.add(join_path(path, "tls"), "set for an http:// URL (use https:// or drop tls)")
    return ClientConfig(
        headers=headers,
        bearer_token=bearer_token,
        bearer_token_file=bearer_token_file,
        basic_auth=basic_auth,
        tls=tls,
    )


def check_headers(
    checker: Checker, value: Any, path: str, *, reserved: Collection[str]
) -> dict[str, Secret]:
    """Extra request headers: names that are tokens, single-line values kept as secrets (a
    value is never echoed in a problem), none of the ``reserved`` names (lower case)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        checker.add(path, f"must be a mapping of header names to strings, not {kind_of(value)}")
        return {}
    headers: dict[str, Secret] = {}
    for key, item in value.items():
        where = join_path(path, str(key))
        if not isinstance(key, str) or not HEADER_NAME.match(key):
            checker.add(where, "invalid header name")
        elif key.lower() in reserved:
            checker.add(
                where,
                _AUTH_HINT if key.lower() == "authorization" else "set by specmon itself",
            )
        elif not isinstance(item, str) or "\n" in item or "\r" in item:
            checker.add(where, "header values must be single-line strings")
        else:
            headers[key] = Secret(item)
    return headers


def _nonempty_str(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _check_basic_auth(checker: FileChecker, value: Any, path: str) -> BasicAuth | None:
    if value is None:
        return None
    data = checker.mapping(value, path, ("username", "password_file", "password_env"))
    if data is None:
        return None
    username = checker.get(data, "username", path, _nonempty_str, None)
    if "username" not in data:
        checker.add(join_path(path, "username"), "is required")
    if ":" in (username or ""):
        checker.add(join_path(path, "username"), "must not contain ':'")
        username = None
    has_file, has_env = "password_file" in data, "password_env" in data
    if has_file == has_env:
        checker.add(path, "set password_file or password_env (exactly one)")
        return None
    if has_file:
        file = checker.readable_file(
            data["password_file"], join_path(path, "password_file"), secret=True
        )
        if username is None or file is None:
            return None
        return BasicAuth(username=username, password_file=file)
    password = checker.env_secret(data["password_env"], join_path(path, "password_env"))
    if username is None or password is None:
        return None
    return BasicAuth(username=username, password=password)


def _check_tls(checker: FileChecker, value: Any, path: str) -> TLSConfig | None:
    if value is None:
        return None
    keys = ("ca_file", "cert_file", "key_file", "insecure_skip_verify")
    data = checker.mapping(value, path, keys)
    if data is None:
        return None
    before = len(checker.problems)
    found: dict[str, Path | None] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        found[key] = (
            checker.readable_file(data[key], join_path(path, key), secret=False)
            if data.get(key) is not None
            else None
        )
    if ("key_file" in data) != ("cert_file" in data):
        checker.add(path, "cert_file and key_file go together")
    tls = TLSConfig(
        ca_file=found["ca_file"],
        cert_file=found["cert_file"],
        key_file=found["key_file"],
        insecure_skip_verify=checker.get(data, "insecure_skip_verify", path, check_bool, False),
    )
    if len(checker.problems) != before:
        return None
    try:
        build_ssl_context(tls)
    except (OSError, ssl.SSLError) as exc:
        checker.add(path, f"cannot use these files: {ssl_reason(exc)}")
        return None
    return tls
