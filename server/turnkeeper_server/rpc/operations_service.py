"""OperationsService: who a token is, caller assertions for requests to agents on
NATS (security/assertions.py), and the audit log."""

from __future__ import annotations

from grpc import aio
from turnkeeper.v1 import operations_pb2, operations_pb2_grpc

from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.errors import InvalidArgument, WrongState
from turnkeeper_server.operations.convert import timestamp
from turnkeeper_server.security import auth
from turnkeeper_server.security.assertions import Assertions
from turnkeeper_server.security.auth import TokenStore

Ctx = aio.ServicerContext[object, object]


class OperationsServicer(operations_pb2_grpc.OperationsServiceServicer):
    def __init__(
        self, tokens: TokenStore | None, audit: AuditLog, assertions: Assertions | None = None
    ) -> None:
        self.tokens = tokens
        self.audit = audit
        self.assertions = assertions

    async def IssueAssertion(
        self, request: operations_pb2.IssueAssertionRequest, context: Ctx
    ) -> operations_pb2.IssueAssertionResponse:
        agent = lim.check_agent(request.agent)
        request_id = lim.check_id("request_id", request.request_id)
        caller = auth.current()
        if self.assertions is None or caller is None:
            raise WrongState(
                "this service runs without tokens: bridges take every caller, so there is "
                "nothing to assert; send the request without a Turnkeeper-Assertion header"
            )
        value, expires = self.assertions.issue(caller, agent, request.method, request_id)
        return operations_pb2.IssueAssertionResponse(assertion=value, expires_at=timestamp(expires))

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
                before = lim.page_position(int(request.page_token))
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
