"""A terminal panel for the pipeline: the Pipeline sidebar next to the conversation.

    python -m examples.pipeline.panel "What is a turn?" "Why does it matter?"

Each question runs the graph in this process (a checkpointer in memory, one thread)
and the panel redraws after every step. ``--delay`` slows each step so the sidebar
can be watched; ``PIPELINE_MODEL`` picks a real model (see ``model.py``).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from examples.pipeline.graph import build_graph, question_input
from examples.pipeline.model import text_of
from examples.pipeline.sidebar import render_sidebar


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


async def run(questions: Sequence[str], *, delay: float, console: Console) -> None:
    graph = build_graph(checkpointer=InMemorySaver(), delay=delay)
    config: Any = {"configurable": {"thread_id": "panel"}}
    with Live(console=console, auto_refresh=False) as live:
        for question in questions:
            async for values in graph.astream(
                question_input(question), config, stream_mode="values"
            ):
                live.update(render(values), refresh=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("questions", nargs="+", help="asked one after the other, same thread")
    parser.add_argument("--delay", type=float, default=0.5, help="seconds per step (default 0.5)")
    args = parser.parse_args(argv)
    asyncio.run(run(args.questions, delay=args.delay, console=Console()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
