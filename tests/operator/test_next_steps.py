"""Errors a newcomer meets say what to do next (issue 49, item 7): an unreachable
service names `turnkeeper serve` and how to point at another; a refused token names
`--token`, `TURNKEEPER_TOKEN` and the SDKs' `api_key`; an HTTP port given to `serve`
that is taken ends with a message, not a traceback."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from turnkeeper.operator._cli import EXIT_ERROR, EXIT_UNAVAILABLE, main

from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

# Nothing listens on port 1: connections are refused at once.
DEAD_ADDRESS = "127.0.0.1:1"


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNKEEPER_TOKEN", raising=False)


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    return code, capsys.readouterr().err


async def test_an_unreachable_service_says_how_to_start_or_find_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = await cli(
        capsys, "turns", "status", "t1", "--address", DEAD_ADDRESS, "--timeout", "2"
    )
    assert code == EXIT_UNAVAILABLE
    assert err.startswith("error: UNAVAILABLE: ")
    assert f"no turnkeeper service answered at {DEAD_ADDRESS}" in err
    assert "`turnkeeper serve`" in err and "`turnkeeper dev langgraph.json`" in err
    assert "--address HOST:PORT or TURNKEEPER_ADDRESS" in err


async def test_a_missing_or_wrong_token_names_where_a_token_goes(
    capsys: pytest.CaptureFixture[str], make_service: ServiceFactory, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(tokens_file=tmp_path / "tokens.jsonl")
    code, err = await cli(capsys, "turns", "status", "t1", "--address", service.address)
    assert code == EXIT_ERROR
    assert err.startswith("error: UNAUTHENTICATED: this service needs a bearer token")
    assert "--token or TURNKEEPER_TOKEN" in err and "api_key" in err
    assert f"the service at {service.address} needs a token: pass one with --token" in err

    code, err = await cli(
        capsys, "turns", "status", "t1", "--address", service.address, "--token", "tk-nope"
    )
    assert code == EXIT_ERROR
    assert "the bearer token is not one this service accepts: check the token" in err
    assert "did not accept the token given" in err and "TURNKEEPER_TOKEN" in err

    # A panel token may read a turn's status, not re-drive one.
    _, err = await cli(
        capsys,
        *("turns", "redrive", "t1", "--address", service.address),
        *("--token", tokens["panel"]),
    )
    assert err.startswith("error: PERMISSION_DENIED")
    assert "an operator or admin token may" in err


async def test_the_langgraph_api_without_a_key_names_api_key(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(tokens_file=tmp_path / "tokens.jsonl", http_listen="127.0.0.1:0")
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"), api_key=None)
    try:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.assistants.search()
    finally:
        await client.http.client.aclose()
    assert refused.value.response.status_code == 401
    assert "api_key" in refused.value.response.text


async def test_serve_on_a_taken_http_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "turnkeeper_server", "--listen", "127.0.0.1:0", "--no-nats"),
            *("--data-dir", str(tmp_path), "--http-port", str(port)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    text = out.decode()
    assert proc.returncode == 2, text
    assert f"HTTP port {port} is in use" in text
    assert "another --http-port (env TURNKEEPER_HTTP_PORT), 0 for any free port" in text
    assert "Traceback" not in text
