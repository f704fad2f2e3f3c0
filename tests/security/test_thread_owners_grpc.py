"""Threads made over gRPC record their owner as HTTP ones do, and CheckpointService
applies the one ownership rule of both surfaces (decision 310): a thread the caller
owns, or one only its own agent's turns run on, never another agent's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc

from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import value

if TYPE_CHECKING:
    from turnkeeper.v1.checkpoints_pb2_grpc import CheckpointServiceAsyncStub

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]

ROLES = {"alpha": "agent:alpha", "beta": "agent:beta", "admin": "admin"}


async def _code(call: Any) -> grpc.StatusCode:
    try:
        await call
    except aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_a_grpc_thread_is_its_makers_and_its_copy_the_copiers(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl", ROLES)
    # No agent renews the turns' leases: the writes are the test's.
    server = await make_service(tokens_file=tmp_path / "tokens.jsonl", **unrenewed())
    alpha, beta, admin = (bearer(tokens[n]) for n in ("alpha", "beta", "admin"))
    async with aio.insecure_channel(server.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints: CheckpointServiceAsyncStub = checkpoints_pb2_grpc.CheckpointServiceStub(
            channel
        )
        start = turns_pb2.StartTurnRequest(
            turn_id="t-a",
            thread_id="th-a",
            agent="alpha",
            input=value({"q": 1}),
            replica="r1",
            incarnation="i1",
        )
        await turns.StartTurn(start, metadata=alpha)
        await turns.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-adm", thread_id="th-adm", agent="gamma", input=value({})
            ),
            metadata=admin,
        )
        # Recorded at StartTurn, as a LangGraph API thread is at create.
        owners = {t: server.engine.threads.get_now(t) for t in ("th-a", "th-adm")}
        assert {t: r.owner if r else None for t, r in owners.items()} == {
            "th-a": "agent:alpha",
            "th-adm": "admin:admin",
        }
        await checkpoints.PutCheckpoint(
            checkpoints_pb2.PutCheckpointRequest(
                thread_id="th-a",
                checkpoint_id="c1",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
                fence=checkpoints_pb2.TurnFence(turn_id="t-a", attempt=0),
            ),
            metadata=alpha,
        )

        # Another agent neither copies alpha's thread nor reads it.
        copy = checkpoints_pb2.CopyThreadRequest(
            source_thread_id="th-a", target_thread_id="th-copy"
        )
        assert await _code(checkpoints.CopyThread(copy, metadata=beta)) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        # Alpha copies it to a thread not made yet, which is then alpha's: its
        # checkpoints are alpha's to read though no turn runs on it (before: the
        # copy was refused, no turn of alpha's being on the target).
        copied = await checkpoints.CopyThread(copy, metadata=alpha)
        assert copied.checkpoints_copied == 1
        copy_record = server.engine.threads.get_now("th-copy")
        assert copy_record is not None and copy_record.owner == "agent:alpha"
        got = await checkpoints.GetCheckpoint(
            checkpoints_pb2.GetCheckpointRequest(thread_id="th-copy"), metadata=alpha
        )
        assert got.found and got.checkpoint.ref.checkpoint_id == "c1"
        read = checkpoints_pb2.GetCheckpointRequest(thread_id="th-copy")
        assert await _code(checkpoints.GetCheckpoint(read, metadata=beta)) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        erase = checkpoints_pb2.DeleteThreadRequest(thread_id="th-copy")
        assert await _code(checkpoints.DeleteThread(erase, metadata=beta)) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        # A thread an admin made for another agent is not alpha's.
        other = checkpoints_pb2.GetCheckpointRequest(thread_id="th-adm")
        assert await _code(checkpoints.GetCheckpoint(other, metadata=alpha)) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        await checkpoints.DeleteThread(erase, metadata=alpha)
