"""TLS and basic authentication for specmon's own HTTP server.

- :func:`build_ssl_context`: a :class:`~specmon.web.config.TLSServerConfig` -> a server
  ``ssl.SSLContext``, every problem with the files listed at once.
- :class:`ReloadableSSLContext`: the context the listening socket keeps; each new handshake
  uses whichever context was installed last, so a certificate renewed on disk is served
  without a restart and without dropping connections.
- :class:`BasicAuth`: bcrypt checks off the event loop, one at a time, with successful checks
  cached (as exporter-toolkit does) so that a scrape does not pay bcrypt's cost every time.
- :func:`allowed_peer`: ``client_allowed_sans`` against a verified client certificate.
- aiohttp middlewares that apply them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import enum
import errno
import hashlib
import ipaddress
import ssl
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import bcrypt
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from specmon import files
from specmon.web.config import (
    CIPHER_SUITES,
    ClientAuth,
    PasswordHash,
    TLSServerConfig,
    WebConfigError,
)

__all__ = [
    "MAX_PEM_BYTES",
    "AuthResult",
    "BasicAuth",
    "ReloadableSSLContext",
    "allowed_peer",
    "auth_middleware",
    "build_ssl_context",
    "headers_middleware",
]

#: Certificates, keys and CA bundles are a few KiB; a larger file is not one.
MAX_PEM_BYTES = 1024 * 1024


# --------------------------------------------------------------------------- TLS


def _read(problems: list[str], path: Path, key: str) -> bytes | None:
    try:
        return files.read_capped(path, max_bytes=MAX_PEM_BYTES)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            problems.append(
                f"tls_server_config.{key}: {path} is larger than {MAX_PEM_BYTES // 1024} KiB"
            )
        else:
            problems.append(f"tls_server_config.{key}: cannot read {path}: {exc.strerror or exc}")
        return None


def _no_password() -> bytes:
    # load_cert_chain would otherwise prompt on the terminal for an encrypted key's password.
    return b""


def build_ssl_context(tls: TLSServerConfig, *, source: str = "") -> ssl.SSLContext:
    """A server context for ``tls``; raise :class:`WebConfigError` naming every problem."""
    problems: list[str] = []
    cert = _read(problems, tls.cert_file, "cert_file")
    if cert is not None and b"-----BEGIN CERTIFICATE-----" not in cert:
        problems.append(f"tls_server_config.cert_file: {tls.cert_file} holds no PEM certificate")
        cert = None
    key = _read(problems, tls.key_file, "key_file")
    if key is not None:
        if b"ENCRYPTED" in key:
            problems.append(
                f"tls_server_config.key_file: {tls.key_file} is encrypted; specmon needs an "
                "unencrypted key (protect the file with its permissions instead)"
            )
            key = None
        elif b"PRIVATE KEY-----" not in key:
            problems.append(f"tls_server_config.key_file: {tls.key_file} holds no PEM private key")
            key = None

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        # TLS 1.0 and 1.1 are deprecated in Python; the toolkit still accepts them.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = tls.min_version.ssl_version
        context.maximum_version = tls.max_version.ssl_version
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    context.set_alpn_protocols(["http/1.1"])
    if tls.cipher_suites:
        try:
            context.set_ciphers(":".join(CIPHER_SUITES[name] for name in tls.cipher_suites))
        except ssl.SSLError:
            problems.append(
                "tls_server_config.cipher_suites: this OpenSSL supports none of the suites listed"
            )

    if cert is not None and key is not None:
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_password)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                problems.append(
                    "tls_server_config: key_file is not the private key of cert_file's certificate"
                )
            else:
                problems.append(
                    "tls_server_config: cannot load cert_file and key_file: "
                    + str(exc.reason or exc.strerror or "invalid PEM")
                )
        except OSError as exc:
            problems.append(f"tls_server_config: cannot load cert_file and key_file: {exc}")

    if tls.client_auth is not ClientAuth.NO_CLIENT_CERT:
        context.verify_mode = tls.client_auth.verify_mode
        try:
            if tls.client_ca_file is not None:
                data = _read(problems, tls.client_ca_file, "client_ca_file")
                if data is not None and b"-----BEGIN CERTIFICATE-----" not in data:
                    problems.append(
                        f"tls_server_config.client_ca_file: {tls.client_ca_file} holds no PEM "
                        "certificate"
                    )
                elif data is not None:
                    context.load_verify_locations(cadata=data.decode("ascii", "replace"))
            elif tls.client_ca is not None:
                context.load_verify_locations(cadata=tls.client_ca)
        except ssl.SSLError as exc:
            which = "client_ca_file" if tls.client_ca_file is not None else "client_ca"
            problems.append(
                f"tls_server_config.{which}: cannot load the CA certificates: "
                + str(exc.reason or exc.strerror or "invalid PEM")
            )
    if problems:
        raise WebConfigError(problems, source=source)
    return context


class ReloadableSSLContext(ssl.SSLContext):
    """The listening socket's context: it hands every new connection to the current one.

    asyncio creates each server-side TLS connection with ``context.wrap_bio(...)``; this
    context forwards that call to the context installed last, whose certificate, client CAs,
    versions and ciphers then apply to that connection. Connections already open keep theirs.
    """

    _current: ssl.SSLContext

    def __new__(cls, current: ssl.SSLContext) -> ReloadableSSLContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_SERVER)

    def __init__(self, current: ssl.SSLContext) -> None:
        self._current = current

    @property
    def current(self) -> ssl.SSLContext:
        return self._current

    def install(self, context: ssl.SSLContext) -> None:
        self._current = context

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self._current.wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
        )

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        return self._current.wrap_socket(*args, **kwargs)


def _normalise_san(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return value


def allowed_peer(peercert: Mapping[str, Any] | None, allowed: Iterable[str]) -> bool:
    """True when the verified peer certificate has a SAN (DNS, IP, email or URI) in
    ``allowed``, compared exactly (IP addresses in canonical form)."""
    if not peercert:
        return False
    wanted = {_normalise_san(a) for a in allowed}
    for _kind, value in peercert.get("subjectAltName", ()):
        if isinstance(value, str) and _normalise_san(value) in wanted:
            return True
    return False


# --------------------------------------------------------------------------- basic auth


class AuthResult(enum.Enum):
    OK = "ok"
    MISSING = "missing"  # no or malformed Authorization header
    WRONG = "wrong"  # unknown user or wrong password
    BUSY = "busy"  # too many uncached checks waiting


class BasicAuth:
    """HTTP basic authentication against bcrypt hashes, as exporter-toolkit does it.

    - A bcrypt check runs in ``executor`` (give it one worker: checks then run one at a time,
      as the toolkit's mutex makes them, and never on the event loop).
    - Successful checks are cached, keyed by a SHA-256 of user, hash and password (the
      plaintext is not kept); failed ones are not, so wrong guesses cannot evict the
      scraper's entry. Each entry belongs to one hash: a changed hash is checked again.
    - An unknown user is checked against a dummy hash of the usual cost, so a response's
      timing does not tell which usernames exist.
    - At most ``max_pending`` uncached checks wait at a time; more get :attr:`AuthResult.BUSY`.
    """

    def __init__(
        self,
        users: Mapping[bytes, PasswordHash],
        *,
        executor: Executor,
        max_pending: int = 16,
        cache_size: int = 128,
    ) -> None:
        self._users = dict(users)
        self._executor = executor
        self._max_pending = max_pending
        self._cache_size = cache_size
        self._cache: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._pending = 0
        costs = collections.Counter(h.cost for h in self._users.values())
        cost = costs.most_common(1)[0][0] if costs else 10
        # A syntactically valid hash that no password matches.
        self._dummy = bcrypt.gensalt(rounds=cost) + b"." * 31

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    @staticmethod
    def credentials(header: str | None) -> tuple[bytes, bytes] | None:
        """``Basic base64(user:password)`` -> (user, password) as bytes; None if malformed."""
        if not header:
            return None
        scheme, _, param = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(param.strip(), validate=True)
        except (binascii.Error, ValueError):
            return None
        user, sep, password = decoded.partition(b":")
        if not sep:
            return None
        return user, password

    def _key(self, user: bytes, hashed: bytes, password: bytes) -> bytes:
        return hashlib.sha256(
            len(user).to_bytes(4, "big") + user + len(hashed).to_bytes(4, "big") + hashed + password
        ).digest()

    async def check(self, header: str | None) -> AuthResult:
        found = self.credentials(header)
        if found is None:
            return AuthResult.MISSING
        user, password = found
        known = self._users.get(user)
        hashed = known.reveal() if known is not None else self._dummy
        key = self._key(user, hashed, password)
        if known is not None and key in self._cache:
            self._cache.move_to_end(key)
            return AuthResult.OK
        if len(password) > 72:  # bcrypt's limit; Go's bcrypt refuses these too
            return AuthResult.WRONG
        if self._pending >= self._max_pending:
            return AuthResult.BUSY
        self._pending += 1
        try:
            loop = asyncio.get_running_loop()
            matches = await loop.run_in_executor(self._executor, _checkpw, password, hashed)
        finally:
            self._pending -= 1
        if not (matches and known is not None):
            return AuthResult.WRONG
        self._cache[key] = None
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return AuthResult.OK


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:
        return False


def auth_middleware(
    current: Callable[[], BasicAuth | None],
    *,
    exempt: frozenset[str],
    on_reject: Callable[[str], None],
) -> Middleware:
    """401 with ``WWW-Authenticate: Basic`` unless the request carries a configured user's
    password. ``exempt`` paths (the probes) are served without it."""

    @web.middleware
    async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        auth = current()
        if auth is None or not auth.enabled or request.path in exempt:
            return await handler(request)
        result = await auth.check(request.headers.get("Authorization"))
        if result is AuthResult.OK:
            return await handler(request)
        if result is AuthResult.BUSY:
            on_reject("auth_busy")
            raise web.HTTPServiceUnavailable(
                text="Too many authentication checks in progress.\n",
                headers={"Retry-After": "1"},
            )
        on_reject("unauthorized")
        raise web.HTTPUnauthorized(text="Unauthorized\n", headers={"WWW-Authenticate": "Basic"})

    return basic_auth


def headers_middleware(current: Callable[[], tuple[tuple[str, str], ...]]) -> Middleware:
    """http_server_config.headers on every response, errors and 401s included."""

    @web.middleware
    async def extra_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = current()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            for name, value in headers:
                exc.headers[name] = value
            raise
        for name, value in headers:
            response.headers[name] = value
        return response

    return extra_headers
