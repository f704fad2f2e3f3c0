"""Agents as real subprocesses (tests/agents/job_agent.py), and the two ways a test
talks to them: JSON-RPC over NATS, and a panel watching a turn over WatchTurn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from turnkeeper._caller_assertion import HEADER as ASSERTION_HEADER
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import operations_pb2, turns_pb2

from tests.support.nats import Collector
from tests.support.procs import Child, kill_group, signal_child, spawn_python

AGENT_SCRIPT = Path(__file__).resolve().parent.parent / "agents" / "job_agent.py"
AGENT = "jobs"
# How long some tests wait for something that happens in another process (CI runners
# can be slow; nothing here waits this long when things work). The waits of this
# module have no deadline of their own: each waits for its event, fails at once when
# the process it waits on has exited, and is otherwise bounded by the test's timeout
# (pytest-timeout), which a loaded machine cannot turn into a false failure.
PATIENCE = 30.0


class Agent:
    """One agent process. Its stdout and stderr lines are collected in `lines`."""

    def __init__(self, child: Child, name: str) -> None:
        self.proc = child.proc
        self.name = name
        self.lines: list[str] = []
        self._changed = asyncio.Event()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.proc.stdout)),
            asyncio.create_task(self._read(self.proc.stderr)),
        ]
        self._child = child
        self._exited = child.exited
        self._exited.add_done_callback(lambda _: self._changed.set())
        # The exit and the end of its output, as one task: a caller that stops
        # waiting (a cancelled wait_exit) stops neither the readers nor this.
        self._ended = asyncio.create_task(self._end())
        self._ended.add_done_callback(lambda _: self._changed.set())

    @classmethod
    async def spawn(
        cls,
        *,
        service: str,
        nats_url: str,
        replica: str,
        side_file: Path,
        graph: str = "four-step",
        slow_step: int | None = None,
        slow_attempt: int = 0,
        warm: bool = False,
        agent: str = AGENT,
        extra_env: dict[str, str] | None = None,
        script: Path = AGENT_SCRIPT,
    ) -> Agent:
        env = {
            **os.environ,
            "TURNKEEPER_ADDRESS": service,
            "NATS_URL": nats_url,
            "TURNKEEPER_AGENT": agent,
            "TURNKEEPER_REPLICA": replica,
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "SIDE_FILE": str(side_file),
            "JOB_GRAPH": graph,
            "WAIT_FOR_GO": "1" if warm else "0",
            "PYTHONUNBUFFERED": "1",
            "SLOW_ATTEMPT": str(slow_attempt),
            **(extra_env or {}),
        }
        env.pop("SLOW_STEP", None)
        if slow_step is not None:
            env["SLOW_STEP"] = str(slow_step)
        return cls(await spawn_python(str(script), env=env), replica)

    async def _read(self, stream: asyncio.StreamReader) -> None:
        """Every line of `stream`, until its end. Reads chunks, not lines: a line
        longer than the stream's limit makes readline() raise, and a reader that
        stops leaves the pipe's transport paused once the buffer fills, so the end
        of file is never seen."""
        pending = b""
        while chunk := await stream.read(1 << 16):
            *complete, pending = (pending + chunk).split(b"\n")
            if complete:
                self.lines.extend(raw.decode(errors="replace") for raw in complete)
                self._changed.set()
        if pending:
            self.lines.append(pending.decode(errors="replace"))
        self._changed.set()

    async def _end(self) -> int:
        """The exit status, once the process has exited (by its pid) and its output
        has ended. Whatever of its process group is left goes with it, so no other
        process keeps its pipes open; a pipe open PATIENCE after that is closed."""
        returncode = await self._exited
        kill_group(self.proc.pid)
        _, open_ = await asyncio.wait(self._readers, timeout=PATIENCE)
        if open_:
            self.lines.append(f"[output still open {PATIENCE:.0f} s after the exit: closed]")
            self._changed.set()
            self._child.close_pipes()
            await asyncio.wait(self._readers)
        return returncode

    async def wait_line(
        self, predicate: Callable[[str], bool], timeout: float | None = None
    ) -> str:
        """The first output line that satisfies `predicate`: the line is the event (an
        announcement the agent prints). Fails at once if the agent exits first; no
        deadline unless `timeout` is given."""

        async def loop() -> str:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if predicate(line):
                        return line
                seen = len(self.lines)
                if self._ended.done():
                    raise AssertionError(f"agent {self.name} exited: {self.output()}")
                self._changed.clear()
                await self._changed.wait()

        try:
            return await asyncio.wait_for(loop(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"agent {self.name}: no such line; output:\n{self.output()}"
            ) from None

    async def go(self) -> None:
        """Start the bridge of a warm agent (spawned with warm=True)."""
        await self.wait_line(lambda line: line == "imported")
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()

    async def ready(self, timeout: float | None = None) -> None:
        """Until the agent announces ``ready <healthz url>``: its bridge serves."""
        await self.wait_line(lambda line: line.startswith("ready "), timeout)

    def output(self) -> str:
        return "\n".join(self.lines[-60:])

    def signal(self, sig: signal.Signals) -> None:
        signal_child(self.proc, sig)

    async def kill(self) -> None:
        """SIGKILL: no goodbye, no flush, no shutdown."""
        self.signal(signal.SIGKILL)
        await self.wait_exit()

    async def wait_exited(self) -> int:
        """Its exit status, as soon as it has exited (its output may not have ended)."""
        return await asyncio.shield(self._exited)

    async def wait_exit(self, timeout: float | None = None) -> int:
        """Its exit status, once it has exited and its output has been read to the
        end. By its pid, not by ``proc.wait()`` (procs.Child says why)."""
        return await asyncio.wait_for(asyncio.shield(self._ended), timeout)

    async def close(self) -> None:
        if not self._exited.done():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self._exited), 10)
            except TimeoutError:
                kill_group(self.proc.pid)
        await self.wait_exit()


@dataclass
class Agents:
    """Spawns agents against one service and NATS; kills whatever is left at the end."""

    service: str
    nats_url: str
    side_file: Path
    spawned: list[Agent] = field(default_factory=list)

    async def spawn(self, replica: str = "r1", **kwargs: Any) -> Agent:
        agent = await Agent.spawn(
            service=self.service,
            nats_url=self.nats_url,
            replica=replica,
            side_file=self.side_file,
            **kwargs,
        )
        self.spawned.append(agent)
        return agent

    async def start(self, replica: str = "r1", **kwargs: Any) -> Agent:
        agent = await self.spawn(replica, **kwargs)
        await agent.ready()
        return agent

    def side(self) -> list[str]:
        return self.side_file.read_text().splitlines() if self.side_file.exists() else []

    async def close(self) -> None:
        await asyncio.gather(*(a.close() for a in self.spawned), return_exceptions=True)


async def assertion_for(
    caller: ConnectionOptions | AsyncTurnkeeperClient,
    method: str,
    request_id: str,
    *,
    agent: str = AGENT,
) -> str:
    """What a panel does before a request on NATS: ask the service (as `caller`: a
    client, or its address, token and TLS) for an assertion."""
    request = operations_pb2.IssueAssertionRequest(
        agent=agent, method=method, request_id=request_id
    )
    if isinstance(caller, AsyncTurnkeeperClient):
        return (await caller.issue_assertion(request)).assertion
    async with AsyncTurnkeeperClient(caller) as client:
        return (await client.issue_assertion(request)).assertion


async def rpc(
    nc: Client,
    method: str,
    params: dict[str, Any],
    *,
    agent: str = AGENT,
    timeout: float = 20,
    caller: ConnectionOptions | AsyncTurnkeeperClient | None = None,
) -> dict[str, Any]:
    """One JSON-RPC request to the agent's subject; the whole reply envelope.
    `caller`: how to reach the service as the caller: the request carries a caller
    assertion the service issues to its token (a token never goes on NATS)."""
    request_id = uuid.uuid4().hex
    envelope = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": params,
        "metadata": {},
    }
    headers = None
    if caller is not None:
        value = await assertion_for(caller, method, request_id, agent=agent)
        headers = {ASSERTION_HEADER: value}
    msg = await nc.request(
        f"vystak.default.agents.{agent}.tasks",
        json.dumps(envelope).encode(),
        timeout=timeout,
        headers=headers,
    )
    reply: dict[str, Any] = json.loads(msg.data)
    assert reply["id"] == request_id, reply
    return reply


async def result(nc: Client, method: str, params: dict[str, Any], **kwargs: Any) -> Any:
    reply = await rpc(nc, method, params, **kwargs)
    assert "result" in reply, reply
    return reply["result"]


@dataclass
class Panel:
    """What a browser watching a turn shows: WatchTurn frames applied as they come
    (a reset clears the list, an event appends to it)."""

    shown: list[tuple[int, str, Any]] = field(default_factory=list)
    resets: list[turns_pb2.Reset] = field(default_factory=list)
    frames: int = 0
    task: asyncio.Task[None] | None = None

    async def _watch(self, client: AsyncTurnkeeperClient, turn_id: str) -> None:
        request = turns_pb2.WatchTurnRequest(turn_id=turn_id)
        async for frame in client.watch_turn(request):
            self.frames += 1
            if frame.HasField("reset"):
                self.resets.append(frame.reset)
                self.shown.clear()
            else:
                e = frame.event
                self.shown.append((e.seq, e.type, json.loads(e.data_json)))

    def start(self, client: AsyncTurnkeeperClient, turn_id: str) -> None:
        self.task = asyncio.create_task(self._watch(client, turn_id))

    async def ended(self, timeout: float | None = None) -> list[tuple[int, str, Any]]:
        assert self.task is not None
        await asyncio.wait_for(asyncio.shield(self.task), timeout)
        return self.shown


async def until(seen: Collector, predicate: Callable[[], bool]) -> None:
    """Until what a NATS subscriber received satisfies `predicate`."""
    await seen.wait_for(predicate)


def job_turn(
    turn_id: str, thread_id: str | None = None, *, job: str | None = None, **extra: Any
) -> dict[str, Any]:
    """responses/create's params for a background turn of the job agent
    (tests/agents/job_agent.py): the job `job` (the turn's id unless given) on
    `thread_id` (``th-<turn_id>`` unless given), and any `extra` params."""
    return {
        "input": {"job": turn_id if job is None else job, "results": []},
        "turn_id": turn_id,
        "thread_id": f"th-{turn_id}" if thread_id is None else thread_id,
        "background": True,
        **extra,
    }


async def until_event(seen: Collector, turn_id: str, type_: str) -> None:
    """Until an event of that type of the turn has arrived on NATS."""
    subject = f".turn.events.{turn_id}"
    await seen.wait_for(lambda: any(m["type"] == type_ for m in seen.on(subject)))


async def all_events(client: AsyncTurnkeeperClient, turn_id: str) -> list[turns_pb2.Event]:
    response = await client.list_events(turns_pb2.ListEventsRequest(turn_id=turn_id))
    return list(response.events)


def shape(events: list[turns_pb2.Event]) -> list[tuple[int, str, Any]]:
    """(seq, type, data) of each event: what a reader sees, without the attempt."""
    return [(e.seq, e.type, json.loads(e.data_json)) for e in events]


@contextlib.asynccontextmanager
async def agents_for(service: str, nats_url: str, side_file: Path) -> AsyncIterator[Agents]:
    agents = Agents(service, nats_url, side_file)
    try:
        yield agents
    finally:
        await agents.close()
        # Captured by pytest: shown when the test failed.
        for agent in agents.spawned:
            print(f"--- agent {agent.name} (exit {agent.proc.returncode}) ---")
            print("\n".join(agent.lines))
