"""Helpers for tests against an in-process service: its settings, the factory type
of the `make_service` fixture, the check of a refused call's status, and the wait
for what its agents announce."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc import aio
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.config import Settings

# The stores a `both_backends` module runs each test on (the `backend` fixture).
BACKENDS = ("sqlite", "postgres")


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    base = Settings(
        turns_path=data_dir / "turns.db",
        sessions_path=data_dir / "sessions.db",
        listen="127.0.0.1:0",
        lease_seconds=2.0,
        claim_seconds=1.0,
        reap_interval=0.2,
        shutdown_grace=1.0,
    )
    return dataclasses.replace(base, **overrides)


ServiceFactory = Callable[..., Awaitable[TurnkeeperServer]]


async def expect_code(call: Awaitable[Any], code: grpc.StatusCode) -> str:
    """Await a call that must fail with `code`; returns the status message."""
    with pytest.raises(aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, f"{info.value.code()}: {info.value.details()}"
    return info.value.details() or ""


async def announced(service: TurnkeeperServer, check: Callable[[], bool]) -> None:
    """Until `check` holds, looked at after each announcement the service's agent
    directory keeps (what a replica says of itself, its version or its free slots,
    reaches the service over NATS a moment later): any replica's, whether it serves
    the LangGraph API (an assistant) or not."""
    if check():
        return
    seen = asyncio.Event()

    def heard(agent: str) -> None:
        if check():
            seen.set()

    directory = service.engine.directory
    directory.on_heard.append(heard)
    try:
        # Replicas announce themselves every few seconds and at once on a change.
        await asyncio.wait_for(seen.wait(), 30)
    except TimeoutError:
        raise AssertionError("no announcement the service heard in 30 s made it so") from None
    finally:
        directory.on_heard.remove(heard)
