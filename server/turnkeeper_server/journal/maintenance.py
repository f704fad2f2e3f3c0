"""Checkpoint maintenance: LangGraph's extended saver operations (`prune`,
`delete_for_runs`, `copy_thread`) and the pruning retention uses, written once;
the rows they touch are the backend's (`Tx.checkpoints`: sessions.db's tables on
SQLite, PostgresSaver's checkpoints, checkpoint_blobs and checkpoint_writes).

A thread with a live turn is refused (FAILED_PRECONDITION) by every operation that
deletes its checkpoints or writes into it: its checkpoints are what a re-drive or
a resume continues from. Checkpoint ids are LangGraph's time-ordered ids, so the
latest of a namespace is its greatest id (as `checkpoints.get` reads it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from turnkeeper_server.errors import WrongState
from turnkeeper_server.records import UNFINISHED_SQL
from turnkeeper_server.store.contract import Tx

KEEP_LATEST, DELETE = "keep_latest", "delete"


def live_threads(tx: Tx, thread_ids: Iterable[str]) -> list[str]:
    """Those of `thread_ids` with a RUNNING, PARKED or QUEUED turn."""
    return [
        thread_id
        for thread_id in dict.fromkeys(thread_ids)
        if tx.execute(
            f"SELECT 1 FROM main.turns WHERE thread_id = ? AND state IN {UNFINISHED_SQL} LIMIT 1",
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


def prune_thread(tx: Tx, thread_id: str, strategy: str) -> int:
    """Keep only the latest checkpoint of each namespace (and its writes), or delete
    them all. No check for live turns: the caller decides. Returns how many went."""
    return sum(
        # keep_latest keeps `latest`; delete keeps nothing.
        tx.checkpoints.prune_namespace(
            tx, thread_id, ns, latest if strategy == KEEP_LATEST else None
        )
        for ns, latest in tx.checkpoints.namespaces(tx, thread_id)
    )


def prune(tx: Tx, thread_ids: Sequence[str], strategy: str) -> int:
    _refuse_live(tx, thread_ids, "pruned")
    return sum(prune_thread(tx, thread_id, strategy) for thread_id in dict.fromkeys(thread_ids))


def delete_for_runs(tx: Tx, run_ids: Sequence[str]) -> int:
    """Delete the checkpoints whose metadata names one of `run_ids`, with their
    writes (the metadata filter is the backend's: `checkpoints_of_runs`)."""
    found: list[tuple[str, str, str]] = []
    for run_id in dict.fromkeys(run_ids):
        found += tx.checkpoints.checkpoints_of_runs(tx, run_id)
    _refuse_live(tx, (thread_id for thread_id, _, _ in found), "deleted")
    for thread_id, ns, checkpoint_id in found:
        tx.checkpoints.delete_checkpoint(tx, thread_id, ns, checkpoint_id)
    return len(found)


def copy_thread(tx: Tx, source: str, target: str) -> int:
    """Every checkpoint and write of `source`, under `target` (same ids, so the
    parent chain and the order carry over). Turn boundaries stay with the source:
    the source's turns did not run on the target."""
    if source == target:
        return 0
    _refuse_live(tx, [target], "written over")
    return int(tx.checkpoints.copy_thread(tx, source, target))
