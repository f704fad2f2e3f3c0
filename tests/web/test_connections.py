"""Connections before any request (decision 181): half-sent HTTP requests are
answered 408 and closed after the header timeout, one peer's waiting connections
are capped, a slow body is 408; open connections are capped per address and in all
(decision 274); an idle gRPC connection gets GOAWAY and one that
never speaks HTTP/2 is closed; the service raises its open-files limit.

Real sockets against a real service on port 0; nothing waits on a clock where an
event (a closed socket, a channel's state change) can be awaited.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.procs import ServiceProcess
from tests.support.raw_http import exchange, parse_response, read_response, request_head
from tests.support.service import ServiceFactory

HALF_SENT = b"POST /turnkeeper.v1.TurnService/TurnStatus HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-"


async def turn_status(service: TurnkeeperServer) -> int:
    assert service.web is not None
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{service.web.url}turnkeeper.v1.TurnService/TurnStatus", json={"turnId": "t1"}
        ) as r,
    ):
        return r.status


async def half_sent(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HALF_SENT)
    await writer.drain()
    return reader, writer


async def test_half_sent_requests_are_closed_after_the_header_timeout(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(http_listen="127.0.0.1:0", http_header_timeout=1.0)
    assert service.web is not None
    held = [await half_sent(service.web.port) for _ in range(40)]
    try:
        # Meanwhile a whole request is answered.
        assert await turn_status(service) == 200
        # Each half-sent one is answered 408 and closed (before: held open for ever).
        answers = await asyncio.wait_for(asyncio.gather(*(reader.read() for reader, _ in held)), 20)
    finally:
        for _, writer in held:
            writer.close()
    for raw in answers:
        response = parse_response(raw)
        assert response.status == 408
        assert "--http-header-timeout" in response.json()["message"]
    assert service.web.gate.pending() == 0
    assert await turn_status(service) == 200


async def test_one_peers_waiting_connections_are_capped(make_service: ServiceFactory) -> None:
    service = await make_service(http_listen="127.0.0.1:0", http_max_pending_per_peer=4)
    assert service.web is not None
    port = service.web.port
    held = [await half_sent(port) for _ in range(4)]
    try:
        # The fifth is answered 429 when its probation ends (decision 321), saying
        # which limit it hit.
        response = await asyncio.wait_for(exchange(port, [HALF_SENT]), 10)
        assert response.status == 429
        assert "--http-max-pending-per-peer" in response.json()["message"]
        # One of the four finishes its request: it is answered, and its place is free.
        reader, writer = held.pop()
        body = b'{"turnId": "t1"}'
        writer.write(b"Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert (await asyncio.wait_for(read_response(reader), 10)).status == 200
        writer.close()
        assert await turn_status(service) == 200
    finally:
        for _, writer in held:
            writer.close()


async def test_a_body_that_does_not_arrive_is_408(make_service: ServiceFactory) -> None:
    service = await make_service(http_listen="127.0.0.1:0", http_body_timeout=0.5)
    assert service.web is not None
    head = request_head("POST", "/turnkeeper.v1.TurnService/TurnStatus", {"Content-Length": "100"})
    response = await asyncio.wait_for(exchange(service.web.port, [head, b'{"turnId"']), 10)
    assert response.status == 408
    assert "did not arrive within 0.5 s" in response.json()["message"]


async def test_an_unauthenticated_answer_closes_its_connection(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    from tests.support.security import write_tokens

    write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl")
    assert service.web is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", service.web.port)
    try:
        body = b'{"turnId": "t1"}'
        head = request_head(
            "POST", "/turnkeeper.v1.TurnService/TurnStatus", {"Content-Length": str(len(body))}
        ).replace(b"Connection: close", b"Connection: keep-alive")
        writer.write(head + body)
        raw = await asyncio.wait_for(reader.read(), 10)  # EOF: the service closed it
    finally:
        writer.close()
    assert parse_response(raw).status == 401


async def test_an_idle_grpc_connection_is_closed(make_service: ServiceFactory) -> None:
    service = await make_service(grpc_idle_timeout=0.5)
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.TurnStatus(turns_pb2.TurnStatusRequest(turn_id="t1"))
        assert channel.get_state() == grpc.ChannelConnectivity.READY
        # The service's GOAWAY takes the channel out of READY (before: it stayed).
        await asyncio.wait_for(channel.wait_for_state_change(grpc.ChannelConnectivity.READY), 20)
        assert channel.get_state() != grpc.ChannelConnectivity.READY


async def test_a_grpc_connection_that_never_speaks_http2_is_closed(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(grpc_handshake_timeout=0.5)
    host, _, port = service.address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"PRI * HTTP/2.0\r\n")  # half a preface, then nothing
        await writer.drain()
        # Closed by the service (after a GOAWAY saying why): before, held 120 s.
        await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/<pid>/limits")
def test_the_service_raises_its_open_files_limit(tmp_path: Path) -> None:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(reason=f"the hard limit ({hard}) leaves nothing to raise")
    # Started with a soft limit of 256, as a default shell would give it.
    lowered = (
        "import resource, sys; h = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, h)); "
        "from turnkeeper_server.main import main; sys.exit(main())"
    )
    proc = ServiceProcess(tmp_path, command=("-c", lowered), extra=["--http-port", "-1"])
    proc.start()
    try:
        assert proc.process is not None
        limits = Path(f"/proc/{proc.process.pid}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        found_soft = line.split()[3]
        assert found_soft != "256", line
        assert found_soft == line.split()[4] or hard == resource.RLIM_INFINITY
        assert any(re.search(r"open-files limit raised from 256 to \d+", x) for x in proc.log)
    finally:
        proc.terminate()


Held = tuple[int, asyncio.StreamReader, asyncio.StreamWriter]
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def open_and_ask(port: int) -> Held:
    """A keep-alive connection after one request: its status, and the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HEALTH)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(parse_response(head).headers["content-length"])
    await reader.readexactly(length)
    return int(head.split()[1]), reader, writer


