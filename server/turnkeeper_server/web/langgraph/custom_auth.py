"""End users, the LangGraph way: the `auth` of a `langgraph.json` (a
`langgraph_sdk.Auth`), run as LangGraph's server runs it, so one `auth.py` works
unchanged on both.

Its `authenticate` handler maps each LangGraph API request to an end user (its
parameters injected by name); an `Auth.exceptions.HTTPException` it raises is the
answer (401 unless it says otherwise). Its `@auth.on` handlers are asked per
resource and action, most specific first (`threads.create`, `threads.*`,
`*.create`, `*.*`, then the global `@auth.on`); each gets the context and a mutable
`value` (a create's `metadata` may be stamped, an owner for instance), and answers
None or True (allowed), False (403) or a filter on the resource's metadata
(`{"owner": "alice"}`, `{"$eq": …}`, `{"$contains": …}`, `$or`, `$and`) that hides
what does not match: a thread filtered out is not found (404), as on LangGraph's.

The token of the service (when tokens are on) still decides the caller's role; the
end user is a user within it. Without an auth file nothing here runs.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from aiohttp import web
from turnkeeper._object_spec import load_object, parse_object_spec

from turnkeeper_server.web.langgraph.errors import ApiError

# langgraph_sdk (with httpx and pydantic) is imported by `load`, which runs only where
# a langgraph.json names an `auth`: a tenth of the service's start-up (about 0.14 s of
# CPU a process) that most deployments never use. A loaded object's handlers reach the
# SDK's exceptions and types through it (`Auth.exceptions`, `Auth.types`).
if TYPE_CHECKING:
    from langgraph_sdk import Auth

log = logging.getLogger(__name__)

Filters = dict[str, Any]
Resource = Literal["threads", "crons", "assistants", "store"]

# What an `authenticate` handler may ask for by name (LangGraph's server's list).
PARAMETERS: Final = frozenset(
    {
        "request",
        "body",
        "user",
        "path",
        "method",
        "scopes",
        "path_params",
        "query_params",
        "headers",
        "authorization",
        "scope",
    }
)
# LangGraph's server refuses filters nested deeper than this.
MAX_NESTING: Final = 2


class EndUser:
    """An authenticated end user: what `authenticate` returned, as a BaseUser."""

    def __init__(self, identity: str, permissions: Sequence[str], fields: Mapping[str, Any]):
        self._identity = identity
        self._permissions = tuple(permissions)
        self._fields = {
            **fields,
            "identity": identity,
            "permissions": list(self._permissions),
        }
        self._fields.setdefault("display_name", identity)
        self._fields.setdefault("is_authenticated", True)

    @property
    def identity(self) -> str:
        return self._identity

    @property
    def permissions(self) -> Sequence[str]:
        return self._permissions

    @property
    def display_name(self) -> str:
        return str(self._fields["display_name"])

    @property
    def is_authenticated(self) -> bool:
        return bool(self._fields["is_authenticated"])

    def __getitem__(self, key: str) -> Any:
        return self._fields[key]

    def __contains__(self, key: object) -> bool:
        return key in self._fields

    def __iter__(self) -> Any:
        return iter(self._fields)

    def __getattr__(self, name: str) -> Any:
        # A custom user's own fields (`ctx.user.org_id`), as LangGraph's proxy does.
        try:
            return self.__dict__["_fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"EndUser({self._identity!r})"


def end_user(answer: Any) -> EndUser:
    """What `authenticate` returned (a string identity, a dict with `identity` and
    optional `permissions`, an object with `identity`, or a (permissions, user)
    pair), as an EndUser; ValueError for anything else."""
    permissions: Sequence[str] = ()
    if isinstance(answer, tuple) and len(answer) == 2:
        permissions, answer = answer
    if isinstance(answer, str):
        return EndUser(answer, permissions, {})
    if isinstance(answer, Mapping) and isinstance(answer.get("identity"), str):
        return EndUser(
            answer["identity"], answer.get("permissions", permissions) or (), dict(answer)
        )
    identity = getattr(answer, "identity", None)
    if isinstance(identity, str):
        fields = (
            {k: v for k, v in vars(answer).items() if not k.startswith("_")}
            if hasattr(answer, "__dict__")
            else {}
        )
        return EndUser(identity, getattr(answer, "permissions", permissions) or (), fields)
    raise ValueError(
        f"authenticate must return a user identity (a string, a dict with 'identity', or "
        f"an object with an identity), not {type(answer).__name__}"
    )


def matches(metadata: Mapping[str, Any], filters: Mapping[str, Any] | None, level: int = 0) -> bool:
    """Whether `metadata` passes a handler's filter, as LangGraph's server reads one:
    each key equal (or `{"$eq": v}`, or `{"$contains": v}` on a list), `$or` and
    `$and` over lists of filters, at most MAX_NESTING deep."""
    if level > MAX_NESTING:
        raise ApiError(500, "the auth handler's filter nests operators too deeply")
    if not filters:
        return True
    for key, wanted in filters.items():
        if key in ("$or", "$and"):
            if not isinstance(wanted, list) or len(wanted) < 2:
                raise ApiError(
                    500, f"the auth handler's {key} must be a list of two filters or more"
                )
            results = (matches(metadata, group, level + 1) for group in wanted)
            if not (any(results) if key == "$or" else all(results)):
                return False
            continue
        if key not in metadata:
            return False
        have = metadata[key]
        if isinstance(wanted, dict) and wanted:
            op, operand = next(iter(wanted.items()))
            if op == "$eq":
                if have != operand:
                    return False
            elif op == "$contains":
                if not isinstance(have, list):
                    return False
                needed = operand if isinstance(operand, list) else [operand]
                if any(item not in have for item in needed):
                    return False
            elif have != wanted:
                return False
        elif have != wanted:
            return False
    return True


@dataclass(frozen=True)
class CustomAuth:
    """A loaded `Auth` object, asked per request."""

    auth: Auth
    # Where it came from, for the log.
    spec: str

    async def authenticate(
        self, request: web.Request, body: Callable[[], Awaitable[Any]]
    ) -> EndUser:
        """The request's end user; `body` reads the request's JSON body, for a
        handler that asks for it."""
        handler = self.auth._authenticate_handler
        if handler is None:
            raise ApiError(500, f"the auth object {self.spec} has no authenticate handler")
        names = set(inspect.signature(handler).parameters) & PARAMETERS
        arguments = _arguments(names, request, await body() if "body" in names else {})
        try:
            answer = await _call(handler, arguments)
        except self.auth.exceptions.HTTPException as exc:
            # LangGraph's server answers 401 as 401, any other refusal as 403.
            raise ApiError(401 if exc.status_code == 401 else 403, str(exc.detail)) from None
        return end_user(answer)

    async def authorize(
        self, user: EndUser, resource: Resource, action: str, value: dict[str, Any]
    ) -> Filters | None:
        """The filter the most specific handler answers (None: everything), after it
        may have changed `value`; 403 when it refuses."""
        handler = self._handler(resource, action)
        if handler is None:
            return None
        ctx = self.auth.types.AuthContext(
            permissions=list(user.permissions),
            user=user,
            resource=resource,
            action=action,
        )
        try:
            result = await handler(ctx=ctx, value=value)
        except self.auth.exceptions.HTTPException as exc:
            raise ApiError(exc.status_code, str(exc.detail)) from None
        except AssertionError as exc:
            raise ApiError(403, str(exc) or "Forbidden") from None
        if result is None or result is True:
            return None
        if result is False:
            raise ApiError(403, "Forbidden")
        if not isinstance(result, dict):
            raise ApiError(
                500,
                f"the auth handler answered {type(result).__name__}: expected a filter "
                "dict, None or a bool",
            )
        return result

    def handles(self, resource: str, action: str) -> bool:
        """Whether a handler (its own, the resource's, the action's or a global
        one) is asked for `action` on `resource`."""
        return self._handler(resource, action) is not None

    def _handler(self, resource: str, action: str) -> Any:
        handlers = self.auth._handlers
        for key in ((resource, action), (resource, "*"), ("*", action), ("*", "*")):
            if handlers.get(key):
                return handlers[key][-1]
        return self.auth._global_handlers[-1] if self.auth._global_handlers else None


def load(spec: str, *, base: Path | None = None) -> CustomAuth:
    """The `Auth` object named by `spec` ("./auth.py:auth" or "package.module:auth").
    A file path is taken relative to `base` (the langgraph.json's folder) and refused
    when it points outside it."""
    from langgraph_sdk import Auth

    named = parse_object_spec(spec, what="the auth path")
    root = base.resolve() if base is not None else None
    obj = load_object(named, what="the auth path", base=root, within=root)
    if not isinstance(obj, Auth):
        raise ValueError(f"{spec!r} names {type(obj).__name__}, not a langgraph_sdk.Auth")
    if obj._authenticate_handler is None:
        raise ValueError(f"the auth object {spec!r} has no @auth.authenticate handler")
    # As LangGraph's server: a parameter it cannot give is refused unless it has a default.
    unknown = {
        name
        for name, param in inspect.signature(obj._authenticate_handler).parameters.items()
        if name not in PARAMETERS and param.default is param.empty
    }
    if unknown:
        raise ValueError(
            f"authenticate takes parameters turnkeeper does not know: {', '.join(sorted(unknown))}"
        )
    return CustomAuth(obj, spec)


def spec_of_config(config: Path) -> tuple[str, Path] | None:
    """`auth.path` of a langgraph.json, with the folder it is relative to (None: the
    file names no auth)."""
    data = json.loads(config.read_text(encoding="utf-8"))
    section = data.get("auth") if isinstance(data, dict) else None
    if section is None:
        return None
    path = section.get("path") if isinstance(section, dict) else None
    if not isinstance(path, str) or not path:
        raise ValueError(f"{config}: auth.path must name the Auth object ('./auth.py:auth')")
    return path, config.resolve().parent


def load_setting(auth: str | None, config: Path | None) -> CustomAuth | None:
    """The service's settings (`--langgraph-auth`, `--langgraph-config`) to the auth
    object they name, if any; `--langgraph-auth` wins."""
    loaded = None
    if auth:
        loaded = load(auth)
    elif config is not None and (found := spec_of_config(config)) is not None:
        loaded = load(found[0], base=found[1])
    if loaded is not None:
        log.info("LangGraph API: end users from %s (langgraph.json auth)", loaded.spec)
    return loaded


async def _call(handler: Any, arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(handler):
        return await handler(**arguments)
    # A plain function may block (LangGraph's server runs it in a thread pool too).
    return await asyncio.to_thread(handler, **arguments)


def _arguments(names: set[str], request: web.Request, body: Any) -> dict[str, Any]:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()]
    values: dict[str, Any] = {
        "request": request,
        "body": dict(body) if isinstance(body, Mapping) else body,
        "user": None,
        "path": request.path,
        "method": request.method,
        "scopes": [],
        "path_params": dict(request.match_info),
        "query_params": dict(request.query),
        "headers": dict(raw),
        "authorization": request.headers.get("Authorization"),
        "scope": {"type": "http", "path": request.path, "method": request.method, "headers": raw},
    }
    return {name: values[name] for name in names}
