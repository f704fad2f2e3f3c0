"""Bearer tokens on HTTP: the same tokens file, roles and rights table as on gRPC.

The page sends `Authorization: Bearer <token>` on every request (it keeps the token
in sessionStorage). Nothing is carried by cookies, so a page of another origin
cannot act with a user's authority: there is no ambient credential to ride on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiohttp import web

from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller, TokenStore

TURN_SERVICE = "/turnkeeper.v1.TurnService/"


def caller_of(request: web.Request, tokens: TokenStore | None) -> Caller | None:
    """The caller named by the request's bearer token; None while authentication is
    off. Raises Unauthenticated exactly as the gRPC interceptor does."""
    if tokens is None:
        return None
    return tokens.authenticate(
        [("authorization", v) for v in request.headers.getall("Authorization", [])]
    )


@contextlib.contextmanager
def acting_as(caller: Caller | None) -> Iterator[None]:
    """Run the servicer's own checks (auth.visible, require_turn ...) as `caller`."""
    if caller is None:
        yield
        return
    with auth._as_current(caller):
        yield


def require(right: str) -> None:
    """PERMISSION_DENIED unless the current caller holds `right` (a key of
    auth.RIGHTS, or a TurnService method name)."""
    if "/" not in right and right in _METHOD_NAMES:
        right = TURN_SERVICE + right
    auth.require_right(right)


_METHOD_NAMES = frozenset(
    key.removeprefix(TURN_SERVICE) for key in auth.RIGHTS if key.startswith(TURN_SERVICE)
)
