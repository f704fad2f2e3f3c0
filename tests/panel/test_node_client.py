"""The Node.js client (clients/node) against the real service.

A server runs in-process on port 0; turns are journaled through the Python stubs, as
an executor would write them; then `npm test` runs with TURNKEEPER_ADDRESS set (so
clients/node/test/server.test.js runs, not skips) and `node follow.js` is run
directly and its JSON lines compared with what was written. Node runs as an asyncio
subprocess so the in-process server keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest
from google.protobuf import json_format, struct_pb2
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer, create_server
from turnkeeper_server.config import Settings

if TYPE_CHECKING:
    # Only in the .pyi: what TurnServiceStub(channel) is for a grpc.aio channel.
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
NPM = shutil.which("npm")
NODE = shutil.which("node")
AGENT = "python-executor"

# grpc-js and grpc core both honour http_proxy-style variables; the service under
# test is on loopback and must never be reached through a proxy.
NO_PROXY_ENV = {"no_grpc_proxy": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@pytest.fixture(scope="module")
def node_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of clients/node (and the protos it loads from ../../protos) with its
    locked dependencies installed by `npm ci`. A copy, so the test neither replaces a
    developer's node_modules nor races another run doing the same."""
    if NPM is None or NODE is None:
        pytest.skip(
            reason="npm is not on PATH: the Node.js client in clients/node cannot be tested"
        )
    root = tmp_path_factory.mktemp("node-client")
    shutil.copytree(REPO / "protos", root / "protos")
    package = root / "clients" / "node"
    shutil.copytree(
        REPO / "clients" / "node", package, ignore=shutil.ignore_patterns("node_modules")
    )
    result = subprocess.run(
        [NPM, "ci", "--no-audit", "--no-fund"],
        cwd=package,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, f"npm ci failed:\n{result.stdout}\n{result.stderr}"
    return package


@pytest.fixture
async def node_service(tmp_path: Path) -> AsyncIterator[TurnkeeperServer]:
    """A real service without NATS: the Node client needs only its gRPC side."""
    settings = Settings(
        turns_path=tmp_path / "turns.db",
        sessions_path=tmp_path / "sessions.db",
        listen="127.0.0.1:0",
    )
    server = await create_server(settings)
    try:
        yield server
    finally:
        await server.stop(0)


@pytest.fixture
async def executor_stub(node_service: TurnkeeperServer) -> AsyncIterator[TurnServiceAsyncStub]:
    async with grpc.aio.insecure_channel(
        f"127.0.0.1:{node_service.port}", options=[("grpc.enable_http_proxy", 0)]
    ) as channel:
        yield turns_pb2_grpc.TurnServiceStub(channel)


class Executor:
    """Writes a turn the way an agent's bridge does: StartTurn, events, FinishTurn."""

    def __init__(self, stub: TurnServiceAsyncStub, label: str) -> None:
        run = uuid.uuid4().hex[:8]
        self.stub = stub
        self.turn_id = f"py-{label}-{run}"
        self.thread_id = f"py-thread-{label}-{run}"
        self.replica = f"py-replica-{run}"
        self.incarnation = f"py-incarnation-{run}"
        self.attempt = 0
        self.seq = 0

    async def start(self, text: str) -> None:
        value = struct_pb2.Value()
        json_format.ParseDict({"messages": [{"role": "user", "content": text}]}, value)
        await self.stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id=self.turn_id,
                thread_id=self.thread_id,
                agent=AGENT,
                input=value,
                replica=self.replica,
                incarnation=self.incarnation,
            )
        )

    async def append(self, *events: tuple[str, dict[str, Any]]) -> None:
        batch = []
        for kind, data in events:
            self.seq += 1
            batch.append(turns_pb2.EventInput(seq=self.seq, type=kind, data_json=json.dumps(data)))
        await self.stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id=self.turn_id, attempt=self.attempt, events=batch)
        )

    async def finish(self) -> None:
        await self.stub.FinishTurn(
            turns_pb2.FinishTurnRequest(
                turn_id=self.turn_id, attempt=self.attempt, outcome=turns_pb2.OUTCOME_DONE
            )
        )

    async def restart(self) -> None:
        """A new incarnation of the same replica re-drives the turn (docs/architecture.md §5.1)."""
        self.incarnation += "-restarted"
        response = await self.stub.Redrive(
            turns_pb2.RedriveRequest(
                agent=AGENT, replica=self.replica, incarnation=self.incarnation
            )
        )
        (redriven,) = (r for r in response.turns if r.turn.turn_id == self.turn_id)
        self.attempt = redriven.turn.attempts
        self.seq = redriven.rewind_seq


async def run_node(
    package: Path,
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    wait_seconds: float = 120,
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=package,
        env={**os.environ, **NO_PROXY_ENV, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), wait_seconds)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


def brief(frames: list[dict[str, Any]]) -> list[str]:
    out = []
    for frame in frames:
        if frame["frame"] == "status":
            out.append(f"status {frame['state']}")
        elif frame["frame"] == "reset":
            out.append(f"reset {frame['seq']} a{frame['attempt']}")
        else:
            out.append(f"event {frame['seq']} a{frame['attempt']} {frame['type']}")
    return out


