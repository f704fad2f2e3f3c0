"""A hand-off that carries its claim (decision 590) is run at once, without
ClaimTurn, only by the incarnation it names, for the turn and attempt its claim
says; any other is not taken, and the service offers the turn again (decision 592)."""

from __future__ import annotations

import base64
from typing import Any, cast

import pytest
from turnkeeper.agent.bridge._jsonrpc import Request
from turnkeeper.agent.bridge._methods import EXECUTE, Methods
from turnkeeper.agent.bridge._runtime import Assignment, Identity, TurnRuntime
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

ME = Identity("agent", "replica-a", "incarnation-a")


class Runtime:
    """What a handed turn asks of the runtime: take() (ClaimTurn is never made)."""

    def __init__(self) -> None:
        self.taken: list[Assignment] = []

    def take(self, assignment: Assignment) -> bool:
        self.taken.append(assignment)
        return True


def handoff(incarnation: str = ME.incarnation, **claim_of: Any) -> Request:
    turn = turns_pb2.Turn(turn_id=claim_of.get("turn_id", "t1"), attempts=claim_of.get("at", 0))
    claim = turns_pb2.ClaimTurnResponse(turn=turn, checkpoint_id="", thread_empty=True)
    params = {
        "turn_id": "t1",
        "attempt": 0,
        "reason": "create",
        "incarnation": incarnation,
        "claim": claim_of.get("raw") or base64.b64encode(claim.SerializeToString()).decode(),
        "lease_seconds": 15.0,
    }
    return Request(id="1", method=EXECUTE, params=params, metadata={})


async def execute(request: Request) -> tuple[bool, Runtime]:
    runtime = Runtime()
    methods = Methods(cast(AsyncTurnkeeperClient, None), cast(TurnRuntime, runtime), ME)
    reply = await methods.dispatch(request)
    result = cast(dict[str, Any], reply.result)
    return bool(result["accepted"]), runtime


async def test_a_handed_turn_runs_at_once_with_its_claim() -> None:
    accepted, runtime = await execute(handoff())
    assert accepted
    (assignment,) = runtime.taken
    assert (assignment.turn_id, assignment.attempt, assignment.thread_empty) == ("t1", 0, True)
    # Its first heartbeat gives a whole lease.
    assert assignment.handed_lease == 15.0


@pytest.mark.parametrize(
    "request_",
    [
        handoff(incarnation="incarnation-old"),  # for a replica restarted since
        handoff(turn_id="t2"),  # a claim of another turn
        handoff(at=1),  # of another attempt
        handoff(raw="not a claim"),
    ],
    ids=["another incarnation", "another turn", "another attempt", "unreadable"],
)
async def test_a_handoff_not_for_this_incarnation_and_attempt_is_not_taken(
    request_: Request,
) -> None:
    accepted, runtime = await execute(request_)
    assert not accepted
    assert runtime.taken == []
