"""End users as LangGraph's server's docs write them (`langgraph.json`'s `auth`):
a bearer token names the user; each thread (and so each run) is stamped with its
owner on create and every read, search, update and delete sees only the user's own.
Nothing here knows turnkeeper: the same file runs under `langgraph dev`."""

from __future__ import annotations

from typing import Any

from langgraph_sdk import Auth

auth = Auth()

# The users this deployment knows: a token each (a real one asks its identity provider).
USERS = {"token-alice": "alice", "token-bob": "bob"}


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="unknown user")
    return {"identity": USERS[token], "permissions": ["threads:write"]}


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: Any) -> Auth.types.FilterType:
    """Stamp the owner on what is made; let each user see only their own."""
    if isinstance(value, dict):
        metadata = value.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}


@auth.on.assistants
async def assistants_for_all(ctx: Auth.types.AuthContext, value: Any) -> None:
    """The graphs are everyone's."""
    return None
