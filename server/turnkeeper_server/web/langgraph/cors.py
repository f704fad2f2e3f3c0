"""CORS for the LangGraph API: a browser panel served from another origin (its own
static host, a dev server) calls the API as it calls LangGraph's server.

Only origins given with `--cors-origin` are answered (`*`: any), only on the
LangGraph API's paths, and credentials are never allowed: the panel sends its token
in a header (`x-api-key` or `Authorization`), which CORS lets through by name, so no
ambient credential (a cookie) can ride a cross-origin request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

PREFIXES: Final = ("/assistants", "/threads", "/runs", "/info")
ALLOWED_HEADERS: Final = (
    "Authorization, Content-Type, Last-Event-ID, X-Api-Key, Accept, Cache-Control, "
    # A stream's choice of live or settled tokens (runs.py, decision 292).
    "X-Turnkeeper-Stream"
)
EXPOSED_HEADERS: Final = "Content-Location, Location, X-Pagination-Next, X-Pagination-Total"
METHODS: Final = "GET, POST, PATCH, DELETE, OPTIONS"


class Cors:
    """`middleware` answers preflights; `on_prepare` (an `on_response_prepare`
    signal) puts the headers on every answer, streams included, whose headers go
    out before a middleware could see the response."""

    def __init__(self, origins: Iterable[str]) -> None:
        self.allowed = frozenset(origins)
        self.anyone = "*" in self.allowed

    def _headers(self, request: web.Request) -> dict[str, str] | None:
        origin = request.headers.get("Origin")
        if origin is None or not request.path.startswith(PREFIXES):
            return None
        if not self.anyone and origin not in self.allowed:
            return None
        return {
            "Access-Control-Allow-Origin": "*" if self.anyone else origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
            "Vary": "Origin",
        }

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        if not request.path.startswith(PREFIXES):
            return await handler(request)
        headers = self._headers(request)
        if headers is None:
            origin = request.headers.get("Origin")
            return web.json_response(
                {"detail": f"origin {origin} may not call this API (--cors-origin)"},
                status=403,
            )
        return web.Response(
            status=204,
            headers={
                **headers,
                "Access-Control-Allow-Methods": METHODS,
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
            },
        )

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        headers = self._headers(request)
        if headers is not None:
            response.headers.update(headers)
