"""What TurnStatus answers with: six columns of one turn.

TurnStatus is the panel's question on every idle gap, so it is the hottest read the
service has. It needs these columns, not the turn's whole row (its input JSON, its
leases and deadlines) built into a `TurnRecord`: that costs twice the time of this
read (bench/analysis.md, "TurnStatus").
"""

from __future__ import annotations

from typing import NamedTuple

from turnkeeper_server.store.contract import Conn


class TurnStatusRow(NamedTuple):
    agent: str
    state: str
    attempts: int
    last_seq: int
    error: str
    end_reason: str


_SELECT = f"SELECT {', '.join(TurnStatusRow._fields)} FROM main.turns WHERE turn_id = ?"


def load_status(conn: Conn, turn_id: str) -> TurnStatusRow | None:
    row = conn.execute(_SELECT, (turn_id,)).fetchone()
    return TurnStatusRow(*row) if row else None
