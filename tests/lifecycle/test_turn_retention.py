"""The turn horizon (`--turn-retention`): a finished turn older than it is deleted,
row and all, with its events, outbox rows and boundaries (checked table by table);
a thread left with no turn goes as DeleteThread would take it; a RUNNING, PARKED or
QUEUED turn is never taken. After it TurnStatus answers UNKNOWN, GetTurn NOT_FOUND,
a follower concludes instead of waiting, and a StartTurn with the same turn_id
starts a new turn. A horizon shorter than --retention is refused at startup. On
both backends.

The sweeps are driven by the test, each as at a chosen instant (`sweep(now=...)`):
no test waits for a clock or a timer."""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path

import grpc
import psycopg
import pytest
from grpc import aio
from turnkeeper.panel.follower import Concluded, ConclusionReason, TurnState
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.config import Settings
from turnkeeper_server.main import add_serve_arguments, main, settings_from_args
from turnkeeper_server.retention import RetentionSweeper
from turnkeeper_server.store.postgres import THREAD_LOCK

from tests.lifecycle.test_erasure import rows_of, store_traced, thread_with_everything
from tests.panel.test_follower import ObservedClient, append, finish, follow
from tests.support.service import ServiceFactory, expect_code, make_settings
from tests.support.turns import start, value

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(120)]

HOUR = 3600.0


def turn_rows(service: TurnkeeperServer, thread_id: str) -> int:
    return rows_of(service, thread_id, [])["turns"]


async def busy_thread(turns: turns_pb2_grpc.TurnServiceAsyncStub, thread_id: str) -> list[str]:
    """A finished turn with events and a fenced checkpoint, then a RUNNING turn and a
    QUEUED one behind it. Returns the three ids."""
    ids = [f"{thread_id}-{n}" for n in ("done", "run", "queued")]
    await start(turns, ids[0], thread_id)
    await append(turns, ids[0], 0, 1, "token", "step")
    await finish(turns, ids[0], 0)
    await start(turns, ids[1], thread_id)
    await append(turns, ids[1], 0, 1, "token")
    queued = await turns.StartTurn(
        pb.StartTurnRequest(
            turn_id=ids[2],
            thread_id=thread_id,
            agent="agent",
            input=value({"q": "next"}),
            multitask_strategy=pb.MULTITASK_STRATEGY_ENQUEUE,
        )
    )
    assert queued.turn.state == pb.TURN_STATE_QUEUED
    return ids


