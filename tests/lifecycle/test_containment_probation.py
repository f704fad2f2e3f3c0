"""One turn on probation per agent, however many replicas release held turns at
once. On PostgreSQL every replica's reaper (and each agent's startup Redrive)
releases the agent's next held turn when none is on probation; two such
transactions, each seeing none, must not put two turns on probation, or a healthy
turn runs beside the poison one, is blamed with it at every crash and ends FAILED
at the cap. Two real transactions of two replicas' stores on one database (each
replica has one writer: decision 265), the first held open until the second waits."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from turnkeeper_server.journal import containment, start
from turnkeeper_server.records import Policy
from turnkeeper_server.store.contract import Tx
from turnkeeper_server.store.postgres import PostgresDatabase

from tests.support.postgres import PostgresCluster

POLICY = Policy()
AGENT = "agent-a"
HELD = ("held-1", "held-2")


@pytest.fixture
async def replicas(
    postgres_cluster: PostgresCluster,
) -> AsyncIterator[tuple[PostgresDatabase, PostgresDatabase]]:
    """Two replicas' stores on one database."""
    url = postgres_cluster.new_database()
    stores = (PostgresDatabase(url), PostgresDatabase(url))
    for store in stores:
        store.open()
    try:
        yield stores
    finally:
        for store in stores:
            store.close()


def _held(tx: Tx) -> None:
    for i, turn_id in enumerate(HELD):
        start.start_turn(
            tx,
            start.StartRequest(
                turn_id=turn_id,
                thread_id=f"th-{i}",
                agent=AGENT,
                input_json="{}",
                replica="r0",
                incarnation="dead",
            ),
            POLICY,
        )
        tx.execute(
            "UPDATE main.turns SET suspect = ?, owner_replica = NULL, "
            "owner_incarnation = NULL, lease_expires_at = NULL WHERE turn_id = ?",
            (containment.HELD, turn_id),
        )


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


async def test_two_replicas_releasing_at_once_put_one_turn_on_probation(
    replicas: tuple[PostgresDatabase, PostgresDatabase],
) -> None:
    database, other_replica = replicas
    await database.write(_held)
    first_released = threading.Event()
    let_go = threading.Event()

    def release_and_hold(tx: Tx) -> Any:
        released = containment.release_next(tx, AGENT, None, POLICY)
        first_released.set()
        let_go.wait(30)  # the transaction stays open until the second one waits
        return released

    first = asyncio.ensure_future(database.write(release_and_hold))
    assert await asyncio.to_thread(first_released.wait, 30)
    second = asyncio.ensure_future(
        other_replica.write(lambda tx: containment.release_next(tx, AGENT, None, POLICY))
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    # Another process's state with nothing to await: a bounded poll.
    while not await asyncio.to_thread(_waiting_on_a_lock, database.url):
        assert loop.time() < deadline, "the second release never waited for the first"
        await asyncio.sleep(0.05)
    let_go.set()
    released = [await first, await second]

    probation = await database.write(
        lambda tx: tx.execute(
            "SELECT turn_id FROM main.turns WHERE agent = ? AND suspect = ? AND state = 'RUNNING'",
            (AGENT, containment.PROBATION),
        ).fetchall()
    )
    assert [r[0] for r in probation] == ["held-1"]
    assert released[0] is not None and released[0].turn.turn_id == "held-1"
    assert released[1] is None
