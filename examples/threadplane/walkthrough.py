"""The threadplane walkthrough, in one command::

    python examples/threadplane/walkthrough.py

It starts NATS, the turnkeeper service (the LangGraph API on its HTTP port) and
``turnkeeper agent langgraph.json`` (each a process of its own), then does what a
LangGraph panel does: ``client.runs.stream(...)`` with LangGraph's own SDK. While the
Plan step runs it SIGKILLs the agent and starts it again; the new process re-drives
the run from its last checkpoint, and the same stream goes on. It ends with the
steps the stream showed and the thread's final state, and exits 0 when every step
was shown exactly once and the answer is the one an uninterrupted run gives.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from langgraph_sdk import get_client

HERE = Path(__file__).resolve().parent
ASSISTANT = "durable-execution"
QUESTION = "what survives a crash?"
QUESTION_INPUT: Any = {"messages": [{"role": "user", "content": QUESTION}]}


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A process whose stderr lines are watched (logs go there) and kept in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self._draining: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, args: list[str], env: dict[str, str], log: Path) -> Child:
        proc = await asyncio.create_subprocess_exec(
            *args, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        return cls(proc, log)

    async def line_with(self, text: str, timeout: float = 60) -> None:
        assert self.proc.stderr is not None

        async def read() -> None:
            assert self.proc.stderr is not None
            with self.log.open("a") as out:
                async for raw in self.proc.stderr:
                    out.write(raw.decode(errors="replace"))
                    if text in raw.decode(errors="replace"):
                        self._draining = asyncio.create_task(self._drain())
                        return
            raise RuntimeError(f"exited before logging {text!r}; see {self.log}")

        await asyncio.wait_for(read(), timeout)

    async def _drain(self) -> None:
        assert self.proc.stderr is not None
        with self.log.open("a") as out:
            async for raw in self.proc.stderr:
                out.write(raw.decode(errors="replace"))

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


async def main() -> int:
    from turnkeeper_server.messaging.embedded import EmbeddedNats  # the service's package

    work = Path(tempfile.mkdtemp(prefix="turnkeeper-threadplane-"))
    logs = work / "logs.txt"
    nats = EmbeddedNats()
    nats_url = nats.start()
    port, grpc_port = free_port(), free_port()
    children: list[Child] = []
    try:
        service = await Child.start(
            [
                sys.executable,
                "-m",
                "turnkeeper_server",
                "--listen",
                f"127.0.0.1:{grpc_port}",
                "--http-port",
                str(port),
                "--data-dir",
                str(work / "data"),
                "--nats-url",
                nats_url,
            ],
            dict(os.environ),
            logs,
        )
        children.append(service)
        await service.line_with("console and HTTP API on")
        say(f"turnkeeper: LangGraph API on http://127.0.0.1:{port}; logs in {logs}")
        env = {
            **os.environ,
            "TURNKEEPER_ADDRESS": f"127.0.0.1:{grpc_port}",
            "NATS_URL": nats_url,
            "TURNKEEPER_REPLICA": "threadplane-1",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            # Slow steps, so the crash lands inside Plan.
            "THREADPLANE_STEP_DELAY": "1.0",
        }
        agent_cmd = [sys.executable, "-m", "turnkeeper.agent.host", str(HERE / "langgraph.json")]

        async def start_agent() -> Child:
            agent = await Child.start(agent_cmd, env, logs)
            children.append(agent)
            await agent.line_with("startup Redrive:")
            return agent

        first = await start_agent()
        say(f"turnkeeper agent langgraph.json: serving {ASSISTANT!r} (pid {first.proc.pid})")

        client = get_client(url=f"http://127.0.0.1:{port}")
        thread = await client.threads.create()
        say(f"thread {thread['thread_id']}; runs.stream({QUESTION!r}):")
        shown: list[str] = []
        last: dict[str, Any] = {}
        async for part in client.runs.stream(
            thread["thread_id"],
            ASSISTANT,
            input=QUESTION_INPUT,
            stream_mode=["values", "updates"],
        ):
            if part.event == "metadata":
                say(f"  run {part.data['run_id']}")
            elif part.event == "updates":
                node = next(iter(part.data))
                shown.append(node)
                say(f"  step done: {node}")
                if node == "analyze":
                    await first.kill()
                    say("  ** agent SIGKILLed while Plan runs; starting it again **")
                    second = await start_agent()
                    say(f"  agent back (pid {second.proc.pid}); it re-drives the run")
            elif part.event == "values":
                last = dict(part.data)
        state = await client.threads.get_state(thread["thread_id"])
        answer = state["values"]["messages"][-1]["content"]  # type: ignore[call-overload]
        say(f"answer: {answer}")
        ok = shown == ["analyze", "plan", "generate"] and state["values"] == last
        ok = ok and answer == f"Here is the answer to {QUESTION!r}, planned and checked."
        say(
            "every step shown exactly once; the final state is an uninterrupted run's"
            if ok
            else f"NOT AS PROMISED: steps {shown}"
        )
        await client.http.client.aclose()
        return 0 if ok else 1
    finally:
        for child in reversed(children):
            await child.stop()
        nats.stop()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