async def open_many(port: int, count: int) -> list[Held]:
    """`count` of them, in batches below the pending-connection limit (64)."""
    out: list[Held] = []
    while len(out) < count:
        batch = min(32, count - len(out))
        out += await asyncio.gather(*(open_and_ask(port) for _ in range(batch)))
    return out


async def let_go(held: Held) -> None:
    """Ask on `held` with Connection: close and read to its end: once the service
    has closed the socket it no longer counts the connection."""
    _, reader, writer = held
    writer.write(HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
    await writer.drain()
    await reader.read()
    writer.close()


async def test_200_connections_from_one_address_are_served_and_open_ones_are_capped(
    make_service: ServiceFactory,
) -> None:
    # The defaults: one address may hold 256 open connections (200 event streams
    # from one address, issue 51, fit); the 257th is answered 429 and closed.
    service = await make_service(http_listen="127.0.0.1:0")
    assert service.web is not None
    port = service.web.port
    held = await open_many(port, 256)
    try:
        assert [status for status, _, _ in held] == [200] * 256
        assert service.web.gate.open() == 256
        response = await asyncio.wait_for(exchange(port, [request_head("GET", "/v1/health")]), 10)
        assert response.status == 429
        assert "--http-max-connections-per-peer" in response.json()["message"]
        # A connection closed frees its place.
        await let_go(held.pop())
        status, _, again = await open_and_ask(port)
        again.close()
        assert status == 200
    finally:
        for _, _, writer in held:
            writer.close()


async def test_past_the_global_connection_limit_a_new_one_is_503(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(http_listen="127.0.0.1:0", http_max_connections=40)
    assert service.web is not None
    port = service.web.port
    held = await open_many(port, 40)
    try:
        response = await asyncio.wait_for(exchange(port, [request_head("GET", "/v1/health")]), 10)
        assert response.status == 503
        assert "--http-max-connections" in response.json()["message"]
    finally:
        for _, _, writer in held:
            writer.close()
