"""Request bodies on the HTTP side, sent over raw sockets the way a slow or hostile
client sends them: in several TCP writes, chunked, nested, with stray bytes.

Each test speaks HTTP/1.1 to a real service on port 0 (decisions 180, 185).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TypeAlias

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web import connect

from tests.support.raw_http import exchange, request_head
from tests.support.turns import start, value

pytestmark = pytest.mark.both_backends

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"

RESUME = "/turnkeeper.v1.TurnService/ResumeDetached"


@pytest.fixture
async def stub(web_service: TurnkeeperServer) -> AsyncIterator[Stub]:
    async with aio.insecure_channel(web_service.address) as channel:
        yield turns_pb2_grpc.TurnServiceStub(channel)


async def parked(stub: Stub, turn_id: str) -> None:
    await start(stub, turn_id=turn_id, thread_id=f"th-{turn_id}")
    await stub.ParkTurn(
        turns_pb2.ParkTurnRequest(turn_id=turn_id, attempt=0, interrupt=value({"ask": "ok?"}))
    )


def port_of(service: TurnkeeperServer) -> int:
    assert service.web is not None
    return service.web.port


async def test_a_150_kb_body_in_many_writes_is_read_whole_every_time(
    stub: Stub, web_service: TurnkeeperServer
) -> None:
    # Before: request.content.read(n) returned what was buffered, so the second
    # half of the body was never parsed ("Unterminated string").
    for i in range(5):
        turn_id = f"t-big-{i}"
        await parked(stub, turn_id)
        body = json.dumps({"turnId": turn_id, "resume": {"text": "x" * 150_000}}).encode()
        head = request_head("POST", RESUME, {"Content-Length": str(len(body))})
        pieces = [head] + [body[k : k + 16_384] for k in range(0, len(body), 16_384)]
        response = await exchange(port_of(web_service), pieces)
        assert response.status == 200, response.body[:300]
        assert response.json()["turn"]["state"] == "TURN_STATE_RUNNING"


async def test_a_chunked_body_is_read_whole_and_refused_over_the_limit(
    stub: Stub, web_service: TurnkeeperServer
) -> None:
    await parked(stub, "t-chunked")
    body = json.dumps({"turnId": "t-chunked", "resume": {"text": "y" * 100_000}}).encode()
    head = request_head("POST", RESUME, {"Transfer-Encoding": "chunked"})
    response = await exchange(port_of(web_service), [head, *chunked(body)])
    assert response.status == 200, response.body[:300]
    # Chunked has no Content-Length to check up front: counted as it is read.
    huge = b'{"turnId": "t-chunked", "resume": "' + b"z" * (connect.MAX_BODY_BYTES + 10) + b'"}'
    response = await exchange(port_of(web_service), [head, *chunked(huge)])
    assert response.status == 413, response.body[:300]
    assert response.json()["code"] == "resource_exhausted"
    assert f"over {connect.MAX_BODY_BYTES} bytes" in response.json()["message"]


async def test_the_relay_reads_the_whole_body_and_refuses_chunked_bodies_over_the_limit(
    web_service: TurnkeeperServer,
) -> None:
    # A body split across writes reaches the relay whole: its method is read (and
    # refused as not relayed), not cut short into a JSON error.
    body = json.dumps({"method": "no/such", "params": {"pad": "p" * 150_000}}).encode()
    head = request_head("POST", "/v1/agents/alpha/rpc", {"Content-Length": str(len(body))})
    response = await exchange(
        port_of(web_service), [head] + [body[k : k + 8192] for k in range(0, len(body), 8192)]
    )
    assert response.status == 400, response.body[:300]
    assert "not relayed" in response.json()["message"]
    huge = b'{"method": "' + b"m" * (connect.MAX_BODY_BYTES + 10) + b'"}'
    head = request_head("POST", "/v1/agents/alpha/rpc", {"Transfer-Encoding": "chunked"})
    response = await exchange(port_of(web_service), [head, *chunked(huge)])
    assert response.status == 413, response.body[:300]


def chunked(body: bytes, size: int = 32_768) -> list[bytes]:
    out = [
        b"%x\r\n%s\r\n" % (len(body[k : k + size]), body[k : k + size])
        for k in range(0, len(body), size)
    ]
    return [*out, b"0\r\n\r\n"]
