"""Test certificates, made per test with ``cryptography`` (no private key is checked in).

:func:`make_pki` writes into a directory: a server CA and a server certificate for localhost,
127.0.0.1 and ::1; a client CA with two client certificates (SANs ``prometheus`` and
``someone-else``); and a client certificate from an unrelated CA (``rogue``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "bcrypt_hash", "make_pki"]


def bcrypt_hash(password: str, *, cost: int = 4, prefix: str = "$2y$") -> str:
    """A bcrypt hash as htpasswd writes it ($2y$). Cost 4 keeps tests fast."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=cost)).decode()
    return prefix + hashed[4:]


@dataclass(frozen=True)
class Pki:
    root: Path
    server_ca: Path
    server_cert: Path
    server_key: Path
    client_ca: Path
    client_cert: Path  # SAN: DNS prometheus
    client_key: Path
    other_client_cert: Path  # same CA, SAN: DNS someone-else
    other_client_key: Path
    rogue_cert: Path  # a client certificate from another CA
    rogue_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    common_name: str,
    sans: list[x509.GeneralName],
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    *,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(root: Path) -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    server_ca = _ca("specmon test server CA")
    client_ca = _ca("specmon test client CA")
    rogue_ca = _ca("someone else's CA")
    server = _leaf(
        "localhost",
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ],
        server_ca,
        server=True,
    )
    client = _leaf("prometheus", [x509.DNSName("prometheus")], client_ca, server=False)
    other = _leaf("someone-else", [x509.DNSName("someone-else")], client_ca, server=False)
    rogue = _leaf("prometheus", [x509.DNSName("prometheus")], rogue_ca, server=False)
    paths = Pki(
        root=root,
        server_ca=root / "server-ca.crt",
        server_cert=root / "server.crt",
        server_key=root / "server.key",
        client_ca=root / "client-ca.crt",
        client_cert=root / "client.crt",
        client_key=root / "client.key",
        other_client_cert=root / "other-client.crt",
        other_client_key=root / "other-client.key",
        rogue_cert=root / "rogue.crt",
        rogue_key=root / "rogue.key",
    )
    paths.server_ca.write_bytes(_pem(server_ca[0]))
    paths.server_cert.write_bytes(_pem(server[0]))
    _write_key(server[1], paths.server_key)
    paths.client_ca.write_bytes(_pem(client_ca[0]))
    paths.client_cert.write_bytes(_pem(client[0]))
    _write_key(client[1], paths.client_key)
    paths.other_client_cert.write_bytes(_pem(other[0]))
    _write_key(other[1], paths.other_client_key)
    paths.rogue_cert.write_bytes(_pem(rogue[0]))
    _write_key(rogue[1], paths.rogue_key)
    return paths
