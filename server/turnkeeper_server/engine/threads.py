"""The engine's threads: LangGraph API threads (journal/threads.py) committed through
the store, and what a thread's turns say about it (its status, its newest turn)."""

from __future__ import annotations

import time
from typing import Any

from turnkeeper_server.journal import runs, threads, webhooks
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import TURN_COLUMNS, TurnRecord
from turnkeeper_server.store.contract import Conn, Store


class Threads:
    def __init__(self, db: Store) -> None:
        self.db = db

    async def get(self, thread_id: str) -> ThreadRecord | None:
        return await self.db.read(lambda conn: threads.get(conn, thread_id))

    def get_now(self, thread_id: str) -> ThreadRecord | None:
        """As get, on the calling thread (a surface's synchronous access rule)."""
        return threads.get(self.db.read_conn(), thread_id)

    async def create(
        self, thread_id: str, metadata: dict[str, Any], *, if_exists: str, owner: str = ""
    ) -> ThreadRecord:
        return await self.db.write(
            lambda tx: threads.create(
                tx, thread_id, metadata, time.time(), if_exists=if_exists, owner=owner
            )
        )

    async def ensure(
        self, thread_id: str, metadata: dict[str, Any], owner: str = ""
    ) -> ThreadRecord:
        return await self.db.write(
            lambda tx: threads.ensure(tx, thread_id, metadata, time.time(), owner)
        )

    async def ensure_made(
        self, thread_id: str, metadata: dict[str, Any], owner: str = ""
    ) -> tuple[ThreadRecord, bool]:
        """As ensure, and whether this write made the thread (journal/threads.py)."""
        return await self.db.write(
            lambda tx: threads.ensure_made(tx, thread_id, metadata, time.time(), owner)
        )

    async def update_metadata(
        self, thread_id: str, metadata: dict[str, Any]
    ) -> ThreadRecord | None:
        return await self.db.write(
            lambda tx: threads.update_metadata(tx, thread_id, metadata, time.time())
        )

    async def touch(self, thread_id: str) -> None:
        await self.db.write(lambda tx: threads.touch(tx, thread_id, time.time()))

    async def search(
        self,
        *,
        metadata: dict[str, Any],
        ids: list[str] | None,
        limit: int,
        offset: int,
        owner: str | None = None,
    ) -> list[ThreadRecord]:
        return await self.db.read(
            lambda conn: threads.search(
                conn, metadata=metadata, ids=ids, limit=limit, offset=offset, owner=owner
            )
        )

    async def put_run(self, record: RunRecord) -> None:
        """A LangGraph API run's record beside its turn (journal/runs.py)."""
        await self.db.write(lambda tx: runs.put(tx, record))

    async def runs(self, turn_ids: list[str]) -> dict[str, RunRecord]:
        """The run records of these turns that have one, by turn id."""
        return await self.db.read(lambda conn: runs.get_many(conn, turn_ids))

    async def unfinished_runs(self) -> list[str]:
        """The run ids of every run still running or queued, oldest first."""
        return await self.db.read(lambda conn: [t for t, _ in runs.unfinished(conn)])

    async def unfinished_runs_of_assistant(self, assistant_id: str) -> list[str]:
        """The run ids of this assistant still running or queued, oldest first."""
        return await self.db.read(lambda conn: runs.unfinished_of_assistant(conn, assistant_id))

    async def values_before(self, turn: TurnRecord) -> str | None:
        """The thread's state as its turns before `turn` journaled it last."""
        return await self.db.read(
            lambda conn: runs.values_before(conn, turn.thread_id, turn.turn_id, turn.created_at)
        )

    async def webhook(
        self, turn_id: str
    ) -> tuple[webhooks.Delivery | None, list[webhooks.Attempt]]:
        """The run's webhook delivery (None: it has none) and each attempt at it."""
        return await self.db.read(
            lambda conn: (webhooks.get(conn, turn_id), webhooks.attempts(conn, turn_id))
        )

    async def turns(self, thread_id: str, *, limit: int, offset: int = 0) -> list[TurnRecord]:
        """The thread's turns, newest first."""
        return await self.db.read(lambda conn: _turns(conn, thread_id, limit, offset))


def _turns(conn: Conn, thread_id: str, limit: int, offset: int) -> list[TurnRecord]:
    rows = conn.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ? "
        "ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?",
        (thread_id, limit, offset),
    ).fetchall()
    return [TurnRecord(*r) for r in rows]
