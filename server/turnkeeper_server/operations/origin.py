"""Where an operation's call came from, and for whom it acts.

Both surfaces hand an operation the same small thing: a gRPC servicer its
`ServicerContext`, the HTTP side its `HttpContext` (web/connect.py). An operation
reads two things of it: the peer (whose quota a stream counts against) and the
call's metadata (the caller assertion a bridge passes on; HTTP calls carry none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias

from turnkeeper._caller_assertion import METADATA as ASSERTION_METADATA

from turnkeeper_server.security import auth
from turnkeeper_server.security.assertions import Assertions

if TYPE_CHECKING:
    # grpc.Metadata is a name of grpc's stubs only.
    import grpc
    from grpc import aio

# A call's gRPC metadata as grpc's stubs name it (the generated servicer's context
# is both a grpc and a grpc.aio ServicerContext); at run time grpc hands a tuple of
# (key, value) pairs, a binary header's value bytes, which is how it is read.
Metadata: TypeAlias = "grpc.Metadata | aio.Metadata"


class Origin(Protocol):
    """What an operation reads of the call it serves."""

    def peer(self) -> str: ...

    def invocation_metadata(self) -> Metadata | None: ...


def acting_for(assertions: Assertions | None, origin: Origin | None, method: str) -> None:
    """A bridge (an agent token) that passes on its caller's assertion for `method`
    acts for that caller from here on: the caller's rights apply too, and the audit
    log names it. A forged or stale one is UNAUTHENTICATED."""
    caller = auth.current()
    if assertions is None or origin is None or caller is None or caller.role != auth.AGENT:
        return
    values = [v for k, v in origin.invocation_metadata() or () if k == ASSERTION_METADATA]
    if not values:
        return
    value = values[0] if isinstance(values[0], str) else values[0].decode("utf-8", "replace")
    assertion = assertions.read(value, caller.agent or "", method)
    auth.require_jsonrpc_role(assertion.role, method)
    auth.act_for(assertion)
