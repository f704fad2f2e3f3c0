"""A client that never reads an event stream (decision 184): what the service holds
for it stays within the byte budget however large the turn, it is dropped after the
write timeout, and a client that reads gets every event meanwhile."""

from __future__ import annotations

import asyncio
import functools
import json
import socket

import aiohttp
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.engine import watch
from turnkeeper_server.web import sse

from tests.support.service import ServiceFactory, unrenewed
from tests.support.sse_client import frames
from tests.support.turns import start

pytestmark = pytest.mark.both_backends

EVENTS = 200
EVENT_BYTES = 100_000  # 20 MB in all: far past every socket buffer on the way


async def big_turn(address: str) -> None:
    async with aio.insecure_channel(address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await start(stub, turn_id="t-big", thread_id="th-big")
        for first in range(1, EVENTS + 1, 40):
            await stub.AppendEvents(
                turns_pb2.AppendEventsRequest(
                    turn_id="t-big",
                    events=[
                        turns_pb2.EventInput(
                            seq=seq, type="token", data_json=json.dumps("x" * EVENT_BYTES)
                        )
                        for seq in range(first, first + 40)
                    ],
                )
            )
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(turn_id="t-big", outcome=turns_pb2.OUTCOME_DONE)
        )


async def test_a_client_that_never_reads_holds_a_bounded_buffer_and_is_dropped(
    make_service: ServiceFactory,
) -> None:
    # No agent renews the big turn's lease: its appends are the test's.
    service = await make_service(http_listen="127.0.0.1:0", http_write_timeout=1.0, **unrenewed())
    assert service.web is not None
    await big_turn(service.address)
    # The stalled client: a small receive window, and it never reads.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(stalled, ("127.0.0.1", service.web.port))
    await loop.sock_sendall(
        stalled, b"GET /v1/turns/t-big/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    try:
        # A client that reads gets all of it meanwhile.
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{service.web.url}v1/turns/t-big/events") as response,
        ):
            got = [f async for f in frames(response)]
        assert [f.id for f in got[:-1]] == [str(s) for s in range(1, EVENTS + 2)]
        assert got[-1].event == "end"
        # The stalled one is dropped after the write timeout (before: held for ever).
        await asyncio.wait_for(service.web.events.dropped_event.wait(), 60)
        assert service.web.events.dropped == 1
    finally:
        stalled.close()
    # What a stream held (frames read ahead, and what its socket had not taken) stayed
    # within the budget plus one frame each side; the turn was 20 MB.
    frame_bytes = EVENT_BYTES + 200
    assert service.web.events.peak_held <= sse.BUFFER_BYTES + 2 * frame_bytes + (256 << 10)
    assert service.web.events.held == {}


async def test_a_watch_page_stops_at_its_byte_budget(make_service: ServiceFactory) -> None:
    service = await make_service(**unrenewed())
    await big_turn(service.address)
    read = functools.partial(watch._turn_and_events, turn_id="t-big", after_seq=0)
    _, page, more = await service.db.read(read)
    # Before: the 200 events (20 MB) in one page.
    assert more and 1 <= len(page) < EVENTS
    assert sum(watch.event_bytes(e) for e in page) <= watch.WATCH_PAGE_BYTES
    # The last page: what is left, and nothing more to read at once.
    last = functools.partial(watch._turn_and_events, turn_id="t-big", after_seq=EVENTS)
    _, page, more = await service.db.read(last)
    assert [e.seq for e in page] == [EVENTS + 1] and not more
