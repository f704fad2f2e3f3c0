"""NATS over mutual TLS: the options beside the URL (turnkeeper._nats_auth).

A real nats-server requiring TLS and client certificates (a test CA made with
`cryptography`); the service's NATS link connects with the CA and a client
certificate given as settings, a bridge reads the same from its environment, and a
connection without them is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from turnkeeper._nats_auth import NatsAuth
from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper_server.messaging.embedded import EmbeddedNats

from tests.support.security import CertificateAuthority, Issued
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pki(tmp_path: Path) -> tuple[CertificateAuthority, Issued, Issued]:
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = CertificateAuthority(directory, "nats-ca")
    return ca, ca.issue("nats-server", server=True), ca.issue("turnkeeper", server=False)


@pytest.fixture
def tls_nats(tmp_path: Path, pki: tuple[CertificateAuthority, Issued, Issued]) -> Iterator[str]:
    ca, server, _client = pki
    config = tmp_path / "nats-tls.conf"
    config.write_text(
        "tls {\n"
        f'  cert_file: "{server.cert}"\n'
        f'  key_file: "{server.key}"\n'
        f'  ca_file: "{ca.files.cert}"\n'
        "  verify: true\n"
        "}\n"
    )
    bus = EmbeddedNats(config_file=config)
    url = bus.start()
    try:
        yield url
    finally:
        bus.stop()


async def test_connections_need_the_tls_options(
    tls_nats: str,
    pki: tuple[CertificateAuthority, Issued, Issued],
    make_service: ServiceFactory,
) -> None:
    ca, _server, client = pki
    auth = NatsAuth(tls_ca=ca.files.cert, tls_cert=client.cert, tls_key=client.key)

    with pytest.raises(Exception):  # noqa: B017, PT011 - nats-py's error type varies
        await nats.connect(tls_nats, allow_reconnect=False, max_reconnect_attempts=0)
    # The server's certificate is trusted, but no client certificate is shown.
    with pytest.raises(Exception):  # noqa: B017, PT011
        await nats.connect(
            tls_nats,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            **NatsAuth(tls_ca=ca.files.cert).connect_kwargs(),
        )

    nc = await nats.connect(tls_nats, **auth.connect_kwargs())
    await nc.close()

    service = await make_service(nats_url=tls_nats, nats_auth=auth)
    assert await service.link.wait_connected(10)

    config = BridgeConfig.from_env(
        env={
            "TURNKEEPER_AGENT": "tls-agent",
            "NATS_URL": tls_nats,
            "TURNKEEPER_NATS_TLS_CA": str(ca.files.cert),
            "TURNKEEPER_NATS_TLS_CERT": str(client.cert),
            "TURNKEEPER_NATS_TLS_KEY": str(client.key),
        }
    )
    assert config.nats_auth == auth


def test_nats_auth_refuses_half_or_conflicting_settings(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        NatsAuth(tls_cert=tmp_path / "c.pem")
    with pytest.raises(ValueError, match="one way to authenticate"):
        NatsAuth(credentials=tmp_path / "a.creds", token_file=tmp_path / "t")
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="is empty"):
        NatsAuth(token_file=empty).connect_kwargs()
