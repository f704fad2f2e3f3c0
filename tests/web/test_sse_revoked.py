"""A revoked token's open SSE stream ends, as its gRPC WatchTurn streams do."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from tests.support.nats import NatsServer
from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory
from tests.support.sse_client import Frame, frames
from tests.support.turns import events, value


async def test_a_token_reload_that_revokes_the_token_ends_its_open_sse_stream(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    path = tmp_path / "tokens.jsonl"
    tokens = write_tokens(path)
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=path,
        tokens_poll_seconds=0.05,
    )
    assert service.web is not None
    # The panel's thread: a panel reads the turns of its own threads (decision 311).
    await service.engine.threads.ensure("th1", {}, "panel:panel")
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t1", thread_id="th1", agent="alpha", input=value({})
            ),
            metadata=bearer(tokens["alpha"]),
        )
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t1", events=events(1, "step")),
            metadata=bearer(tokens["alpha"]),
        )
        url = f"{service.web.url}v1/turns/t1/events"
        seen: list[Frame] = []
        async with (
            aiohttp.ClientSession() as session,
            session.get(url, headers={"Authorization": f"Bearer {tokens['panel']}"}) as response,
        ):
            assert response.status == 200
            stream = frames(response)
            seen.append(await asyncio.wait_for(anext(stream), 10))
            assert (seen[0].event, seen[0].id) == ("event", "1")
            assert len(service.streams) == 1

            # The panel token leaves the file (the others keep theirs); written whole,
            # then renamed, so the reloader never reads half a file.
            scratch = tmp_path / "tokens.next"
            write_tokens(scratch, {"alpha": "agent:alpha", "admin": "admin"})
            os.replace(scratch, path)

            async def rest() -> list[Frame]:
                return [f async for f in stream]

            seen += await asyncio.wait_for(rest(), 10)
        assert [f.event for f in seen] == ["event", "error"]
        assert seen[1].data["code"] == "unauthenticated"
        assert "revoked" in seen[1].data["message"]
        assert len(service.streams) == 0
        # The turn goes on; a token still in the file reads it.
        status = await stub.TurnStatus(
            turns_pb2.TurnStatusRequest(turn_id="t1"), metadata=bearer(tokens["admin"])
        )
        assert status.state == turns_pb2.TURN_STATE_RUNNING
