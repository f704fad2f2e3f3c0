"""What may reach the HTTP side before any handler runs.

- The Host allow-list (decision 182): on a loopback port without authentication a
  browser is the only client another party can steer, and a page of any origin can
  rename itself to 127.0.0.1 (DNS rebinding) and then read the answers as its own.
  There, only this host's names are served: `localhost`, `127.0.0.1`, `[::1]`, the
  listen host, and the names given with `--allow-host` (env TURNKEEPER_ALLOWED_HOSTS),
  each with any port or none. Anything else is 403 saying how to allow it. With
  tokens there is no ambient authority for a page to borrow, so any name is served.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from turnkeeper_server.errors import PermissionDenied
from turnkeeper_server.web.connect import error_response

LOCAL_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(header: str) -> str:
    """The name of a Host header, without its port, lower-case ("[::1]:80" -> "[::1]")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if ":" in header else header


def allowed_hosts(listen_host: str, extra: Iterable[str]) -> frozenset[str]:
    own = f"[{listen_host}]" if ":" in listen_host else listen_host
    return LOCAL_NAMES | {own.lower()} | {host_name(name) for name in extra if name.strip()}


def host_allow_list(allowed: frozenset[str]) -> Middleware:
    """A middleware answering 403 to a request whose Host is not in `allowed`."""

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        # No Host at all: not a browser (every browser sends one), so not a page.
        if header is not None and host_name(header) not in allowed:
            name = host_name(header)
            return error_response(
                PermissionDenied(
                    f"Host {name!r} is not a name of this service: it listens on loopback "
                    "without authentication, where a web page could reach it by DNS "
                    f"rebinding. Open it as http://127.0.0.1:PORT/ or http://localhost:PORT/, "
                    f"or allow the name with --allow-host {name} (env "
                    "TURNKEEPER_ALLOWED_HOSTS, comma-separated)"
                )
            )
        return await handler(request)

    return check_host
