"""A LangGraph stream's follower reads the journal once, at its start, for a whole
run: every later wake comes with the committing writer's news (engine/watch.py
`_Tail`): the claim, the appends, the root checkpoints (decision 440), and the
finish or the park with its events and the turn's end (decision 540). A commit
without news would cost a read per stream, which is what these count."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.engine import watch

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

QUESTION: dict[str, Any] = {"messages": [{"role": "user", "content": "how fast?"}]}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The cursor of every read a follower made of the journal."""
    made: list[int] = []
    read = watch._Tail._read

    async def counted(self: watch._Tail, cursor: int) -> Any:
        made.append(cursor)
        return await read(self, cursor)

    monkeypatch.setattr(watch._Tail, "_read", counted)
    # No wait without a wake ends in the test's time: every read is a wake's.
    monkeypatch.setattr(watch, "SETTLED_RECHECK_SECONDS", 600.0)
    return made


async def test_a_streamed_run_reads_the_journal_once(
    sdk: LangGraphClient, reads: list[int]
) -> None:
    # One service for the three (a service and its agent host cost seconds to start).
    for kind in ("live", "settled"):
        parts = [
            part.event
            async for part in sdk.runs.stream(
                None,
                "durable-execution",
                input=QUESTION,
                stream_mode=["values", "updates"],
                headers={"X-Turnkeeper-Stream": kind},
            )
        ]
        assert parts.count("updates") == 3 and parts[-1] == "values"
        assert reads == [0], kind
        reads.clear()
    # A run that stops at an interrupt: its park tells its events and its state.
    thread = await sdk.threads.create()
    updates = [
        part.data
        async for part in sdk.runs.stream(
            thread["thread_id"], "approval", input={"topic": "x"}, stream_mode="updates"
        )
        if part.event == "updates"
    ]
    assert any("__interrupt__" in (u or {}) for u in updates)
    assert reads == [0]
