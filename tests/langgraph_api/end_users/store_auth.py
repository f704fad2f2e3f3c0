"""End users' own memories, as LangGraph's docs write a store handler: every store
call's namespace is put under the user's identity. Nothing here knows turnkeeper."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()

USERS = {"token-alice": "alice", "token-bob": "bob"}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown user")
    return {"identity": USERS[token], "permissions": []}


@auth.on.store
async def own_namespace(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The user's items live under their identity, whatever namespace is asked."""
    value["namespace"] = (ctx.user.identity, *(value.get("namespace") or ()))
