"""Erasure: DeleteThread leaves no row of the thread in any table (checked table by
table: both SQLite files, or on PostgreSQL the journal's tables and PostgresSaver's
checkpoints, checkpoint_blobs and checkpoint_writes) and no trace in any row (a
fresh `sqlite3 .dump`, or `pg_dump` on PostgreSQL), while other threads keep
every row; refused while a turn is live unless the call cancels it. Every test
runs on both backends."""

from __future__ import annotations

import asyncio
import json
import signal

import grpc
import pytest
from grpc import aio
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.operator._cli import main
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, job_turn, result, until
from tests.support.nats import Collector
from tests.support.rows import store_text, thread_rows
from tests.support.service import ServiceFactory
from tests.support.turns import events, start, value

pytestmark = pytest.mark.both_backends

# A marker in the user's text: it must not survive anywhere.
SECRET = "my-card-number-4111"


async def thread_with_everything(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    thread_id: str,
) -> list[str]:
    """Two turns on the thread: one re-driven (a rewind in the outbox) and finished,
    one finished after writing a fenced checkpoint with pending writes and recording
    an effect. No NATS, so
    every outbox row stays in turns.db."""
    ids = [f"{thread_id}-a", f"{thread_id}-b"]
    await start(turns, ids[0], thread_id, input={"text": f"{SECRET} {thread_id}"})
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id=ids[0], attempt=0, events=events(1, "token", "step"))
    )
    await turns.Redrive(pb.RedriveRequest(turn_id=ids[0], force=True))
    await turns.ClaimTurn(
        pb.ClaimTurnRequest(turn_id=ids[0], attempt=1, replica="r1", incarnation="i2")
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id=ids[0], attempt=1, outcome=pb.OUTCOME_DONE))
    await start(turns, ids[1], thread_id, input={"text": SECRET})
    await turns.AppendEvents(
        pb.AppendEventsRequest(
            turn_id=ids[1],
            attempt=0,
            events=[pb.EventInput(seq=1, type="token", data_json=json.dumps(SECRET))],
        )
    )
    fence = cpb.TurnFence(turn_id=ids[1], attempt=0)
    await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id=thread_id,
            checkpoint_id="c1",
            checkpoint=cpb.TypedValue(type="json", data=SECRET.encode()),
            metadata_json=json.dumps({"source": SECRET}),
            fence=fence,
        )
    )
    await checkpoints.PutWrites(
        cpb.PutWritesRequest(
            thread_id=thread_id,
            checkpoint_id="c1",
            task_id="task-1",
            writes=[
                cpb.WriteInput(
                    idx=0, channel="messages", value=cpb.TypedValue(type="json", data=b'"x"')
                )
            ],
            fence=fence,
        )
    )
    # An effect whose arguments and result name the secret: the ledger goes too.
    call = pb.EffectCall(
        turn_id=ids[1],
        attempt=0,
        key=f"{thread_id}-send",
        name="send",
        args_json=json.dumps({"to": SECRET}),
        policy=pb.EFFECT_POLICY_RETRY,
        task_id="task-1",
        checkpoint_id="c1",
    )
    await turns.RecordEffect(
        pb.RecordEffectRequest(
            call=call, state=pb.EFFECT_STATE_DONE, outcome_json=json.dumps(SECRET)
        )
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id=ids[1], attempt=0, outcome=pb.OUTCOME_DONE))
    return ids


def rows_of(service: TurnkeeperServer, thread_id: str, turn_ids: list[str]) -> dict[str, int]:
    """Rows that belong to the thread, per table of the service's store."""
    return thread_rows(service.settings, thread_id, turn_ids)


def traced(text: str, secret: str = SECRET) -> bool:
    """Whether a dump holds `secret`, as text or inside a BLOB (dumped as X'<hex>')."""
    return secret in text or secret.encode().hex() in text.lower()


def store_traced(
    service: TurnkeeperServer, secret: str = SECRET, without: tuple[str, ...] = ()
) -> bool:
    """Whether any row holds `secret`: a fresh `sqlite3 .dump` of each SQLite file, or
    a fresh `pg_dump --data-only` of the PostgreSQL database (`without` those tables)."""
    return any(traced(text, secret) for text in store_text(service.settings, without).values())


