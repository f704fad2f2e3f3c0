"""Bad input gets a clear status and a message a person can act on; never INTERNAL."""

from __future__ import annotations

from typing import TypeAlias

import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb

from tests.support.service import expect_code
from tests.support.turns import start, value

# The turns here are r1's, written by the test itself: no agent renews their lease.
pytestmark = [pytest.mark.both_backends, pytest.mark.unrenewed]

INVALID = grpc.StatusCode.INVALID_ARGUMENT
# The async stub type exists only in the generated .pyi (an aio channel makes one).
Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"


async def test_unknown_turn_is_unknown_to_status_and_not_found_to_get(turns: Stub) -> None:
    status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="never-seen"))
    assert status.state == pb.TURN_STATE_UNKNOWN
    msg = await expect_code(
        turns.GetTurn(pb.GetTurnRequest(turn_id="never-seen")), grpc.StatusCode.NOT_FOUND
    )
    assert "never-seen" in msg
    for call in (
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="never-seen", attempt=0)),
        turns.ParkTurn(pb.ParkTurnRequest(turn_id="never-seen")),
        turns.ListEvents(pb.ListEventsRequest(turn_id="never-seen")),
        turns.Redrive(pb.RedriveRequest(turn_id="never-seen")),
    ):
        await expect_code(call, grpc.StatusCode.NOT_FOUND)


@pytest.mark.parametrize(
    ("turn_id", "needle"),
    [("", "turn_id is required"), ("x" * 257, "limit is 256"), ("has space", "characters outside")],
)
async def test_bad_ids_are_invalid_argument(turns: Stub, turn_id: str, needle: str) -> None:
    for call in (
        turns.TurnStatus(pb.TurnStatusRequest(turn_id=turn_id)),
        turns.GetTurn(pb.GetTurnRequest(turn_id=turn_id)),
        start(turns, turn_id=turn_id),
        turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id=turn_id)),
        turns.WatchTurn(pb.WatchTurnRequest(turn_id=turn_id)).read(),
    ):
        assert needle in await expect_code(call, INVALID)


async def test_start_validates_every_field(turns: Stub) -> None:
    assert "thread_id is required" in await expect_code(start(turns, thread_id=""), INVALID)
    assert "NATS subject" in await expect_code(start(turns, agent="a.b"), INVALID)
    assert "go together" in await expect_code(start(turns, incarnation=""), INVALID)
    huge = {"q": "x" * (1 << 20)}
    assert "input is" in await expect_code(start(turns, input=huge), INVALID)
    deep: object = "leaf"
    for _ in range(40):
        deep = [deep]
    assert "nested deeper than 32" in await expect_code(start(turns, input=deep), INVALID)


async def test_undecodable_bytes_are_invalid_argument_not_internal(channel: aio.Channel) -> None:
    # A Value nested 200 deep: past protobuf's own limit, so only a client that
    # writes bytes by hand can send it. The service must still answer cleanly.
    value = b"\x1a\x04leaf"  # Value{string_value: "leaf"}
    for _ in range(200):
        listed = b"\x0a" + _varint(len(value)) + value  # ListValue{values: [value]}
        value = b"\x32" + _varint(len(listed)) + listed  # Value{list_value: ...}
    request = b"\x0a\x02t1\x12\x03th1\x1a\x05agent" + b"\x22" + _varint(len(value)) + value
    call = channel.unary_unary(
        "/turnkeeper.v1.TurnService/StartTurn",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    assert "not a valid" in await expect_code(call(request), INVALID)
    garbage = channel.unary_unary(
        "/turnkeeper.v1.TurnService/TurnStatus",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    await expect_code(garbage(b"\xff\xff\xff"), INVALID)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


async def test_event_batches_are_validated(turns: Stub) -> None:
    await start(turns)

    async def append(*events: pb.EventInput) -> str:
        return await expect_code(
            turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events)),
            INVALID,
        )

    assert "not valid JSON" in await append(pb.EventInput(seq=1, type="token", data_json="{nope"))
    assert "type must be" in await append(pb.EventInput(seq=1, type="", data_json="1"))
    assert "seqs start at 1" in await append(pb.EventInput(seq=0, type="token"))
    assert "limit is" in await append(
        pb.EventInput(seq=1, type="token", data_json='"' + "x" * (300 << 10) + '"')
    )
    many = [pb.EventInput(seq=i + 1, type="token") for i in range(1001)]
    assert "limit is 1000" in await append(*many)
    assert "written by the service" in (
        await expect_code(
            turns.AppendEvents(
                pb.AppendEventsRequest(
                    turn_id="t1", attempt=0, events=[pb.EventInput(seq=1, type="turn.done")]
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    )
    # Nothing was stored by any refused call.
    assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))).last_seq == 0


async def test_other_rpcs_refuse_nonsense(turns: Stub) -> None:
    await start(turns)
    await expect_code(turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0)), INVALID)
    await expect_code(
        turns.Heartbeat(
            pb.HeartbeatRequest(turn_id="t1", attempt=-1, replica="r1", incarnation="i1")
        ),
        INVALID,
    )
    await expect_code(turns.Redrive(pb.RedriveRequest()), INVALID)
    await expect_code(turns.Redrive(pb.RedriveRequest(turn_id="t1", agent="agent")), INVALID)
    await expect_code(turns.ListTurns(pb.ListTurnsRequest(page_size=5000)), INVALID)
    await expect_code(turns.ListTurns(pb.ListTurnsRequest(state=99)), INVALID)  # type: ignore[arg-type]
    await expect_code(turns.ListEvents(pb.ListEventsRequest(turn_id="t1", after_seq=-1)), INVALID)
    big = value({"v": "x" * (300 << 10)})
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0))
    assert "resume is" in await expect_code(
        turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="t1", resume=big)), INVALID
    )
    # Still parked: the refused resume changed nothing.
    assert (
        await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
    ).state == pb.TURN_STATE_PARKED


async def test_checkpoint_rpcs_refuse_bad_input(
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    await expect_code(checkpoints.GetCheckpoint(cpb.GetCheckpointRequest(thread_id="")), INVALID)
    await expect_code(
        checkpoints.PutCheckpoint(cpb.PutCheckpointRequest(thread_id="t", checkpoint_id="")),
        INVALID,
    )
    await expect_code(
        checkpoints.PutCheckpoint(
            cpb.PutCheckpointRequest(thread_id="t", checkpoint_id="c", metadata_json="[")
        ),
        INVALID,
    )
    listing = checkpoints.ListCheckpoints(cpb.ListCheckpointsRequest(filter_json='{"bad key!": 1}'))
    assert "Invalid filter key" in await expect_code(listing.read(), INVALID)
    await expect_code(
        checkpoints.PutWrites(cpb.PutWritesRequest(thread_id="t", checkpoint_id="c")), INVALID
    )
    # A fence naming a turn that does not exist.
    fenced = cpb.PutCheckpointRequest(
        thread_id="t", checkpoint_id="c", fence=cpb.TurnFence(turn_id="ghost", attempt=0)
    )
    await expect_code(checkpoints.PutCheckpoint(fenced), grpc.StatusCode.NOT_FOUND)
