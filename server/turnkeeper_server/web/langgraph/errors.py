"""Errors as LangGraph's API server answers them: `{"detail": "..."}` with the HTTP
status its SDKs map to their typed errors (404 NotFoundError, 409 ConflictError, 422
UnprocessableEntityError ...)."""

from __future__ import annotations

import logging
from typing import Final

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler
from aiohttp.web_urldispatcher import MatchInfoError

from turnkeeper_server.errors import status_for
from turnkeeper_server.web.relay import AgentRefused, NotAnswered

log = logging.getLogger(__name__)

# The service's status codes as LangGraph's server uses HTTP: a busy thread or a
# turn in the wrong state is a conflict, bad input is unprocessable.
HTTP_STATUS: Final = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class ApiError(Exception):
    """An answer of this API's own: `status` and the `detail` a person can act on."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def unprocessable(detail: str) -> ApiError:
    return ApiError(422, detail)


def problem(exc: BaseException) -> web.Response:
    """The answer for an exception raised while serving a request."""
    if isinstance(exc, ApiError):
        return web.json_response({"detail": exc.detail}, status=exc.status)
    if isinstance(exc, NotAnswered):
        return web.json_response({"detail": exc.message}, status=exc.status)
    if isinstance(exc, AgentRefused):
        name = exc.service_code
        status = HTTP_STATUS.get(grpc.StatusCode[name], 500) if name in _CODES else 422
        return web.json_response({"detail": exc.message}, status=status)
    code, message = status_for(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("LangGraph API request failed unexpectedly", exc_info=exc)
    status = getattr(exc, "http_status", None) or HTTP_STATUS.get(code, 500)
    return web.json_response({"detail": message}, status=status)


_CODES: Final = frozenset(c.name for c in grpc.StatusCode)


@web.middleware
async def unmatched_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A path no route serves (404) or a method its route does not take (405, with
    `Allow`) answered as every other error of the API: `{"detail": ...}`, as LangGraph's
    server answers them, not aiohttp's plain text. Errors a route raises are its own."""
    match = request.match_info
    if not isinstance(match, MatchInfoError):
        return await handler(request)
    exc = match.http_exception
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        detail = f"{request.method} {request.path} is not served; it takes {allowed}"
        headers = {"Allow": ",".join(sorted(exc.allowed_methods))}
        return web.json_response({"detail": detail}, status=405, headers=headers)
    if exc.status == 404:
        detail = f"no route {request.path}: the API's routes are listed at /openapi.json"
        return web.json_response({"detail": detail}, status=404)
    return web.json_response({"detail": exc.reason}, status=exc.status)