async def test_npm_test_runs_the_node_suite_against_the_real_service(
    node_client: Path, node_service: TurnkeeperServer, executor_stub: TurnServiceAsyncStub
) -> None:
    executor = Executor(executor_stub, "npm-test")
    await executor.start("hello from python")
    await executor.append(("token", {"text": "hel"}), ("token", {"text": "lo"}))
    await executor.append(("final", {"text": "hello"}))
    await executor.finish()

    assert NPM is not None
    code, stdout, stderr = await run_node(
        node_client,
        # TAP whatever node's default reporter is, so the lines below can be read.
        [NPM, "test", "--", "--test-reporter=tap"],
        env={
            "TURNKEEPER_ADDRESS": f"127.0.0.1:{node_service.port}",
            "TURNKEEPER_TEST_TURN_ID": executor.turn_id,
        },
        wait_seconds=240,
    )

    assert code == 0, f"npm test failed:\n{stdout}\n{stderr}"
    assert re.search(r"^# fail 0$", stdout, re.MULTILINE), stdout
    assert "not ok" not in stdout
    passed = {
        match.group(1)
        for match in re.finditer(r"^\s*ok \d+ - (.+)$", stdout, re.MULTILINE)
        if "# SKIP" not in match.group(1)
    }
    # The tests that need a real service ran, rather than skipped.
    assert {
        "follow.js against the real service",
        "replays a finished turn exactly as the service retained it",
        "follows a live turn through a re-drive: reset frame, replay, terminal event",
        "exits 3 for a turn id the journal never saw (TurnStatus UNKNOWN)",
    } <= passed, stdout


async def test_follow_js_prints_a_finished_turn_as_json_lines(
    node_client: Path, node_service: TurnkeeperServer, executor_stub: TurnServiceAsyncStub
) -> None:
    executor = Executor(executor_stub, "finished")
    await executor.start("look something up")
    await executor.append(
        ("tool_call_start", {"id": "call-1", "name": "lookup"}),
        ("tool_call_end", {"id": "call-1", "result": 42}),
    )
    await executor.append(("final", {"text": "the answer is 42"}))
    await executor.finish()

    assert NODE is not None
    code, stdout, stderr = await run_node(
        node_client,
        [NODE, "follow.js", "--address", f"127.0.0.1:{node_service.port}", executor.turn_id],
    )

    assert code == 0, stderr
    frames = [json.loads(line) for line in stdout.splitlines()]
    assert frames[0] == {
        "frame": "status",
        "turn_id": executor.turn_id,
        "state": "DONE",
        "attempts": 0,
        "last_seq": 4,
        "error": "",
    }
    events = [(f["seq"], f["attempt"], f["type"], f["data"]) for f in frames[1:]]
    assert events[:3] == [
        (1, 0, "tool_call_start", {"id": "call-1", "name": "lookup"}),
        (2, 0, "tool_call_end", {"id": "call-1", "result": 42}),
        (3, 0, "final", {"text": "the answer is 42"}),
    ]
    assert events[3][:3] == (4, 0, "turn.done")
    assert len(events) == 4, "frames after the terminal event"
    assert all(f["turn_id"] == executor.turn_id and f["created_at"] for f in frames[1:])


async def test_follow_js_follows_a_live_turn_through_a_redrive(
    node_client: Path, node_service: TurnkeeperServer, executor_stub: TurnServiceAsyncStub
) -> None:
    executor = Executor(executor_stub, "live")
    await executor.start("book a table")
    await executor.append(("step", {"node": "plan"}), ("tool_call_start", {"id": "call-1"}))

    assert NODE is not None
    process = await asyncio.create_subprocess_exec(
        NODE,
        "follow.js",
        "--address",
        f"127.0.0.1:{node_service.port}",
        executor.turn_id,
        cwd=node_client,
        env={**os.environ, **NO_PROXY_ENV},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        lines = [await asyncio.wait_for(process.stdout.readline(), 30) for _ in range(3)]
        assert brief([json.loads(line) for line in lines]) == [
            "status RUNNING",
            "event 1 a0 step",
            "event 2 a0 tool_call_start",
        ]

        # The agent process died; its restart re-drives the turn. No checkpoint was
        # written, so everything is rewound and the new attempt starts at seq 1.
        await executor.restart()
        assert (executor.attempt, executor.seq) == (1, 0)
        await executor.append(("step", {"node": "plan"}), ("tool_call_start", {"id": "call-1"}))
        await executor.append(("tool_call_end", {"id": "call-1", "ok": True}))
        await executor.finish()

        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()

    assert process.returncode == 0, stderr.decode()
    assert brief([json.loads(line) for line in stdout.decode().splitlines()]) == [
        "reset 0 a1",
        "event 1 a1 step",
        "event 2 a1 tool_call_start",
        "event 3 a1 tool_call_end",
        "event 4 a1 turn.done",
    ]
