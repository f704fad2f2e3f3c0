"""A turn nobody will take says so (decision 204). A replica announces its agent with
its startup Redrive; a turn started for an agent no replica ever announced (a typo)
is RUNNING with no owner, and TurnStatus, GetTurn, the CLI and the relay say why
instead of leaving it to the service's log. StartTurn refuses such an agent when
the caller asks it to."""

from __future__ import annotations

import asyncio
import json
from typing import TypeAlias

import aiohttp
import grpc
import pytest
from turnkeeper.operator._cli import main
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, expect_code
from tests.support.turns import value

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"

pytestmark = pytest.mark.both_backends


def unowned(turn_id: str, agent: str, *, require: bool = False) -> pb.StartTurnRequest:
    """A turn for an agent, started by a caller that runs nothing itself."""
    return pb.StartTurnRequest(
        turn_id=turn_id,
        thread_id=f"th-{turn_id}",
        agent=agent,
        input=value({"q": "hello"}),
        require_announced_agent=require,
    )


async def announce(turns: Stub, agent: str) -> None:
    """What a replica of the agent does as it starts: its startup Redrive."""
    await turns.Redrive(pb.RedriveRequest(agent=agent, replica=f"{agent}-1", incarnation="i1"))


async def test_a_turn_for_an_agent_no_replica_announced_says_so(turns: Stub) -> None:
    await turns.StartTurn(unowned("t-typo", "reserch"))
    status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-typo"))
    assert status.state == pb.TURN_STATE_RUNNING
    assert "no replica of agent 'reserch' has announced itself" in status.detail
    turn = (await turns.GetTurn(pb.GetTurnRequest(turn_id="t-typo"))).turn
    assert turn.detail == status.detail

    # Once a replica of it starts, the turn waits for a claim as any other: no detail.
    await announce(turns, "reserch")
    assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-typo"))).detail == ""
    assert (await turns.GetTurn(pb.GetTurnRequest(turn_id="t-typo"))).turn.detail == ""


async def test_a_turn_an_executor_owns_or_of_an_announced_agent_has_no_detail(
    turns: Stub,
) -> None:
    await announce(turns, "research")
    await turns.StartTurn(unowned("t-known", "research"))
    assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-known"))).detail == ""
    owned = unowned("t-owned", "custom")
    owned.replica, owned.incarnation = "r1", "i1"
    await turns.StartTurn(owned)
    assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-owned"))).detail == ""


async def test_start_turn_refuses_an_unannounced_agent_when_asked_to(turns: Stub) -> None:
    message = await expect_code(
        turns.StartTurn(unowned("t-refused", "reserch", require=True)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "no replica of agent 'reserch' has announced itself" in message
    # Nothing was journaled.
    status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-refused"))
    assert status.state == pb.TURN_STATE_UNKNOWN
    # Not asked: journaled, with its detail. Announced: taken.
    await turns.StartTurn(unowned("t-taken", "reserch"))
    await announce(turns, "research")
    started = await turns.StartTurn(unowned("t-known", "research", require=True))
    assert started.created


async def test_the_cli_shows_the_detail(
    turns: Stub, service: TurnkeeperServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await turns.StartTurn(unowned("t-cli", "reserch"))
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["turns", "status", "t-cli", "--address", service.address])
    out = capsys.readouterr().out
    assert code == 0 and "no replica of agent 'reserch' has announced itself" in out
    code = await asyncio.to_thread(
        main, ["turns", "status", "t-cli", "--json", "--address", service.address]
    )
    assert "announced" in json.loads(capsys.readouterr().out)["detail"]


async def test_the_relay_says_an_agent_never_announced_itself(
    make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    service = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    assert service.web is not None
    assert await service.link.wait_connected(10)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{service.web.url}v1/agents/reserch/rpc",
            json={"method": "responses/create", "params": {"input": {}, "background": True}},
        ) as response,
    ):
        assert response.status == 503
        answer = await response.json()
    assert answer["dispatched"] is False
    assert "no replica of agent 'reserch' is listening" in answer["message"]
    assert "none has ever announced itself" in answer["message"]
