"""HTTP/1.1 over a raw socket, for tests that send what aiohttp's client would not:
a body in many writes, a chunked body, a half-sent request, any Host header."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return json.loads(self.body)


def request_head(
    method: str, path: str, headers: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> bytes:
    """The request line and headers (Connection: close; JSON unless said otherwise)."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: close"]
    given = {"Content-Type": "application/json", **(headers or {})}
    lines += [f"{k}: {v}" for k, v in given.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_response(raw: bytes) -> RawResponse:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, v = line.partition(":")
        headers[name.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = dechunk(body)
    return RawResponse(status, headers, body)


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return out


async def exchange(port: int, pieces: list[bytes], *, host: str = "127.0.0.1") -> RawResponse:
    """Send `pieces` as separate writes (each drained before the next), then read the
    whole response until the service closes the connection (the request says
    Connection: close; no half-close, which aiohttp takes as the client leaving)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            # Let the service read this write on its own before the next arrives.
            await asyncio.sleep(0)
        return await read_response(reader)
    finally:
        writer.close()


async def read_response(reader: asyncio.StreamReader) -> RawResponse:
    """One response: to its Content-Length when it has one (the service may keep the
    connection open a while after it, reading what the client still sends), else to
    the end of the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = parse_response(head).headers.get("content-length")
    body = await (reader.readexactly(int(length)) if length is not None else reader.read())
    return parse_response(head + body)
