"""The three-step example: it runs to completion, and the Pipeline sidebar
shows the right states after every step, including its two documented quirks."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from rich.console import Console

from examples.pipeline.graph import STEPS, build_graph, question_input
from examples.pipeline.model import ScriptedChatModel, configured_model, scripted_reply
from examples.pipeline.panel import render
from examples.pipeline.sidebar import StepState, render_sidebar, sidebar_states

C, A, P = StepState.COMPLETE, StepState.ACTIVE, StepState.PENDING


def states(step: str | None) -> list[StepState]:
    return [state for _, state in sidebar_states(step)]


def test_sidebar_states_follow_step() -> None:
    assert [name for name, _ in sidebar_states(None)] == list(STEPS)
    assert states(None) == [P, P, P]
    assert states("analyze") == [A, P, P]
    assert states("plan") == [C, A, P]
    # The last step stays active when the run ends: `step` names it, nothing follows.
    assert states("generate") == [C, C, A]
    assert states("not-a-step") == [P, P, P]


async def test_pipeline_runs_to_completion_with_the_sidebar_at_each_step() -> None:
    graph = build_graph(ScriptedChatModel(), checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "th"}}

    async def ask(question: str) -> list[tuple[str | None, list[StepState]]]:
        seen = []
        async for values in graph.astream(question_input(question), config, stream_mode="values"):
            seen.append((values.get("step"), states(values.get("step"))))
        return seen

    first = await ask("What is a turn?")
    assert first == [
        (None, [P, P, P]),  # the input, before any step
        ("analyze", [A, P, P]),
        ("plan", [C, A, P]),
        ("generate", [C, C, A]),  # the run ended: generate stays active
    ]
    state = (await graph.aget_state(config)).values
    assert state["analysis"] == scripted_reply("analyze", "What is a turn?")
    assert state["plan"] == scripted_reply("plan", "What is a turn?")
    assert [type(m) for m in state["messages"]] == [HumanMessage, AIMessage]
    assert state["messages"][1].content == scripted_reply("generate", "What is a turn?")

    second = await ask("Why does it matter?")
    assert second == [
        ("generate", [C, C, A]),  # the stale value of the previous run
        ("analyze", [A, P, P]),
        ("plan", [C, A, P]),
        ("generate", [C, C, A]),
    ]
    # generate kept only the newest question and its answer.
    messages = (await graph.aget_state(config)).values["messages"]
    assert [(type(m), m.content) for m in messages] == [
        (HumanMessage, "Why does it matter?"),
        (AIMessage, scripted_reply("generate", "Why does it matter?")),
    ]


def test_the_panel_draws_the_sidebar_and_the_conversation() -> None:
    console = Console(record=True, width=100, color_system=None)
    console.print(render_sidebar("plan"))
    rows = [line.strip("│ ") for line in console.export_text().splitlines()[1:-1]]
    # The contract's labels, not node ids.
    assert rows == ["✓ Analyze", "● Plan", "○ Generate"]
    console = Console(record=True, width=100, color_system=None)
    console.print(render({"step": "generate", "messages": [HumanMessage("Q?"), AIMessage("A.")]}))
    text = console.export_text()
    assert "● Generate" in text and "you: Q?" in text and "agent: A." in text


def test_the_stand_in_model_is_the_default() -> None:
    assert isinstance(configured_model({}), ScriptedChatModel)
