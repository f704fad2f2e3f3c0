"""Tokens change without a restart: the tokens file is re-read when it changes and
on SIGHUP. A revoked token is refused on its next call and its open WatchTurn
stream ends with UNAUTHENTICATED; a new token works at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import Unauthenticated
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.security.auth import token_hash

from tests.support.procs import ServiceProcess
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory
from tests.support.turns import events, value

pytestmark = pytest.mark.timeout(60)

# The watcher reads every turn (a panel reads only its own threads' turns).
ROLES = {"watcher": "operator", "admin": "admin"}


def rewrite(path: Path, tokens: Mapping[str, tuple[str, str]]) -> None:
    """Replace the tokens file atomically: name -> (token, role)."""
    lines = [
        json.dumps({"sha256": token_hash(token), "role": role, "name": name})
        for name, (token, role) in tokens.items()
    ]
    scratch = path.with_suffix(".new")
    scratch.write_text("\n".join(lines) + "\n")
    scratch.chmod(0o600)
    os.replace(scratch, path)


def client(address: str, token: str) -> AsyncTurnkeeperClient:
    return AsyncTurnkeeperClient(ConnectionOptions(target=address, bearer_token=token))


@pytest.fixture
async def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(tmp_path / "tokens.jsonl", ROLES)


@pytest.fixture
async def service(
    make_service: ServiceFactory, tmp_path: Path, tokens: dict[str, str]
) -> TurnkeeperServer:
    return await make_service(tokens_file=tmp_path / "tokens.jsonl", tokens_poll_seconds=0.05)


@pytest.fixture
async def admin(
    service: TurnkeeperServer, tokens: dict[str, str]
) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with client(service.address, tokens["admin"]) as c:
        yield c


async def status(c: AsyncTurnkeeperClient, turn_id: str = "t1") -> int:
    return (await c.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state


async def test_a_revoked_token_is_refused_and_its_stream_ends_a_new_one_works(
    service: TurnkeeperServer,
    admin: AsyncTurnkeeperClient,
    tokens: dict[str, str],
    tmp_path: Path,
) -> None:
    await admin.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id="t1", thread_id="th1", agent="alpha", input=value({"q": 1})
        )
    )
    newbie = "tk-newbie-0123456789abcdef"
    async with (
        client(service.address, tokens["watcher"]) as panel,
        client(service.address, newbie) as new,
    ):
        with pytest.raises(Unauthenticated):
            await status(new)

        first = asyncio.Event()

        async def watch() -> None:
            async for _frame in panel.watch_turn(turns_pb2.WatchTurnRequest(turn_id="t1")):
                first.set()

        watching = asyncio.create_task(watch())
        await admin.append_events(
            turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "step"))
        )
        await asyncio.wait_for(first.wait(), 10)

        rewrite(
            tmp_path / "tokens.jsonl",
            {"admin": (tokens["admin"], "admin"), "newbie": (newbie, "panel")},
        )
        # The open stream ends with UNAUTHENTICATED once the change is seen ...
        with pytest.raises(Unauthenticated, match="revoked"):
            await asyncio.wait_for(watching, 10)
        # ... by then the new token works and the revoked one is refused.
        assert await status(new) == turns_pb2.TURN_STATE_RUNNING
        with pytest.raises(Unauthenticated):
            await status(panel)
        assert len(service.streams) == 0


async def test_a_broken_tokens_file_keeps_the_old_tokens(
    service: TurnkeeperServer, admin: AsyncTurnkeeperClient, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.jsonl"
    path.write_text('{"sha256": "not-a-hash", "role": "admin"}\n')
    reload = service.token_reloader
    assert reload is not None
    result = reload.reload("test")
    assert "sha256 must be 64 hex digits" in result.error
    assert await status(admin) == turns_pb2.TURN_STATE_UNKNOWN


@pytest.fixture
def process(tmp_path: Path, tokens: dict[str, str]) -> Iterator[ServiceProcess]:
    service = ServiceProcess(
        tmp_path / "data",
        extra=["--tokens-file", str(tmp_path / "tokens.jsonl"), "--tokens-poll-seconds", "0"],
    )
    service.start()
    try:
        yield service
    finally:
        service.terminate()


@pytest.mark.slow
async def test_sighup_reloads_the_tokens_file(
    process: ServiceProcess, tokens: dict[str, str], tmp_path: Path
) -> None:
    newbie = "tk-sighup-0123456789abcdef"
    rewrite(
        tmp_path / "tokens.jsonl",
        {"admin": (tokens["admin"], "admin"), "newbie": (newbie, "panel")},
    )
    async with (
        client(process.address, newbie) as new,
        client(process.address, tokens["watcher"]) as panel,
    ):
        # Polling is off: nothing changes until the signal.
        with pytest.raises(Unauthenticated):
            await status(new)
        assert process.process is not None
        process.process.send_signal(signal.SIGHUP)

        async def accepted() -> int:
            while True:
                try:
                    return await status(new)
                except Unauthenticated:
                    await asyncio.sleep(0.05)

        assert await asyncio.wait_for(accepted(), 20) == turns_pb2.TURN_STATE_UNKNOWN
        with pytest.raises(Unauthenticated):
            await status(panel)
