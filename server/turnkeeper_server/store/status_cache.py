"""What TurnStatus answers with: six columns of one turn, and the cache that keeps them.

TurnStatus is the panel's question on every idle gap, so it is the hottest read the
service has. It needs these columns, not the turn's whole row (its input JSON, its
leases and deadlines) built into a `TurnRecord`: that costs twice the time of this
read (bench/analysis.md, "TurnStatus").

Where one process writes the database (SQLite's writer thread), the rows are also
kept in a `StatusCache` that is never staler than the database (decision 148). The
writer's connection has triggers on `main.turns` that call `StatusCache.touched`
with the turn_id of every row a statement inserts, deletes or changes a status
column of, inside the transaction; `StatusCache.settled` runs once that
transaction has committed or rolled back, before any of its writes is
acknowledged. A touched turn is not answered from the cache, nor put in it, until
its transaction has settled, and a row read from the database is kept only if no
transaction touched any turn between the start of the read and the keeping (a
generation number), so a row read before a commit never outlives it. A read that
misses reads the database, as with no cache at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final

from turnkeeper_server.store.contract import Conn
from turnkeeper_server.store.records import TurnStatusRow

_SELECT = f"SELECT {', '.join(TurnStatusRow._fields)} FROM main.turns WHERE turn_id = ?"

# Turns kept: about 200 bytes each, so a few MB; the oldest kept goes first.
CACHED_TURNS: Final = 16_384


def load_status(conn: Conn, turn_id: str) -> TurnStatusRow | None:
    row = conn.execute(_SELECT, (turn_id,)).fetchone()
    return TurnStatusRow(*row) if row else None


class StatusCache:
    """TurnStatus rows, invalidated inside the transactions that change them.

    Reads run on the event loop's thread; `touched` and `settled` on the writer's.
    The lock makes each side's check-and-change one step.
    """

    def __init__(self, capacity: int = CACHED_TURNS) -> None:
        self._capacity = capacity
        self._rows: OrderedDict[str, TurnStatusRow] = OrderedDict()
        # Turns the transaction under way touched: read from the database only.
        self._writing: set[str] = set()
        # Moves on every touch and settle: a read that saw it move keeps nothing.
        self._generation = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def status(self, conn: Conn, turn_id: str) -> TurnStatusRow | None:
        """The turn's status columns: kept, else read through `conn` (and kept)."""
        with self._lock:
            row = self._rows.get(turn_id)
            if row is not None:
                return row
            generation = -1 if turn_id in self._writing else self._generation
        row = load_status(conn, turn_id)
        # An unknown turn is not kept: a caller could fill the cache with made-up ids.
        if row is not None and generation >= 0:
            with self._lock:
                if generation == self._generation:
                    self._rows[turn_id] = row
                    if len(self._rows) > self._capacity:
                        self._rows.popitem(last=False)
        return row

    # -- the writer's side ---------------------------------------------------------

    def touched(self, turn_id: str) -> None:
        """A statement of the transaction under way inserted, deleted or changed the
        turn's row (called by the writer connection's triggers)."""
        with self._lock:
            self._rows.pop(turn_id, None)
            self._writing.add(turn_id)
            self._generation += 1

    def settled(self) -> None:
        """The transaction under way committed or rolled back; called before any of
        its writes is acknowledged."""
        with self._lock:
            if self._writing:
                self._writing.clear()
                self._generation += 1


def trigger_statements(function: str) -> list[str]:
    """SQLite: TEMP triggers on the writer's connection calling `function(turn_id)`
    for every turns row a statement inserts, deletes, or sets a status column of."""
    columns = ", ".join(TurnStatusRow._fields)
    return [
        f"CREATE TEMP TRIGGER turnkeeper_status_insert AFTER INSERT ON main.turns "
        f"BEGIN SELECT {function}(NEW.turn_id); END",
        f"CREATE TEMP TRIGGER turnkeeper_status_update AFTER UPDATE OF turn_id, {columns} "
        f"ON main.turns BEGIN SELECT {function}(OLD.turn_id), {function}(NEW.turn_id); END",
        f"CREATE TEMP TRIGGER turnkeeper_status_delete AFTER DELETE ON main.turns "
        f"BEGIN SELECT {function}(OLD.turn_id); END",
    ]
