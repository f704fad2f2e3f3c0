"""The journal's rules against a real store: the two SQLite files under tmp_path, or a
fresh database of the session's PostgreSQL cluster. Every module here is marked
`both_backends`, so each test runs on both.

These tests call the journal's functions inside `Store.write` as the engine does, with
no service, RPC or agent around them: what they assert is the journal's own rule,
where a reader of `server/turnkeeper_server/journal/` looks for it (the black-box
tests of the same behaviour, through gRPC and agents, are in tests/service/,
tests/effects/ and tests/langgraph_api/).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from turnkeeper_server.journal import checkpoints, start, transitions
from turnkeeper_server.journal.redrive import redrive_orphan
from turnkeeper_server.records import Fence, NewEvent, Policy, TurnRecord
from turnkeeper_server.store import Store, Tx, open_store
from turnkeeper_server.store.records import CheckpointPut, PendingWrite, WritesPut

T = TypeVar("T")

POLICY = Policy()
REPLICA = ("replica-1", "incarnation-1")


@contextmanager
def opened_store(tmp_path: Path, database_url: str | None, name: str = "") -> Iterator[Store]:
    """A replica's store, opened for the block: on `database_url`'s PostgreSQL, else
    on SQLite files in `tmp_path` (named with the prefix `name`, for a second one)."""
    db = open_store(
        database_url=database_url or "",
        turns_path=tmp_path / f"{name}turns.db",
        sessions_path=tmp_path / f"{name}sessions.db",
        synchronous="FULL",
        status_cache_turns=0,
    )
    db.open()
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
async def store(tmp_path: Path, database_url: str | None) -> AsyncIterator[Store]:
    with opened_store(tmp_path, database_url) as db:
        yield db


class Journal:
    """A turn's life written straight through the journal, one transaction a call."""

    def __init__(self, db: Store) -> None:
        self.db = db
        self._serde = JsonPlusSerializer()

    async def write(self, fn: Callable[[Tx], T]) -> T:
        return await self.db.write(fn)

    def turn(self, turn_id: str) -> TurnRecord:
        return transitions.require_turn(self.db.read_conn(), turn_id)

    async def start(self, turn_id: str, thread_id: str) -> TurnRecord:
        """A RUNNING turn owned by REPLICA; its first attempt is 0."""
        request = start.StartRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent="agent",
            input_json="{}",
            replica=REPLICA[0],
            incarnation=REPLICA[1],
        )
        started = await self.write(lambda tx: start.start_turn(tx, request, POLICY))
        return started.turn

    async def events(self, turn_id: str, attempt: int, *types: str) -> int:
        """Append events of these types after the turn's last; returns the new last_seq."""
        last = self.turn(turn_id).last_seq
        batch: list[NewEvent] = [
            (last + i, type_, f'{{"attempt": {attempt}}}') for i, type_ in enumerate(types, 1)
        ]
        return await self.write(
            lambda tx: transitions.append_events(
                tx, turn_id=turn_id, attempt=attempt, events=batch, policy=POLICY
            )
        )

    def put(self, thread_id: str, checkpoint_id: str) -> CheckpointPut:
        checkpoint = empty_checkpoint()
        checkpoint["id"] = checkpoint_id
        type_, blob = self._serde.dumps_typed(checkpoint)
        return CheckpointPut(
            thread_id=thread_id,
            checkpoint_ns="",
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id="",
            type=type_,
            blob=blob,
            metadata_json='{"source": "loop", "step": 1}',
        )

    async def checkpoint(
        self, thread_id: str, checkpoint_id: str, fence: Fence | None
    ) -> str | None:
        """PutCheckpoint through the journal's fenced write; the turn whose boundary
        moved (a watcher of its settled events wakes), if any."""
        write = checkpoints.CheckpointWrite(self.put(thread_id, checkpoint_id), fence)
        boundary = await self.write(lambda tx: checkpoints.write(tx, write, POLICY))
        return None if boundary is None else boundary.turn_id

    async def task_writes(
        self,
        thread_id: str,
        checkpoint_id: str,
        task_id: str,
        fence: Fence | None,
        effects_made: frozenset[str] | None,
        channel: str = "messages",
    ) -> None:
        """PutWrites of one task through the journal's fenced write."""
        value: PendingWrite = (0, channel, "json", b'"done"')
        row = WritesPut(thread_id, "", checkpoint_id, task_id, "", [value], False)
        write = checkpoints.CheckpointWrite(row, fence, effects_made)
        await self.write(lambda tx: checkpoints.write(tx, write, POLICY))

    async def redrive(self, turn_id: str) -> TurnRecord:
        """The turn's execution died: attempt+1, rewound to its newest boundary."""

        def orphan(tx: Tx) -> TurnRecord:
            turn = transitions.lock_turn(tx, turn_id)
            return redrive_orphan(tx, turn, POLICY, REPLICA).turn

        return await self.write(orphan)

    def boundary(self, turn_id: str) -> tuple[str, int]:
        return transitions.latest_boundary(self.db.read_conn(), turn_id)


@pytest.fixture
def journal(store: Store) -> Journal:
    return Journal(store)
