"""TLS and mutual TLS end to end, with certificates made here by `cryptography`, and
the rule that an exposed port needs TLS and authentication unless --insecure."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server import main as server_main
from turnkeeper_server.app import create_server
from turnkeeper_server.security.transport import InsecureListen, is_loopback

from tests.support.procs import ServiceProcess
from tests.support.security import CertificateAuthority, Issued, bearer, write_tokens
from tests.support.service import ServiceFactory, make_settings

pytestmark = pytest.mark.timeout(60)


@dataclasses.dataclass
class Pki:
    ca: CertificateAuthority
    server: Issued
    client: Issued
    # A second CA nobody configured, and a client certificate it signed.
    stranger_ca: CertificateAuthority
    stranger_client: Issued


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = CertificateAuthority(directory, "ca")
    stranger = CertificateAuthority(directory, "stranger-ca")
    return Pki(
        ca=ca,
        server=ca.issue("server", server=True),
        client=ca.issue("client", server=False),
        stranger_ca=stranger,
        stranger_client=stranger.issue("client", server=False),
    )


async def status(
    address: str,
    credentials: grpc.ChannelCredentials | None,
    metadata: Any = None,
) -> grpc.StatusCode:
    """TurnStatus over a fresh channel; the code it ends with."""
    channel = (
        aio.insecure_channel(address)
        if credentials is None
        else aio.secure_channel(address, credentials)
    )
    async with channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        try:
            await stub.TurnStatus(
                turns_pb2.TurnStatusRequest(turn_id="t1"), metadata=metadata, timeout=10
            )
        except aio.AioRpcError as exc:
            return exc.code()
        return grpc.StatusCode.OK


def mutual_tls_flags(pki: Pki) -> list[str]:
    """`turnkeeper serve`'s flags for TLS with client certificates from `pki`'s CA."""
    return [
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--tls-client-ca",
        str(pki.ca.files.cert),
    ]


def loopback(address: str) -> str:
    return f"127.0.0.1:{address.rsplit(':', 1)[1]}"


async def test_tls_serves_clients_that_trust_its_ca(make_service: ServiceFactory, pki: Pki) -> None:
    server = await make_service(tls_cert=pki.server.cert, tls_key=pki.server.key)
    trusted = grpc.ssl_channel_credentials(root_certificates=pki.ca.pem)
    assert await status(server.address, trusted) == grpc.StatusCode.OK
    # The wrong CA: the handshake fails, nothing is served.
    wrong = grpc.ssl_channel_credentials(root_certificates=pki.stranger_ca.pem)
    assert await status(server.address, wrong) == grpc.StatusCode.UNAVAILABLE
    # Plaintext to a TLS port is no call either.
    assert await status(server.address, None) == grpc.StatusCode.UNAVAILABLE


async def test_mutual_tls_needs_a_client_certificate_from_the_client_ca(
    make_service: ServiceFactory, pki: Pki
) -> None:
    server = await make_service(
        tls_cert=pki.server.cert, tls_key=pki.server.key, tls_client_ca=pki.ca.files.cert
    )

    def creds(client: Issued | None) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=pki.ca.pem,
            private_key=client.key_pem if client else None,
            certificate_chain=client.cert_pem if client else None,
        )

    assert await status(server.address, creds(pki.client)) == grpc.StatusCode.OK
    assert await status(server.address, creds(None)) == grpc.StatusCode.UNAVAILABLE
    assert await status(server.address, creds(pki.stranger_client)) == grpc.StatusCode.UNAVAILABLE


async def test_the_service_process_serves_mutual_tls_on_its_grpc_engine(
    pki: Pki, tmp_path: Path
) -> None:
    # The services above run in this process, on grpc's default engine; the service's
    # own process runs on iomgr (turnkeeper/_io_engine.py), whose TLS path is this one.
    service = ServiceProcess(
        tmp_path / "data",
        extra=mutual_tls_flags(pki),
    )
    address = await asyncio.to_thread(service.start)
    try:
        client = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.pem,
            private_key=pki.client.key_pem,
            certificate_chain=pki.client.cert_pem,
        )
        assert await status(address, client) == grpc.StatusCode.OK
        anonymous = grpc.ssl_channel_credentials(root_certificates=pki.ca.pem)
        assert await status(address, anonymous) == grpc.StatusCode.UNAVAILABLE
        assert await status(address, None) == grpc.StatusCode.UNAVAILABLE
    finally:
        service.kill()


async def test_tls_and_tokens_serve_every_interface_with_call_credentials(
    make_service: ServiceFactory, pki: Pki, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel"})
    server = await make_service(
        listen="0.0.0.0:0",
        tls_cert=pki.server.cert,
        tls_key=pki.server.key,
        tokens_file=tmp_path / "tokens.jsonl",
    )
    address = loopback(server.address)
    ssl = grpc.ssl_channel_credentials(root_certificates=pki.ca.pem)
    # The token as call credentials (what grpc sends only over a secure channel) ...
    with_token = grpc.composite_channel_credentials(
        ssl, grpc.access_token_call_credentials(tokens["panel"])
    )
    assert await status(address, with_token) == grpc.StatusCode.OK
    # ... or as plain metadata; and without one, UNAUTHENTICATED.
    assert await status(address, ssl, bearer(tokens["panel"])) == grpc.StatusCode.OK
    assert await status(address, ssl) == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("overrides", "missing"),
    [
        ({}, "TLS"),
        ({}, "authentication"),
        ({"tokens_file": True}, "TLS"),
        ({"tls": True}, "authentication"),
    ],
)
async def test_an_exposed_port_without_tls_and_authentication_is_refused(
    tmp_path: Path, pki: Pki, overrides: dict[str, Any], missing: str
) -> None:
    settings: dict[str, Any] = {"listen": "0.0.0.0:0"}
    if overrides.get("tokens_file"):
        write_tokens(tmp_path / "tokens.jsonl", {"admin": "admin"})
        settings["tokens_file"] = tmp_path / "tokens.jsonl"
    if overrides.get("tls"):
        settings.update(tls_cert=pki.server.cert, tls_key=pki.server.key)
    data = tmp_path / "data"
    with pytest.raises(InsecureListen) as info:
        await create_server(make_settings(data, **settings))
    message = str(info.value)
    assert "0.0.0.0:0" in message
    assert missing in message
    assert "--insecure" in message
    # Refused before anything was created.
    assert not (data / "turns.db").exists()


async def test_insecure_serves_an_exposed_port_and_warns_at_every_start(
    make_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="turnkeeper_server.security.transport"):
            server = await make_service(listen="0.0.0.0:0", insecure=True)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any("INSECURE" in r.getMessage() for r in warnings)
        assert await status(loopback(server.address), None) == grpc.StatusCode.OK
        await server.stop(0)


async def test_an_exposed_metrics_port_is_refused_even_with_tls_and_tokens(
    tmp_path: Path, pki: Pki
) -> None:
    # The gRPC and HTTP ports are secured; the Prometheus port has neither TLS nor
    # tokens, so beyond loopback it is refused without --insecure (decision 186).
    write_tokens(tmp_path / "tokens.jsonl", {"admin": "admin"})
    data = tmp_path / "data"
    for metrics_listen in ("0.0.0.0:0", ":0"):
        with pytest.raises(InsecureListen) as info:
            await create_server(
                make_settings(
                    data,
                    listen="0.0.0.0:0",
                    tls_cert=pki.server.cert,
                    tls_key=pki.server.key,
                    tokens_file=tmp_path / "tokens.jsonl",
                    metrics_listen=metrics_listen,
                )
            )
        message = str(info.value)
        assert f"refusing to serve Prometheus metrics on {metrics_listen}" in message
        assert "no TLS and no authentication" in message
        assert "--metrics-listen" in message and "--insecure" in message
    assert not (data / "turns.db").exists()


async def test_an_exposed_metrics_port_with_insecure_is_served_with_a_warning(
    make_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.security.transport"):
        server = await make_service(metrics_listen="0.0.0.0:0", insecure=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        w.startswith("INSECURE: serving Prometheus metrics on 0.0.0.0:0") for w in warnings
    ), warnings
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        async with session.get(url) as response:
            assert response.status == 200
            assert "turnkeeper_turns_started_total" in await response.text()
    # On loopback the metrics port needs nothing, and warns about nothing.
    await server.stop(0)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.security.transport"):
        await make_service(metrics_listen="127.0.0.1:0")
    assert not [r for r in caplog.records if r.name == "turnkeeper_server.security.transport"]


def test_the_cli_refuses_an_exposed_metrics_port_without_insecure(tmp_path: Path) -> None:
    # A real `python -m turnkeeper_server`: exit status 2 and the reason, no traceback.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNKEEPER_")}
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "turnkeeper_server", "--listen", "127.0.0.1:0"),
            *("--data-dir", str(tmp_path / "data"), "--no-nats"),
            *("--metrics-listen", "0.0.0.0:0"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to serve Prometheus metrics on 0.0.0.0:0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data" / "turns.db").exists()


async def test_mutual_tls_counts_as_authentication_for_an_exposed_port(
    make_service: ServiceFactory, pki: Pki
) -> None:
    server = await make_service(
        listen="0.0.0.0:0",
        tls_cert=pki.server.cert,
        tls_key=pki.server.key,
        tls_client_ca=pki.ca.files.cert,
    )
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.pem,
        private_key=pki.client.key_pem,
        certificate_chain=pki.client.cert_pem,
    )
    assert await status(loopback(server.address), creds) == grpc.StatusCode.OK


async def test_loopback_needs_no_tls(make_service: ServiceFactory) -> None:
    server = await make_service(listen="127.0.0.1:0")
    assert await status(server.address, None) == grpc.StatusCode.OK


async def test_half_a_tls_configuration_is_refused(tmp_path: Path, pki: Pki) -> None:
    with pytest.raises(ValueError, match="go together"):
        await create_server(make_settings(tmp_path, tls_cert=pki.server.cert))
    with pytest.raises(ValueError, match="needs --tls-cert"):
        await create_server(make_settings(tmp_path, tls_client_ca=pki.ca.files.cert))
    with pytest.raises(ValueError, match="cannot read"):
        await create_server(
            make_settings(tmp_path, tls_cert=tmp_path / "nope.crt", tls_key=pki.server.key)
        )


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("127.0.0.1:50051", True),
        ("127.0.0.2:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/tmp/turnkeeper.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.1.2.3:50051", False),
        ("name.invalid:50051", False),
    ],
)
def test_is_loopback(listen: str, expected: bool) -> None:
    assert is_loopback(listen) is expected


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server_main.add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_flags_and_env_reach_the_settings(
    tmp_path: Path, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = parse(
        [
            "--data-dir",
            str(tmp_path),
            *mutual_tls_flags(pki),
            "--tokens-file",
            "/etc/turnkeeper/tokens.jsonl",
            "--insecure",
            "--no-reflection",
        ]
    )
    settings = server_main.settings_from_args(args, None)
    assert settings.tls_cert == pki.server.cert
    assert settings.tls_key == pki.server.key
    assert settings.tls_client_ca == pki.ca.files.cert
    assert settings.tokens_file == Path("/etc/turnkeeper/tokens.jsonl")
    assert settings.insecure is True
    assert settings.reflection is False
    assert settings.limits.max_watch_streams_per_client == 256

    defaults = server_main.settings_from_args(parse(["--data-dir", str(tmp_path)]), None)
    assert (defaults.tls_cert, defaults.tokens_file, defaults.insecure) == (None, None, False)
    assert defaults.reflection is True

    monkeypatch.setenv("TURNKEEPER_TLS_CERT", str(pki.server.cert))
    monkeypatch.setenv("TURNKEEPER_TLS_KEY", str(pki.server.key))
    monkeypatch.setenv("TURNKEEPER_TLS_CLIENT_CA", str(pki.ca.files.cert))
    monkeypatch.setenv("TURNKEEPER_TOKENS_FILE", "/run/secrets/tokens.jsonl")
    monkeypatch.setenv("TURNKEEPER_INSECURE", "1")
    monkeypatch.setenv("TURNKEEPER_REFLECTION", "0")
    monkeypatch.setenv("TURNKEEPER_MAX_WATCH_STREAMS", "7")
    from_env = server_main.settings_from_args(parse(["--data-dir", str(tmp_path)]), None)
    assert from_env.tls_cert == pki.server.cert
    assert from_env.tls_key == pki.server.key
    assert from_env.tls_client_ca == pki.ca.files.cert
    assert from_env.tokens_file == Path("/run/secrets/tokens.jsonl")
    assert from_env.insecure is True
    assert from_env.reflection is False
    assert from_env.limits.max_watch_streams_per_client == 7


async def test_serve_exits_2_with_a_clear_message_on_an_exposed_port(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    args = parse(["--listen", "0.0.0.0:0", "--data-dir", str(tmp_path), "--no-nats"])
    with caplog.at_level(logging.ERROR):
        assert await server_main.serve(args) == 2
    assert any("refusing to listen on 0.0.0.0:0" in r.getMessage() for r in caplog.records)


def test_the_image_is_secure_by_default_and_only_the_dev_stack_opts_out() -> None:
    root = Path(__file__).resolve().parents[2]
    dockerfile = root.joinpath("Dockerfile").read_text()
    # The image listens on 0.0.0.0 and sets no opt-out: without TLS and tokens it refuses.
    assert '"0.0.0.0:50051"' in dockerfile
    assert not [
        line
        for line in dockerfile.splitlines()
        if "TURNKEEPER_INSECURE" in line and not line.lstrip().startswith("#")
    ]
    compose = root.joinpath("compose.yaml").read_text()
    assert 'TURNKEEPER_INSECURE: "1"' in compose


async def test_the_python_client_speaks_mutual_tls_and_tokens(
    make_service: ServiceFactory, pki: Pki, tmp_path: Path
) -> None:
    # The service side of clients/python's ConnectionOptions: CA, client
    # certificate and bearer token, async and sync, and its typed errors.
    from turnkeeper import errors
    from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient

    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel", "ops": "operator"})
    server = await make_service(
        listen="0.0.0.0:0",
        tls_cert=pki.server.cert,
        tls_key=pki.server.key,
        tls_client_ca=pki.ca.files.cert,
        tokens_file=tmp_path / "tokens.jsonl",
    )

    def options(token: str | None) -> ConnectionOptions:
        return ConnectionOptions(
            target=loopback(server.address),
            root_certificates=pki.ca.files.cert,
            client_certificate=pki.client.cert,
            client_key=pki.client.key,
            bearer_token=token,
            retry_max_attempts=1,
        )

    request = turns_pb2.TurnStatusRequest(turn_id="t1")
    async with AsyncTurnkeeperClient(options(tokens["panel"])) as client:
        status = await client.turn_status(request)
        assert status.state == turns_pb2.TURN_STATE_UNKNOWN
        with pytest.raises(errors.PermissionDenied):
            await client.list_turns(turns_pb2.ListTurnsRequest())
    async with AsyncTurnkeeperClient(options(None)) as client:
        with pytest.raises(errors.Unauthenticated):
            await client.turn_status(request)

    def sync_calls() -> None:
        with TurnkeeperClient(options(tokens["ops"])) as client:
            assert not client.list_turns(turns_pb2.ListTurnsRequest()).turns
        with TurnkeeperClient(options("wrong")) as client, pytest.raises(errors.Unauthenticated):
            client.turn_status(request)

    await asyncio.to_thread(sync_calls)
