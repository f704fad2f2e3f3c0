"""The bundled nats-server is locked when the service has tokens.

`turnkeeper serve` with a tokens file and no NATS URL (a real subprocess) generates
a token into its data directory, owner-only, and starts nats-server requiring it:
a connection without it is refused; the service, an agent pointed at the file with
TURNKEEPER_NATS_TOKEN_FILE, and a caller with it all work.
"""

from __future__ import annotations

import asyncio
import re
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.nats_auth import NatsAuth
from turnkeeper.v1 import turns_pb2

from tests.support.agents import AGENT, agents_for, result
from tests.support.procs import ServiceProcess
from tests.support.security import write_tokens

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

_BUNDLED = re.compile(r"started a bundled nats-server at (nats://\S+)")


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[ServiceProcess, str, dict[str, str]]]:
    tokens = write_tokens(
        tmp_path / "tokens.jsonl", {"agent": f"agent:{AGENT}", "operator": "operator"}
    )
    service = ServiceProcess(
        tmp_path / "data",
        bundled_nats=True,
        extra=["--tokens-file", str(tmp_path / "tokens.jsonl")],
    )
    service.start()
    try:
        urls = [m.group(1) for line in service.log if (m := _BUNDLED.search(line))]
        assert urls, "\n".join(service.log)
        yield service, urls[0], tokens
    finally:
        service.terminate()


async def test_the_bundled_server_refuses_a_connection_without_the_token(
    locked: tuple[ServiceProcess, str, dict[str, str]], tmp_path: Path
) -> None:
    service, url, tokens = locked
    token_file = service.data_dir / "nats.token"
    for generated in (token_file, service.data_dir / "nats-server.conf"):
        assert stat.S_IMODE(generated.stat().st_mode) == 0o600, generated

    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(
            url, token="not-the-token", allow_reconnect=False, max_reconnect_attempts=0
        )

    # With the token file: a caller, the agent and the service's outbox all connect.
    nc = await nats.connect(url, **NatsAuth(token_file=token_file).connect_kwargs())
    events: asyncio.Queue[Msg] = asyncio.Queue()
    await nc.subscribe("vystak.turn.events.>", cb=events.put)
    await nc.flush()
    try:
        async with agents_for(service.address, url, tmp_path / "side.log") as agents:
            await agents.start(
                extra_env={
                    "TURNKEEPER_TOKEN": tokens["agent"],
                    "TURNKEEPER_NATS_TOKEN_FILE": str(token_file),
                }
            )
            turn_id = uuid.uuid4().hex
            created = await result(
                nc,
                "responses/create",
                {"input": {"job": turn_id, "results": []}, "turn_id": turn_id, "background": True},
                token=tokens["operator"],
            )
            assert created["turn_id"] == turn_id
            options = ConnectionOptions(target=service.address, bearer_token=tokens["operator"])
            async with AsyncTurnkeeperClient(options) as client:
                request = turns_pb2.WatchTurnRequest(turn_id=turn_id)
                async for frame in client.watch_turn(request):
                    if frame.event.type.startswith("turn."):
                        assert frame.event.type == "turn.done"
                        break
            # The service published the turn's events on the locked server.
            while True:
                msg = await asyncio.wait_for(events.get(), 30)
                if msg.subject.endswith(turn_id) and b"turn.done" in msg.data:
                    break
    finally:
        await nc.close()
