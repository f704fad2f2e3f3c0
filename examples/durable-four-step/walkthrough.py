"""The durable four-step walkthrough, in one command::

    python examples/durable-four-step/walkthrough.py

It starts NATS, the turnkeeper service and the four-step agent (each a process of
its own), dispatches the job over NATS (``responses/create``), and prints what a
panel watching the turn sees. When step 2 is streaming it SIGKILLs the agent and
starts it again; the new process re-drives the turn from its last checkpoint, and
the panel gets a reset, the replay of what survived, and the rest of the job. Then
it SIGKILLs the agent again in step 4, after the step's tool published the post and
before the step's checkpoint: step 4 runs again, and its tool does not publish
again (the effect ledger answers with the recorded outcome). It ends with what ran
how often and exits 0 when every promise held.

``--attach`` skips the process management: it talks to the NATS and service named
by ``NATS_URL`` and ``TURNKEEPER_ADDRESS`` and lets the agent crash by itself
(``CRASH_AT_STEP``), which is how ``compose.yaml`` beside this file runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.follower import Concluded, Event, Frame, Reset, Transcript, TurnFollower
from turnkeeper.v1 import turns_pb2

HERE = Path(__file__).resolve().parent
AGENT = "four-step"
TOPIC = "durable agents"


def say(text: str = "", end: str = "\n") -> None:
    sys.stdout.write(text + end)
    sys.stdout.flush()


# -- processes ---------------------------------------------------------------------------


class Process:
    """A child process whose stdout lines we wait on; its stderr goes to a log file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: TextIO) -> None:
        self.proc = proc
        self.log = log

    @classmethod
    async def start(cls, args: list[str], env: dict[str, str], log_path: Path) -> Process:
        log = log_path.open("a")
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=log
        )
        return cls(proc, log)

    async def line_starting(self, prefix: str, timeout: float = 60) -> str:
        assert self.proc.stdout is not None

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


# -- the panel ---------------------------------------------------------------------------


class PanelView:
    """Prints WatchTurn frames the way a chat panel would show them."""

    def __init__(self) -> None:
        self.node = ""
        self.replay_until = 0

    def render(self, frame: Frame) -> None:
        if isinstance(frame, Reset):
            self._close_line()
            say(
                f"  <<< RESET: the turn was rewound to seq {frame.seq} "
                f"(attempt {frame.attempt}); the panel clears and replays what survived"
            )
            self.replay_until = frame.seq or 0
        elif isinstance(frame, Event):
            self._event(frame)
        elif isinstance(frame, Concluded):
            self._close_line()
            state = frame.state.value if frame.state else "?"
            say(f"  === the turn is {state}{': ' + frame.error if frame.error else ''}")

    def _event(self, e: Event) -> None:
        replay = "replay " if e.seq <= self.replay_until else ""
        data = e.data if isinstance(e.data, dict) else {}
        if e.type == "token":
            if data.get("node") != self.node:
                self._close_line()
                self.node = str(data.get("node"))
                say(f"  {replay}[{self.node}] ", end="")
            say(str(data.get("text", "")), end="")
            return
        self._close_line()
        if e.type == "step":
            say(f"  {replay}  (seq {e.seq}: step {data.get('step')} '{data.get('node')}' done)")
        elif e.type == "tool_call_start":
            say(f"  {replay}  tool {data.get('name')}({json.dumps(data.get('input'))})")
        elif e.type == "tool_call_end":
            say(f"  {replay}  tool {data.get('name')} -> {data.get('output')}")
        elif e.type == "final":
            say(f"  (seq {e.seq}: final output, {len(data['output']['results'])} results)")
        else:
            say(f"  (seq {e.seq}: {e.type})")

    def note(self, text: str) -> None:
        """A line of the walkthrough's own, between the panel's."""
        self._close_line()
        say(text)

    def _close_line(self) -> None:
        if self.node:
            say()
            self.node = ""


# -- the job -----------------------------------------------------------------------------


