"""A minimal SSE reader for tests: frames as (event, id, data)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass(frozen=True)
class Frame:
    event: str
    id: str | None
    data: Any


def parse_block(block: str) -> Frame | None:
    event, id_, data = "message", None, []
    for line in block.split("\n"):
        if not line or line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "id":
            id_ = value
        elif field == "data":
            data.append(value)
    if not data:
        return None
    return Frame(event, id_, json.loads("\n".join(data)))


async def frames(response: aiohttp.ClientResponse) -> AsyncIterator[Frame]:
    buffer = ""
    async for chunk in response.content.iter_any():
        buffer += chunk.decode()
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            frame = parse_block(block)
            if frame is not None:
                yield frame
