"""The Node.js client (clients/node) against the real service.

A server runs in-process on port 0; turns are journaled through the Python stubs, as
an executor would write them; then `npm test` runs with TURNKEEPER_ADDRESS set (so
clients/node/test/validate.test.ts, LangGraph.js's checkpointer suite, runs against
this service rather than skips) and the package's follower CLI
(dist/cli/follow.js, the `turnkeeper-follow` bin) is run directly and its JSON
lines compared with what was written. Node runs as an asyncio subprocess so the
in-process server keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
import pytest
from google.protobuf import json_format, struct_pb2
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer, create_server
from turnkeeper_server.config import Settings

from tests.support.node import NO_PROXY_ENV, NODE, NPM, run_command

if TYPE_CHECKING:
    # Only in the .pyi: what TurnServiceStub(channel) is for a grpc.aio channel.
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AGENT = "python-executor"
FOLLOW = "dist/cli/follow.js"


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


async def test_npm_test_runs_langgraph_js_checkpointer_suite_against_the_real_service(
    node_package: Path, node_service: TurnkeeperServer, tmp_path: Path
) -> None:
    report = tmp_path / "vitest.json"
    assert NPM is not None
    code, stdout, stderr = await run_command(
        # JSON whatever vitest's default reporter is, so the counts below can be read.
        [NPM, "test", "--", "--reporter=json", f"--outputFile={report}"],
        node_package,
        env={"TURNKEEPER_ADDRESS": f"127.0.0.1:{node_service.port}"},
        timeout=280,
    )

    assert code == 0, f"npm test failed:\n{stdout}\n{stderr}"
    counts = json.loads(report.read_text())
    assert counts["numFailedTests"] == 0, stdout
    # validate() ran against this service rather than skipped: its 700-odd tests
    # passed, and the only one not run is the channel-delta test the suite itself
    # skips for MemorySaver and SqliteSaver (see vitest.config.ts).
    assert counts["numPassedTests"] >= 700, counts["numPassedTests"]
    skipped = [
        t["fullName"]
        for suite in counts["testResults"]
        for t in suite["assertionResults"]
        if t["status"] != "passed"
    ]
    assert len(skipped) == 1 and "only store channel_values that have changed" in skipped[0]


async def test_follow_js_prints_a_finished_turn_as_json_lines(
    node_package: Path, node_service: TurnkeeperServer, executor_stub: TurnServiceAsyncStub
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
    code, stdout, stderr = await run_command(
        [NODE, FOLLOW, "--address", f"127.0.0.1:{node_service.port}", executor.turn_id],
        node_package,
        timeout=120,
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
    node_package: Path, node_service: TurnkeeperServer, executor_stub: TurnServiceAsyncStub
) -> None:
    executor = Executor(executor_stub, "live")
    await executor.start("book a table")
    await executor.append(("step", {"node": "plan"}), ("tool_call_start", {"id": "call-1"}))

    assert NODE is not None
    process = await asyncio.create_subprocess_exec(
        NODE,
        FOLLOW,
        "--address",
        f"127.0.0.1:{node_service.port}",
        executor.turn_id,
        cwd=node_package,
        env={**os.environ, **NO_PROXY_ENV},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        lines = [await process.stdout.readline() for _ in range(3)]
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
