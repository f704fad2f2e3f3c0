"""The WatchTurn stream quota on the SSE route and on gRPC: counted per (token, peer
address), and refused over HTTP with 429 and the error shape before any stream
starts (decision 187). A real service on port 0; a second client address
is 127.0.0.2 (HTTP, a bound source address) or ::1 (gRPC, a dual-stack listener)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.limits import DEFAULT_LIMITS

from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory
from tests.support.turns import events, value

pytestmark = pytest.mark.timeout(60)

TWO = dataclasses.replace(DEFAULT_LIMITS, max_watch_streams_per_client=2)


async def panels_thread(service: TurnkeeperServer) -> None:
    """Thread th1 is the panel's: a panel reads and watches the turns of the threads
    it owns only (decision 311)."""
    await service.engine.threads.ensure("th1", {}, "panel:panel")


async def start_turn(address: str, admin: str) -> None:
    async with aio.insecure_channel(address) as channel:
        await turns_pb2_grpc.TurnServiceStub(channel).StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t1", thread_id="th1", agent="agent", input=value({})
            ),
            metadata=bearer(admin),
        )
        # One event, so a WatchTurn answers a frame as soon as it is registered.
        await turns_pb2_grpc.TurnServiceStub(channel).AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "step")),
            metadata=bearer(admin),
        )


@contextlib.asynccontextmanager
async def client_from(source: str) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(local_addr=(source, 0), force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


async def test_an_sse_request_over_the_quota_is_429_and_each_address_has_its_own(
    make_service: ServiceFactory, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel", "admin": "admin"})
    service = await make_service(
        limits=TWO, http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl"
    )
    assert service.web is not None
    await panels_thread(service)
    await start_turn(service.address, tokens["admin"])
    url = f"{service.web.url}v1/turns/t1/events"
    headers = {"Authorization": f"Bearer {tokens['panel']}"}
    async with contextlib.AsyncExitStack() as held:
        first = await held.enter_async_context(client_from("127.0.0.1"))
        for _ in range(2):
            response = await held.enter_async_context(first.get(url, headers=headers))
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/event-stream"
        # The third from the same address and token: 429 and the error shape, before
        # any stream starts (it used to be 200 and an `error` frame).
        async with first.get(url, headers=headers) as refused:
            assert refused.status == 429
            assert refused.headers["Content-Type"].startswith("application/json")
            body = await refused.json()
        assert body["code"] == "resource_exhausted"
        assert "2 WatchTurn streams already open for this client" in body["message"]
        assert "max_watch_streams_per_client" in body["message"]
        # gRPC's WatchTurn from that address with that token counts against the same
        # quota, and keeps its RESOURCE_EXHAUSTED.
        async with aio.insecure_channel(service.address) as channel:
            call: Any = turns_pb2_grpc.TurnServiceStub(channel).WatchTurn(
                turns_pb2.WatchTurnRequest(turn_id="t1"), metadata=bearer(tokens["panel"])
            )
            with pytest.raises(aio.AioRpcError) as info:
                await asyncio.wait_for(call.read(), 10)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Another user of the same panel token, from another address, is not starved.
        second = await held.enter_async_context(client_from("127.0.0.2"))
        for _ in range(2):
            response = await held.enter_async_context(second.get(url, headers=headers))
            assert response.status == 200
        async with second.get(url, headers=headers) as refused:
            assert refused.status == 429


@pytest.fixture
async def dual_stack(
    make_service: ServiceFactory, tmp_path: Path
) -> tuple[TurnkeeperServer, dict[str, str]]:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel", "admin": "admin"})
    service = await make_service(
        limits=TWO, listen="[::]:0", insecure=True, tokens_file=tmp_path / "tokens.jsonl"
    )
    return service, tokens


async def test_grpc_watch_streams_are_counted_per_token_and_address(
    dual_stack: tuple[TurnkeeperServer, dict[str, str]],
) -> None:
    service, tokens = dual_stack
    port = service.address.rpartition(":")[2]
    await panels_thread(service)
    await start_turn(f"127.0.0.1:{port}", tokens["admin"])
    panel = bearer(tokens["panel"])
    calls: list[Any] = []

    async def opened(stub: Any) -> None:
        call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id="t1"), metadata=panel)
        first = await asyncio.wait_for(call.read(), 10)  # the stream is registered
        assert isinstance(first, turns_pb2.WatchTurnResponse)
        calls.append(call)

    async def refused(stub: Any) -> str:
        call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id="t1"), metadata=panel)
        with pytest.raises(aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 10)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        return info.value.details() or ""

    async with (
        aio.insecure_channel(f"127.0.0.1:{port}") as v4,
        aio.insecure_channel(f"[::1]:{port}") as v6,
    ):
        for channel in (v4, v6):
            stub = turns_pb2_grpc.TurnServiceStub(channel)
            for _ in range(2):
                await opened(stub)
            assert "the limit is 2" in await refused(stub)
        for call in calls:
            call.cancel()
