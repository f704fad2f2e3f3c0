"""A terminal panel for the pipeline agent: the Pipeline sidebar next to the conversation.

    python -m examples.pipeline.panel "What is a turn?" "Why does it matter?"

Each question goes to the pipeline agent (``examples/pipeline/agent.py``, hosted by
the turnkeeper bridge) over NATS as a detached run, one thread for all of them; the
panel follows the run on the turnkeeper service (an
:class:`~turnkeeper.panel.session.AgentSession`) and redraws on every event: the sidebar
from the step events, the answer from generate's tokens. A rewind (the agent died
and a new process took the run back) clears what the run showed and replays what
survived. ``NATS_URL`` and ``TURNKEEPER_ADDRESS`` name NATS and the service
(``walkthrough.py`` starts everything and kills the agent on the way).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from collections.abc import Sequence
from typing import Any

import nats
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, Frame, Reset
from turnkeeper.panel.session import AgentSession

from examples.pipeline.model import text_of
from examples.pipeline.sidebar import render_sidebar

AGENT = "pipeline"


class PipelineView:
    """What the panel shows, built from a run's frames: the sidebar's ``step`` and
    the conversation (the question, and the answer as generate streams it)."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.messages: list[BaseMessage] = []
        self._stale_step: str | None = None
        self._answer = ""

    def ask(self, question: str) -> None:
        """A new question: shown at once. The sidebar keeps the previous run's step
        until this run's first step finishes (the documented stale value)."""
        self.messages = [HumanMessage(question)]
        self._stale_step = self.step
        self._answer = ""

    def apply(self, frame: Frame) -> None:
        if isinstance(frame, Reset):
            # Rewound: drop what the run showed; the retained events follow again.
            self.step = self._stale_step
            self.messages = self.messages[:1]
            self._answer = ""
        elif isinstance(frame, Event):
            data = frame.data if isinstance(frame.data, dict) else {}
            if frame.type == "step":
                update = data.get("update")
                if isinstance(update, dict) and isinstance(update.get("step"), str):
                    self.step = update["step"]
                if data.get("node") == "generate" and isinstance(update, dict):
                    # The step's own output holds the answer whole: what a reply the
                    # effect ledger gave back (no tokens streamed again) shows.
                    replies = [
                        m["content"]
                        for m in update.get("messages") or []
                        if isinstance(m, dict)
                        and m.get("type") == "ai"
                        and isinstance(m.get("content"), str)
                    ]
                    if replies:
                        self._answer = replies[-1]
                        self.messages = [*self.messages[:1], AIMessage(self._answer)]
            elif frame.type == "token" and data.get("node") == "generate":
                self._answer += str(data.get("text", ""))
                self.messages = [*self.messages[:1], AIMessage(self._answer)]

    def values(self) -> dict[str, Any]:
        """The state :func:`render` draws."""
        return {"step": self.step, "messages": self.messages}


def question_payload(question: str) -> dict[str, str]:
    """A run's input for the agent; the message id makes a re-run's output the same."""
    return {"question": question, "id": f"q-{uuid.uuid4().hex[:12]}"}


def render_conversation(messages: Sequence[BaseMessage]) -> Panel:
    lines: list[RenderableType] = []
    for message in messages:
        who, style = ("agent", "cyan") if isinstance(message, AIMessage) else ("you", "bold")
        lines.append(Text.assemble((f"{who}: ", style), text_of(message)))
    return Panel(Group(*lines), title="Conversation")


def render(values: dict[str, Any]) -> RenderableType:
    """The whole screen for one state of the graph."""
    screen = Table.grid(padding=(0, 1), expand=True)
    screen.add_column(no_wrap=True)
    screen.add_column(ratio=1)
    screen.add_row(
        render_sidebar(values.get("step")), render_conversation(values.get("messages", []))
    )
    return screen


async def run(questions: Sequence[str], *, console: Console) -> int:
    nc = await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222"))
    options = ConnectionOptions(target=os.environ.get("TURNKEEPER_ADDRESS", "127.0.0.1:50051"))
    view = PipelineView()
    try:
        async with AsyncTurnkeeperClient(options) as client:
            with Live(console=console, auto_refresh=False) as live:

                def on_frame(frame: Frame) -> None:
                    view.apply(frame)
                    live.update(render(view.values()), refresh=True)

                transport = NatsAgentTransport(nc, AGENT, client=client)
                session = AgentSession(transport, on_frame=on_frame)
                for question in questions:
                    view.ask(question)
                    live.update(render(view.values()), refresh=True)
                    if await session.submit(question_payload(question)):
                        await session.join()
                    if session.error is not None:
                        console.print(f"[red]{session.error.kind.value}: {session.error.message}")
                        return 1
    finally:
        await nc.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("questions", nargs="+", help="asked one after the other, same thread")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.questions, console=Console()))


if __name__ == "__main__":
    raise SystemExit(main())
