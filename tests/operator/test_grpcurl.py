"""Operators with nothing but grpcurl: reflection is always on."""

from __future__ import annotations

import json

from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.grpcurl import grpcurl
from tests.support.turns import start


async def test_list_and_describe_by_reflection(service: TurnkeeperServer) -> None:
    listed = (await grpcurl(service.address, "list")).stdout.split()
    assert "turnkeeper.v1.TurnService" in listed
    assert "turnkeeper.v1.CheckpointService" in listed
    assert "grpc.health.v1.Health" in listed
    described = (await grpcurl(service.address, "describe", "turnkeeper.v1.TurnService")).stdout
    assert "rpc ResumeDetached ( .turnkeeper.v1.ResumeDetachedRequest )" in described
    assert "rpc WatchTurn ( .turnkeeper.v1.WatchTurnRequest ) returns ( stream" in described
    message = (await grpcurl(service.address, "describe", "turnkeeper.v1.Turn")).stdout
    assert ".google.protobuf.Value input" in message


async def test_turn_status_and_resume_of_a_parked_turn(
    service: TurnkeeperServer, turns: turns_pb2_grpc.TurnServiceAsyncStub
) -> None:
    await start(turns)
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0))
    status = json.loads(
        (
            await grpcurl(
                service.address, "turnkeeper.v1.TurnService/TurnStatus", data={"turn_id": "t1"}
            )
        ).stdout
    )
    assert status["state"] == "TURN_STATE_PARKED"

    out = await grpcurl(
        service.address,
        "turnkeeper.v1.TurnService/ResumeDetached",
        data={"turn_id": "t1", "resume": {"approved": True}},
    )
    resumed = json.loads(out.stdout)
    assert resumed["turn"]["state"] == "TURN_STATE_RUNNING"
    assert resumed["turn"]["resume"] == {"approved": True}
    got = await turns.GetTurn(pb.GetTurnRequest(turn_id="t1"))
    assert got.turn.resume.struct_value["approved"] is True

    again = await grpcurl(
        service.address,
        "turnkeeper.v1.TurnService/ResumeDetached",
        data={"turn_id": "t1", "resume": {"approved": True}},
        check=False,
    )
    assert again.returncode != 0
    assert "FailedPrecondition" in again.stderr
    assert "already resumed" in again.stderr


async def test_unknown_turn_status_and_health(service: TurnkeeperServer) -> None:
    status = json.loads(
        (
            await grpcurl(
                service.address, "turnkeeper.v1.TurnService/TurnStatus", data={"turn_id": "nope"}
            )
        ).stdout
    )
    assert status["state"] == "TURN_STATE_UNKNOWN"
    health = json.loads((await grpcurl(service.address, "grpc.health.v1.Health/Check")).stdout)
    assert health["status"] == "SERVING"
