"""Small builders for TurnService requests, so tests read as the scenario."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from google.protobuf import json_format, struct_pb2
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from tests.support.agents import PATIENCE


def value(obj: Any) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.Parse(json.dumps(obj), v)
    return v


def events(start: int, *types: str) -> list[turns_pb2.EventInput]:
    return [
        turns_pb2.EventInput(seq=start + i, type=t, data_json=json.dumps({"n": start + i}))
        for i, t in enumerate(types)
    ]


async def start(
    stub: turns_pb2_grpc.TurnServiceAsyncStub,
    turn_id: str = "t1",
    thread_id: str = "th1",
    agent: str = "agent",
    replica: str = "r1",
    incarnation: str = "i1",
    input: Any = None,
    wait_for_ready: bool | None = None,
) -> turns_pb2.StartTurnResponse:
    return await stub.StartTurn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent=agent,
            input=value(input if input is not None else {"q": "hello"}),
            replica=replica,
            incarnation=incarnation,
        ),
        wait_for_ready=wait_for_ready,
    )


async def status(stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> int:
    return (await stub.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state


async def settled(client: AsyncTurnkeeperClient, turn_id: str, want: int) -> turns_pb2.Turn:
    """The turn once it reaches state `want` (its watchers are woken on each change)."""
    async with asyncio.timeout(PATIENCE):
        while True:
            turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=turn_id))).turn
            if turn.state == want:
                return turn
            async for _ in client.watch_turn(
                turns_pb2.WatchTurnRequest(turn_id=turn_id, after_seq=turn.last_seq)
            ):
                break
