"""OperationsService: who a token is (for the NATS bridges), and the audit log."""

from __future__ import annotations

from grpc import aio
from turnkeeper.v1 import operations_pb2, operations_pb2_grpc

from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.rpc.convert import timestamp
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import TokenStore

Ctx = aio.ServicerContext[object, object]


class OperationsServicer(operations_pb2_grpc.OperationsServiceServicer):
    def __init__(self, tokens: TokenStore | None, audit: AuditLog) -> None:
        self.tokens = tokens
        self.audit = audit

    async def Introspect(
        self, request: operations_pb2.IntrospectRequest, context: Ctx
    ) -> operations_pb2.IntrospectResponse:
        lim.check_length("token", request.token, auth.MAX_TOKEN_LENGTH)
        if self.tokens is None:
            return operations_pb2.IntrospectResponse(
                authentication=False, methods=list(auth.JSONRPC_METHODS)
            )
        caller = self.tokens.lookup(request.token)
        if caller is None:
            return operations_pb2.IntrospectResponse(authentication=True, active=False)
        return operations_pb2.IntrospectResponse(
            authentication=True,
            active=True,
            name=caller.name,
            role=caller.role,
            agent=caller.agent or "",
            methods=auth.jsonrpc_methods(caller.role),
        )

    async def ListAudit(
        self, request: operations_pb2.ListAuditRequest, context: Ctx
    ) -> operations_pb2.ListAuditResponse:
        size = lim.page_size(request.page_size, 100)
        before = None
        if request.page_token:
            lim.check_length("page_token", request.page_token, 32)
            try:
                before = int(request.page_token)
            except ValueError:
                raise InvalidArgument("page_token is not one this service issued") from None
        rows = self.audit.list(size + 1, before)
        page = rows[:size]
        return operations_pb2.ListAuditResponse(
            records=[
                operations_pb2.AuditRecord(
                    id=r.id,
                    at=timestamp(r.at),
                    actor=r.actor,
                    action=r.action,
                    target=r.target,
                    outcome=r.outcome,
                    detail=r.detail,
                )
                for r in page
            ],
            next_page_token=str(page[-1].id) if len(rows) > size else "",
        )
