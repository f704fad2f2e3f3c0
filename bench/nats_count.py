"""Count the messages NATS delivers on a subject, at a few microseconds each.

The ingest benchmark asks when every event has reached a NATS subscriber. With
nats-py, each message costs its subscriber a parsed `Msg` and a callback on the
event loop, some 15-20 µs of Python: at 50,000 events/s that is most of a core,
taken from the two the service and the load generator share, so the benchmark
would measure its own subscriber. This one speaks just enough of the NATS client
protocol (CONNECT, SUB, PING/PONG) to count `MSG` and `HMSG` frames by their
declared sizes, without building a message or calling anything per frame.
"""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

_CRLF = b"\r\n"


class MessageCounter:
    """Subscribes to `subject` on `url`; `count` is how many messages arrived."""

    def __init__(self, url: str, subject: str) -> None:
        self.url = url
        self.subject = subject
        self.count = 0
        self._target = 0
        self._reached = asyncio.Event()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        parts = urlsplit(self.url)
        self._reader, self._writer = await asyncio.open_connection(parts.hostname, parts.port)
        info = await self._reader.readuntil(_CRLF)
        if not info.startswith(b"INFO "):
            raise RuntimeError(f"not a NATS server at {self.url}: {info[:80]!r}")
        connect = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1}
        self._writer.write(
            b"CONNECT "
            + json.dumps(connect).encode()
            + _CRLF
            + b"SUB "
            + self.subject.encode()
            + b" 1"
            + _CRLF
            + b"PING"
            + _CRLF
        )
        await self._writer.drain()
        # The server answers PONG once it has the subscription.
        while (line := await self._reader.readuntil(_CRLF)) != b"PONG" + _CRLF:
            if line.startswith(b"-ERR"):
                raise RuntimeError(f"NATS refused the subscription: {line.decode().strip()}")
        self._task = asyncio.create_task(self._read())

    async def wait_for(self, total: int) -> None:
        """Until `total` messages have arrived since the start."""
        self._target = total
        if self.count >= total:
            return
        self._reached.clear()
        await self._reached.wait()

    async def _read(self) -> None:
        assert self._reader is not None and self._writer is not None
        buf = b""
        while chunk := await self._reader.read(1 << 20):
            buf += chunk
            pos, counted = 0, 0
            while (end := buf.find(_CRLF, pos)) != -1:
                line = buf[pos:end]
                if line.startswith((b"MSG ", b"HMSG ")):
                    # The frame's last field is the size of what follows the line.
                    size = int(line[line.rindex(b" ") + 1 :])
                    if end + 2 + size + 2 > len(buf):
                        break  # the rest of the frame is still on its way
                    pos = end + 2 + size + 2
                    counted += 1
                    continue
                if line == b"PING":
                    self._writer.write(b"PONG" + _CRLF)
                pos = end + 2
            buf = buf[pos:]
            self.count += counted
            if self._target and self.count >= self._target:
                self._reached.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._writer is not None:
            self._writer.close()
            await asyncio.gather(self._writer.wait_closed(), return_exceptions=True)
