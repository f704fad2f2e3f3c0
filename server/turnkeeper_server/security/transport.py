"""Transport security: TLS and mTLS credentials, and the rule about exposed ports.

- `--tls-cert` and `--tls-key` (PEM; env TURNKEEPER_TLS_CERT, TURNKEEPER_TLS_KEY) serve
  TLS. `--tls-client-ca` (env TURNKEEPER_TLS_CLIENT_CA) adds mutual TLS: a client
  must present a certificate signed by that CA, or the handshake fails.
- The service refuses to listen on a non-loopback address unless it has both TLS
  and authentication (bearer tokens, `auth.py`, or client certificates through
  mTLS). `--insecure` (env TURNKEEPER_INSECURE=1) overrides that, and the service
  then logs a WARNING at every start.
- The Prometheus port (`--metrics-listen`) has neither, ever: beyond loopback it
  needs `--insecure` too (`check_plain_exposure`, decision 186).

Loopback and Unix-socket listeners are exempt: only processes on the host reach them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from pathlib import Path
from typing import Protocol

import grpc

log = logging.getLogger(__name__)


class TransportSettings(Protocol):
    """What the transport rules read of the service's settings (config.Settings
    has them all; the settings live above this floor, so they are named here)."""

    @property
    def listen(self) -> str: ...

    @property
    def insecure(self) -> bool: ...

    @property
    def tls_cert(self) -> Path | None: ...

    @property
    def tls_key(self) -> Path | None: ...

    @property
    def tls_client_ca(self) -> Path | None: ...


class InsecureListen(RuntimeError):
    """The listen address is reachable from the network but the server is not secured."""


def listen_host(listen: str) -> str:
    """The host part of a gRPC listen address ("[::1]:50051" -> "::1")."""
    host = listen.rpartition(":")[0] if ":" in listen else listen
    return host.strip("[]")


def is_loopback(listen: str) -> bool:
    """True when only this host can reach `listen`. Names other than localhost are
    resolved; anything that does not resolve to loopback addresses only is exposed."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen_host(listen)
    if not host:  # ":50051": every interface
        return False
    if host == "localhost":
        return True
    with contextlib.suppress(ValueError):  # not an IP literal: resolve the name below
        return ipaddress.ip_address(host).is_loopback
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%")[0]).is_loopback for a in addresses
    )


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the TLS {what} {path}: {exc}") from None


def check_tls_settings(settings: TransportSettings) -> None:
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together: give both or neither")
    if settings.tls_client_ca is not None and settings.tls_cert is None:
        raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")


def server_credentials(settings: TransportSettings) -> grpc.ServerCredentials | None:
    """TLS credentials from the settings' PEM files, or None for plaintext."""
    check_tls_settings(settings)
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    cert = _read(settings.tls_cert, "certificate")
    key = _read(settings.tls_key, "key")
    client_ca = None
    if settings.tls_client_ca is not None:
        client_ca = _read(settings.tls_client_ca, "client CA")
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        # With a client CA every client must present a certificate it signed.
        require_client_auth=client_ca is not None,
    )


def check_exposure(settings: TransportSettings, *, tokens: bool, listen: str | None = None) -> None:
    """Refuse an exposed listener without TLS and authentication, unless insecure.

    `tokens`: bearer-token authentication is on; `listen`: the address, when not
    the settings' gRPC one (the HTTP port's). Raises InsecureListen.
    """
    check_tls_settings(settings)
    listen = settings.listen if listen is None else listen
    if is_loopback(listen):
        return
    missing = []
    if settings.tls_cert is None:
        missing.append("TLS (--tls-cert and --tls-key)")
    if not tokens and settings.tls_client_ca is None:
        missing.append("authentication (--tokens-file, or --tls-client-ca for mutual TLS)")
    if not missing:
        return
    what = " and ".join(missing)
    if not settings.insecure:
        raise InsecureListen(
            f"refusing to listen on {listen} without {what}: that address is "
            "reachable from the network, and anyone who reaches it could read and change "
            "every turn and checkpoint. Configure them, listen on 127.0.0.1, or pass "
            "--insecure (env TURNKEEPER_INSECURE=1) to serve it this way anyway."
        )
    log.warning(
        "INSECURE: listening on %s without %s because --insecure was given: anyone who "
        "can reach this port can read and change every turn and checkpoint",
        listen,
        what,
    )


def check_plain_exposure(settings: TransportSettings, listen: str, what: str, flag: str) -> None:
    """Refuse a port that serves neither TLS nor authentication (`what`, set by
    `flag`) beyond loopback, unless insecure, which logs a WARNING. Raises
    InsecureListen."""
    if is_loopback(listen):
        return
    if not settings.insecure:
        raise InsecureListen(
            f"refusing to serve {what} on {listen}: that port has no TLS and no "
            "authentication, and that address is reachable from the network, so anyone "
            f"who reaches it could read it. Give {flag} a loopback address (127.0.0.1:PORT) "
            f"and scrape it there or through a proxy, leave {flag} unset, or pass "
            "--insecure (env TURNKEEPER_INSECURE=1) to serve it this way anyway."
        )
    log.warning(
        "INSECURE: serving %s on %s without TLS and authentication because --insecure "
        "was given: anyone who can reach this port can read it",
        what,
        listen,
    )
