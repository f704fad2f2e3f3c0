"""``GET /healthz`` on a small asyncio HTTP server (no web framework needed).

200 ``ok`` when the check passes, 503 with the reason otherwise; any other path is
404. One request per connection (``Connection: close``), headers capped in size and
time, so a stuck or hostile client cannot hold the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

log = logging.getLogger(__name__)

# (healthy, reason)
Check = Callable[[], Awaitable[tuple[bool, str]]]

MAX_HEADER_BYTES: Final = 8192
READ_TIMEOUT: Final = 5.0
MAX_RESPONSE_BYTES: Final = 65536


class HealthServer:
    def __init__(self, host: str, port: int, check: Check) -> None:
        self.host = host
        self.port = port
        self.check = check
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        """Listen; returns the bound port (port 0 picks a free one)."""
        self._server = await asyncio.start_server(
            self._handle, self.host, self.port, limit=MAX_HEADER_BYTES
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}/healthz"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT)
            method, path, *_ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            if path.split("?", 1)[0] != "/healthz":
                status, body = 404, "not found: try /healthz\n"
            elif method not in ("GET", "HEAD"):
                status, body = 405, "method not allowed\n"
            else:
                try:
                    healthy, reason = await self.check()
                except asyncio.CancelledError:
                    # A call of the check cancelled under it (the bridge closing its
                    # client as it stops): answered here, as Python 3.11's stream
                    # callback would log the handler's CancelledError as an error.
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        raise
                    healthy, reason = False, "shutting down"
                status, body = (200, "ok\n") if healthy else (503, f"{reason}\n")
            if method == "HEAD":
                body = ""
            await _respond(writer, status, body)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            with contextlib.suppress(Exception):
                await _respond(writer, 400, "bad request\n")
        except Exception:
            log.exception("healthz request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self) -> None:
        """Safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)


_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


async def _respond(writer: asyncio.StreamWriter, status: int, body: str) -> None:
    data = body.encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Service Unavailable')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(data)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode() + data)
    await writer.drain()


async def get_status(host: str, port: int, path: str = "/healthz", timeout: float = 5.0) -> int:
    """The HTTP status of ``GET path``."""
    return (await get(host, port, path, timeout))[0]


async def get(
    host: str, port: int, path: str = "/healthz", timeout: float = 5.0
) -> tuple[int, str]:
    """``GET path``: (HTTP status, body); the body of a 503 is the reason."""

    async def fetch() -> tuple[int, str]:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            response = b""
            while len(response) < MAX_RESPONSE_BYTES and (chunk := await reader.read(4096)):
                response += chunk  # until the server closes (Connection: close)
            head, _, body = response.partition(b"\r\n\r\n")
            return int(head.split(b" ")[1]), body.decode(errors="replace")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return await asyncio.wait_for(fetch(), timeout)
