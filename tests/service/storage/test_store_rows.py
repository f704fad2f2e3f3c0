"""store/rows.py: many rows in one INSERT, chunked into powers of two."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from turnkeeper_server.store.rows import MAX_ROWS, insert_rows


class _Counting:
    """A transaction on a sqlite3 connection that records the statements it was sent."""

    array_rows = False  # SQLite's: rows as multi-row VALUES

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.statements: list[str] = []

    def send(self, sql: str, parameters: Any = (), /) -> None:
        self.statements.append(sql)
        self.conn.execute(sql, parameters)


@pytest.mark.parametrize(
    ("rows", "chunks"),
    [
        (0, []),
        (1, [1]),
        (100, [64, 32, 4]),
        (MAX_ROWS + 3, [MAX_ROWS, 2, 1]),
        (600, [256, 256, 64, 16, 8]),
    ],
)
def test_rows_go_in_order_in_chunks_whose_sizes_are_powers_of_two(
    tmp_path: Path, rows: int, chunks: list[int]
) -> None:
    conn = _Counting(sqlite3.connect(tmp_path / "rows.db"))
    conn.conn.execute("CREATE TABLE t (n INTEGER PRIMARY KEY, text TEXT NOT NULL)")
    values: list[object] = []
    for n in range(rows):
        values += (n, f"row {n}")
    insert_rows(conn, "INSERT INTO t (n, text)", 2, values)
    assert [s.count("(?, ?)") for s in conn.statements] == chunks
    stored = conn.conn.execute("SELECT n, text FROM t ORDER BY rowid").fetchall()
    assert stored == [(n, f"row {n}") for n in range(rows)]


def test_values_that_do_not_fill_whole_rows_are_refused(tmp_path: Path) -> None:
    conn = _Counting(sqlite3.connect(tmp_path / "rows.db"))
    with pytest.raises(ValueError, match="5 values do not make rows of 2"):
        insert_rows(conn, "INSERT INTO t (n, text)", 2, [1, "a", 2, "b", 3])
    assert conn.statements == []
