"""JSON at the bridge's edges: protobuf ``Value`` in and out, and graph objects
(messages, pydantic models, interrupts ...) made into plain JSON for events."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from pydantic import BaseModel


def message_to_json(message: BaseMessage) -> dict[str, Any]:
    """The parts of a chat message a reader of the event stream needs."""
    out: dict[str, Any] = {"type": message.type, "content": to_jsonable(message.content)}
    if message.id is not None:
        out["id"] = message.id
    if message.name is not None:
        out["name"] = message.name
    for attr in ("tool_calls", "tool_call_id", "status"):
        extra = getattr(message, attr, None)
        if extra:
            out[attr] = to_jsonable(extra)
    return out


def to_jsonable(obj: Any, _depth: int = 0, *, whole: bool = False) -> Any:
    """Best-effort plain JSON for whatever a graph puts in its state or its stream.

    Messages keep their type, content, id and tool calls; pydantic models and
    dataclasses become objects; anything else unknown becomes its ``repr``. Never
    raises: an event must not fail a turn because of how it is displayed.

    ``whole``: messages as LangGraph's API server sends them (every field of the
    message model: ``additional_kwargs``, ``response_metadata`` ...), for the
    ``values`` a LangGraph client reads as a thread's state."""
    if _depth > 48:
        return "..."
    # The plain JSON a node, a model's dump or an earlier pass makes, by exact type
    # first: the same answers as the checks below, without their ABC lookups (a
    # run's tokens and states come through here, decision 521).
    kind = type(obj)
    if kind is str or kind is int or kind is bool or obj is None:
        return obj
    if kind is dict:
        return {
            k if type(k) is str else str(k): to_jsonable(v, _depth + 1, whole=whole)
            for k, v in obj.items()
        }
    if kind is list:
        return [to_jsonable(v, _depth + 1, whole=whole) for v in obj]
    if isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, BaseMessage):
        if whole:
            try:
                return to_jsonable(obj.model_dump(mode="json"), _depth + 1, whole=whole)
            except Exception:
                return message_to_json(obj)
        return message_to_json(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v, _depth + 1, whole=whole) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [to_jsonable(v, _depth + 1, whole=whole) for v in obj]
    if isinstance(obj, bytes):
        return {"base64": base64.b64encode(obj).decode()}
    if isinstance(obj, BaseModel):
        try:
            return to_jsonable(obj.model_dump(mode="json"), _depth + 1, whole=whole)
        except Exception:
            return repr(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: to_jsonable(getattr(obj, f.name), _depth + 1, whole=whole)
            for f in dataclasses.fields(obj)
        }
    # langgraph's Interrupt, Command, Send ... carry their fields as attributes.
    if hasattr(obj, "__slots__") or hasattr(obj, "__dict__"):
        fields = {
            name: getattr(obj, name)
            for name in _public_attributes(obj)
            if not callable(getattr(obj, name, None))
        }
        if fields:
            return {"__type__": type(obj).__name__} | {
                k: to_jsonable(v, _depth + 1, whole=whole) for k, v in fields.items()
            }
    return repr(obj)


def _public_attributes(obj: Any) -> list[str]:
    names: list[str] = []
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else list(slots))
    names.extend(getattr(obj, "__dict__", {}))
    return [n for n in dict.fromkeys(names) if not n.startswith("_") and hasattr(obj, n)]


def dumps(obj: Any, *, plain: bool = False) -> str:
    """Compact JSON text of :func:`to_jsonable` ``(obj)``. ``plain``: ``obj`` is
    that already (plain values, and parts each made by :func:`to_jsonable` with the
    depth of its place in ``obj``, which a second pass returns unchanged), so it is
    written as it is: a token's or a state's JSON is not walked twice (decision 521)."""
    return json.dumps(obj if plain else to_jsonable(obj), separators=(",", ":"), ensure_ascii=False)


def response_schema_of(interrupt: Any) -> Any:
    """An ``Interrupt``'s ``response_schema`` as JSON (LangGraph's API sends it with
    every interrupt, null when none was given): a JSON schema as given, a pydantic
    model's schema, else null."""
    schema = getattr(interrupt, "response_schema", None)
    if schema is None or isinstance(schema, dict):
        return schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    return None
