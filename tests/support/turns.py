"""Small builders for TurnService requests, so tests read as the scenario."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, struct_pb2
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc


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
) -> turns_pb2.StartTurnResponse:
    return await stub.StartTurn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent=agent,
            input=value(input if input is not None else {"q": "hello"}),
            replica=replica,
            incarnation=incarnation,
        )
    )


async def status(stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> int:
    return (await stub.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state
