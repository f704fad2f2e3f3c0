"""JSON-RPC 2.0 in vystak's envelope: ``{jsonrpc, id, method, params, metadata}``.

Pure functions and types, no transport: :mod:`turnkeeper.agent.bridge._subscriber` moves
the bytes, :mod:`turnkeeper.agent.bridge._methods` implements the methods.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from turnkeeper.errors import TurnkeeperError

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
# Implementation-defined server error: the turnkeeper service refused or failed the
# call; `data` carries the gRPC status name and the service's message.
SERVICE_ERROR: Final = -32000


class RpcError(Exception):
    """An error answer: raised by a method, sent as the envelope's ``error``."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @classmethod
    def from_service(cls, exc: TurnkeeperError) -> RpcError:
        return cls(SERVICE_ERROR, exc.message, {"code": exc.code.name, "message": exc.message})

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_params(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


@dataclass(frozen=True)
class Request:
    id: Any
    method: str
    params: Mapping[str, Any]
    metadata: Mapping[str, Any]
    # False for a notification (no id): nobody waits for an answer.
    wants_reply: bool = True
    # The NATS message's headers (the caller assertion: caller_auth).
    headers: Mapping[str, str] = field(default_factory=dict)
    # Who the caller is, once caller_auth checked it ("alice (operator)"), and the
    # assertion that says so, passed on with the calls made for the caller.
    caller: str | None = None
    assertion: str = ""


@dataclass
class Reply:
    """A method's result, and what to do once it has been sent (a turn to start
    after answering, so the answer is never held up by the work)."""

    result: Any
    then: Callable[[], Awaitable[None]] | None = field(default=None)
    # Not answered at all: a question on the control subject (every replica hears
    # it) that only one replica can answer; the others stay silent.
    silent: bool = False


Method = Callable[[Request], Awaitable[Reply]]


def parse(data: bytes) -> Request:
    """The request in a message body; RpcError (parse error, invalid request) if
    it is not one. Params must be an object (or absent: an empty one)."""
    try:
        envelope = json.loads(data)
    except ValueError as exc:
        raise RpcError(PARSE_ERROR, f"the message is not JSON: {exc}") from None
    if not isinstance(envelope, dict):
        raise RpcError(INVALID_REQUEST, "a JSON-RPC request is a JSON object")
    if envelope.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'the request must carry "jsonrpc": "2.0"')
    method = envelope.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, '"method" must be a non-empty string')
    params = envelope.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, f"{method}: params must be a JSON object")
    metadata = envelope.get("metadata")
    return Request(
        id=envelope.get("id"),
        method=method,
        params=params,
        metadata=metadata if isinstance(metadata, dict) else {},
        wants_reply="id" in envelope,
    )


def request_id(data: bytes) -> Any:
    """The id of a request that failed to parse as a whole, if it can be found."""
    try:
        envelope = json.loads(data)
    except ValueError:
        return None
    return envelope.get("id") if isinstance(envelope, dict) else None


def result_envelope(id_: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}).encode()


def error_envelope(id_: Any, error: RpcError) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "error": error.to_json()}).encode()


# Parameter helpers: each raises INVALID_PARAMS naming the parameter.


def optional_str(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise invalid_params(f"{name} must be a non-empty string")
    return value


def required_str(params: Mapping[str, Any], name: str) -> str:
    value = optional_str(params, name)
    if value is None:
        raise invalid_params(f"{name} is required")
    return value


def required_int(params: Mapping[str, Any], name: str) -> int:
    value = params.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid_params(f"{name} must be a non-negative integer")
    return value
