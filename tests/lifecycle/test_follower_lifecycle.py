"""The panel's follower (TurnFollower) with the lifecycle's states: a cancelled turn
concludes on its turn.cancelled event as CANCELLED; a QUEUED turn is waited on, like
a running one, until it has run. On both backends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from grpc import aio
from turnkeeper.panel.follower import Concluded, ConclusionReason, TurnState
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.panel.test_follower import ObservedClient, append, finish, follow
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import start, value

pytestmark = pytest.mark.both_backends

if TYPE_CHECKING:
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub as Stub


@pytest.fixture
async def svc(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, **unrenewed(claims=True))


@pytest.fixture
async def stub(svc: TurnkeeperServer) -> AsyncIterator[Stub]:
    async with aio.insecure_channel(svc.address) as ch:
        yield turns_pb2_grpc.TurnServiceStub(ch)


@pytest.fixture
async def client(svc: TurnkeeperServer) -> AsyncIterator[ObservedClient]:
    async with ObservedClient(svc.address) as c:
        yield c


async def test_a_cancelled_turn_concludes_cancelled(stub: Stub, client: ObservedClient) -> None:
    await start(stub)
    await append(stub, "t1", 0, 1, "step")
    consumer = follow(client)
    await consumer.wait_for(lambda t: len(t.events) == 1)
    await stub.CancelTurn(pb.CancelTurnRequest(turn_id="t1", reason="stop"))
    transcript = await consumer.finished()
    assert [e.type for e in transcript.events] == ["step", "turn.cancelled"]
    assert transcript.concluded == Concluded(ConclusionReason.TERMINAL_EVENT, TurnState.CANCELLED)
    assert TurnState.from_proto(pb.TURN_STATE_CANCELLED) is TurnState.CANCELLED


async def test_a_queued_turn_is_waited_on_until_it_has_run(
    stub: Stub, client: ObservedClient
) -> None:
    await start(stub, "t1", "th1")
    await stub.StartTurn(
        pb.StartTurnRequest(
            turn_id="t2",
            thread_id="th1",
            agent="agent",
            input=value({"q": "next"}),
            multitask_strategy=pb.MULTITASK_STRATEGY_ENQUEUE,
        )
    )
    consumer = follow(client, "t2")
    # Idle gaps answered QUEUED: the follower waits on.
    await client.wait_for(lambda s: s.count(TurnState.QUEUED) >= 2)
    assert not consumer.task.done()
    await finish(stub, "t1", 0)  # t2 starts, unowned: an executor claims it
    await stub.ClaimTurn(
        pb.ClaimTurnRequest(turn_id="t2", attempt=0, replica="r2", incarnation="i2")
    )
    await append(stub, "t2", 0, 1, "final")
    await finish(stub, "t2", 0)
    transcript = await consumer.finished()
    assert [e.type for e in transcript.events] == ["final", "turn.done"]
    assert transcript.concluded == Concluded(ConclusionReason.TERMINAL_EVENT, TurnState.DONE)
