"""How a webhook is signed: the Standard Webhooks scheme (www.standardwebhooks.com),
so receivers can use its libraries.

Each delivery carries ``webhook-id`` (the run id: the idempotency key, the same on
every retry; also sent as ``Idempotency-Key``), ``webhook-timestamp`` (Unix seconds
of this attempt) and ``webhook-signature``: ``v1,<base64 HMAC-SHA256>`` of
``"{id}.{timestamp}.{body}"`` under each secret of the deployment's secret file,
space separated. With two secrets in the file (the new one and the old one) every
receiver accepts while they switch over: that is how the secret is rotated.

The secret file holds one secret a line: ``whsec_`` and base64 (Standard Webhooks'
form; `turnkeeper`'s docs show how to make one), or any other line taken as its
bytes. Blank lines and ``#`` comments are skipped. It is read again when it changes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from pathlib import Path

PREFIX = "whsec_"
MIN_SECRET_BYTES = 16


def parse_secrets(text: str, where: str) -> tuple[bytes, ...]:
    secrets: list[bytes] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(PREFIX):
            try:
                secret = base64.b64decode(line[len(PREFIX) :], validate=True)
            except binascii.Error:
                raise ValueError(
                    f"{where} line {number}: whsec_ is not followed by base64"
                ) from None
        else:
            secret = line.encode()
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(
                f"{where} line {number}: a webhook secret needs at least {MIN_SECRET_BYTES} bytes"
            )
        secrets.append(secret)
    if not secrets:
        raise ValueError(f"{where} holds no webhook secret")
    return tuple(secrets)


def signature(secrets: tuple[bytes, ...], msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(secret, signed, hashlib.sha256).digest()).decode()
        for secret in secrets
    )


def headers(secrets: tuple[bytes, ...], msg_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "Idempotency-Key": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(secrets, msg_id, timestamp, body),
    }


class SecretFile:
    """The deployment's webhook secrets, read again when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int] | None = None
        self._secrets: tuple[bytes, ...] = ()
        self.current()  # a missing or bad file fails the start, not a delivery

    def current(self) -> tuple[bytes, ...]:
        try:
            st = os.stat(self.path)
            seen = (st.st_mtime_ns, st.st_size)
            if seen != self._seen:
                self._secrets = parse_secrets(self.path.read_text(), str(self.path))
                self._seen = seen
        except OSError as exc:
            raise ValueError(f"--webhook-secret-file {self.path}: {exc.strerror}") from None
        return self._secrets