async def dispatch(nc: Client, turn_id: str) -> dict[str, Any]:
    request = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "responses/create",
        "params": {
            "input": {"topic": TOPIC, "results": []},
            "turn_id": turn_id,
            "thread_id": f"thread-{turn_id}",
            "background": True,
        },
        "metadata": {},
    }
    subject = f"vystak.default.agents.{AGENT}.tasks"
    for _ in range(60):
        try:
            msg = await nc.request(subject, json.dumps(request).encode(), timeout=10)
            break
        except NoRespondersError:  # the agent is still starting
            await asyncio.sleep(0.5)
    else:
        raise RuntimeError(f"no agent answers on {subject}")
    reply: dict[str, Any] = json.loads(msg.data)
    if "error" in reply:
        raise RuntimeError(f"responses/create failed: {reply['error']}")
    result: dict[str, Any] = reply["result"]
    return result


async def follow(
    client: AsyncTurnkeeperClient,
    turn_id: str,
    view: PanelView,
    on_event: Callable[[Event], Awaitable[None]] | None = None,
) -> Transcript:
    transcript = Transcript()
    async with TurnFollower(client, turn_id) as follower:
        async for frame in follower:
            transcript.apply(frame)
            view.render(frame)
            if on_event is not None and isinstance(frame, Event):
                await on_event(frame)
    return transcript


async def summary(
    client: AsyncTurnkeeperClient, turn_id: str, transcript: Transcript, rewinds: list[Any]
) -> bool:
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=turn_id))).turn
    events = (await client.list_events(turns_pb2.ListEventsRequest(turn_id=turn_id))).events
    state = turns_pb2.TurnState.Name(turn.state).removeprefix("TURN_STATE_")
    say()
    say(f"turn {turn_id}: {state}, {turn.attempts} re-drive(s), {turn.rewinds} rewind(s)")
    for rewind in rewinds:
        say(f"  rewind on NATS: back to seq {rewind['seq']}, attempt {rewind['attempt']}")
    seqs = [e.seq for e in transcript.events]
    exact = transcript.content() == [(e.seq, e.type, json.loads(e.data_json)) for e in events]
    say(
        f"  the panel shows {len(seqs)} events, seq 1..{seqs[-1] if seqs else 0}"
        f"{', contiguous' if seqs == list(range(1, len(seqs) + 1)) else ', WITH GAPS'}"
        f"{', exactly the retained ones' if exact else ', NOT the retained ones'}"
    )
    return state == "DONE" and exact and seqs == list(range(1, len(seqs) + 1))


@contextlib.asynccontextmanager
async def watching_rewinds(nc: Client) -> AsyncIterator[list[Any]]:
    rewinds: list[Any] = []

    async def on_rewind(msg: Msg) -> None:
        rewinds.append(json.loads(msg.data))

    sub = await nc.subscribe("vystak.turn.rewind", cb=on_rewind)
    await nc.flush()
    try:
        yield rewinds
    finally:
        await sub.unsubscribe()


