"""LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance)
against RemoteSaver and a real service.

The suite drives the async methods (aput, alist ...). It runs twice: once on
RemoteSaver itself (the grpc.aio path), once on a view of it whose async methods
call the sync ones in a worker thread, so the blocking-channel path passes the
same contract. Run with ``-s`` to see the suite's report.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks
from turnkeeper.agent.saver import RemoteSaver

pytestmark = [pytest.mark.timeout(300), pytest.mark.both_backends]


def service_address(service: Any) -> str:
    """host:port of the ``service`` fixture (tests/conftest.py)."""
    return str(service.address)


class SyncPathSaver(RemoteSaver):
    """RemoteSaver whose async methods run its sync ones in a thread: the
    conformance suite, which only calls async methods, then tests the sync path."""

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        tuples = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in tuples:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))


async def _validate(saver_type: type[RemoteSaver], address: str) -> CapabilityReport:
    @checkpointer_test(name=saver_type.__name__)
    async def factory() -> AsyncIterator[RemoteSaver]:
        saver = saver_type(address)
        try:
            yield saver
        finally:
            await saver.aclose()

    print()
    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()
    return report


def _assert_passes(report: CapabilityReport) -> None:
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    # Every base capability ran at least one test (none skipped as undetected).
    # The extended ones too: delete_for_runs, copy_thread, prune.
    for name in (
        "put",
        "put_writes",
        "get_tuple",
        "list",
        "delete_thread",
        "delete_for_runs",
        "copy_thread",
        "prune",
    ):
        result = report.results[name]
        assert result.detected, name
        assert result.tests_passed > 0, name


@pytest.mark.parametrize("saver_type", [RemoteSaver, SyncPathSaver])
async def test_conformance(service: Any, saver_type: type[RemoteSaver]) -> None:
    report = await _validate(saver_type, service_address(service))
    _assert_passes(report)
