"""What a web page of another site may not make a browser do here (decision 273).

A browser sends a "simple" cross-site request (a form post, a `fetch` with a
`text/plain` body) without asking first, with whatever ambient authority the service
grants: on a loopback port without tokens, everything. So a request that changes
something (POST, PUT, PATCH, DELETE) is refused when

- it comes from a page of a foreign origin: its `Origin` is neither the service's
  own (the `Host` it was sent to: the console's pages) nor one given with
  `--cors-origin` (`*`: any), or, without an `Origin`, its `Sec-Fetch-Site` says
  `cross-site`: 403 naming the flag;
- on the LangGraph API's paths, it carries a body (or a `Content-Type`) that is not
  `application/json`: 415. JSON is not a type a page may send without a CORS
  preflight, which only the origins of `--cors-origin` pass. The Connect routes and
  the relay refuse other types themselves (400, connect.py, relay.py).

Clients that are not browsers (the SDKs, curl) send no `Origin` and pass as before.
`check_any_origin` is the start-time rule: `--cors-origin '*'` only with tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Handler

from turnkeeper_server.errors import PermissionDenied
from turnkeeper_server.web.connect import error_response
from turnkeeper_server.web.langgraph.cors import PREFIXES as LANGGRAPH_PREFIXES

STATE_CHANGING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON: Final = "application/json"


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str


def _authority(origin: str) -> str | None:
    """`host[:port]` of an origin ("https://a.example:8443" -> "a.example:8443"), or
    None for an opaque one ("null", a sandboxed frame's or a file's)."""
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return parts.netloc


def refusal(
    *,
    method: str,
    path: str,
    headers: Mapping[str, str],
    has_body: bool,
    allowed: frozenset[str],
) -> Refusal | None:
    """Why a request must be refused, or None: the rule above, without I/O."""
    if method.upper() not in STATE_CHANGING:
        return None
    origin = headers.get("Origin")
    if origin is not None:
        own = headers.get("Host", "").strip().lower()
        configured = "*" in allowed or origin.rstrip("/") in allowed
        # An opaque origin (None) is never this service's own.
        if not configured and _authority(origin) != own:
            return Refusal(
                403,
                f"a page of origin {origin} may not change anything on this service "
                f"(only its own pages and the origins given with --cors-origin may); "
                f"if that page is yours, pass --cors-origin {origin} (env "
                "TURNKEEPER_CORS_ORIGINS)",
            )
    elif headers.get("Sec-Fetch-Site", "").strip().lower() == "cross-site":
        return Refusal(
            403,
            "a page of another site may not change anything on this service (the "
            "browser says Sec-Fetch-Site: cross-site); allow its origin with --cors-origin",
        )
    if path.startswith(LANGGRAPH_PREFIXES):
        given = headers.get("Content-Type")
        kind = (given or "").partition(";")[0].strip().lower()
        if (has_body or given is not None) and kind != JSON:
            return Refusal(
                415,
                f"send the request body as Content-Type {JSON}, not {kind or 'none'!r}",
            )
    return None


class CrossSite:
    """The rule as an aiohttp middleware, with the origins of `--cors-origin`."""

    def __init__(self, origins: Iterable[str], *, tokens: bool) -> None:
        self.allowed = frozenset(o.rstrip("/") for o in origins)
        check_any_origin(self.allowed, tokens=tokens)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        found = refusal(
            method=request.method,
            path=request.path,
            headers=request.headers,
            has_body=request.body_exists,
            allowed=self.allowed,
        )
        if found is None:
            return await handler(request)
        if request.path.startswith(LANGGRAPH_PREFIXES):
            # LangGraph's own error shape, which its SDKs turn into typed errors.
            return web.json_response({"detail": found.message}, status=found.status)
        if found.status == 403:
            return error_response(PermissionDenied(found.message))
        return web.json_response(
            {"code": "invalid_argument", "message": found.message}, status=found.status
        )


def check_any_origin(origins: Iterable[str], *, tokens: bool) -> None:
    """`--cors-origin '*'` without tokens would let a page of any site read and
    change everything: refused (ValueError saying what to pass)."""
    if "*" in set(origins) and not tokens:
        raise ValueError(
            "refusing --cors-origin '*' without --tokens-file: without tokens everyone "
            "is an admin, so a page of any site could read every thread and start runs "
            "through your browser. Pass --tokens-file FILE (env TURNKEEPER_TOKENS_FILE) "
            "so each call needs a token, or name the origins of your panels instead "
            "(--cors-origin https://panel.example, env TURNKEEPER_CORS_ORIGINS)"
        )
