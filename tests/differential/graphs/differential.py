"""The differential suite's graphs (tests/differential): small, deterministic, and the
same file under `langgraph dev` and under `turnkeeper agent`. Each covers one thing an
application does: a streamed chat reply, a tool call, an interrupt, a subgraph, a Send
fan-out, custom stream parts, a run's context and config.

The chat model is scripted: its reply is a function of the conversation alone, so a
re-run (turnkeeper's recovery) or a second server gets the same words, streamed one
chunk per word with no delay."""

import json
import operator
from collections.abc import Iterator
from typing import Annotated, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.config import get_config, get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.runtime import Runtime
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict


class ScriptedChat(BaseChatModel):
    """Answers by rule: a question about a sum calls the `add` tool, a tool's result is
    reported, anything else is greeted. Streams one chunk per word."""

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"The sum is {last.content}.")
        if "sum" in str(last.content):
            call = {"name": "add", "args": {"a": 2, "b": 3}, "id": "call-add-1"}
            return AIMessage(content="", tool_calls=[call])
        turn = sum(1 for m in messages if m.type == "human")
        return AIMessage(content=f"Hello, this is reply number {turn}.")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        words = str(reply.content).split(" ") if reply.content else []
        chunks = [AIMessageChunk(content=w if i == 0 else f" {w}") for i, w in enumerate(words)]
        for call in reply.tool_calls:
            args = json.dumps(call["args"])
            chunks.append(
                AIMessageChunk(
                    content="",
                    tool_call_chunks=[
                        {"name": call["name"], "args": args, "id": call["id"], "index": 0}
                    ],
                )
            )
        for message in chunks:
            chunk = ChatGenerationChunk(message=message)
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


MODEL = ScriptedChat()


# -- chat: one node, a streamed reply -----------------------------------------------------


def respond(state: MessagesState) -> dict[str, Any]:
    return {"messages": [MODEL.invoke(state["messages"])]}


_chat = StateGraph(MessagesState)
_chat.add_node("respond", respond)
_chat.add_edge(START, "respond")
_chat.add_edge("respond", END)
chat = _chat.compile()


# -- tools: the model calls a tool, then reports its result --------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent(state: MessagesState) -> dict[str, Any]:
    return {"messages": [MODEL.invoke(state["messages"])]}


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


_tools = StateGraph(MessagesState)
_tools.add_node("agent", agent)
_tools.add_node("tools", ToolNode([add]))
_tools.add_edge(START, "agent")
_tools.add_conditional_edges("agent", route, ["tools", END])
_tools.add_edge("tools", "agent")
tools = _tools.compile()


# -- interrupt: a question to a person, then the answer's effect ---------------------------


class ApprovalState(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str


def draft(state: ApprovalState) -> ApprovalState:
    return {"draft": f"a draft about {state.get('topic', 'nothing')}"}


def review(state: ApprovalState) -> ApprovalState:
    answer: Any = interrupt({"question": "approve the draft?", "draft": state.get("draft")})
    return {"verdict": "approved" if answer == "yes" else "rejected"}


_approval = StateGraph(ApprovalState)
_approval.add_node("draft", draft)
_approval.add_node("review", review)
_approval.add_edge(START, "draft")
_approval.add_edge("draft", "review")
_approval.add_edge("review", END)
approval = _approval.compile()


# -- subgraph: a compiled graph as a node --------------------------------------------------


class InnerState(TypedDict, total=False):
    steps: Annotated[list[str], operator.add]


class OuterState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    steps: Annotated[list[str], operator.add]


def before(state: OuterState) -> OuterState:
    return {"log": ["before"]}


def inner_a(state: InnerState) -> InnerState:
    return {"steps": ["inner_a"]}


def inner_b(state: InnerState) -> InnerState:
    return {"steps": ["inner_b"]}


def after(state: OuterState) -> OuterState:
    return {"log": ["after"]}


_inner = StateGraph(InnerState)
_inner.add_node("inner_a", inner_a)
_inner.add_node("inner_b", inner_b)
_inner.add_edge(START, "inner_a")
_inner.add_edge("inner_a", "inner_b")
_inner.add_edge("inner_b", END)

_nested = StateGraph(OuterState)
_nested.add_node("before", before)
_nested.add_node("inner", _inner.compile())
_nested.add_node("after", after)
_nested.add_edge(START, "before")
_nested.add_edge("before", "inner")
_nested.add_edge("inner", "after")
_nested.add_edge("after", END)
nested = _nested.compile()


# -- subgraph-chat: the model streams inside a subgraph --------------------------------------

_talk = StateGraph(MessagesState)
_talk.add_node("respond", respond)
_talk.add_edge(START, "respond")
_talk.add_edge("respond", END)

_nested_chat = StateGraph(MessagesState)
_nested_chat.add_node("talk", _talk.compile())
_nested_chat.add_edge(START, "talk")
_nested_chat.add_edge("talk", END)
nested_chat = _nested_chat.compile()


# -- fanout: Send one task per item, results gathered by a reducer -------------------------


class FanState(TypedDict, total=False):
    items: list[str]
    results: Annotated[list[str], operator.add]
    summary: str


class WorkItem(TypedDict):
    item: str


def split(state: FanState) -> FanState:
    return {}


def fan_out(state: FanState) -> list[Send]:
    return [Send("work", {"item": item}) for item in state.get("items", [])]


def work(state: WorkItem) -> FanState:
    return {"results": [state["item"].upper()]}


def gather(state: FanState) -> FanState:
    return {"summary": ",".join(sorted(state.get("results", [])))}


_fanout = StateGraph(FanState)
_fanout.add_node("split", split)
_fanout.add_node("work", work, input_schema=WorkItem)
_fanout.add_node("gather", gather)
_fanout.add_edge(START, "split")
_fanout.add_conditional_edges("split", fan_out, ["work"])
_fanout.add_edge("work", "gather")
_fanout.add_edge("gather", END)
fanout = _fanout.compile()


# -- custom: a node reports progress on the `custom` stream --------------------------------


class CountState(TypedDict, total=False):
    count: int


def count(state: CountState) -> CountState:
    write = get_stream_writer()
    for n in range(1, 4):
        write({"progress": n, "of": 3})
    return {"count": 3}


_custom = StateGraph(CountState)
_custom.add_node("count", count)
_custom.add_edge(START, "count")
_custom.add_edge("count", END)
custom = _custom.compile()


# -- context: what a run's `context` and `config` say reaches the node ---------------------


class Who(TypedDict, total=False):
    user: str


class SeenState(TypedDict, total=False):
    user: str
    model: str


def read(state: SeenState, runtime: Runtime[Who]) -> SeenState:
    """Writes what the run was given, and nothing of what it was not (LangGraph's server
    refuses `context` and `configurable` in one run: the scenario sends them apart)."""
    seen: SeenState = {}
    context: Any = runtime.context
    user = context.get("user") if isinstance(context, dict) else getattr(context, "user", None)
    if user:
        seen["user"] = user
    model = (get_config().get("configurable") or {}).get("model")
    if model:
        seen["model"] = model
    return seen


_context = StateGraph(SeenState, context_schema=Who)
_context.add_node("read", read)
_context.add_edge(START, "read")
_context.add_edge("read", END)
context = _context.compile()
