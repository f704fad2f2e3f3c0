"""The turn horizon: finished turns themselves are deleted once old enough.

Retention (retention.py) keeps a finished turn's row so TurnStatus, GetTurn and
StartTurn's idempotency keep answering; past the turn horizon the row goes too,
with everything that still names the turn: its retained events, the outbox rows
held for its events subject, and its turn boundaries (the only rows of
sessions.db keyed by a turn: re-drive reads them for that turn alone). A turn
that is RUNNING, PARKED or QUEUED is never taken, however old.

A thread left with no turn at all is erased like DeleteThread would erase it (its
checkpoints, their writes, and on PostgreSQL their blobs): an agent token's
claim to a thread is that it has turns there (security/auth.py), so a thread of
checkpoints with no turn would be open to any agent's next StartTurn. The horizon
is therefore also how long an idle thread is kept.

The audit log is not touched: its records name turns and threads by id only, and
who did what is what that log is for (as after an erasure).

Written once over the store contract: on PostgreSQL the batch's rows are taken
`FOR UPDATE SKIP LOCKED`, so replicas sweeping at once share the work, and each
thread is claimed (`Tx.claim_thread`) before its turns go, so one replica alone
decides whether the thread was left empty. A StartTurn on a thread at the very
moment its last turn is swept may find the thread erased and start it afresh:
the thread had been idle for the whole horizon.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper_server.journal.erasure import delete_turns
from turnkeeper_server.records import ENDED_SQL, Policy
from turnkeeper_server.store.contract import Tx


@dataclass(frozen=True)
class Deleted:
    turns: int
    threads: int


def delete_batch(tx: Tx, *, cutoff: float, policy: Policy, limit: int) -> Deleted:
    """Delete up to `limit` turns that ended before `cutoff`, oldest first. A thread
    another replica's sweep holds is left for a later batch."""
    rows = tx.execute(
        f"SELECT turn_id, thread_id FROM main.turns WHERE state IN {ENDED_SQL} "
        f"AND updated_at < ? ORDER BY updated_at LIMIT ?{tx.skip_locked}",
        (cutoff, limit),
    ).fetchall()
    threads: dict[str, list[str]] = {}
    for turn_id, thread_id in rows:
        threads.setdefault(thread_id, []).append(turn_id)
    claimed = [thread_id for thread_id in threads if tx.claim_thread(thread_id)]
    ids = [turn_id for thread_id in claimed for turn_id in threads[thread_id]]
    if not ids:
        return Deleted(0, 0)
    delete_turns(tx, ids, policy)
    emptied = [
        thread_id
        for thread_id in claimed
        if tx.execute(
            "SELECT 1 FROM main.turns WHERE thread_id = ? LIMIT 1", (thread_id,)
        ).fetchone()
        is None
    ]
    for thread_id in emptied:
        tx.checkpoints.delete_thread(tx, thread_id)
    return Deleted(len(ids), len(emptied))
