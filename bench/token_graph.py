"""A graph for the first-token figure (bench/langgraph_api.py): one node whose model
streams a reply whose first chunk is the wall-clock time (ns) at which the model
produced it, so a reader on the same machine measures model-to-client."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict


class TokenState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


class StampModel(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "stamp-model"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(str(time.time_ns())))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError("streamed asynchronously")

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for text in (str(time.time_ns()), " and", " more"):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager is not None:
                await run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk


model = StampModel()


async def reply(state: TokenState) -> TokenState:
    return {"messages": [await model.ainvoke(state.get("messages", []))]}


builder = StateGraph(TokenState)
builder.add_node("reply", reply)
builder.add_edge(START, "reply")
builder.add_edge("reply", END)
graph = builder.compile()
