"""The pipeline graph: analyze -> plan -> generate, one model call each.

Every node writes the name of the step it just finished into ``step`` (the Pipeline
sidebar is drawn from it, see :mod:`examples.pipeline.sidebar`). ``generate`` keeps
only the newest human question and its answer in ``messages``, so a thread holds one
exchange at a time.

    graph = build_graph(checkpointer=InMemorySaver())
    await graph.ainvoke(question_input("What is a turn?"), {"configurable": {"thread_id": "t"}})
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Final, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

from examples.pipeline.model import configured_model, newest_human, text_of

#: The steps, in order; the first is the graph's entry node.
STEPS: Final = ("analyze", "plan", "generate")
ENTRY: Final = STEPS[0]


class PipelineState(TypedDict, total=False):
    # BaseMessage rather than AnyMessage: generate's update holds RemoveMessages.
    messages: Annotated[list[BaseMessage], add_messages]
    #: The step that finished last. Stale at the start of the next question.
    step: str
    analysis: str
    plan: str


def question_input(question: str, *, message_id: str | None = None) -> PipelineState:
    """The graph input for one question. Give ``message_id`` for a run whose
    output must be the same every time (LangGraph makes up a random id otherwise)."""
    return {"messages": [HumanMessage(content=question, id=message_id)]}


def build_graph(
    model: BaseChatModel | None = None,
    *,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    delay: float = 0.0,
    approve_plan: bool = False,
) -> CompiledStateGraph[PipelineState, None, PipelineState, PipelineState]:
    """The compiled pipeline. ``model`` defaults to :func:`configured_model`;
    ``delay`` seconds are slept at the start of every node (a slow step, for demos
    and for tests that need a window mid-turn). With ``approve_plan`` a person
    approves the plan before ``generate`` runs: an ``approve`` node parks the run at
    ``interrupt({"approve": plan})`` (a panel's pending approval); it writes no
    ``step``, so the sidebar is the same. Nodes are async: run the graph with
    ``ainvoke`` / ``astream``."""
    llm = model if model is not None else configured_model()

    async def ask(step: str, instructions: str, question: str) -> str:
        if delay:
            await asyncio.sleep(delay)
        prompt = [SystemMessage(content=f"step: {step}\n{instructions}"), HumanMessage(question)]
        return text_of(await llm.ainvoke(prompt))

    def question_of(state: PipelineState) -> HumanMessage:
        question = newest_human(state.get("messages", []))
        if question is None:
            raise ValueError("the pipeline needs a human question in `messages`")
        return question

    async def analyze(state: PipelineState) -> PipelineState:
        q = text_of(question_of(state))
        analysis = await ask("analyze", "Say what the question asks for.", q)
        return {"analysis": analysis, "step": "analyze"}

    async def plan(state: PipelineState) -> PipelineState:
        q = text_of(question_of(state))
        context = f"{q}\n\n{state.get('analysis', '')}"
        return {"plan": await ask("plan", "Plan a short answer.", context), "step": "plan"}

    async def generate(state: PipelineState) -> PipelineState:
        question = question_of(state)
        context = f"{text_of(question)}\n\nPlan: {state.get('plan', '')}"
        answer = await ask("generate", "Answer the question, following the plan.", context)
        # Keep only the newest question and its answer.
        stale: list[BaseMessage] = [
            RemoveMessage(id=m.id)
            for m in state.get("messages", [])
            if m.id is not None and m.id != question.id
        ]
        # The answer's id follows from the question's: the same in every run.
        reply = AIMessage(content=answer, id=f"{question.id}-answer")
        return {"messages": [*stale, reply], "step": "generate"}

    async def approve(state: PipelineState) -> PipelineState:
        interrupt({"approve": state.get("plan", "")})  # resumed: approved
        return {}

    builder = StateGraph(PipelineState)
    builder.add_node("analyze", analyze)
    builder.add_node("plan", plan)
    builder.add_node("generate", generate)
    builder.add_edge(START, "analyze")
    builder.add_edge("analyze", "plan")
    if approve_plan:
        builder.add_node("approve", approve)
        builder.add_edge("plan", "approve")
        builder.add_edge("approve", "generate")
    else:
        builder.add_edge("plan", "generate")
    builder.add_edge("generate", END)
    return builder.compile(checkpointer=checkpointer)
