"""A resume over HTTP when a re-drive lands between the check of its position and
its first page (decision 650): LangGraph's join (`/threads/{thread_id}/runs/
{run_id}/stream` with Last-Event-ID: langgraph-sdk's `runs.join_stream`, and a
`runs.stream` reconnecting) and the turn's own SSE (`/v1/turns/{turn_id}/events`
with Last-Event-ID and attempt). Both checked that the client's last event (seq 2,
attempt 0) still stood; the re-drive then took seqs 1 and 2 back and the re-run
wrote seqs 1 to 3 before the stream's first read. Before, the stream went on
after seq 2 with the re-run's seq 3: the client kept the two tokens taken back. A
join whose Last-Event-ID is not one of the stream's goes on from the run's newest
event: the same, with the turn's attempt for that event's.

The turn is driven over gRPC as an executor drives it (no agent: the re-drive is
an operator's, landed in the gap by a hook on the stream's first read)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import aiohttp
import pytest
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine import watch
from turnkeeper_server.web.langgraph.stream import REMOVE_ALL, live_id

from tests.support.sse_client import Frame, frames
from tests.support.turns import start

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(120)]

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"


def tokens(attempt: int, *texts: str) -> list[turns_pb2.EventInput]:
    """A model's tokens from seq 1, as the bridge journals them."""
    return [
        turns_pb2.EventInput(
            seq=seq,
            type="token",
            data_json=json.dumps({"node": "chat", "text": text, "id": f"reply-{attempt}"}),
        )
        for seq, text in enumerate(texts, 1)
    ]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.mark.parametrize("endpoint", ["langgraph-join", "langgraph-join-unknown-id", "turn-events"])
async def test_a_rewind_after_a_resumes_check_is_told_before_the_rerun(
    service: TurnkeeperServer,
    turns: Stub,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
) -> None:
    run_id, thread_id = str(uuid.uuid4()), str(uuid.uuid4())
    await start(turns, turn_id=run_id, thread_id=thread_id)
    await turns.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id=run_id, attempt=0, events=tokens(0, "Hel", "lo"))
    )
    gap = asyncio.Event()
    first_read = watch._Tail._read

    async def gapped(self: watch._Tail, cursor: int) -> Any:
        if not gap.is_set():
            # Past the stream's check of its position, before its first page.
            await turns.Redrive(turns_pb2.RedriveRequest(turn_id=run_id, force=True))
            await turns.ClaimTurn(
                turns_pb2.ClaimTurnRequest(
                    turn_id=run_id, attempt=1, replica="r2", incarnation="i2"
                )
            )
            await turns.AppendEvents(
                turns_pb2.AppendEventsRequest(
                    turn_id=run_id, attempt=1, events=tokens(1, "Good", "by", "e")
                )
            )
            gap.set()
        return await first_read(self, cursor)

    monkeypatch.setattr(watch._Tail, "_read", gapped)
    assert service.web is not None
    base = service.web.url.rstrip("/")
    if endpoint.startswith("langgraph-join"):
        url = f"{base}/threads/{thread_id}/runs/{run_id}/stream?stream_mode=messages-tuple"
        # An id that is not the stream's goes on from the run's newest event (seq 2)
        # with the turn's attempt, as it stood when the join came (0).
        last = "not-an-id" if endpoint.endswith("unknown-id") else live_id(2, 0)
        headers = {"Last-Event-ID": last}
    else:
        url = f"{base}/v1/turns/{run_id}/events?attempt=0"
        headers = {"Last-Event-ID": "2"}

    async def read() -> list[Frame]:
        async with session.get(url, headers=headers) as response:
            assert response.status == 200, await response.text()
            return [frame async for frame in frames(response)]

    reader = asyncio.create_task(read())
    await asyncio.wait_for(gap.wait(), 60)
    await turns.FinishTurn(
        turns_pb2.FinishTurnRequest(turn_id=run_id, attempt=1, outcome=turns_pb2.OUTCOME_DONE)
    )
    got = await asyncio.wait_for(reader, 60)

    if endpoint.startswith("langgraph-join"):
        # LangGraph's remove-all first (the client's reply is gone), then the
        # re-run's tokens, each once.
        first, *rest = got
        assert first.event == "messages" and first.data[0]["id"] == REMOVE_ALL
        streamed = [(f.id, f.data[0]["content"]) for f in rest if f.event == "messages"]
        assert streamed == [
            (live_id(1, 1), "Good"),
            (live_id(2, 1), "by"),
            (live_id(3, 1), "e"),
        ]
    else:
        # The stream's reset, then the turn's events from seq 1, each once.
        assert [(f.event, f.id) for f in got] == [
            ("reset", "0"),
            ("event", "1"),
            ("event", "2"),
            ("event", "3"),
            ("event", "4"),
            ("end", None),
        ]
        assert got[0].data["attempt"] == 1 and not got[0].data["local"]
        assert [f.data["attempt"] for f in got[1:5]] == [1, 1, 1, 1]
