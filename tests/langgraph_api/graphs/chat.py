"""A chat graph whose model streams its reply a word at a time, for the live-token
tests: `chat` calls the model (its last chunk carries a tool-call chunk and usage),
`note` returns a message of its own without streaming it (LangGraph's server
streams such a message whole).

`CHAT_GATE=host:port`: the model connects there when it starts a reply and, before
each word after the first, waits for one byte: the test holds the model mid-reply
for as long as it wants, with no clock involved. Unset, the model does not wait.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

REPLY = "one two three four five six"


class ChatState(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]


class WordModel(BaseChatModel):
    """Replies REPLY, streamed a word per chunk."""

    @property
    def _llm_type(self) -> str:
        return "word-model"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(REPLY))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError("the graph streams asynchronously")

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        gate = os.environ.get("CHAT_GATE")
        connection = None
        if gate:
            host, port = gate.rsplit(":", 1)
            connection = await asyncio.open_connection(host, int(port))
        words = REPLY.split(" ")
        for k, word in enumerate(words):
            if k and connection is not None:
                await connection[0].readexactly(1)
            text = word if k == 0 else " " + word
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager is not None:
                await run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk
        if connection is not None:
            connection[1].close()
        last = AIMessageChunk(
            content="",
            tool_call_chunks=[{"name": "lookup", "args": "{}", "id": "call-1", "index": 0}],
            usage_metadata={"input_tokens": 3, "output_tokens": 6, "total_tokens": 9},
            response_metadata={"finish_reason": "stop", "model_name": "word-model"},
        )
        if run_manager is not None:
            await run_manager.on_llm_new_token("", chunk=ChatGenerationChunk(message=last))
        yield ChatGenerationChunk(message=last)


model = WordModel()


async def chat(state: ChatState) -> ChatState:
    reply = await model.ainvoke(state.get("messages", []))
    return {"messages": [reply]}


def note(state: ChatState) -> ChatState:
    count = len(state.get("messages", []))
    return {"messages": [AIMessage(f"noted {count} messages", id=f"note-{count}")]}


builder = StateGraph(ChatState)
builder.add_node("chat", chat)
builder.add_node("note", note)
builder.add_edge(START, "chat")
builder.add_edge("chat", "note")
builder.add_edge("note", END)
graph = builder.compile()
