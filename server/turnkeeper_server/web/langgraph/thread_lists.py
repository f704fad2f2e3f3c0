"""Thread lists as LangGraph's server answers them: `threads.search` (filters, sort,
page, `select`, `extract`), `threads.count` (every match), and `threads.prune` (the
service's erasure of each thread named, decision 298).

A thread's status, its times and its values are its newest run's, which the threads
row does not hold: the rows matching the metadata, ids and owner are read (SQL), and
the rest is done here over them, at most MAX_SCAN per request (decision 300).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import end_users, rights, shapes
from turnkeeper_server.web.langgraph.api import (
    DELETE_THREAD,
    READ,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    sees,
)
from turnkeeper_server.web.langgraph.custom_auth import matches
from turnkeeper_server.web.langgraph.errors import ApiError
from turnkeeper_server.web.langgraph.threads import (
    MAX_IDS,
    newest_state,
    newest_turn,
)

# The options of `threads.search` as LangGraph's server takes them (the document at
# /openapi.json is made from these too).
STATUSES: Final = ("idle", "busy", "interrupted", "error")
SORT_BY: Final = ("thread_id", "status", "created_at", "updated_at", "state_updated_at")
SORT_ORDER: Final = ("asc", "desc")
SELECT: Final = (
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
)
# Where an `extract` path may start, and how many one search may name.
EXTRACT_ROOTS: Final = ("values", "metadata", "config", "interrupts")
MAX_EXTRACT: Final = 10
PRUNE_STRATEGIES: Final = ("delete", "keep_latest")
# The threads one search or count reads (after the metadata filter and the owner):
# sorting, status and values are of each thread's newest run, so they are applied
# here, over at most this many.
MAX_SCAN: Final = 100_000
_ALIAS: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_SPLIT: Final = re.compile(r"\.|\[")


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if value not in allowed:
        raise ApiError(422, f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return str(value)


def _select(body: dict[str, Any]) -> list[str] | None:
    value = body.get("select")
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(422, "select must be a list of field names")
    invalid = [v for v in value if v not in SELECT]
    if invalid:
        raise ApiError(422, f"select: unknown fields {invalid}; the fields: {', '.join(SELECT)}")
    return value


def _extract(body: dict[str, Any]) -> dict[str, str] | None:
    value = body.get("extract")
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or len(value) > MAX_EXTRACT:
        raise ApiError(422, f"extract must be an object of at most {MAX_EXTRACT} alias: path")
    for alias, path in value.items():
        if not _ALIAS.match(alias) or alias in SELECT:
            raise ApiError(
                422, f"extract: {alias!r} must be an identifier and not a thread field's name"
            )
        if not isinstance(path, str) or path.split(".")[0].split("[")[0] not in EXTRACT_ROOTS:
            raise ApiError(
                422, f"extract: the path of {alias!r} must start with {', '.join(EXTRACT_ROOTS)}"
            )
    return value


def extract_path(thread: dict[str, Any], path: str) -> Any:
    """The value at `path` (`values.messages[-1].content`) in a thread; None when it
    does not resolve."""
    parts = _PATH_SPLIT.split(path)
    current: Any = thread.get(parts[0])
    for part in parts[1:]:
        if current is None:
            return None
        if part.endswith("]"):
            try:
                index = int(part[:-1])
                current = current[index] if isinstance(current, list) else None
            except (ValueError, IndexError):
                return None
        elif part:
            current = current.get(part) if isinstance(current, dict) else None
    return current


def contains(value: Any, pattern: Any) -> bool:
    """JSON containment, as PostgreSQL's `@>` (LangGraph's filter on `values`): an
    object holds each key of the pattern with a value that contains it; a list holds
    an element containing each element of the pattern."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            k in value and contains(value[k], v) for k, v in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(value, list) and all(
            any(contains(item, p) for item in value) for p in pattern
        )
    return bool(value == pattern and type(value) is type(pattern))


@dataclass
class _Listed:
    record: ThreadRecord
    newest: TurnRecord | None

    def key(self, sort_by: str) -> Any:
        if sort_by == "thread_id":
            return self.record.thread_id
        if sort_by == "created_at":
            return self.record.created_at
        if sort_by == "status":
            return shapes.thread_status(self.newest)
        if sort_by == "state_updated_at":
            return shapes.state_updated_at(self.record, self.newest)
        return shapes.thread_updated_at(self.record, self.newest)


async def _listed(
    request: web.Request, caller: Caller | None, deps: Deps, body: dict[str, Any], action: str
) -> tuple[list[_Listed], Any]:
    """The threads `caller` sees that match the body's metadata, ids, status and
    values (and a langgraph.json's filter), each with its newest run, in no order;
    and the values filter (applied by the caller of this, which reads values)."""
    require(caller, READ)
    metadata = field(body, "metadata", dict, {})
    values = field(body, "values", dict, {})
    ids = field(body, "ids", list)
    if ids is not None and (len(ids) > MAX_IDS or not all(isinstance(i, str) for i in ids)):
        raise ApiError(422, f"ids must be a list of at most {MAX_IDS} thread ids")
    status = _choice(body, "status", STATUSES)
    limit, offset = limit_offset(body) if action == "search" else (None, None)
    # A langgraph.json's auth narrows the search to what its filter lets through.
    filters = await end_users.authorize(
        request,
        deps,
        "threads",
        "search",
        {
            "metadata": metadata,
            "values": values or None,
            "status": status,
            "limit": limit,
            "offset": offset,
        },
    )
    narrowed, rest = end_users.narrowed(metadata, filters)
    if narrowed is None:
        return [], values
    # A panel's threads are its own (in SQL); an agent's are filtered below (it also
    # sees the threads its turns run on).
    owner = None
    if caller is not None and not auth.sees_every_thread(caller) and caller.role != auth.AGENT:
        owner = auth.identity(caller)
    records = await deps.engine.threads.search(
        metadata=narrowed, ids=ids or None, limit=MAX_SCAN + 1, offset=0, owner=owner
    )
    if len(records) > MAX_SCAN:
        # Never a list or a count of some of them as if it were all.
        raise ApiError(
            422,
            f"more than {MAX_SCAN} threads match: narrow the {action} by metadata or ids",
        )
    out = []
    for record in records:
        if rest is not None and not matches(record.metadata, rest):
            continue
        if not sees(deps, caller, record):
            continue
        listed = _Listed(record, await newest_turn(deps, record.thread_id))
        if status and shapes.thread_status(listed.newest) != status:
            continue
        out.append(listed)
    return out, values


