"""The engine's assistants: LangGraph API assistants (journal/assistants.py) committed
through the store, and each announced graph's default assistant."""

from __future__ import annotations

import time
from typing import Any

from turnkeeper._run_request import default_assistant_id

from turnkeeper_server.journal import assistants
from turnkeeper_server.journal.assistants import AssistantRecord
from turnkeeper_server.store.contract import Store, Tx


def default_record(graph_id: str, now: float) -> AssistantRecord:
    """The graph's default assistant, as LangGraph's server makes one per graph."""
    return AssistantRecord(
        assistant_id=default_assistant_id(graph_id),
        graph_id=graph_id,
        version=1,
        name=graph_id,
        description=None,
        config={},
        context={},
        metadata={"created_by": "system"},
        created_at=now,
        updated_at=now,
    )


def ensure_default(tx: Tx, graph_id: str, now: float) -> None:
    """The graph's default assistant, made unless it exists (a replica announcing
    its agent, engine/turns.py)."""
    assistants.create(tx, default_record(graph_id, now), if_exists="do_nothing")


class Assistants:
    def __init__(self, db: Store) -> None:
        self.db = db
        # The graphs whose default assistant this process made sure of.
        self._ensured: set[str] = set()

    async def ensure_defaults(self, graph_ids: list[str]) -> None:
        """Each graph's default assistant, for graphs announced before assistants
        were stored (or only through NATS): one write per graph per process."""
        missing = [g for g in graph_ids if g not in self._ensured]
        if not missing:
            return

        def op(tx: Tx) -> None:
            now = time.time()
            for graph_id in missing:
                ensure_default(tx, graph_id, now)

        await self.db.write(op)
        self._ensured.update(missing)

    async def get(self, assistant_id: str) -> AssistantRecord | None:
        return await self.db.read(lambda conn: assistants.get(conn, assistant_id))

    async def all(self) -> list[AssistantRecord]:
        return await self.db.read(assistants.all_assistants)

    async def create(
        self, record: AssistantRecord, *, if_exists: str
    ) -> tuple[AssistantRecord, bool]:
        return await self.db.write(lambda tx: assistants.create(tx, record, if_exists=if_exists))

    async def update(self, assistant_id: str, changes: dict[str, Any]) -> AssistantRecord:
        return await self.db.write(
            lambda tx: assistants.update(tx, assistant_id, changes, time.time())
        )

    async def versions(self, assistant_id: str) -> list[AssistantRecord]:
        return await self.db.read(lambda conn: assistants.versions(conn, assistant_id))

    async def set_latest(self, assistant_id: str, version: int) -> AssistantRecord:
        return await self.db.write(
            lambda tx: assistants.set_latest(tx, assistant_id, version, time.time())
        )

    async def delete(self, assistant_id: str) -> bool:
        return await self.db.write(lambda tx: assistants.delete(tx, assistant_id))
