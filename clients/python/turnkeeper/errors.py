"""Errors raised by the turnkeeper Python client.

The service answers with gRPC status codes (docs/architecture.md §9); the client turns each
into one exception class here, in :func:`from_rpc_error`, which is the only place
status codes are mapped. Callers catch the domain classes (``WrongState``,
``StaleAttempt`` ...) and never look at ``grpc.StatusCode`` themselves; the code is
still on every error (``err.code``) for logging and for the codes that have no
class of their own (DEADLINE_EXCEEDED, INTERNAL, UNKNOWN ...), which surface as the
base :class:`TurnkeeperError`.
"""

from __future__ import annotations

from typing import Final

import grpc

__all__ = [
    "AlreadyExists",
    "InvalidArgument",
    "PermissionDenied",
    "ResourceExhausted",
    "StaleAttempt",
    "TurnNotFound",
    "TurnkeeperError",
    "Unauthenticated",
    "Unavailable",
    "WrongState",
    "from_rpc_error",
]


class TurnkeeperError(Exception):
    """A call to the turnkeeper service failed.

    ``code`` is the gRPC status code, ``message`` the service's message (meant for a
    person to act on) and ``rpc`` the method that failed, when known.
    """

    def __init__(self, code: grpc.StatusCode, message: str, *, rpc: str | None = None) -> None:
        self.code = code
        self.message = message
        self.rpc = rpc
        where = f"{rpc}: " if rpc else ""
        super().__init__(f"{where}{code.name}: {message}")


class TurnNotFound(TurnkeeperError):
    """NOT_FOUND: the journal never saw this turn_id (GetTurn, ResumeDetached ...)."""


class WrongState(TurnkeeperError):
    """FAILED_PRECONDITION: the turn (or its thread) is not in a state that allows
    the call, e.g. ResumeDetached on a turn that is not PARKED, or StartTurn on a
    thread that already has a RUNNING or PARKED turn."""


class AlreadyExists(TurnkeeperError):
    """ALREADY_EXISTS: StartTurn with a known turn_id but a different request."""


class StaleAttempt(TurnkeeperError):
    """ABORTED: the write was fenced. It came from an attempt (or an owner) that is
    no longer the turn's current one, typically a zombie executor whose turn was
    re-driven away. The caller must stop working on the turn, not retry."""


class InvalidArgument(TurnkeeperError, ValueError):
    """INVALID_ARGUMENT: a bad id, an oversized payload, a malformed filter.

    Also a ``ValueError``, as LangGraph's own savers raise for a bad filter key."""


class ResourceExhausted(TurnkeeperError):
    """RESOURCE_EXHAUSTED: a quota or a message size limit was hit."""


class Unavailable(TurnkeeperError):
    """UNAVAILABLE: the service could not be reached or is shutting down.

    Idempotent calls were already retried by the client before this was raised."""


class Unauthenticated(TurnkeeperError):
    """UNAUTHENTICATED: no bearer token, or one the service does not accept."""


class PermissionDenied(TurnkeeperError):
    """PERMISSION_DENIED: the caller's token does not allow this call."""


_BY_CODE: Final[dict[grpc.StatusCode, type[TurnkeeperError]]] = {
    grpc.StatusCode.NOT_FOUND: TurnNotFound,
    grpc.StatusCode.FAILED_PRECONDITION: WrongState,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.ABORTED: StaleAttempt,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def from_rpc_error(err: grpc.RpcError, *, rpc: str | None = None) -> TurnkeeperError:
    """The domain exception for a failed call (sync ``grpc.RpcError`` or
    ``grpc.aio.AioRpcError``). Raise it ``from err`` to keep the gRPC details.

    Codes without a class of their own give a plain :class:`TurnkeeperError`.
    """
    # grpc.RpcError itself declares no code()/details(): the concrete errors that
    # grpc raises (_InactiveRpcError, AioRpcError, ...) add them. Anything else
    # that is an RpcError without them is reported as UNKNOWN rather than crashing.
    code_of = getattr(err, "code", None)
    code = code_of() if callable(code_of) else None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    details_of = getattr(err, "details", None)
    details = details_of() if callable(details_of) else None
    message = details if isinstance(details, str) and details else code.name
    return _BY_CODE.get(code, TurnkeeperError)(code, message, rpc=rpc)