def _with_values(deps: Deps, listed: list[_Listed], values: Any) -> list[_Listed]:
    if not values:
        return listed
    return [t for t in listed if contains(newest_state(deps, t.newest)[0], values)]


async def search(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """Threads that match, sorted (`updated_at`, newest first, unless `sort_by` and
    `sort_order` say otherwise), a page of them, with the fields `select` names and
    the values `extract` names."""
    body = await body_of(request)
    limit, offset = limit_offset(body)
    sort_by = _choice(body, "sort_by", SORT_BY) or "updated_at"
    descending = (_choice(body, "sort_order", SORT_ORDER) or "desc") == "desc"
    select = _select(body)
    extract = _extract(body)
    listed, values = await _listed(request, caller, deps, body, "search")
    listed = _with_values(deps, listed, values)
    # Ties in the order of their ids, whichever the direction.
    listed.sort(key=lambda t: t.record.thread_id)
    listed.sort(key=lambda t: t.key(sort_by), reverse=descending)
    # The reference's paging headers, as it computes them: with more after this page,
    # the next offset and a "total" of one past it; on the last page, the total.
    more = len(listed) > offset + limit
    headers = (
        {"X-Pagination-Next": str(offset + limit), "X-Pagination-Total": str(offset + limit + 1)}
        if more
        else {"X-Pagination-Total": str(offset + len(listed[offset:]))}
    )
    page = []
    for item in listed[offset : offset + limit]:
        values_of, interrupts = newest_state(deps, item.newest)
        thread = shapes.thread(item.record, item.newest, values_of, interrupts)
        shown = {k: v for k, v in thread.items() if k in select} if select else thread
        if extract:
            shown["extracted"] = {a: extract_path(thread, p) for a, p in extract.items()}
        page.append(shown)
    response = json_response(page)
    response.headers.update(headers)
    return response


async def count(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """How many threads match `metadata`, `values` and `status` (every one, not a
    page)."""
    body = await body_of(request)
    listed, values = await _listed(request, caller, deps, body, "count")
    return json_response(len(_with_values(deps, listed, values)))


async def prune(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """Erase the threads named, as `DELETE /threads/{id}` erases one (their runs,
    events and checkpoints; a live run cancelled), each audited; a thread the
    caller does not see, or that is not, is skipped: `pruned_count` says how many
    were erased. `keep_latest` is refused (no checkpoint is ever dropped alone)."""
    body = await body_of(request)
    thread_ids = body.get("thread_ids")
    if not isinstance(thread_ids, list) or not all(isinstance(t, str) for t in thread_ids):
        raise ApiError(422, "thread_ids must be a list of thread ids")
    if len(thread_ids) > MAX_IDS:
        raise ApiError(422, f"thread_ids: at most {MAX_IDS} threads per prune")
    strategy = _choice(body, "strategy", PRUNE_STRATEGIES) or "delete"
    for thread_id in thread_ids:
        try:
            lim.check_id("thread_id", thread_id)
        except InvalidArgument as exc:
            raise ApiError(422, str(exc)) from None
    # Erasure is DeleteThread's right, one thread or many (decision 298); a refusal
    # is audited under the caller, each erasure by the operation that does it.
    needed = rights.Needed(audit_log.DELETE_THREAD, (DELETE_THREAD,), "prune threads")
    # No owner: pruning is a role's right over many threads, never an owner's.
    await rights.refuse_unless(deps, caller, needed, "prune " + " ".join(thread_ids)[:200], "")
    if strategy == "keep_latest":
        raise ApiError(
            422,
            "strategy keep_latest is not supported by turnkeeper: a thread's checkpoints "
            "are its runs' record; prune with strategy delete, or delete the thread",
        )
    # A langgraph.json's auth: its `threads.delete` handler is asked, once, for all.
    filters = await end_users.authorize(
        request, deps, "threads", "delete", {"thread_ids": list(thread_ids)}
    )
    # Every thread checked before any is erased: a refusal erases none.
    seen = []
    for thread_id in dict.fromkeys(thread_ids):
        record = await deps.engine.threads.get(thread_id)
        if record is None or not sees(deps, caller, record):
            continue
        if filters is not None and not matches(record.metadata, filters):
            raise ApiError(404, "at least one thread not found or not authorized")
        seen.append(thread_id)
    pruned = 0
    for thread_id in seen:
        with web_auth.acting_as(caller):
            await deps.operations.threads.erase(
                checkpoints_pb2.DeleteThreadRequest(thread_id=thread_id, cancel=True),
                HttpContext(request),
            )
        pruned += 1
    return json_response({"pruned_count": pruned})
