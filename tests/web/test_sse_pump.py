"""The one SSE pump (web/pump.py) under both event streams: a turn's events
(`/v1/turns/{id}/events`) and a LangGraph run's stream count against one WatchTurn
quota per (token, address), each refused in its own protocol's form; and a Connect
route is made only for a unary method whose request type the descriptor names
(web/connect.py). A real service on port 0 (decision 272)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path

import aiohttp
import pytest
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.limits import DEFAULT_LIMITS
from turnkeeper_server.operations import Origin
from turnkeeper_server.web import connect, pump

from tests.support.security import write_tokens
from tests.support.service import ServiceFactory
from tests.web.test_sse_quota import panels_thread, start_turn

pytestmark = pytest.mark.timeout(60)

TWO = dataclasses.replace(DEFAULT_LIMITS, max_watch_streams_per_client=2)


async def test_a_turns_events_and_a_langgraph_run_stream_share_one_quota(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel", "admin": "admin"})
    service = await make_service(
        limits=TWO, http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl"
    )
    assert service.web is not None
    await panels_thread(service)
    await start_turn(service.address, tokens["admin"])
    events = f"{service.web.url}v1/turns/t1/events"
    run = f"{service.web.url}threads/th1/runs/t1/stream"
    headers = {"Authorization": f"Bearer {tokens['panel']}"}
    async with contextlib.AsyncExitStack() as held:
        session = await held.enter_async_context(aiohttp.ClientSession())
        for url in (events, run):
            response = await held.enter_async_context(session.get(url, headers=headers))
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream"
        # The quota is full: the LangGraph stream is refused in LangGraph's form ...
        async with session.get(run, headers=headers) as refused:
            assert refused.status == 429
            assert "max_watch_streams_per_client" in (await refused.json())["detail"]
        # ... and the turn's events in Connect's.
        async with session.get(events, headers=headers) as refused:
            assert refused.status == 429
            assert (await refused.json())["code"] == "resource_exhausted"
        # Another token from the same address has a quota of its own.
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        response = await held.enter_async_context(session.get(run, headers=admin))
        assert response.status == 200


def test_a_connect_route_is_refused_for_a_streaming_method() -> None:
    async def watch(
        request: turns_pb2.WatchTurnRequest, context: Origin
    ) -> turns_pb2.WatchTurnResponse:
        return turns_pb2.WatchTurnResponse()

    with pytest.raises(ValueError, match="streams"):
        connect.method_route(connect.TURN_SERVICE, turns_pb2.WatchTurnRequest, watch)


async def test_the_frame_buffer_hands_frames_in_order_within_its_byte_bound() -> None:
    """One source puts, one pump takes: a frame already there is taken at once
    (`take`), none is EMPTY, and the source waits while the bound is reached (one
    frame always fits)."""
    buffer = pump.FrameBuffer(limit=10)
    assert buffer.take() is pump.EMPTY
    await buffer.put(pump.Frame(b"123456", 1))
    # 6 + 6 > 10: the second put waits until the first frame is taken.
    second = asyncio.create_task(buffer.put(pump.Frame(b"abcdef", 2)))
    await asyncio.sleep(0)
    assert not second.done() and buffer.bytes == 6
    got = buffer.take()
    assert isinstance(got, pump.Frame) and got.seq == 1
    await asyncio.wait_for(second, 10)
    waiting = asyncio.create_task(buffer.get())
    assert (await asyncio.wait_for(waiting, 10)) == pump.Frame(b"abcdef", 2)
    getter = asyncio.create_task(buffer.get())
    await asyncio.sleep(0)
    assert not getter.done()
    await buffer.put(None)
    assert await asyncio.wait_for(getter, 10) is None
    assert buffer.bytes == 0
