"""The engine's effects: the ledger's operations (journal/effects.py), one
transaction each, and the reads ListEffects answers with."""

from __future__ import annotations

from turnkeeper_server.journal import effects
from turnkeeper_server.records import EffectCall, EffectRecord
from turnkeeper_server.store.contract import Store


class Effects:
    def __init__(self, db: Store) -> None:
        self.db = db

    async def begin(self, call: EffectCall, *, record_intent: bool) -> tuple[str, EffectRecord]:
        """BeginEffect. Without an intent to record it is a read (decision 224: a
        `retry` effect costs one durable commit, its outcome's), unless the call
        diverges and a recorded call must be superseded."""
        if not record_intent:
            peeked = await self.db.read(lambda conn: effects.peek(conn, call))
            if peeked is not None:
                return peeked
        return await self.db.write(lambda tx: effects.begin(tx, call, record_intent=record_intent))

    async def record(
        self, call: EffectCall, key: str, state: str, outcome_json: str
    ) -> EffectRecord:
        return await self.db.write(lambda tx: effects.record(tx, call, key, state, outcome_json))

    async def list(self, turn_id: str, offset: int, limit: int) -> list[EffectRecord]:
        return await self.db.read(lambda conn: effects.list_effects(conn, turn_id, offset, limit))