async def test_finished_turns_go_past_the_horizon_and_live_ones_never(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(nats_url=None)  # no NATS: every outbox row stays held
    sweeper = RetentionSweeper(service.db, service.policy, 0.0, HOUR, turn_retention=HOUR)
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        old = await thread_with_everything(turns, checkpoints, "th-old")
        busy = await busy_thread(turns, "th-busy")
        await start(turns, "t-parked", "th-parked")
        await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t-parked", attempt=0, interrupt=value(1)))
        ended = time.time()  # every turn above that ended, ended before this
        await start(turns, "t-young", "th-young")
        await finish(turns, "t-young", 0)

        old_rows = rows_of(service, "th-old", old)
        assert all(old_rows.values()), old_rows  # every table holds something to delete
        busy_rows = rows_of(service, "th-busy", busy)
        parked_rows = rows_of(service, "th-parked", ["t-parked"])
        young_rows = rows_of(service, "th-young", ["t-young"])

        # Not before: an hour has not passed for any of them.
        assert (await sweeper.sweep()).turns_deleted == 0
        assert rows_of(service, "th-old", old) == old_rows
        assert rows_of(service, "th-busy", busy) == busy_rows

        # An hour after `ended`: the turns that had finished by then go.
        swept = await sweeper.sweep(now=ended + HOUR)
        assert (swept.turns_deleted, swept.threads_erased) == (3, 1)
        # th-old had no other turn: the thread goes with them, table by table.
        assert rows_of(service, "th-old", old) == dict.fromkeys(old_rows, 0)
        # th-busy: its finished turn's events and boundaries go; the running and the
        # queued turn, and the checkpoints they continue from, stay.
        busy_after = rows_of(service, "th-busy", busy[1:])
        assert busy_after["turns"] == 2
        assert busy_after["events"] == rows_of(service, "th-busy", busy)["events"] > 0
        assert rows_of(service, "th-busy", busy[:1])["events"] == 0
        # The younger finished turn and the parked one are untouched.
        assert rows_of(service, "th-young", ["t-young"]) == young_rows
        assert rows_of(service, "th-parked", ["t-parked"]) == parked_rows
        # Nothing the deleted turns carried is left (the inputs, events and
        # checkpoints held the secret), except the audit log's records by id.
        assert not store_traced(service, without=("audit",))
        assert [r.target for r in service.audit.list(100) if r.action == "redrive"] == [old[0]]
        if not service.settings.database_url:
            # The freed pages went back to the file system (incremental vacuum).
            for path in (service.settings.turns_path, service.settings.sessions_path):
                with sqlite3.connect(path) as conn:
                    assert conn.execute("PRAGMA freelist_count").fetchone() == (0,), path
                conn.close()

        # However old, a live, parked or queued turn is never taken.
        swept = await sweeper.sweep(now=time.time() + 1000 * HOUR)
        assert swept.turns_deleted == 1  # t-young, now old enough
        assert turn_rows(service, "th-busy") == 2
        assert turn_rows(service, "th-parked") == 1
        states = [(await turns.TurnStatus(pb.TurnStatusRequest(turn_id=t))).state for t in busy]
        assert states == [pb.TURN_STATE_UNKNOWN, pb.TURN_STATE_RUNNING, pb.TURN_STATE_QUEUED]


async def test_a_deleted_turn_is_unknown_and_its_id_starts_a_new_turn(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(nats_url=None)
    sweeper = RetentionSweeper(service.db, service.policy, 0.0, HOUR, turn_retention=HOUR)
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        await start(turns, "t1", "th1", input={"q": "first"})
        await append(turns, "t1", 0, 1, "token")
        await finish(turns, "t1", 0)
        # Within the horizon StartTurn is idempotent: the same request, the same turn.
        again = await start(turns, "t1", "th1", input={"q": "first"})
        assert (again.created, again.turn.state) == (False, pb.TURN_STATE_DONE)

        assert (await sweeper.sweep(now=time.time() + 2 * HOUR)).turns_deleted == 1

        status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
        assert status.state == pb.TURN_STATE_UNKNOWN
        await expect_code(turns.GetTurn(pb.GetTurnRequest(turn_id="t1")), grpc.StatusCode.NOT_FOUND)
        # A panel following the deleted turn concludes at once on UNKNOWN, never waits.
        async with ObservedClient(service.address) as client:
            transcript = await follow(client, "t1").finished()
        assert transcript.events == []
        assert transcript.concluded == Concluded(ConclusionReason.STATUS, TurnState.UNKNOWN)
        # Past the horizon the id is free: the same StartTurn starts a new turn.
        retried = await start(turns, "t1", "th1", input={"q": "first"})
        assert retried.created
        assert (retried.turn.state, retried.turn.last_seq) == (pb.TURN_STATE_RUNNING, 0)


async def test_with_retention_a_turn_is_pruned_first_and_deleted_at_the_horizon(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(
        nats_url=None,
        retention_seconds=60.0,
        turn_retention_seconds=HOUR,
        retention_interval=HOUR,  # the test runs the passes itself
    )
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        await start(turns, "t1", "th1")
        await append(turns, "t1", 0, 1, "token", "step")
        await finish(turns, "t1", 0)
        ended = time.time()

        # Past the retention, before the horizon: events gone, the row kept, pruned.
        swept = await service.retention.sweep(now=ended + 120.0)
        assert (swept.turns, swept.turns_deleted) == (1, 0)
        assert rows_of(service, "th1", ["t1"])["events"] == 0
        status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
        assert status.state == pb.TURN_STATE_DONE

        # Past the horizon: the row goes too.
        swept = await service.retention.sweep(now=ended + HOUR + 1.0)
        assert (swept.turns, swept.turns_deleted) == (0, 1)
        assert turn_rows(service, "th1") == 0
        status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
        assert status.state == pb.TURN_STATE_UNKNOWN


@pytest.mark.postgres_only  # SQLite has one writer: no other sweep can hold a thread
async def test_a_thread_another_replica_is_sweeping_is_left_to_it(
    make_service: ServiceFactory, backend: str
) -> None:
    service = await make_service(nats_url=None)
    sweeper = RetentionSweeper(service.db, service.policy, 0.0, HOUR, turn_retention=HOUR)
    url = service.settings.database_url
    assert url is not None
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        for thread_id in ("th-held", "th-free"):
            await start(turns, f"{thread_id}-t", thread_id)
            await finish(turns, f"{thread_id}-t", 0)
        later = time.time() + 2 * HOUR
        # Another replica's sweep transaction, still open, has claimed th-held.
        with psycopg.connect(url) as other:
            other.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (THREAD_LOCK, "th-held")
            )
            swept = await sweeper.sweep(now=later)
            assert (swept.turns_deleted, swept.threads_erased) == (1, 1)
            assert (turn_rows(service, "th-held"), turn_rows(service, "th-free")) == (1, 0)
        # Released (its transaction ended): the next pass takes the thread.
        swept = await sweeper.sweep(now=later)
        assert (swept.turns_deleted, swept.threads_erased) == (1, 1)
        assert turn_rows(service, "th-held") == 0


def test_a_horizon_shorter_than_the_retention_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ValueError, match=r"--turn-retention .* is shorter than --retention"):
        make_settings(tmp_path, retention_seconds=7 * 86400.0, turn_retention_seconds=86400.0)
    # Equal, longer, or either one alone is accepted.
    for retention, horizon in ((60.0, 60.0), (60.0, HOUR), (0.0, HOUR), (HOUR, 0.0)):
        settings = make_settings(
            tmp_path, retention_seconds=retention, turn_retention_seconds=horizon
        )
        assert isinstance(settings, Settings)

    # `serve` refuses at startup: exit status 2 and the reason, no traceback.
    code = main(
        [
            *("--data-dir", str(tmp_path / "data"), "--no-nats", "--listen", "127.0.0.1:0"),
            *("--http-port", "-1", "--retention", "7d", "--turn-retention", "1d"),
        ]
    )
    assert code == 2
    refusals = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage().split(":")[0] for r in refusals] == [
        "--turn-retention (86400 s) is shorter than --retention (604800 s)"
    ]
    assert refusals[0].exc_info is None  # the reason, not a traceback
    assert not (tmp_path / "data" / "turns.db").exists()  # refused before opening anything


def test_the_turn_retention_flag_and_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(
        ["--data-dir", str(tmp_path), "--retention", "7d", "--turn-retention", "90d"]
    )
    settings = settings_from_args(args, None)
    assert (settings.retention_seconds, settings.turn_retention_seconds) == (
        7 * 86400,
        90 * 86400,
    )
    assert parser.parse_args([]).turn_retention == 0  # off by default

    monkeypatch.setenv("TURNKEEPER_TURN_RETENTION", "30d")
    from_env = argparse.ArgumentParser()
    add_serve_arguments(from_env)
    assert from_env.parse_args([]).turn_retention == 30 * 86400
