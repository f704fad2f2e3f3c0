"""Outbox rows that carry several messages: how they are written and read back.

An AppendEvents batch of 100 events used to write 100 outbox rows beside its 100
events, and the publisher read them back one row at a time: the outbox was half of
the writer's SQLite work and a fifth of the event loop's (bench/analysis.md, round
eight). Where the backend can reserve a run of message ids (SQLite: its one writer
takes `sqlite_sequence`'s next n ids), a batch's messages for one subject go in one
row instead (decision 154):

- `messages` is n, and the row's id is the *last* of its n ids, so every message
  still has an outbox id of its own, the ids stay one increasing run, and
  `Nats-Msg-Id` is what it always was (JetStream's de-duplication and the
  publisher's "past the last id published" are unchanged).
- `payload` is the n payloads joined by the ASCII record separator (0x1E), as in
  RFC 7464's JSON text sequences: it cannot occur in JSON text, and the service's
  payloads are JSON. A payload that holds one anyway goes one row a message.

PostgreSQL keeps one row a message, with `messages` = 1; its writer reads the rows'
ids back (RETURNING) and its replica publishes them from memory once they commit,
deleting them by id after (decision 801).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from turnkeeper_server.store.contract import Tx
from turnkeeper_server.store.records import OutboxRow
from turnkeeper_server.store.rows import insert_rows

SEPARATOR = b"\x1e"

_INSERT = "INSERT INTO main.outbox (subject, payload, created_at)"
_TRACED_INSERT = "INSERT INTO main.outbox (subject, payload, created_at, traceparent)"
# The columns' types, for a backend that inserts rows as arrays (store/rows.py).
_TYPES = ("text", "bytea", "double precision")
_TRACED_TYPES = (*_TYPES, "text")


def write_messages(tx: Tx, subject: str, payloads: list[bytes], now: float) -> None:
    """Queue `payloads` for `subject`, in order, in this transaction's outbox rows."""
    if tx.outbox_from_memory:
        trace = () if tx.trace is None else (tx.trace,)
        head, types = (_INSERT, _TYPES) if tx.trace is None else (_TRACED_INSERT, _TRACED_TYPES)
        rows: list[object] = []
        for payload in payloads:
            rows += (subject, payload, now, *trace)
        sends = _Returning(tx, subject, payloads, len(types))
        insert_rows(sends, head, len(types), rows, "RETURNING id", types)
        return
    if tx.outbox_run_insert and len(payloads) > 1:
        joined = SEPARATOR.join(payloads)
        if joined.count(SEPARATOR) == len(payloads) - 1:
            n = len(payloads)
            tx.execute(tx.outbox_run_insert, (n, subject, joined, now, tx.trace, n))
            return
    if tx.trace is None:
        values: list[object] = []
        for payload in payloads:
            values += (subject, payload, now)
        insert_rows(tx, _INSERT, 3, values, types=_TYPES)
    else:
        traced: list[object] = []
        for payload in payloads:
            traced += (subject, payload, now, tx.trace)
        insert_rows(tx, _TRACED_INSERT, 4, traced, types=_TRACED_TYPES)


class _Returning:
    """Where `insert_rows` sends outbox rows whose ids come back (`Tx.send_outbox`):
    each statement with the messages it holds."""

    def __init__(self, tx: Tx, subject: str, payloads: list[bytes], width: int) -> None:
        self.tx = tx
        self.subject = subject
        self.payloads = payloads
        self.width = width
        self.array_rows = tx.array_rows
        self._sent = 0

    def send(self, sql: str, params: Sequence[Any] = (), /) -> None:
        # One array a column, or the rows' values flattened (store/rows.py).
        n = len(params[0]) if isinstance(params[0], list) else len(params) // self.width
        held = self.payloads[self._sent : self._sent + n]
        self._sent += n
        self.tx.send_outbox(sql, params, self.subject, held)


def messages(row: OutboxRow) -> Iterator[tuple[int, bytes]]:
    """The (outbox id, payload) of each message a row carries, in order."""
    last_id, _, payload, _, count = row
    if count == 1:
        yield last_id, payload
        return
    parts = payload.split(SEPARATOR)
    if len(parts) != count:
        raise ValueError(f"outbox row {last_id} holds {len(parts)} messages, not {count}")
    yield from zip(range(last_id - count + 1, last_id + 1), parts, strict=True)
