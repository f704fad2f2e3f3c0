"""Domain errors, and the one place they become gRPC status codes.

Servicers and stores raise these; `status_for` maps them. Nothing else calls
`context.abort` with a code of its own choosing.
"""

from __future__ import annotations

import sqlite3
import sys

import grpc


class TurnkeeperError(Exception):
    """Base of every error a client is meant to see. The message is for a person."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN


class NotFound(TurnkeeperError):
    code = grpc.StatusCode.NOT_FOUND


class WrongState(TurnkeeperError):
    """The turn (or thread) is not in the state the call needs."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class AlreadyExists(TurnkeeperError):
    code = grpc.StatusCode.ALREADY_EXISTS


class StaleAttempt(TurnkeeperError):
    """Fencing: the write comes from an execution that no longer owns the turn."""

    code = grpc.StatusCode.ABORTED


class InvalidArgument(TurnkeeperError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class ResourceExhausted(TurnkeeperError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(TurnkeeperError):
    code = grpc.StatusCode.UNAVAILABLE


class Unauthenticated(TurnkeeperError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TurnkeeperError):
    code = grpc.StatusCode.PERMISSION_DENIED


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client gets for an exception."""
    if isinstance(exc, TurnkeeperError):
        return exc.code, str(exc)
    if isinstance(exc, sqlite3.OperationalError):
        # Disk full, I/O error, read-only file: the write was not committed, so it
        # was not acknowledged. The client may retry once storage is healthy.
        return grpc.StatusCode.UNAVAILABLE, f"storage refused the operation: {exc}"
    # psycopg is loaded by the PostgreSQL store alone: without it, no error is its.
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        # A read on a connection PostgreSQL dropped (a restart, a network fault);
        # the next call reconnects.
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return grpc.StatusCode.UNAVAILABLE, f"PostgreSQL is unreachable: {detail}"
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
