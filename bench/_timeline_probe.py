"""Stamps for bench/run_timeline.py, installed in the service's and the agent host's
processes by a `sitecustomize` that bench/run_timeline.py puts first on their
PYTHONPATH (with ``TURNKEEPER_TIMELINE`` naming the file): wall-clock stamps
(``time.time_ns``, one clock on one machine) of the moments of a run, written a
line each as they happen (the host ends with ``os._exit``: nothing is kept for
the end). Wrappers only: no product code changes for it, and none of it is
loaded outside this benchmark.

On PostgreSQL it also stamps each operation of a group (`pg.op`, its waits
mid-group included) and the group's commit (`pg.commit`: its notification, the
COMMIT's round trip and WAL flush); with ``TURNKEEPER_TIMELINE_WAITS=1`` in the
environment of ``python -m bench.run_timeline``, each wait of the writer thread for
PostgreSQL mid-group too (`pg.wait`: a fetch or a sync, a round trip each).
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_out: Any = None
_who = ""


def stamp(label: str) -> None:
    line = f"{time.time_ns()} {_who} {threading.current_thread().name} {label}\n"
    with _lock:
        _out.write(line)
        _out.flush()


def _around(owner: Any, name: str, label: Callable[..., str] | str) -> None:
    """Stamp `label` when owner.name (a coroutine function or a function) starts and
    `label`/end when it returns."""
    original = getattr(owner, name)

    def text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        return label if isinstance(label, str) else label(*args, **kwargs)

    if _is_async(original):

        @functools.wraps(original)
        async def wrapped_async(*args: Any, **kwargs: Any) -> Any:
            what = text(args, kwargs)
            stamp(f"{what} >")
            try:
                return await original(*args, **kwargs)
            finally:
                stamp(f"{what} <")

        setattr(owner, name, wrapped_async)
        return

    @functools.wraps(original)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        what = text(args, kwargs)
        stamp(f"{what} >")
        try:
            return original(*args, **kwargs)
        finally:
            stamp(f"{what} <")

    setattr(owner, name, wrapped)


def _is_async(fn: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def _service() -> None:
    from aiohttp import web, web_app
    from turnkeeper_server.engine.handoffs import Handoffs
    from turnkeeper_server.store.group_commit import GroupWriter

    original_init = GroupWriter.__init__

    def init(self: GroupWriter, name: str, run_group: Callable[[list[Any]], None]) -> None:
        def stamped(group: list[Any]) -> None:
            stamp(f"commit[{len(group)}] >")
            try:
                run_group(group)
            finally:
                stamp(f"commit[{len(group)}] <")

        original_init(self, name, stamped)

    GroupWriter.__init__ = init  # type: ignore[method-assign]
    _postgres_writer()
    _around(Handoffs, "dispatch", "handoff")
    original_handle = web_app.Application._handle

    async def handle(self: Any, request: web.Request) -> Any:
        stamp(f"http {request.method} {request.path}")
        return await original_handle(self, request)

    web_app.Application._handle = handle  # type: ignore[method-assign]
    original_write = web.StreamResponse.write

    async def write(self: Any, data: bytes) -> None:
        head = bytes(data[:40]).split(b"\n", 1)[0].decode(errors="replace")
        stamp(f"sse.write {head}")
        await original_write(self, data)

    web.StreamResponse.write = write  # type: ignore[method-assign,assignment]


def _postgres_writer() -> None:
    """Inside a PostgreSQL group: each operation (its waits mid-group included) and
    the commit (the notification, the COMMIT's round trip and WAL flush)."""
    from turnkeeper_server.store.postgres import PostgresDatabase

    run_fast = PostgresDatabase._run_fast

    def stamped(conn: Any, pipeline: Any, job: Any, *args: Any) -> Any:
        fn = job.fn
        while hasattr(fn, "func"):
            fn = fn.func
        what = f"pg.op {getattr(fn, '__qualname__', type(fn).__name__)}"
        stamp(f"{what} >")
        try:
            return run_fast(conn, pipeline, job, *args)
        finally:
            stamp(f"{what} <")

    PostgresDatabase._run_fast = staticmethod(stamped)  # type: ignore[method-assign,assignment]
    _around(PostgresDatabase, "_commit", "pg.commit")
    if os.environ.get("TURNKEEPER_TIMELINE_WAITS"):
        _postgres_waits()


def _postgres_waits() -> None:
    """Each wait of the writer thread for PostgreSQL mid-group: a fetch of a
    statement's rows (in pipeline mode, a round trip) or a sync."""
    import psycopg

    def on_writer(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name != "turnkeeper-pg-writer":
                return fn(self, *args, **kwargs)
            query = getattr(getattr(self, "_query", None), "query", b"") or b""
            stamp(f"pg.wait {label} > {bytes(query)[:60].decode(errors='replace')}")
            try:
                return fn(self, *args, **kwargs)
            finally:
                stamp(f"pg.wait {label} <")

        return wrapped

    for name in ("fetchone", "fetchall"):
        setattr(psycopg.Cursor, name, on_writer(getattr(psycopg.Cursor, name), name))
    psycopg.Pipeline.sync = on_writer(psycopg.Pipeline.sync, "sync")  # type: ignore[method-assign]


def _agent() -> None:
    from turnkeeper.agent.bridge import _events, _methods, _runtime
    from turnkeeper.agent.saver import _stream

    _around(_methods.Methods, "execute", "execute")
    _around(_runtime.TurnRuntime, "_claimed", "ClaimTurn")
    _around(_runtime.Execution, "_finish", "FinishTurn")
    _around(_runtime.Execution, "_drive", "drive")
    original_emit = _events.EventLog.emit

    def emit(self: Any, type_: str, data: Any, **options: Any) -> None:
        stamp(f"emit {type_}")
        original_emit(self, type_, data, **options)  # `plain` (decision 521) where taken

    _events.EventLog.emit = emit  # type: ignore[method-assign]

    def op_label(self: Any, **op: Any) -> str:
        (kind,) = op
        return f"stream.{kind}"

    _around(_stream.AsyncRunStream, "request", op_label)


def install(path: str, role: str) -> None:
    global _out, _who
    _out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    _who = role
    {"service": _service, "agent": _agent}[role]()


if os.environ.get("TURNKEEPER_TIMELINE") and os.environ.get("TURNKEEPER_TIMELINE_ROLE"):
    install(os.environ["TURNKEEPER_TIMELINE"], os.environ["TURNKEEPER_TIMELINE_ROLE"])
