"""The operations beneath both surfaces: `rpc/` (gRPC) and `web/` (HTTP: Connect,
SSE, the LangGraph API) are two translations of these, each mapping its own
requests, errors and statuses (decision 272).

    operations = Operations(engine, limits, audit, assertions)
    await operations.turns.cancel(turns_pb2.CancelTurnRequest(turn_id=...), origin)

Inputs and outputs are the proto messages of the contract (or, where the contract
has none, plain typed arguments); the rights on a turn or thread and the audit
record are taken inside an operation, so a surface cannot forget them.
"""

from __future__ import annotations

from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.limits import Limits
from turnkeeper_server.messaging.directory import AgentDirectory
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.operations.threads import ThreadOperations
from turnkeeper_server.operations.turns import TurnOperations
from turnkeeper_server.security.assertions import Assertions

__all__ = ["Operations", "Origin", "ThreadOperations", "TurnOperations"]


class Operations:
    """The service's operations, one instance shared by both surfaces (so WatchTurn's
    quota counts gRPC and HTTP streams together)."""

    def __init__(
        self,
        engine: Engine,
        limits: Limits,
        audit: AuditLog | None = None,
        assertions: Assertions | None = None,
        *,
        owners_edit_state: bool = False,
    ) -> None:
        self.engine = engine
        # Where a surface records what it refuses or does itself (decision 283).
        self.audit = audit
        self.turns = TurnOperations(
            engine, limits, audit, assertions, owners_edit_state=owners_edit_state
        )
        self.threads = ThreadOperations(engine, limits, audit)

    @property
    def directory(self) -> AgentDirectory:
        """The agents replicas announce; the engine's own, since the version
        policies route hand-offs by it."""
        return self.engine.directory
