"""How the HTTP side is served: TLS and mutual TLS from the gRPC side's files, the
`--http-port` flag, and the default port's fallback when it is taken."""

from __future__ import annotations

import argparse
import socket
import ssl
from pathlib import Path

import aiohttp
import pytest
from turnkeeper_server import main
from turnkeeper_server.app import TurnkeeperServer

from tests.support.security import CertificateAuthority
from tests.support.service import ServiceFactory

BODY = {"turnId": "t1"}


async def turn_status(url: str, context: ssl.SSLContext | None = None) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}turnkeeper.v1.TurnService/TurnStatus", json=BODY, ssl=context or True
        ) as r,
    ):
        assert (await r.json())["state"] == "TURN_STATE_UNKNOWN"
        return r.status


async def test_https_with_mutual_tls_uses_the_grpc_sides_files(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    ca = CertificateAuthority(tmp_path, "ca")
    server = ca.issue("server", server=True)
    client = ca.issue("client", server=False)
    service: TurnkeeperServer = await make_service(
        tls_cert=server.cert,
        tls_key=server.key,
        tls_client_ca=ca.files.cert,
        http_listen="127.0.0.1:0",
    )
    assert service.web is not None and service.web.url.startswith("https://127.0.0.1:")
    trusted = ssl.create_default_context(cafile=str(ca.files.cert))
    trusted.load_cert_chain(client.cert, client.key)
    assert await turn_status(service.web.url, trusted) == 200
    # No client certificate: the handshake fails, as on the gRPC port.
    anonymous = ssl.create_default_context(cafile=str(ca.files.cert))
    with pytest.raises(aiohttp.ClientError):
        await turn_status(service.web.url, anonymous)
    with pytest.raises(aiohttp.ClientError):
        await turn_status(service.web.url.replace("https://", "http://"))


async def test_a_taken_default_port_falls_back_and_a_given_one_is_an_error(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = await make_service(http_listen=f"127.0.0.1:{port}", http_any_port_if_busy=True)
        assert service.web is not None and service.web.port not in (0, port)
        assert await turn_status(service.web.url) == 200
        # Files of its own: the first service holds the SQLite files' lock.
        other = tmp_path / "other"
        other.mkdir()
        with pytest.raises(OSError, match="address already in use"):
            await make_service(
                http_listen=f"127.0.0.1:{port}",
                turns_path=other / "turns.db",
                sessions_path=other / "sessions.db",
            )


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    main.add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_http_port_flag_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNKEEPER_HTTP_PORT", raising=False)
    monkeypatch.delenv("TURNKEEPER_LISTEN", raising=False)
    assert main._http_listen(parse()) == ("127.0.0.1:50080", True)
    assert main._http_listen(parse("--http-port", "0")) == ("127.0.0.1:0", False)
    assert main._http_listen(parse("--http-port", "-1")) == (None, False)
    # The HTTP side listens on the gRPC side's host, so one exposure rule covers both.
    assert main._http_listen(parse("--listen", "[::1]:7000", "--http-port", "7001")) == (
        "[::1]:7001",
        False,
    )
    monkeypatch.setenv("TURNKEEPER_HTTP_PORT", "8088")
    assert main._http_listen(parse()) == ("127.0.0.1:8088", False)


async def test_https_responses_carry_hsts_and_http_ones_do_not(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    ca = CertificateAuthority(tmp_path, "ca")
    server = ca.issue("server", server=True)
    service = await make_service(
        tls_cert=server.cert, tls_key=server.key, http_listen="127.0.0.1:0"
    )
    assert service.web is not None
    trusted = ssl.create_default_context(cafile=str(ca.files.cert))
    async with aiohttp.ClientSession() as session:
        for path in ("v1/health", "console/"):
            async with session.get(f"{service.web.url}{path}", ssl=trusted) as r:
                assert r.headers["Strict-Transport-Security"] == "max-age=31536000", path
    other = tmp_path / "plain"
    other.mkdir()
    plain = await make_service(
        http_listen="127.0.0.1:0",
        turns_path=other / "turns.db",
        sessions_path=other / "sessions.db",
    )
    assert plain.web is not None
    async with aiohttp.ClientSession() as session, session.get(f"{plain.web.url}v1/health") as r:
        assert "Strict-Transport-Security" not in r.headers
