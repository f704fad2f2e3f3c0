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

# The lease of a turn a test starts over gRPC in a replica's name and writes itself,
# with no agent to renew it (no heartbeat; appends renew nothing). make_settings' 2 s
# lease lapses between two of the test's writes on a loaded machine (CI, 2 cores
# shared), the reaper finds no agent to vouch for the turn and re-drives it away
# mid-test (ABORTED "re-driven away", attempts 1 where 0 was asserted). A test ABOUT
# lease expiry keeps the short default.
UNRENEWED_LEASE = 120.0


def unrenewed(*, claims: bool = False) -> dict[str, float]:
    """make_service's (make_settings') overrides for a test whose turns no agent
    renews: UNRENEWED_LEASE; with `claims`, the claim window as long too (a turn
    waiting for a claimer is not offered again behind the test's back)."""
    lease = {"lease_seconds": UNRENEWED_LEASE}
    return {**lease, "claim_seconds": UNRENEWED_LEASE} if claims else lease


# The mark of a module or test whose turns no agent renews: every service its
# make_service starts (the `service` and `web_service` fixtures too) takes
# `unrenewed()` unless the call says its own lease. Registered by
# tests/support/fixtures.py, applied by tests/conftest.py's make_service.
UNRENEWED_MARK = "unrenewed"


# The mark of a LangGraph API module or test whose `api_url` and `sdk` are the
# worker's shared deployment (tests/langgraph_api/conftest.py,
# tests/support/deployment.py). Registered by tests/support/fixtures.py.
SHARED_DEPLOYMENT_MARK = "shared_deployment"


def lease_for(request: pytest.FixtureRequest) -> dict[str, float]:
    """The overrides make_service gives the requesting test's services: `unrenewed()`
    under the mark, else none (make_settings' short lease)."""
    return unrenewed() if request.node.get_closest_marker(UNRENEWED_MARK) else {}


def unrenewed_flags() -> list[str]:
    """The same lease for a service run as a process (tests/support/procs.py's
    ServiceProcess `extra`), whose own default (15 s) a restart or a browser under
    load outlasts too."""
    return ["--lease-seconds", str(UNRENEWED_LEASE)]


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
