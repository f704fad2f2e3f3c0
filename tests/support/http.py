"""JSON over HTTP against a service's HTTP side (server/turnkeeper_server/web/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp


@dataclass
class Http:
    """JSON over HTTP against one service's HTTP side."""

    session: aiohttp.ClientSession
    base: str

    async def call(
        self, method: str, body: dict[str, Any], token: str | None = None
    ) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        async with self.session.post(
            f"{self.base}turnkeeper.v1.TurnService/{method}", data=json.dumps(body), headers=headers
        ) as response:
            return response.status, await response.json()
