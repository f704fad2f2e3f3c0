"""Malformed requests are 4xx (or a gRPC client error) with a message, never a 500
with a traceback in the log (decision 185): bytes that are not text in
the Authorization header, a relay body nested past the parser's recursion limit,
and page tokens that decode to a row id no store can hold. A real service on port 0
with tokens, spoken to over raw sockets and gRPC."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import grpc
import pytest
from grpc import aio
from turnkeeper.v1 import operations_pb2, operations_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.raw_http import exchange, request_head
from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory, expect_code

pytestmark = pytest.mark.timeout(60)

LIST_TURNS = "/turnkeeper.v1.TurnService/ListTurns"


@pytest.fixture
async def secured(make_service: ServiceFactory, tmp_path: Path) -> tuple[TurnkeeperServer, str]:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"admin": "admin"})
    service = await make_service(http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl")
    return service, tokens["admin"]


def http_port(service: TurnkeeperServer) -> int:
    assert service.web is not None
    return service.web.port


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


async def test_an_authorization_header_that_is_not_text_is_401_on_every_route(
    secured: tuple[TurnkeeperServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    service, _ = secured
    body = b"{}"
    for method, path in (
        ("POST", LIST_TURNS),
        ("GET", "/v1/turns/t1/events"),
        ("POST", "/v1/agents/alpha/rpc"),
        ("GET", "/v1/whoami"),
    ):
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        ).encode() + b"Authorization: Bearer \xff\xfe\xc3\x28\r\n\r\n"
        response = await exchange(http_port(service), [head, body])
        assert response.status == 401, (path, response.status, response.body[:300])
        assert response.json() == {
            "code": "unauthenticated",
            "message": "the bearer token is not printable ASCII: send 'Bearer <token>' as issued",
        }
    no_tracebacks(caplog)


async def test_a_relay_body_nested_past_the_parsers_recursion_limit_is_400(
    secured: tuple[TurnkeeperServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    service, token = secured
    auth = {"Authorization": f"Bearer {token}"}
    for depth in (100_000, 33):
        params = b"[" * depth + b"]" * depth
        body = b'{"method": "responses/create", "params": {"input": ' + params + b"}}"
        head = request_head(
            "POST", "/v1/agents/alpha/rpc", {**auth, "Content-Length": str(len(body))}
        )
        response = await exchange(http_port(service), [head, body])
        assert response.status == 400, (depth, response.status, response.body[:300])
        assert response.json() == {
            "code": "invalid_argument",
            "message": "the body is nested deeper than 32 levels",
        }
    # Bytes that are not UTF-8 are a 400 too, saying so.
    body = b'{"method": "responses/create", "params": {"x": "\xff"}}'
    head = request_head("POST", "/v1/agents/alpha/rpc", {**auth, "Content-Length": str(len(body))})
    response = await exchange(http_port(service), [head, body])
    assert response.status == 400
    assert response.json()["message"].startswith("the body is not UTF-8")
    no_tracebacks(caplog)


def turns_token(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).decode()


# Page tokens past what a 64-bit row id holds, zero or negative, or not numbers.
BAD_TURNS_TOKENS = [
    turns_token(b"v1:" + b"9" * 40),
    turns_token(b"v1:9223372036854775808"),
    turns_token(b"v1:-99999999999999999999"),
    turns_token(b"v1:0"),
    turns_token(b"v1:x"),
    "%%%",
]
BAD_AUDIT_TOKENS = ["9" * 32, "9223372036854775808", "-" + "9" * 31, "0", "1e5"]
ISSUED = "page_token is not one this service issued"


async def test_page_tokens_no_store_can_hold_are_invalid_argument_on_grpc(
    secured: tuple[TurnkeeperServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    service, token = secured
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        operations = operations_pb2_grpc.OperationsServiceStub(channel)
        for page_token in BAD_TURNS_TOKENS:
            request = turns_pb2.ListTurnsRequest(page_token=page_token)
            call = turns.ListTurns(request, metadata=bearer(token))
            assert await expect_code(call, grpc.StatusCode.INVALID_ARGUMENT) == ISSUED
        for page_token in BAD_AUDIT_TOKENS:
            audit_request = operations_pb2.ListAuditRequest(page_token=page_token)
            audit_call = operations.ListAudit(audit_request, metadata=bearer(token))
            assert await expect_code(audit_call, grpc.StatusCode.INVALID_ARGUMENT) == ISSUED
        # The largest row id there can be is still a page token: an empty page.
        largest = turns_token(b"v1:9223372036854775807")
        page = await turns.ListTurns(
            turns_pb2.ListTurnsRequest(page_token=largest), metadata=bearer(token)
        )
        assert list(page.turns) == []
        audit = await operations.ListAudit(
            operations_pb2.ListAuditRequest(page_token="9223372036854775807"),
            metadata=bearer(token),
        )
        assert audit.next_page_token == ""
    no_tracebacks(caplog)


async def test_page_tokens_no_store_can_hold_are_400_on_connect_json(
    secured: tuple[TurnkeeperServer, str], caplog: pytest.LogCaptureFixture
) -> None:
    service, token = secured
    for page_token in BAD_TURNS_TOKENS:
        body = json.dumps({"pageToken": page_token}).encode()
        head = request_head(
            "POST",
            LIST_TURNS,
            {"Authorization": f"Bearer {token}", "Content-Length": str(len(body))},
        )
        response = await exchange(http_port(service), [head, body])
        assert response.status == 400, (page_token, response.status, response.body[:300])
        assert response.json() == {"code": "invalid_argument", "message": ISSUED}
    no_tracebacks(caplog)
