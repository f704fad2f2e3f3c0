"""The quick start's graph: a messages chat in two steps, served by ``turnkeeper dev``.

``think`` reads the question and notes what it is about; ``answer`` replies. Each
calls a chat model: here a deterministic stand-in (no key, no network), whose reply
is a function of its prompt alone, so a step re-run after a crash says what the lost
run said. Put a real model in its place (``init_chat_model(...)``) and nothing else
changes. The graph is compiled **without a checkpointer**: the server that hosts it
(``turnkeeper dev``, ``turnkeeper agent``, or LangGraph's) brings persistence.

``QUICKSTART_STEP_DELAY`` (seconds, default 0) slows each step, to leave time to
``kill -9`` the graphs' process mid-run and watch the run finish anyway.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Annotated, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    #: What ``think`` made of the question.
    topic: str


class FakeModel(BaseChatModel):
    """Replies from the prompt alone, streamed word by word."""

    @property
    def _llm_type(self) -> str:
        return "quickstart-fake"

    def _reply(self, messages: list[BaseMessage]) -> str:
        instruction = str(messages[-1].content)
        question = next((str(m.content) for m in reversed(messages) if m.type == "human"), "")
        if instruction == "think":
            words = question.rstrip("?!. ").split()
            return words[-1] if words else "nothing"
        return f"You asked {question!r}. A durable answer: this reply survives a crash."

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
        for k, word in enumerate(self._reply(messages).split(" ")):
            text = word if k == 0 else " " + word
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager is not None:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk


model = FakeModel()


async def _step_delay() -> None:
    delay = float(os.environ.get("QUICKSTART_STEP_DELAY", "0") or 0)
    if delay:
        await asyncio.sleep(delay)


async def think(state: State) -> State:
    await _step_delay()
    reply = await model.ainvoke([*state.get("messages", []), AIMessage(content="think")])
    return {"topic": str(reply.content)}


async def answer(state: State, config: RunnableConfig) -> State:
    await _step_delay()
    reply = await model.ainvoke([*state.get("messages", []), AIMessage(content="answer")])
    run_id = config.get("configurable", {}).get("run_id")
    # A stable id: a re-run after a crash replaces the message instead of adding one.
    return {"messages": [AIMessage(content=str(reply.content), id=f"answer-{run_id}")]}


builder = StateGraph(State)
builder.add_node("think", think)
builder.add_node("answer", answer)
builder.add_edge(START, "think")
builder.add_edge("think", "answer")
builder.add_edge("answer", END)
graph = builder.compile()
