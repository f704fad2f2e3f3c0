"""The service SIGKILLed right after acknowledging writes: nothing acknowledged is
missing after a restart, and (on SQLite) both files pass integrity_check. SIGTERM
shuts down gracefully. On both backends."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb

from tests.support.nats import NatsServer, subscribe
from tests.support.procs import OWN_CONNECTIONS, ServiceProcess
from tests.support.service import unrenewed_flags
from tests.support.turns import events, start

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]


def integrity(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


async def test_sigkill_after_acknowledged_writes_loses_nothing(
    tmp_path: Path, database_url: str | None
) -> None:
    proc = ServiceProcess(tmp_path, database_url=database_url)
    address = proc.start()
    acknowledged: dict[str, int] = {}
    try:
        async with aio.insecure_channel(address) as ch:
            turns = turns_pb2_grpc.TurnServiceStub(ch)
            checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(ch)
            for i in range(20):
                tid = f"t{i}"
                await start(turns, turn_id=tid, thread_id=f"th{i}")
                resp = await turns.AppendEvents(
                    pb.AppendEventsRequest(
                        turn_id=tid, attempt=0, events=events(1, *["token"] * 25)
                    )
                )
                acknowledged[tid] = resp.last_seq
                await checkpoints.PutCheckpoint(
                    cpb.PutCheckpointRequest(
                        thread_id=f"th{i}",
                        checkpoint_id=f"1ef-{i:04}",
                        checkpoint=cpb.TypedValue(type="bytes", data=bytes(range(256)) * 8),
                        metadata_json=json.dumps({"i": i}),
                        fence=cpb.TurnFence(turn_id=tid, attempt=0),
                    )
                )
            # The last acknowledged write, then SIGKILL with no pause.
            await turns.FinishTurn(
                pb.FinishTurnRequest(turn_id="t19", attempt=0, outcome=pb.OUTCOME_DONE)
            )
        proc.kill()
    finally:
        proc.kill()

    if database_url is None:
        assert integrity(tmp_path / "turns.db") == "ok"
        assert integrity(tmp_path / "sessions.db") == "ok"

    restarted = ServiceProcess(tmp_path, database_url=database_url)
    address = restarted.start()
    try:
        async with aio.insecure_channel(address) as ch:
            turns = turns_pb2_grpc.TurnServiceStub(ch)
            checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(ch)
            for i, (tid, last) in enumerate(acknowledged.items()):
                listed = await turns.ListEvents(pb.ListEventsRequest(turn_id=tid))
                expected = last + 1 if tid == "t19" else last
                assert [e.seq for e in listed.events] == list(range(1, expected + 1))
                got = await checkpoints.GetCheckpoint(cpb.GetCheckpointRequest(thread_id=f"th{i}"))
                assert got.found and got.checkpoint.checkpoint.data == bytes(range(256)) * 8
            status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t19"))
            assert status.state == pb.TURN_STATE_DONE
    finally:
        restarted.kill()


async def test_outbox_survives_a_crash_and_drains_after_restart(
    tmp_path: Path, nats_server: NatsServer, database_url: str | None
) -> None:
    # Written while NATS is down, the service SIGKILLed: the backlog is in turns.db
    # and goes out once a restarted service sees NATS.
    nats_server.stop()
    # t1 is r1's and nothing renews it: a restart that outlasted the process's lease
    # would have the reaper re-drive it, and its rewind join the two messages awaited.
    proc = ServiceProcess(
        tmp_path, nats_url=nats_server.url, database_url=database_url, extra=unrenewed_flags()
    )
    address = proc.start()
    try:
        async with aio.insecure_channel(address) as ch:
            turns = turns_pb2_grpc.TurnServiceStub(ch)
            await start(turns)
            await turns.AppendEvents(
                pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "a", "b"))
            )
    finally:
        proc.kill()
    nats_server.start()
    nc, got = await subscribe(nats_server.url, "vystak.turn.>")
    restarted = ServiceProcess(
        tmp_path, nats_url=nats_server.url, database_url=database_url, extra=unrenewed_flags()
    )
    restarted.start()
    try:
        await got.wait_for(lambda: len(got.messages) == 2, timeout=20)
        assert [m["seq"] for _, m, _ in got.messages] == [1, 2]
    finally:
        await nc.close()
        restarted.kill()


async def test_sigterm_shuts_down_gracefully(tmp_path: Path, database_url: str | None) -> None:
    proc = ServiceProcess(tmp_path, database_url=database_url)
    address = proc.start()
    async with aio.insecure_channel(address) as ch:
        await start(turns_pb2_grpc.TurnServiceStub(ch))
    assert proc.terminate() == 0
    assert any("turnkeeper stopped" in line for line in proc.log)
    if database_url is None:
        assert integrity(tmp_path / "turns.db") == "ok"


async def test_start_turn_stays_idempotent_after_a_restart(
    tmp_path: Path, database_url: str | None
) -> None:
    # Found by tests/faults: a responses/create journaled just before the service
    # was SIGKILLed, sent again after its restart, was refused ALREADY_EXISTS. The
    # request's hash covered the input as JSON text, whose key order followed the
    # protobuf Struct's map order, which (upb) differs from one process to the next.
    request = {f"key{i}": [i, {"b": i, "a": -i}] for i in range(8)}
    proc = ServiceProcess(tmp_path, database_url=database_url)
    address = proc.start()
    try:
        async with aio.insecure_channel(address) as ch:
            first = await start(turns_pb2_grpc.TurnServiceStub(ch), input=request)
        assert first.created
        for _ in range(3):
            proc.kill()
            proc.start()
            # The same port again: a channel of its own (grpc shares a process's
            # connections to one address between channels, and one to the killed
            # process may still be in its back-off), and the call waits for the
            # connection instead of failing on the first refusal (a loaded CI run
            # failed UNAVAILABLE "Connection refused" with the service announced).
            async with aio.insecure_channel(address, options=OWN_CONNECTIONS) as ch:
                again = await start(
                    turns_pb2_grpc.TurnServiceStub(ch), input=request, wait_for_ready=True
                )
            assert not again.created
            assert again.turn.turn_id == first.turn.turn_id
    finally:
        proc.kill()
