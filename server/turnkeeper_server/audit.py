"""The audit log: who did what to which turn or thread, when, and how it ended.

Recorded: ResumeDetached (`resume`), the operator form of Redrive (`redrive`),
CancelTurn (`cancel`), MigrateTurns (`migrate_turns`), DeleteThread (`delete_thread`, also when it cancels the
thread's live turn) and each reload of the tokens file that changed
something or was refused (`tokens_reload`). The startup form of Redrive is the
bridges' own recovery, not an operator's action, and is not recorded.

A record is written after the action, in its own transaction, with the outcome:
`ok`, or the gRPC status the action was refused with and its message. Rows live in
the store's `audit` table beside the journal (turns.db, or the PostgreSQL database),
so a backup of the journal carries them; they are read with
OperationsService/ListAudit and `turnkeeper audit`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from turnkeeper_server.errors import status_for
from turnkeeper_server.security import auth
from turnkeeper_server.store.contract import Store

log = logging.getLogger(__name__)

RESUME, REDRIVE, CANCEL, DELETE_THREAD, TOKENS_RELOAD = (
    "resume",
    "redrive",
    "cancel",
    "delete_thread",
    "tokens_reload",
)
# StartTurn that does to the thread's other turns what a cancel does: an
# interrupt or rollback strategy, or a regenerate (its last answer goes back).
START_INTERRUPT, START_ROLLBACK, REGENERATE = "start_interrupt", "start_rollback", "regenerate"
# A thread's state edited (update_state, a Command's update or goto), or a run from
# an earlier checkpoint (decision 283).
EDIT_STATE, FORK = "edit_state", "fork"
# LangGraph's extended saver operations, which delete or copy checkpoints.
PRUNE_THREADS, DELETE_FOR_RUNS, COPY_THREAD = "prune_threads", "delete_for_runs", "copy_thread"
# A finished run deleted through the LangGraph API (its turn, events and boundaries).
DELETE_RUN = "delete_run"
# Waiting turns moved to another graph version on purpose (docs/versions.md).
MIGRATE_TURNS = "migrate_turns"
OK = "ok"
# Longest detail kept (a refusal's message, a reload's summary).
MAX_DETAIL = 2000


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: float
    actor: str
    action: str
    target: str
    outcome: str
    detail: str


# gRPC metadata a bridge sends: whom it acts for (its JSON-RPC caller).
ON_BEHALF_OF = "turnkeeper-on-behalf-of"
MAX_ON_BEHALF_OF = 200


def actor(context: Any = None) -> str:
    """The calling token ("alice (operator)"), or "anonymous" without tokens. An
    agent token (a bridge) may say whom it acts for: "alice (operator) via
    support (agent:support)"; from other roles that claim is ignored."""
    caller = auth.current()
    if caller is None:
        return "anonymous"
    role = f"agent:{caller.agent}" if caller.role == auth.AGENT else caller.role
    who = f"{caller.name} ({role})"
    behalf = auth.acting_for()
    if behalf is not None:
        # Verified: the service signed this caller's assertion itself.
        return f"{behalf.who} via {who}"
    # A gRPC context has the call's metadata; the HTTP side's has none.
    metadata = getattr(context, "invocation_metadata", None)
    if caller.role == auth.AGENT and metadata is not None:
        claimed = [v for k, v in metadata() or () if k == ON_BEHALF_OF]
        if claimed:
            text = (
                claimed[0] if isinstance(claimed[0], str) else claimed[0].decode("utf-8", "replace")
            )
            return f"{text[:MAX_ON_BEHALF_OF]} via {who}"
    return who


class AuditLog:
    def __init__(self, db: Store) -> None:
        self.db = db
        self._pending: set[asyncio.Task[None]] = set()

    async def record(
        self, action: str, target: str, outcome: str = OK, detail: str = "", who: str | None = None
    ) -> None:
        row = (time.time(), who or actor(), action, target, outcome, detail[:MAX_DETAIL])
        await self.db.write(
            lambda tx: tx.execute(
                "INSERT INTO main.audit (at, actor, action, target, outcome, detail) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    def record_soon(self, action: str, target: str, outcome: str, detail: str, who: str) -> None:
        """From synchronous code on the loop (a signal handler): written shortly."""
        task = asyncio.ensure_future(self.record(action, target, outcome, detail, who))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait for the records started with record_soon."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    @contextlib.asynccontextmanager
    async def action(self, action: str, target: str, context: Any = None) -> AsyncIterator[None]:
        """Record the action in the block with its outcome; errors pass through.
        `context`: the call's, for whom a bridge acts (actor())."""
        who = actor(context)
        try:
            yield
        except Exception as exc:
            code, message = status_for(exc)
            await self.safely(action, target, code.name, message, who)
            raise
        await self.safely(action, target, OK, "", who)

    async def safely(self, action: str, target: str, outcome: str, detail: str, who: str) -> None:
        try:
            await self.record(action, target, outcome, detail, who)
        except Exception:
            # The action itself happened (or was refused) either way; say so loudly.
            log.exception("could not write the audit record of %s %s (%s)", action, target, outcome)

    def list(self, limit: int, before: int | None = None) -> list[AuditRecord]:
        """Newest first; `before`: only ids below it."""
        rows = (
            self.db.read_conn()
            .execute(
                "SELECT id, at, actor, action, target, outcome, detail FROM main.audit "
                "WHERE id < ? ORDER BY id DESC LIMIT ?",
                (before if before is not None else 2**62, limit),
            )
            .fetchall()
        )
        return [AuditRecord(*row) for row in rows]


def audited(
    log: AuditLog | None, action: str, target: str, context: Any = None
) -> contextlib.AbstractAsyncContextManager[None]:
    """`log.action(...)`, or nothing where the service keeps no audit log (tests of a
    servicer alone). Targets are cut to 500 characters (a list of thread ids)."""
    if log is None:
        return contextlib.nullcontext()
    return log.action(action, target[:500], context)
