"""The durable pipeline walkthrough, in one command (from the repository root)::

    python -m examples.pipeline.walkthrough

It starts NATS, the turnkeeper service and the pipeline agent (each a process of
its own), asks the agent a question through the panel's session (NATS JSON-RPC,
``responses/create``), and prints what the panel's Pipeline sidebar shows after
every step. While **Plan** is streaming it SIGKILLs the agent and starts it again;
the new process re-drives the run from the checkpoint **Analyze** left, so the
sidebar goes back over Analyze's retained step (a replay, not a re-run) and goes on
at Plan. Then it SIGKILLs the agent again in **Generate**, once the model's reply is
complete and journaled in the turn's effect ledger and before the step's checkpoint:
Generate runs again, and gets the reply from the ledger without calling the model.
It ends with what ran how often, and exits 0 when every promise held: the model was
called once for Analyze, twice for Plan (it was streaming at the first crash: a reply
not finished is not kept), once for Generate, and the panel ended with exactly the
run's retained events.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import TextIO

import nats
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, Frame, Reset
from turnkeeper.panel.session import AgentSession
from turnkeeper.v1 import turns_pb2

from examples.pipeline.graph import STEPS
from examples.pipeline.panel import AGENT, PipelineView, question_payload
from examples.pipeline.sidebar import label, sidebar_text

ROOT = Path(__file__).resolve().parent.parent.parent
QUESTION = "What is a durable turn?"


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class Process:
    """A child process whose stdout lines we wait on; its stderr goes to a log file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: TextIO) -> None:
        self.proc = proc
        self.log = log

    @classmethod
    async def start(cls, args: list[str], env: dict[str, str], log_path: Path) -> Process:
        log = log_path.open("a")
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=log
        )
        return cls(proc, log)

    async def line_starting(self, prefix: str, timeout: float = 60) -> str:
        async def read() -> str:
            assert self.proc.stdout is not None
            async for raw in self.proc.stdout:
                line = raw.decode().strip()
                if line.startswith(prefix):
                    return line
            raise RuntimeError(f"exited before printing {prefix!r}; see {self.log.name}")

        return await asyncio.wait_for(read(), timeout)

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                await self.kill()
        self.log.close()


async def walkthrough() -> int:
    from turnkeeper_server.messaging.embedded import EmbeddedNats  # the service's package

    work = Path(tempfile.mkdtemp(prefix="turnkeeper-pipeline-"))
    logs, step_log = work / "logs.txt", work / "steps.txt"
    embedded = EmbeddedNats()
    nats_url = embedded.start()
    processes: list[Process] = []
    say(f"NATS on {nats_url}; logs in {logs}")
    try:
        service = await Process.start(
            [
                *(sys.executable, "-m", "turnkeeper_server", "--listen", "127.0.0.1:0"),
                *("--data-dir", str(work / "data"), "--nats-url", nats_url),
            ],
            dict(os.environ),
            logs,
        )
        processes.append(service)
        address = (await service.line_starting("turnkeeper listening on")).rsplit(" ", 1)[1]
        say(f"turnkeeper service on {address}")
        agent_env = {
            **os.environ,
            "TURNKEEPER_ADDRESS": address,
            "NATS_URL": nats_url,
            "TURNKEEPER_AGENT": AGENT,
            "TURNKEEPER_REPLICA": "pipeline-walkthrough",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "STEP_LOG": str(step_log),
        }

        async def start_agent(**extra: str) -> Process:
            agent = await Process.start(
                [sys.executable, "-m", "examples.pipeline.agent"], {**agent_env, **extra}, logs
            )
            processes.append(agent)
            await agent.line_starting("ready")
            return agent

        first = await start_agent(CRASH_WINDOW_STEP="plan")
        say(f"agent {AGENT} up (pid {first.proc.pid})")
        restarting: list[asyncio.Task[Process]] = []
        view = PipelineView()
        shown: list[str] = []

        def on_frame(frame: Frame) -> None:
            view.apply(frame)
            if isinstance(frame, Reset):
                say(f"  <<< RESET to seq {frame.seq} (attempt {frame.attempt}): the panel replays")
            elif isinstance(frame, Event) and frame.type == "step":
                line = sidebar_text(view.step)
                shown.append(line)
                say(f"  sidebar: {line}")
            elif isinstance(frame, Event) and frame.type == "token" and not restarting:
                data = frame.data if isinstance(frame.data, dict) else {}
                if data.get("node") == "plan":
                    restarting.append(asyncio.create_task(crash_and_restart()))

        async def crash_and_restart() -> Process:
            await first.kill()
            say(f"  !!! SIGKILL agent pid {first.proc.pid} while {label('plan')} is streaming")
            say("  ... starting it again: its startup Redrive takes the run back")
            second = await start_agent(CRASH_AFTER_REPLY_STEP="generate")
            await second.line_starting("replied generate")
            await second.kill()
            say(
                f"  !!! SIGKILL agent pid {second.proc.pid} in {label('generate')}, its model "
                "reply complete and journaled, before the step's checkpoint"
            )
            say("  ... starting it again: Generate runs again, its model must not")
            return await start_agent()

        nc = await nats.connect(nats_url)
        try:
            async with AsyncTurnkeeperClient(ConnectionOptions(target=address)) as client:
                session = AgentSession(
                    NatsAgentTransport(nc, AGENT, client=client), on_frame=on_frame
                )
                view.ask(QUESTION)
                say(f"you: {QUESTION}")
                say(f"  sidebar: {sidebar_text(view.step)}")
                if await session.submit(question_payload(QUESTION)):
                    await session.join()
                await asyncio.gather(*restarting)
                assert session.turn_id is not None
                turn = (
                    await client.get_turn(turns_pb2.GetTurnRequest(turn_id=session.turn_id))
                ).turn
                events = (
                    await client.list_events(turns_pb2.ListEventsRequest(turn_id=session.turn_id))
                ).events
        finally:
            await nc.close()

        answer = [m.content for m in view.messages[1:]]
        say(f"agent: {answer[0] if answer else '-'}")
        state = turns_pb2.TurnState.Name(turn.state).removeprefix("TURN_STATE_")
        say()
        say(f"run {turn.turn_id}: {state}, {turn.attempts} re-drive(s), {turn.rewinds} rewind(s)")
        runs = Counter(line.split()[1] for line in step_log.read_text().splitlines())
        say("  model calls: " + ", ".join(f"{label(s)} {runs[s]}x" for s in STEPS))
        say(
            f"  {label('generate')} ran again after the second crash and its model was not "
            "called again: the reply came from the effect ledger"
        )
        exact = session.transcript.content() == [
            (e.seq, e.type, Event.from_proto(e).data) for e in events
        ]
        say(f"  the panel ends with {'exactly' if exact else 'NOT'} the run's retained events")
        if runs["analyze"] == 1 and turn.attempts == 2:
            say(
                f"  the first re-drive resumed at {label('plan')}: {label('analyze')} was not re-run"
            )
        ok = (
            state == "DONE"
            and session.error is None
            and exact
            and (runs["analyze"], runs["plan"], runs["generate"]) == (1, 2, 1)
            and turn.attempts == 2
            and shown[-1] == sidebar_text("generate")
        )
        say("every promise held" if ok else "SOMETHING WENT WRONG")
        return 0 if ok else 1
    finally:
        for process in reversed(processes):
            await process.stop()
        embedded.stop()


def main() -> int:
    return asyncio.run(walkthrough())


if __name__ == "__main__":
    sys.exit(main())
