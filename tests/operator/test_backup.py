"""`turnkeeper backup` (the real console script) under write load, restored into a
fresh service: every turn, event and checkpoint acknowledged before the backup
started is there, and both copies pass `PRAGMA integrity_check`."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc

from tests.support.service import ServiceFactory
from tests.support.turns import events, start

pytestmark = pytest.mark.timeout(120)

WRITERS = 3
# Acknowledged writes to wait for before the backup starts.
BEFORE = 30

Ack = tuple[str, str]


async def load(
    address: str, writer: int, acks: list[Ack], enough: asyncio.Event, stop: asyncio.Event
) -> None:
    """Turns one after another: start, events, a checkpoint, finish; each write
    recorded once the service acknowledged it."""
    async with aio.insecure_channel(address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        n = 0
        while not stop.is_set():
            turn_id, thread_id = f"w{writer}-t{n}", f"w{writer}-th{n}"
            await start(turns, turn_id, thread_id, agent="loader")
            acks.append(("turn", turn_id))
            await turns.AppendEvents(
                turns_pb2.AppendEventsRequest(
                    turn_id=turn_id, attempt=0, events=events(1, "step", "step")
                )
            )
            acks.append(("events", turn_id))
            await checkpoints.PutCheckpoint(
                cpb.PutCheckpointRequest(
                    thread_id=thread_id,
                    checkpoint_id=f"c{n}",
                    checkpoint=cpb.TypedValue(type="json", data=json.dumps({"n": n}).encode()),
                    metadata_json="{}",
                    fence=cpb.TurnFence(turn_id=turn_id, attempt=0),
                )
            )
            acks.append(("checkpoint", thread_id))
            await turns.FinishTurn(
                turns_pb2.FinishTurnRequest(
                    turn_id=turn_id, attempt=0, outcome=turns_pb2.OUTCOME_DONE
                )
            )
            acks.append(("done", turn_id))
            if len(acks) >= BEFORE:
                enough.set()
            n += 1


async def run_backup(dest: Path, data_dir: Path) -> str:
    command = shutil.which("turnkeeper")
    assert command is not None
    proc = await asyncio.create_subprocess_exec(
        command,
        "backup",
        str(dest),
        "--data-dir",
        str(data_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_a_backup_under_load_restores_every_acknowledged_write(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    service = await make_service()
    acks: list[Ack] = []
    enough, stop = asyncio.Event(), asyncio.Event()
    writers = [
        asyncio.create_task(load(service.address, w, acks, enough, stop)) for w in range(WRITERS)
    ]
    try:
        await asyncio.wait_for(enough.wait(), 30)
        before = list(acks)
        dest = tmp_path / "backup"
        said = await run_backup(dest, tmp_path)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert "integrity_check ok" in said, said
    await service.stop()

    for name in ("turns.db", "sessions.db"):
        copy = dest / name
        assert stat.S_IMODE(copy.stat().st_mode) == 0o600
        with sqlite3.connect(copy) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    restored = await make_service(turns_path=dest / "turns.db", sessions_path=dest / "sessions.db")
    async with aio.insecure_channel(restored.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        for kind, ident in before:
            if kind == "turn":
                turn = (await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=ident))).turn
                assert turn.turn_id == ident
            elif kind == "events":
                listed = await turns.ListEvents(turns_pb2.ListEventsRequest(turn_id=ident))
                assert [e.seq for e in listed.events][:2] == [1, 2], ident
            elif kind == "checkpoint":
                got = await checkpoints.GetCheckpoint(cpb.GetCheckpointRequest(thread_id=ident))
                assert got.found, ident
            else:
                status = await turns.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=ident))
                assert status.state == turns_pb2.TURN_STATE_DONE, ident


async def test_backup_refuses_to_overwrite_and_names_missing_files(tmp_path: Path) -> None:
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "turns.db").write_text("earlier backup")
    command = shutil.which("turnkeeper")
    assert command is not None
    data = tmp_path / "data"
    data.mkdir()
    for name in ("turns.db", "sessions.db"):
        sqlite3.connect(data / name).close()
    for args, message in (
        ([str(tmp_path / "dest"), "--data-dir", str(tmp_path / "nowhere")], "does not exist"),
        ([str(tmp_path / "dest"), "--data-dir", str(data)], "exists"),
    ):
        proc = await asyncio.create_subprocess_exec(
            command, "backup", *args, stderr=asyncio.subprocess.PIPE
        )
        _, err = await proc.communicate()
        assert proc.returncode == 1
        assert message in err.decode()
    assert (tmp_path / "dest" / "turns.db").read_text() == "earlier backup"
