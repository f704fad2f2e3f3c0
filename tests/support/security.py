"""Certificates (made with `cryptography`, in the test) and tokens files for the
security tests."""

from __future__ import annotations

import datetime
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from grpc import aio
from turnkeeper_server.security.auth import token_hash

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key.read_bytes()


def _write(directory: Path, name: str, cert: x509.Certificate, key: Key) -> Issued:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return Issued(cert_path, key_path)


class CertificateAuthority:
    """A throwaway CA that issues server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "turnkeeper-test-ca") -> None:
        self.directory = directory
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
            .sign(self._key, hashes.SHA256())
        )
        self.files = _write(directory, name, self._cert, self._key)

    @property
    def pem(self) -> bytes:
        return self.files.cert_pem

    def issue(self, name: str, *, server: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        return _write(self.directory, f"{self.name}-{name}", cert, key)


ROLE_TOKENS = {
    "alpha": "agent:alpha",
    "beta": "agent:beta",
    "panel": "panel",
    "operator": "operator",
    "admin": "admin",
}


def write_tokens(path: Path, names_to_roles: Mapping[str, str] = ROLE_TOKENS) -> dict[str, str]:
    """A tokens file (hashes only) for these names; returns name -> token."""
    tokens = {name: f"tk-{name}-{token_hash(name)[:24]}" for name in names_to_roles}
    lines = ["# test tokens: sha256 of each token, never the token"]
    for name, role in names_to_roles.items():
        lines.append(json.dumps({"sha256": token_hash(tokens[name]), "role": role, "name": name}))
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return tokens


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


class _Bearer:
    def __init__(self, token: str) -> None:
        self.metadata = bearer(token)

    def _with_token(self, details: Any) -> Any:
        return details._replace(metadata=(*(details.metadata or ()), *self.metadata))


class _UnaryUnary(_Bearer, aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_token(details), request)


class _UnaryStream(_Bearer, aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._with_token(details), request)


class _StreamUnary(_Bearer, aio.StreamUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._with_token(details), requests)


class _StreamStream(_Bearer, aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(self._with_token(details), requests)


def bearer_interceptors(token: str) -> list[Any]:
    """`authorization: Bearer <token>` on every call of a raw aio channel's stubs: one
    interceptor per kind of call (grpc.aio files each under one kind only)."""
    return [kind(token) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)]
