"""Checkpoint maintenance in sessions.db: LangGraph's extended saver operations
(`prune`, `delete_for_runs`, `copy_thread`) and the pruning retention uses.

A thread with a live turn is refused (FAILED_PRECONDITION) by every operation that
deletes its checkpoints or writes into it: its checkpoints are what a re-drive or
a resume continues from. Checkpoint ids are LangGraph's time-ordered ids, so the
latest of a namespace is its greatest id (as `checkpoints.get` reads it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from turnkeeper_server.errors import WrongState
from turnkeeper_server.store.sqlite import Tx

KEEP_LATEST, DELETE = "keep_latest", "delete"


def live_threads(tx: Tx, thread_ids: Iterable[str]) -> list[str]:
    """Those of `thread_ids` with a RUNNING, PARKED or QUEUED turn."""
    return [
        thread_id
        for thread_id in dict.fromkeys(thread_ids)
        if tx.execute(
            "SELECT 1 FROM main.turns WHERE thread_id = ? "
            "AND state IN ('RUNNING','PARKED','QUEUED') LIMIT 1",
            (thread_id,),
        ).fetchone()
        is not None
    ]


def _refuse_live(tx: Tx, thread_ids: Iterable[str], what: str) -> None:
    live = live_threads(tx, thread_ids)
    if live:
        raise WrongState(
            f"thread {live[0]!r} has a live turn: its checkpoints are what the turn "
            f"continues from, so they cannot be {what} until it ends (or is cancelled)"
        )


def _delete_checkpoint(tx: Tx, thread_id: str, ns: str, checkpoint_id: str) -> None:
    key = (thread_id, ns, checkpoint_id)
    where = "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    tx.execute(f"DELETE FROM sessions.checkpoints {where}", key)
    tx.execute(f"DELETE FROM sessions.writes {where}", key)
    tx.execute(f"DELETE FROM sessions.turnkeeper_boundaries {where}", key)


def prune_thread(tx: Tx, thread_id: str, strategy: str) -> int:
    """Keep only the latest checkpoint of each namespace (and its writes), or delete
    them all. No check for live turns: the caller decides. Returns how many went."""
    deleted = 0
    namespaces = [
        r[0]
        for r in tx.execute(
            "SELECT DISTINCT checkpoint_ns FROM sessions.checkpoints WHERE thread_id = ?",
            (thread_id,),
        ).fetchall()
    ]
    for ns in namespaces:
        latest = tx.execute(
            "SELECT max(checkpoint_id) FROM sessions.checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        ).fetchone()[0]
        # keep_latest keeps `latest`; delete keeps nothing (no id is greater).
        cut = latest if strategy == KEEP_LATEST else None
        for table in ("checkpoints", "writes", "turnkeeper_boundaries"):
            sql = f"DELETE FROM sessions.{table} WHERE thread_id = ? AND checkpoint_ns = ?"
            params: tuple[str, ...] = (thread_id, ns)
            if cut is not None:
                sql += " AND checkpoint_id < ?"
                params += (cut,)
            count = tx.execute(sql, params).rowcount
            if table == "checkpoints":
                deleted += count
    if strategy == DELETE:
        # Writes saved against a checkpoint that was never stored go too.
        tx.execute("DELETE FROM sessions.writes WHERE thread_id = ?", (thread_id,))
    return deleted


def prune(tx: Tx, thread_ids: Sequence[str], strategy: str) -> int:
    _refuse_live(tx, thread_ids, "pruned")
    return sum(prune_thread(tx, thread_id, strategy) for thread_id in dict.fromkeys(thread_ids))


def delete_for_runs(tx: Tx, run_ids: Sequence[str]) -> int:
    """Delete the checkpoints whose metadata names one of `run_ids`, with their
    writes. json_extract is SQLite's; the same filter `checkpoints.list_` uses."""
    found: list[tuple[str, str, str]] = []
    for run_id in dict.fromkeys(run_ids):
        found += tx.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM sessions.checkpoints "
            "WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') = ?",
            (run_id,),
        ).fetchall()
    _refuse_live(tx, (thread_id for thread_id, _, _ in found), "deleted")
    for thread_id, ns, checkpoint_id in found:
        _delete_checkpoint(tx, thread_id, ns, checkpoint_id)
    return len(found)


def copy_thread(tx: Tx, source: str, target: str) -> int:
    """Every checkpoint and write of `source`, under `target` (same ids, so the
    parent chain and the order carry over). Turn boundaries stay with the source:
    the source's turns did not run on the target."""
    if source == target:
        return 0
    _refuse_live(tx, [target], "written over")
    copied = tx.execute(
        "INSERT OR REPLACE INTO sessions.checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, type, checkpoint, metadata) "
        "SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
        "metadata FROM sessions.checkpoints WHERE thread_id = ?",
        (target, source),
    ).rowcount
    tx.execute(
        "INSERT OR REPLACE INTO sessions.writes (thread_id, checkpoint_ns, checkpoint_id, "
        "task_id, task_path, idx, channel, type, value) "
        "SELECT ?, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value "
        "FROM sessions.writes WHERE thread_id = ?",
        (target, source),
    )
    return int(copied)
