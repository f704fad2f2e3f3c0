"""Retention: once a finished turn is older than the retention, its events and outbox
rows go, its thread's checkpoints are pruned to the latest of each namespace (the
thread still continues from there; on PostgreSQL the blobs only pruned checkpoints
named go too), SQLite's freed pages go back to the file system (incremental
vacuum), and nothing of a live turn or a younger one is touched. On both backends."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import checkpoints_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.durations import add_lifecycle_arguments, parse_duration
from turnkeeper_server.retention import RetentionSweeper

from tests.support.agents import Agents, Panel, all_events, job_turn, result, until_event
from tests.support.nats import Collector, NatsServer
from tests.support.rows import thread_rows
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.both_backends]

RETENTION = 0.2


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # The sweeper's own timer is far off: the test runs its passes itself.
    return await make_service(
        nats_url=nats_server.url, retention_seconds=RETENTION, retention_interval=3600.0
    )


async def run_turn(nc: Client, client: AsyncTurnkeeperClient, turn_id: str) -> list[str]:
    await result(nc, "responses/create", job_turn(turn_id, "th-old"))
    panel = Panel()
    panel.start(client, turn_id)
    shown = await panel.ended()
    assert shown[-1][1] == "turn.done"
    results: list[str] = shown[-2][2]["output"]["results"]
    return results


async def checkpoint_ids(client: AsyncTurnkeeperClient, thread_id: str) -> list[str]:
    request = checkpoints_pb2.ListCheckpointsRequest(thread_id=thread_id)
    return [r.checkpoint.ref.checkpoint_id async for r in client.list_checkpoints(request)]


def blobs(url: str, thread_id: str) -> tuple[int, int]:
    """PostgresSaver's blob rows of the thread: all, and those no checkpoint names."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM checkpoints c "
            "WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns "
            "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)) "
            "FROM checkpoint_blobs b WHERE b.thread_id = %s",
            (thread_id,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def pragma(path: Path, name: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


async def test_retention_prunes_finished_turns_and_leaves_live_ones(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
) -> None:
    nc, seen = bus
    await agents.start()
    await agents.start("r2", graph="approval", agent="approvals")
    assert len(await run_turn(nc, client, "t-old")) == 4
    history = await checkpoint_ids(client, "th-old")
    assert len(history) > 1
    await result(nc, "responses/create", job_turn("t-live", "th-live"), agent="approvals")
    await until_event(seen, "t-live", "interrupt")
    live_events = len(await all_events(client, "t-live"))
    live_history = await checkpoint_ids(client, "th-live")
    url = service.settings.database_url
    if url:
        blobs_before = blobs(url, "th-old")
        assert blobs_before[0] > 0 and blobs_before[1] == 0

    # Not before: a sweeper whose retention has not passed deletes nothing.
    patient = RetentionSweeper(service.db, service.policy, 3600.0, 3600.0)
    assert (await patient.sweep()).turns == 0
    assert await all_events(client, "t-old")

    await asyncio.sleep(RETENTION * 2)  # the retention itself must pass
    swept = await service.retention.sweep()
    assert swept.turns == 1 and swept.events > 0
    assert swept.checkpoints == len(history) - 1
    # A second pass finds nothing new: the pruned turn's record is not pruned again.
    # (Right away, before another turn finishes: on a busy machine a later turn can
    # outlive the 0.2 s retention before the pass, and would rightly be pruned.)
    assert (await service.retention.sweep()).turns == 0

    # The finished turn: no events, no outbox rows; its record still answers.
    assert await all_events(client, "t-old") == []
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-old"))
    assert status.state == turns_pb2.TURN_STATE_DONE
    rows = thread_rows(service.settings, "th-old", ["t-old"])
    assert (rows["events"], rows["outbox (events)"], rows["checkpoints"]) == (0, 0, 1)
    if url:
        # The blobs only pruned checkpoints named went with them; the latest's stay.
        remaining, orphans = blobs(url, "th-old")
        assert 0 < remaining < blobs_before[0] and orphans == 0
    # Its thread keeps only the latest checkpoint, and continues from it.
    assert await checkpoint_ids(client, "th-old") == [history[0]]
    assert len(await run_turn(nc, client, "t-later")) == 8
    # The parked turn is untouched.
    assert len(await all_events(client, "t-live")) == live_events
    assert await checkpoint_ids(client, "th-live") == live_history
    assert (await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-live"))).state == (
        turns_pb2.TURN_STATE_PARKED
    )
    if not url:
        # The files give freed pages back: incremental auto-vacuum, nothing left free.
        # (PostgreSQL has no such step: autovacuum makes the space reusable.)
        for path in (service.settings.turns_path, service.settings.sessions_path):
            assert pragma(path, "auto_vacuum") == 2, path  # INCREMENTAL
            assert pragma(path, "freelist_count") == 0, path


def test_the_retention_flag_takes_a_duration() -> None:
    parser = argparse.ArgumentParser()
    add_lifecycle_arguments(parser, max_run_time=3600.0, park_expiry=0.0)
    args = parser.parse_args(["--retention", "30d", "--max-run-time", "90s"])
    assert (args.retention, args.max_run_time, args.park_expiry) == (30 * 86400, 90, 0)
    assert parser.parse_args(["--park-expiry", "7d"]).park_expiry == 7 * 86400
    assert parser.parse_args([]).retention == 0
    assert parse_duration("1.5h") == 5400
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        parse_duration("soon")
