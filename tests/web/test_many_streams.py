"""200 event streams opened at once from one address are all served (issue 51): the
per-address cap on pending connections (decision 181) counts connections that have
sent nothing, not ones whose request has arrived and is being answered. A service in
its own process, as a client meets it."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2_grpc

from tests.support.procs import ServiceProcess
from tests.support.turns import start

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

STREAMS = 200
_CONSOLE = re.compile(r"turnkeeper console on (\S+)console/")


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    proc = ServiceProcess(tmp_path, extra=["--http-port", "0"])
    address = await asyncio.to_thread(proc.start)
    base = (await asyncio.to_thread(proc.wait_line, _CONSOLE)).group(1)
    yield address, base
    proc.kill()


async def test_200_event_streams_at_once_from_one_address_are_all_served(
    service: tuple[str, str],
) -> None:
    address, base = service
    async with aio.insecure_channel(address) as ch:
        # A turn that runs on: its stream stays open.
        await start(turns_pb2_grpc.TurnServiceStub(ch), turn_id="t1")
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        opened: list[aiohttp.ClientResponse] = []

        async def stream() -> int:
            response = await session.get(f"{base}v1/turns/t1/events")
            opened.append(response)
            return response.status

        try:
            statuses = await asyncio.gather(*(stream() for _ in range(STREAMS)))
        finally:
            for response in opened:
                response.close()
    assert statuses == [200] * STREAMS