def erasures(service: TurnkeeperServer) -> list[str]:
    """The threads the audit log records as erased."""
    return [r.target for r in service.audit.list(100) if r.action == "delete_thread"]


async def test_delete_thread_erases_every_row_of_the_thread_and_only_those(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(nats_url=None)
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        gone = await thread_with_everything(turns, checkpoints, "th-gone")
        kept = await thread_with_everything(turns, checkpoints, "th-kept")
        before = rows_of(service, "th-gone", gone)
        assert all(before.values()), before  # every table holds something to erase
        assert store_traced(service)
        if not service.settings.database_url:
            # The secret is in both SQLite files, the journal's and the checkpoints'.
            assert all(traced(text) for text in store_text(service.settings).values())

        response = await checkpoints.DeleteThread(cpb.DeleteThreadRequest(thread_id="th-gone"))
        assert (response.turns_deleted, response.cancelled_turn_id) == (2, "")

        assert rows_of(service, "th-gone", gone) == dict.fromkeys(before, 0)
        assert rows_of(service, "th-kept", kept) == before  # the other thread is untouched
        # The thread's ids stay in one place: the audit log's records of what was done
        # to it (who erased what is the point of that log); its content is nowhere.
        assert erasures(service) == ["th-gone"]
        assert not store_traced(service, "th-gone", without=("audit",))
        assert store_traced(service, "th-kept")
        with pytest.raises(grpc.RpcError) as missing:
            await turns.GetTurn(pb.GetTurnRequest(turn_id=gone[0]))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id=gone[1]))
        assert status.state == pb.TURN_STATE_UNKNOWN
        # Erasing again finds nothing and says so.
        again = await checkpoints.DeleteThread(cpb.DeleteThreadRequest(thread_id="th-gone"))
        assert again.turns_deleted == 0


async def test_a_live_turn_refuses_erasure_unless_the_call_cancels_it(
    make_service: ServiceFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    service = await make_service(nats_url=None)
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        await start(turns, "t-live", "th-live", input={"text": SECRET})
        await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t-live", attempt=0, interrupt=value(1)))
        with pytest.raises(grpc.RpcError) as refused:
            await checkpoints.DeleteThread(cpb.DeleteThreadRequest(thread_id="th-live"))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "pass cancel" in (refused.value.details() or "")
        assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t-live"))).state == (
            pb.TURN_STATE_PARKED
        )

        # The CLI refuses the same way (exit 4), then erases with --cancel.
        address = ["--address", service.address]
        code = await asyncio.to_thread(main, ["threads", "delete", "th-live", *address])
        assert code == 4 and "FAILED_PRECONDITION" in capsys.readouterr().err
        code = await asyncio.to_thread(main, ["threads", "delete", "th-live", "--cancel", *address])
        assert code == 0
        assert capsys.readouterr().out.strip() == (
            "deleted thread th-live: 1 turns erased (cancelled live turn t-live first)"
        )
        assert rows_of(service, "th-live", ["t-live"]) == dict.fromkeys(
            rows_of(service, "th-live", ["t-live"]), 0
        )
        assert not store_traced(service)


async def test_erasing_a_thread_whose_turn_runs_stops_the_agent(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
) -> None:
    nc, seen = bus
    agent = await agents.start(slow_step=2)
    await result(nc, "responses/create", job_turn("t-run", "th-run", job=SECRET))
    await until(
        seen,
        lambda: any(
            m["type"] == "token" and m["data"]["node"] == "step2"
            for m in seen.on(".turn.events.t-run")
        ),
    )
    response = await client.delete_thread(cpb.DeleteThreadRequest(thread_id="th-run", cancel=True))
    assert response.cancelled_turn_id == "t-run"
    await agent.wait_line(lambda line: "t-run attempt=0" in line and "execution stops" in line)
    await agent.wait_line(lambda line: line == "cancelled in step2")
    agent.signal(signal.SIGUSR1)
    assert rows_of(service, "th-run", ["t-run"]) == dict.fromkeys(rows_of(service, "th-run", []), 0)
    assert not store_traced(service)
    assert not store_traced(service, "th-run", without=("audit",))
    assert erasures(service) == ["th-run"]
