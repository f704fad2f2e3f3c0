"""A TCP relay a test can shut and open: one client's own path to a server.

Used to decide *when* the service gets back to a restarted nats-server, so that a
test subscriber is known to be back first and sees everything the service's
outbox then publishes; and to hold what the client sends (`hold`), so that a
flush is known to be waiting when its connection is cut.
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.is_open = True
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        # Cleared by `hold`: the live links keep what they read and forward nothing.
        self._flowing = asyncio.Event()
        self._flowing.set()
        # Set once a held link has read bytes on their way to the server (a publish,
        # a PING) and keeps them back: the client now waits for what cannot come.
        self.holding = asyncio.Event()
        # hold(until=...): the bytes whose first sending starts the hold.
        self._until: bytes | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.is_open:
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        if not self.is_open:  # shut while this link was being made
            writer.close()
            up_writer.close()
            return
        self._links |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer, upstream=True),
            self._pipe(up_reader, writer, upstream=False),
        )
        self._links -= {writer, up_writer}

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool
    ) -> None:
        try:
            while data := await reader.read(65536):
                if upstream and self._until is not None and self._until in data:
                    self._until = None
                    self._flowing.clear()
                if not self._flowing.is_set():
                    if upstream:
                        self.holding.set()
                    await self._flowing.wait()
                if writer.is_closing():
                    break  # cut while held: what it held is lost with the link
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    def hold(self, until: bytes | None = None) -> None:
        """Stop forwarding, both ways, on every link (as a stalled network path): what
        is read is kept until `release`, or lost if the links are cut (`shut`). With
        `until`, from the first read of a client's that carries it (b"PING\r\n": a
        flush, which now waits), that read included."""
        self.holding.clear()
        if until is None:
            self._flowing.clear()
        else:
            self._until = until

    def release(self) -> None:
        """Forward again, what was held first."""
        self._until = None
        self._flowing.set()

    def shut(self) -> None:
        """Refuse new connections and cut the live ones."""
        self.is_open = False
        for writer in list(self._links):
            writer.close()
        # A held pipe wakes to find its link cut.
        self._until = None
        self._flowing.set()

    def open(self) -> None:
        self.is_open = True

    async def stop(self) -> None:
        self.shut()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
