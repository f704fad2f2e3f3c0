"""LISTEN/NOTIFY between replicas: the writer's notification of the turns a group
changed, sent with its commit, and the listener that wakes this replica's WatchTurn
streams for other replicas' changes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from typing import Any

import psycopg

from turnkeeper_server.store.contract import TurnChanged
from turnkeeper_server.store.postgres_conn import CONNECTION

log = logging.getLogger(__name__)

# The LISTEN/NOTIFY channel: payload a turn_id whose events or state changed.
CHANNEL = "turnkeeper_turns"
# How long the listener waits for a notification before checking it should stop.
LISTEN_POLL = 0.25


# A notification's payload is at most 8000 bytes: the turns of a group go in as
# few as fit (`notify`).
NOTIFY_BYTES = 7900


def notify(conn: psycopg.Connection[Any], turn_ids: list[str]) -> None:
    """One statement for a group's announced turns, before its COMMIT: each turn once,
    as a JSON array in as few notifications as the payload limit allows (decision
    431). A notification per operation cost a statement each, and each is an entry
    in PostgreSQL's queue that every listening replica reads. The writer's fast path
    sends the same payloads with its last operation's statement instead
    (store/postgres_riders.py)."""
    if turn_ids:
        conn.execute(
            "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload",
            (CHANNEL, payloads(turn_ids)),
        )


def payloads(turn_ids: list[str]) -> list[str]:
    """The notifications' payloads of a group's turns (`notify`)."""
    if not turn_ids:
        return []
    out: list[str] = []
    chunk: list[str] = []
    size = 2
    for turn_id in dict.fromkeys(turn_ids):
        grows = len(json.dumps(turn_id).encode()) + 1
        if chunk and size + grows > NOTIFY_BYTES:
            out.append(json.dumps(chunk, separators=(",", ":")))
            chunk, size = [], 2
        chunk.append(turn_id)
        size += grows
    out.append(json.dumps(chunk, separators=(",", ":")))
    return out


def announced(payload: str) -> list[str]:
    """The turns a notification names: a group's JSON array (`notify`), or one turn
    id as it is (a replica of before decision 431, or an operator's pg_notify)."""
    if payload.startswith('["'):
        with contextlib.suppress(ValueError):
            turns = json.loads(payload)
            if isinstance(turns, list) and all(isinstance(t, str) for t in turns):
                return turns
    return [payload]


class Listener:
    """LISTEN on a connection of its own, in a thread: each notification of another
    replica's wakes the WatchTurn streams of its turn on this replica's loop. Those
    sent by `own` backends (this replica's writer) are skipped: their commits woke
    the streams already, and a second wake costs each stream a read that finds
    nothing new."""

    def __init__(
        self,
        url: str,
        loop: asyncio.AbstractEventLoop,
        on_change: TurnChanged,
        own: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        self.url = url
        self.loop = loop
        self.on_change = on_change
        self.own = own
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turnkeeper-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        # The thread sees the flag within LISTEN_POLL and closes its connection.
        self._stop.set()
        self._thread.join(timeout=LISTEN_POLL + 1)

    def _deliver(self, turn_id: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
            self.loop.call_soon_threadsafe(self.on_change, turn_id)

    def _run(self) -> None:
        connected_before = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, **CONNECTION) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if connected_before:
                        # Changes while the connection was down went unheard.
                        self._deliver(None)
                    connected_before = True
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=LISTEN_POLL):
                            if note.pid not in self.own:
                                for turn_id in announced(note.payload):
                                    self._deliver(turn_id)
            except psycopg.Error as exc:
                log.warning("LISTEN connection to PostgreSQL lost (%s); reconnecting", exc)
                self._stop.wait(1.0)
