"""RemoteSaver's extended LangGraph capabilities: ``delete_for_runs``, ``copy_thread``
and ``prune``, sync and async, each a single call to the service (CheckpointService
PruneThreads, DeleteForRuns, CopyThread), built by one request builder per
operation for both paths.

The service refuses (``WrongState``, FAILED_PRECONDITION) to prune or delete the
checkpoints of a thread with a live turn, or to copy onto one: a turn continues
from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnkeeper.v1 import checkpoints_pb2

if TYPE_CHECKING:
    from turnkeeper.agent.saver._channels import Channels

_STRATEGIES = {
    "keep_latest": checkpoints_pb2.PRUNE_STRATEGY_KEEP_LATEST,
    "delete": checkpoints_pb2.PRUNE_STRATEGY_DELETE,
}


def _prune_request(thread_ids: Sequence[str], strategy: str) -> checkpoints_pb2.PruneThreadsRequest:
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    return checkpoints_pb2.PruneThreadsRequest(
        thread_ids=[str(t) for t in thread_ids], strategy=_STRATEGIES[strategy]
    )


def _runs_request(run_ids: Sequence[str]) -> checkpoints_pb2.DeleteForRunsRequest:
    return checkpoints_pb2.DeleteForRunsRequest(run_ids=[str(r) for r in run_ids])


def _copy_request(source: str, target: str) -> checkpoints_pb2.CopyThreadRequest:
    return checkpoints_pb2.CopyThreadRequest(
        source_thread_id=str(source), target_thread_id=str(target)
    )


class ExtendedSaverMethods:
    """Mixed into RemoteSaver (ahead of BaseCheckpointSaver, whose defaults raise
    NotImplementedError)."""

    _channels: Channels

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and writes) of the given runs (metadata ``run_id``)."""
        if run_ids:
            self._channels.sync().delete_for_runs(_runs_request(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another."""
        self._channels.sync().copy_thread(_copy_request(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only the latest checkpoint per namespace (``keep_latest``), or delete
        every checkpoint (``delete``), of the given threads."""
        if thread_ids:
            self._channels.sync().prune_threads(_prune_request(thread_ids, strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        if run_ids:
            await self._channels.aio().delete_for_runs(_runs_request(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await self._channels.aio().copy_thread(_copy_request(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        if thread_ids:
            await self._channels.aio().prune_threads(_prune_request(thread_ids, strategy))
