"""JSON data and protobuf ``Value``, both ways: the one conversion the client package
reads and writes a turn's input, interrupt, resume and output with (the bridge's edges
and the operator's CLI alike)."""

from __future__ import annotations

from typing import Any, Final

from google.protobuf import json_format, struct_pb2

# Past 2**53 a double no longer holds every integer: such a number stays a float.
_EXACT: Final = 2**53


def value_to_py(value: struct_pb2.Value) -> Any:
    """A ``google.protobuf.Value`` as Python JSON data (an unset Value is None).

    Value keeps every number as a double, so ``3`` comes back as ``3.0``; integral
    numbers are made ints again, so that a turn's input reads the same whether it
    came from the request or from the journal (a JSON reader cannot tell them apart
    anyway)."""
    if value.WhichOneof("kind") is None:
        return None
    return _ints(json_format.MessageToDict(value))


def py_to_value(obj: Any) -> struct_pb2.Value:
    """Python JSON data (as from ``json.loads``) as a ``google.protobuf.Value``."""
    value = struct_pb2.Value()
    json_format.ParseDict(obj, value)
    return value


def _ints(obj: Any) -> Any:
    if isinstance(obj, float) and obj.is_integer() and abs(obj) < _EXACT:
        return int(obj)
    if isinstance(obj, dict):
        return {k: _ints(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_ints(v) for v in obj]
    return obj
