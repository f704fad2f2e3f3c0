"""The threadplane pipeline as the seed writes it, served by ``turnkeeper agent``.

Three nodes, Analyze, Plan and Generate, share one system prompt and call one chat
model each. The graph is compiled **without a checkpointer**: the server that hosts
it (LangGraph's, or turnkeeper's durable host) brings persistence. Generate writes
the answer and, only when both ids are distinct non-empty strings, the turn that
completed it (``completed_turn_id``: the run's id) and the answer's message id
(``completed_answer_id``), which a panel uses to know the answer it shows is the
finished one.

The model is a deterministic stand-in streaming its reply word by word: its reply
is a function of the prompt alone, so a node re-run after a crash says what the
lost run said. ``THREADPLANE_STEP_DELAY`` (seconds, default 0) slows every node,
for walkthroughs and tests that kill the agent mid-step.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Annotated, Any, Final

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

SYSTEM_PROMPT: Final = (
    "You are a careful assistant. Work in three steps: analyze the request, plan the "
    "answer, then generate it."
)
#: The Pipeline sidebar: node id -> label.
STEPS: Final = {"analyze": "Analyze", "plan": "Plan", "generate": "Generate"}


class DurableState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    #: The node that finished last.
    step: str
    completed_turn_id: str
    completed_answer_id: str


class StandInModel(BaseChatModel):
    """Replies ``<step>: <question>`` (Generate: an answer), streamed by word."""

    @property
    def _llm_type(self) -> str:
        return "threadplane-stand-in"

    def _reply(self, messages: list[BaseMessage]) -> str:
        step = str(messages[-1].content)
        question = next((str(m.content) for m in reversed(messages) if m.type == "human"), "")
        if step == "generate":
            return f"Here is the answer to {question!r}, planned and checked."
        return f"{STEPS.get(step, step)}: {question}"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(self._reply(messages)))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        words = self._reply(messages).split(" ")
        for k, word in enumerate(words):
            text = word if k == 0 else " " + word
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager is not None:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk


model = StandInModel()


async def _ask(state: DurableState, step: str) -> AIMessage:
    delay = float(os.environ.get("THREADPLANE_STEP_DELAY", "0") or 0)
    if delay:
        await asyncio.sleep(delay)
    prompt: list[BaseMessage] = [
        AIMessage(content=SYSTEM_PROMPT, id="system"),
        *state.get("messages", []),
        AIMessage(content=step),
    ]
    reply = await model.ainvoke(prompt)
    return AIMessage(content=str(reply.content))


async def analyze(state: DurableState) -> DurableState:
    await _ask(state, "analyze")
    return {"step": "analyze"}


async def plan(state: DurableState) -> DurableState:
    await _ask(state, "plan")
    return {"step": "plan"}


async def generate(state: DurableState, config: RunnableConfig) -> DurableState:
    answer = await _ask(state, "generate")
    run_id = str(config.get("configurable", {}).get("run_id") or "")
    # A stable answer id: the same in a re-run after a crash.
    answer.id = f"answer-{run_id}" if run_id else None
    update: DurableState = {"messages": [answer], "step": "generate"}
    if run_id and answer.id and run_id != answer.id:
        update["completed_turn_id"] = run_id
        update["completed_answer_id"] = answer.id
    return update


builder = StateGraph(DurableState)
builder.add_node("analyze", analyze)
builder.add_node("plan", plan)
builder.add_node("generate", generate)
builder.add_edge(START, "analyze")
builder.add_edge("analyze", "plan")
builder.add_edge("plan", "generate")
builder.add_edge("generate", END)
# No checkpointer: the server hosting the graph provides persistence.
graph = builder.compile()
