"""An outbox batch counts as published only once the server has read it.

Found by tests/faults (a NATS restart): nats-py's flush() writes its PING straight
to the socket, ahead of the publishes still in its pending buffer, so the PONG
came back before the server had read the batch. When the connection died right
then, the outbox deleted rows whose messages no subscriber would ever get: a gap.
"""

from __future__ import annotations

import asyncio

import pytest
from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.store.records import OutboxRow

from tests.support.nats import NatsServer, subscribe

pytestmark = pytest.mark.timeout(60)

PING = b"PING\r\n"


class CutAfterPing:
    """A TCP proxy to NATS whose client-to-server direction, once armed, forwards
    everything up to and including the next PING and then nothing more: the
    connection to the server breaks right after a PING (PONGs still come back)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.armed = False
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> asyncio.Server:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        return server

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def up() -> None:
            cut = False
            while data := await reader.read(65536):
                if cut:
                    continue  # the server never sees these bytes
                if self.armed and PING in data:
                    data, cut = data[: data.index(PING) + len(PING)], True
                up_writer.write(data)
                await up_writer.drain()

        async def down() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()

        for pipe in (up(), down()):
            task = asyncio.create_task(pipe)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def test_a_batch_is_confirmed_only_once_the_server_read_it(nats_server: NatsServer) -> None:
    proxy = CutAfterPing(nats_server.port)
    server = await proxy.start()
    link = NatsLink(f"nats://127.0.0.1:{proxy.port}")
    nc, seen = await subscribe(nats_server.url, "vystak.turn.>")
    try:
        await link.start()
        assert await link.wait_connected(10)
        proxy.armed = True
        rows = [
            OutboxRow(i, "vystak.turn.events.t1", b'{"seq": %d}' % i, None, 1) for i in range(1, 4)
        ]
        confirmed = await link.publish_batch(rows)
        if confirmed:
            # The outbox now deletes these rows: the server must have them.
            # No deadline: what is missing never comes, and the test's timeout says so.
            await seen.wait_for(lambda: len(seen.messages) >= len(rows))
            got = sorted(int(msg_id) for _, _, msg_id in seen.messages)
            assert got == [1, 2, 3], "a confirmed batch never reached the server"
    finally:
        await nc.close()
        await link.stop()
        await proxy.stop()
        server.close()