async def local() -> int:
    """Everything on this machine, in child processes."""
    from turnkeeper_server.messaging.embedded import EmbeddedNats  # the service's package

    work = Path(tempfile.mkdtemp(prefix="turnkeeper-walkthrough-"))
    logs, step_log = work / "logs.txt", work / "steps.txt"
    embedded = EmbeddedNats()
    nats_url = embedded.start()
    processes: list[Process] = []
    say(f"NATS on {nats_url}; logs in {logs}")
    try:
        service = await Process.start(
            [
                sys.executable,
                "-m",
                "turnkeeper_server",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(work / "data"),
                "--nats-url",
                nats_url,
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
            "TURNKEEPER_REPLICA": "walkthrough-agent",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "STEP_LOG": str(step_log),
        }
        agent_cmd = [sys.executable, str(HERE / "agent.py")]

        async def start_agent(**extra: str) -> Process:
            agent = await Process.start(agent_cmd, {**agent_env, **extra}, logs)
            processes.append(agent)
            await agent.line_starting("ready")
            return agent

        first = await start_agent(CRASH_WINDOW_STEP="2")
        say(f"agent {AGENT} up (pid {first.proc.pid})")

        nc = await nats.connect(nats_url)
        options = ConnectionOptions(target=address)
        async with AsyncTurnkeeperClient(options) as client, watching_rewinds(nc) as rewinds:
            turn_id = f"job-{uuid.uuid4().hex[:8]}"
            created = await dispatch(nc, turn_id)
            say(f"responses/create -> {created}")
            say("what the panel sees:")
            agents = [first]
            restarting: list[asyncio.Task[Process]] = []

            async def restart(**extra: str) -> Process:
                agent = await start_agent(**extra)
                agents.append(agent)
                return agent

            async def crash(event: Event) -> None:
                data = event.data if isinstance(event.data, dict) else {}
                node = data.get("node")
                if len(restarting) == 0 and event.type == "token" and node == "research":
                    await agents[-1].kill()
                    view.note(
                        f"  !!! SIGKILL agent pid {agents[-1].proc.pid} in the middle of step 2"
                    )
                    view.note("  ... starting it again: its startup Redrive takes the turn back")
                    # The next process makes the second crash: in step 4, after its tool.
                    extra = {"CRASH_WINDOW_STEP": "4", "CRASH_WINDOW_ATTEMPT": "1"}
                    restarting.append(asyncio.create_task(restart(**extra)))
                elif len(restarting) == 1 and event.type == "tool_call_end" and node == "publish":
                    await restarting[0]
                    await agents[-1].kill()
                    view.note(
                        f"  !!! SIGKILL agent pid {agents[-1].proc.pid} in step 4, after its "
                        "tool published the post, before the step's checkpoint"
                    )
                    view.note("  ... starting it again: step 4 runs again, its tool must not")
                    restarting.append(asyncio.create_task(restart()))

            view = PanelView()
            transcript = await follow(client, turn_id, view, crash)
            await asyncio.gather(*restarting)
            ok = await summary(client, turn_id, transcript, rewinds)
            effects = (
                await client.list_effects(turns_pb2.ListEffectsRequest(turn_id=turn_id))
            ).effects
        await nc.close()

        runs = Counter(
            line.split()[1]
            for line in step_log.read_text().splitlines()
            if line.startswith("start")
        )
        ledger = [line for line in step_log.read_text().splitlines() if line.startswith("ledger")]
        say(
            "  steps run: "
            + ", ".join(
                f"{name} {runs[name]}x" for name in ("outline", "research", "draft", "publish")
            )
            + " (research and publish were running at the crashes: at-least-once)"
        )
        say(f"  ledger: {len(ledger)} post(s): {ledger[0].split(' key=')[1] if ledger else '-'}")
        states = [
            turns_pb2.EffectState.Name(e.state).removeprefix("EFFECT_STATE_") for e in effects
        ]
        say(
            f"  effects: {', '.join(f'{e.name} {s}' for e, s in zip(effects, states, strict=True))}"
            "; publish ran again after the crash and its tool did not publish again: "
            "the effect ledger returned the recorded outcome"
        )
        ok = ok and runs["outline"] == 1 and runs["research"] == 2 and runs["publish"] == 2
        ok = ok and len(ledger) == 1 and states == ["DONE"] and len(rewinds) == 2
        say("every promise held" if ok else "SOMETHING WENT WRONG")
        return 0 if ok else 1
    finally:
        for process in reversed(processes):
            await process.stop()
        embedded.stop()


async def attach() -> int:
    """Against running containers (compose.yaml): the agent crashes by itself."""
    nats_url = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
    nc = await nats.connect(nats_url, max_reconnect_attempts=-1)
    async with AsyncTurnkeeperClient() as client, watching_rewinds(nc) as rewinds:
        turn_id = f"job-{uuid.uuid4().hex[:8]}"
        say(f"responses/create -> {await dispatch(nc, turn_id)}")
        say("what the panel sees (the agent SIGKILLs itself in step 2; compose restarts it):")
        transcript = await follow(client, turn_id, PanelView())
        ok = await summary(client, turn_id, transcript, rewinds) and len(rewinds) == 1
    await nc.close()
    say("every promise held" if ok else "SOMETHING WENT WRONG")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--attach", action="store_true", help="use running NATS, service and agent (compose)"
    )
    args = parser.parse_args()
    return asyncio.run(attach() if args.attach else local())


if __name__ == "__main__":
    sys.exit(main())
