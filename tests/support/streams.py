"""Helpers for the CheckpointStream tests: turns to fence, messages to send, and a
client that keeps every frame it writes."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc

Req = checkpoints_pb2.CheckpointStreamRequest


async def start_turn(turns: turns_pb2_grpc.TurnServiceAsyncStub, thread: str, turn_id: str) -> None:
    await turns.StartTurn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread,
            agent="stream-agent",
            input=struct_pb2.Value(string_value="hi"),
            replica=f"replica-{turn_id}",
            incarnation="inc-1",
        )
    )


async def redrive_turn(turns: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> tuple[str, int]:
    """Re-drive the turn's replica (a new incarnation): its checkpoint and rewind seq."""
    redriven = await turns.Redrive(
        turns_pb2.RedriveRequest(
            agent="stream-agent", replica=f"replica-{turn_id}", incarnation="inc-2"
        )
    )
    [mine] = [r for r in redriven.turns if r.turn.turn_id == turn_id]
    return mine.checkpoint_id, mine.rewind_seq


def put_message(thread: str, turn_id: str, attempt: int, checkpoint_id: str) -> Req:
    return Req(
        put=checkpoints_pb2.PutCheckpointRequest(
            thread_id=thread,
            checkpoint_id=checkpoint_id,
            checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=attempt),
        )
    )


def append_message(turn_id: str, attempt: int, *seqs: int) -> Req:
    events = [turns_pb2.EventInput(seq=s, type="token", data_json=f'{{"n": {s}}}') for s in seqs]
    return Req(
        append=turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=attempt, events=events)
    )


async def stored_checkpoints(
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub, thread: str
) -> set[str]:
    return {
        answer.checkpoint.ref.checkpoint_id
        async for answer in checkpoints.ListCheckpoints(
            checkpoints_pb2.ListCheckpointsRequest(thread_id=thread)
        )
    }


def keep_frames(call: Any, frames: list[Req]) -> Any:
    """The call, keeping every frame written on it in `frames`."""
    write = call.write

    async def counted(request: Req) -> None:
        frames.append(request)
        await write(request)

    call.write = counted
    return call


class CountingClient(AsyncTurnkeeperClient):
    """The real client; it keeps every frame it writes on a checkpoint stream."""

    frames: list[Req]

    def open_checkpoint_stream(self) -> Any:
        return keep_frames(super().open_checkpoint_stream(), self.frames)
