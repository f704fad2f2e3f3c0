"""OperationsService: who a token is (for the NATS bridges), and the audit log."""

from __future__ import annotations

from grpc import aio
from turnkeeper.v1 import operations_pb2, operations_pb2_grpc

from turnkeeper_server.rpc import limits as lim
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import TokenStore

Ctx = aio.ServicerContext[object, object]


class OperationsServicer(operations_pb2_grpc.OperationsServiceServicer):
    def __init__(self, tokens: TokenStore | None) -> None:
        self.tokens = tokens

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
