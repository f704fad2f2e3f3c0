"""An event's JSON is made in one pass (decision 521): a token's chunk, a step's
update and a state are converted by ``to_jsonable`` at their place in the event's
data and written as they are: the text one conversion of the whole data gives
(messages whole, the depth cut counted from the event's data), and for anything
nested less than 45 levels deep the text the two passes wrote before."""

from __future__ import annotations

import json
import operator
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import _convert
from turnkeeper.agent.bridge._capture import _LANGGRAPH_VERSION, EventCapture
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.agent.bridge._graph_api import state_values


class _Client:
    async def append_events(self, request: Any) -> Any:
        raise AssertionError("nothing is appended here")


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for k in range(levels):
        value = {f"k{k}": [value, 1.5, float("inf"), (1, None)]}
    return value


METADATA: Any = {
    "langgraph_node": "reply",
    "langgraph_step": 2,
    "langgraph_path": ("__pregel_pull", "reply"),
    "langgraph_triggers": ["branch:to:reply"],
    "deep": _deep(30),
}


def _events(capture: EventCapture) -> list[tuple[str, Any]]:
    return [(e.type, json.loads(e.data_json)) for e in capture.events._pending]


async def _capture() -> EventCapture:
    return EventCapture(EventLog(_Client(), "t1", 1, 0), message_ids=True)  # type: ignore[arg-type]


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    real = _convert.to_jsonable

    def counted(obj: Any, _depth: int = 0, *, whole: bool = False) -> Any:
        calls[0] += 1
        return real(obj, _depth, whole=whole)

    # The recursion calls the module's name: every level is counted.
    monkeypatch.setattr(_convert, "to_jsonable", counted)
    return calls


@pytest.mark.parametrize("levels", [30, 5], ids=["past-the-cut", "shallow"])
async def test_a_token_event_is_the_whole_datas_json_made_once(
    monkeypatch: pytest.MonkeyPatch, levels: int
) -> None:
    capture = await _capture()
    run = uuid.uuid4()
    capture.on_chat_model_start({}, [[]], run_id=run, metadata=METADATA | {"deep": _deep(levels)})
    # 30: deeper than the cut (48 levels), which falls where one conversion of the
    # event's data puts it.
    deep = _deep(levels)
    chunk = AIMessageChunk(content="hi", id="m1", response_metadata={"deep": deep})
    import turnkeeper.agent.bridge._capture as events_module

    calls = _counting(monkeypatch)
    monkeypatch.setattr(events_module, "to_jsonable", _convert.to_jsonable)
    capture.on_llm_new_token("hi", run_id=run, chunk=ChatGenerationChunk(message=chunk))
    made = calls[0]
    ((kind, data),) = _events(capture)
    metadata = METADATA | {"deep": deep}
    whole = {
        "node": "reply",
        "text": "hi",
        "id": "m1",
        "chunk": chunk,
        "metadata": {"langgraph_version": _LANGGRAPH_VERSION, **metadata},
    }
    calls[0] = 0
    expected = json.loads(_convert.dumps(_convert.to_jsonable(whole, whole=True)))
    one_pass = calls[0] - 1  # the `dumps` of plain JSON walks it once more
    assert kind == "token" and data == expected
    assert ("..." in json.dumps(data)) == (levels == 30)
    # What the two passes wrote: the chunk converted alone, then the whole data.
    twice = {
        **whole,
        "chunk": _convert.to_jsonable(chunk, whole=True),
        "metadata": {"langgraph_version": _LANGGRAPH_VERSION}
        | {k: _convert.to_jsonable(v) for k, v in metadata.items()},
    }
    if levels < 20:
        assert capture.events._pending[0].data_json == _convert.dumps(twice)
    # One conversion of the chunk, not a second one of the whole event on top.
    assert made < one_pass / 1.5, (made, one_pass)


async def test_a_step_event_is_the_whole_datas_json() -> None:
    capture = await _capture()
    root, node = uuid.uuid4(), uuid.uuid4()
    capture.on_chain_start({}, {}, run_id=root)
    capture.on_chain_start({}, {}, run_id=node, parent_run_id=root, metadata=METADATA, name="reply")
    update = {"messages": [AIMessage("done", id="a1", response_metadata=_deep(50))]}
    capture.on_chain_end(update, run_id=node)
    ((kind, data),) = _events(capture)
    expected = {
        "node": "reply",
        "step": 2,
        "update": update,
        "metadata": {"langgraph_version": _LANGGRAPH_VERSION, **METADATA},
    }
    assert kind == "step"
    assert data == json.loads(json.dumps(_convert.to_jsonable(expected, whole=True)))


class State(TypedDict, total=False):
    messages: Annotated[list[Any], operator.add]
    step: str


@pytest.mark.parametrize("levels", [50, 5], ids=["past-the-cut", "shallow"])
def test_a_states_json_at_its_place_is_the_whole_events(levels: int) -> None:
    builder = StateGraph(State)
    builder.add_node("only", lambda state: {"step": "x"})
    builder.add_edge(START, "only")
    builder.add_edge("only", END)
    graph = builder.compile()
    values = {"messages": [AIMessage("hi", id="m", response_metadata=_deep(levels))], "step": "s"}
    event = {"values": state_values(graph, values, 1)}
    expected = _convert.to_jsonable({"values": values}, whole=True)
    assert _convert.dumps(event, plain=True) == _convert.dumps(expected, plain=True)
    if levels < 20:
        # The text the two passes wrote: the state converted alone, then the event.
        twice = _convert.dumps({"values": state_values(graph, values)})
        assert _convert.dumps(event, plain=True) == twice


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, 2.5, None, True, "x"], 3: {"b": ()}, None: float("nan")},
        [(1, 2), {"k": {1, 2}}, b"\x00", float("-inf")],
        _deep(60),
    ],
    ids=["mixed", "containers", "deep"],
)
def test_plain_types_first_give_the_same_json(value: Any) -> None:
    """The exact-type shortcuts answer as the general checks did: keys made strings,
    tuples and sets lists, non-finite floats strings, the depth cut at 48."""
    out = _convert.to_jsonable(value)
    assert _convert.to_jsonable(out) == out  # a second pass changes nothing
    text = json.dumps(out)
    assert "NaN" not in text and "Infinity" not in text
