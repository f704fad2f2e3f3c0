"""The bundled nats-server gives every token a NATS identity of its own.

`turnkeeper serve` with a tokens file and no NATS URL (a real subprocess) starts
nats-server with a user per token and one for the service (its config and the
service's password owner-only in the data directory). An agent connects with its
turnkeeper token alone and may use only its own subjects: it cannot read another
agent's requests or the turns' events, forge an event, or send another agent a
stop notice; NATS itself refuses (a permissions violation). A panel's identity
sends requests (with caller assertions) and reads events; a connection without
credentials is refused. The agent's bridge runs turns as before.
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
from nats.aio.client import Client
from nats.aio.msg import Msg
from turnkeeper._nats_identity import identity_of
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2

from tests.support.agents import AGENT, agents_for, result
from tests.support.procs import ServiceProcess
from tests.support.security import write_tokens

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

_BUNDLED = re.compile(r"started a bundled nats-server at (nats://\S+)")


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[tuple[ServiceProcess, str, dict[str, str]]]:
    tokens = write_tokens(
        tmp_path / "tokens.jsonl",
        {"agent": f"agent:{AGENT}", "other": "agent:other", "operator": "operator"},
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


class Refusals:
    """A connection whose permission violations are awaited, not slept on."""

    def __init__(self) -> None:
        self.errors: asyncio.Queue[str] = asyncio.Queue()

    async def error_cb(self, exc: Exception) -> None:
        await self.errors.put(str(exc))

    async def next(self) -> str:
        return await asyncio.wait_for(self.errors.get(), 10)


async def connect_as(url: str, token: str, refusals: Refusals) -> Client:
    return await nats.connect(
        url,
        error_cb=refusals.error_cb,
        allow_reconnect=False,
        **identity_of(token).connect_kwargs(),
    )


async def test_each_token_gets_its_own_nats_identity_and_only_its_subjects(
    locked: tuple[ServiceProcess, str, dict[str, str]], tmp_path: Path
) -> None:
    service, url, tokens = locked
    for generated in ("nats-service.password", "nats-server.conf"):
        assert stat.S_IMODE((service.data_dir / generated).stat().st_mode) == 0o600, generated
    assert "tk-" in (service.data_dir / "nats-server.conf").read_text()
    assert not (service.data_dir / "nats.token").exists()

    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    with pytest.raises(Exception, match=r"(?i)authorization"):
        await nats.connect(
            url, user="tk-guess", password="guess", allow_reconnect=False, max_reconnect_attempts=0
        )

    # The operator's identity reads the turns' events; the other agent's is the
    # attacker: it tries to read this agent's requests and to forge on its subjects.
    operator_errors, rogue_errors = Refusals(), Refusals()
    operator = await connect_as(url, tokens["operator"], operator_errors)
    rogue = await connect_as(url, tokens["other"], rogue_errors)
    events: asyncio.Queue[Msg] = asyncio.Queue()
    await operator.subscribe("vystak.turn.events.>", cb=events.put)
    await operator.flush()
    sniffed: list[Msg] = []

    async def sniff(msg: Msg) -> None:
        sniffed.append(msg)

    try:
        for subject in (f"vystak.default.agents.{AGENT}.tasks", "vystak.default.agents.>"):
            await rogue.subscribe(subject, cb=sniff)
            assert "permissions violation" in (await rogue_errors.next()).lower()
        await rogue.subscribe("vystak.turn.events.>", cb=sniff)
        assert "permissions violation" in (await rogue_errors.next()).lower()
        forged = b'{"turn_id":"x","seq":1,"type":"final","data":{}}'
        await rogue.publish("vystak.turn.events.x", forged)
        assert "permissions violation" in (await rogue_errors.next()).lower()
        notice = b'{"jsonrpc":"2.0","method":"turnkeeper/cancel","params":{}}'
        await rogue.publish(f"vystak.default.agents.{AGENT}.control", notice)
        assert "permissions violation" in (await rogue_errors.next()).lower()

        async with agents_for(service.address, url, tmp_path / "side.log") as agents:
            # The agent's token is all it is given: its NATS identity follows from it,
            # and the bridge finds NATS keeping it to its own subjects.
            agent = await agents.start(extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
            await agent.wait_line(lambda line: "NATS keeps this agent to its own" in line)
            turn_id = uuid.uuid4().hex
            created = await result(
                operator,
                "responses/create",
                {"input": {"job": turn_id, "results": []}, "turn_id": turn_id, "background": True},
                caller=ConnectionOptions(target=service.address, bearer_token=tokens["operator"]),
            )
            assert created["turn_id"] == turn_id
            options = ConnectionOptions(target=service.address, bearer_token=tokens["operator"])
            async with AsyncTurnkeeperClient(options) as client:
                request = turns_pb2.WatchTurnRequest(turn_id=turn_id)
                async for frame in client.watch_turn(request):
                    if frame.event.type.startswith("turn."):
                        assert frame.event.type == "turn.done"
                        break
            # The service (its own user) published the turn's events; the forged one
            # never reached a subscriber.
            while True:
                msg = await asyncio.wait_for(events.get(), 30)
                assert msg.subject != "vystak.turn.events.x", msg.data
                if msg.subject.endswith(turn_id) and b"turn.done" in msg.data:
                    break
        await rogue.flush()
        assert sniffed == []
        assert operator_errors.errors.empty()
    finally:
        await operator.close()
        await rogue.close()
