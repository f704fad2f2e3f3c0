"""A fault the harness fails to make or to undo ends the campaign with its error.

The full PostgreSQL campaign once idled for good: a nats-server the harness started
again died before its exec (gRPC's fork handlers, tests/support/forking.py), the
restart raised, and the round's turns waited for ever on a NATS that was never coming
back, the error held in a task nobody awaited until they ended.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from tests.faults.campaign import alongside


async def test_a_failed_fault_cancels_the_turns_and_raises() -> None:
    turns_cancelled = asyncio.Event()

    async def turns() -> list[str]:
        try:
            await asyncio.Event().wait()  # turns waiting on a cluster that is gone
        except asyncio.CancelledError:
            turns_cancelled.set()
            raise
        return []

    async def fault() -> None:
        raise RuntimeError("nats-server did not become ready")

    with pytest.raises(RuntimeError, match="did not become ready"):
        await alongside(asyncio.create_task(turns()), asyncio.create_task(fault()))
    assert turns_cancelled.is_set()


async def test_the_turns_result_once_both_end() -> None:
    faults_done = asyncio.Event()

    async def turns() -> list[str]:
        return ["t0"]

    async def faults() -> None:
        await asyncio.sleep(0)
        faults_done.set()

    assert await alongside(asyncio.create_task(turns()), asyncio.create_task(faults())) == ["t0"]
    assert faults_done.is_set()


async def test_failed_turns_raise_their_own_error() -> None:
    async def turns() -> list[str]:
        raise ValueError("a turn's check")

    with pytest.raises(ValueError, match="a turn's check"):
        await alongside(asyncio.create_task(turns()), asyncio.create_task(asyncio.sleep(0)))


def test_the_campaign_command_turns_grpcs_fork_handlers_off() -> None:
    # `python -m tests.faults` imports the package, not tests/conftest.py.
    code = "import os, tests.faults.campaign; print(os.environ['GRPC_ENABLE_FORK_SUPPORT'])"
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "0"
