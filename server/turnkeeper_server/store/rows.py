"""Many rows in one INSERT, in the dialect both backends share.

sqlite3's `executemany` steps its statement once per row, and every step lets go
of the GIL and takes it back. While the event loop is busy, each of those takes
waits for the loop to let go in turn, so a batch of 100 events in the writer
thread waited for the GIL 200 times (bench/analysis.md, round seven). One
statement with many `VALUES` rows steps once. On PostgreSQL it is one statement
instead of a pipeline of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Protocol

# Rows per statement at most: 256 rows of 9 columns stay far under both SQLite's
# (32,766) and PostgreSQL's (65,535) limit on parameters.
MAX_ROWS = 256


class Sends(Protocol):
    """Where rows go: an operation's transaction (`Tx.send`, `Tx.array_rows`)."""

    @property
    def array_rows(self) -> bool: ...

    def send(self, sql: str, params: Sequence[Any] = ..., /) -> None: ...


def insert_rows(
    tx: Sends,
    head: str,
    width: int,
    values: Sequence[Any],
    tail: str = "",
    types: tuple[str, ...] = (),
) -> None:
    """Insert rows of `width` columns whose values are flattened into `values`, in
    order: `head` is the statement up to `VALUES` ("INSERT INTO main.t (a, b)"),
    `tail` what follows the rows (PostgreSQL's "ON CONFLICT ..."). Nobody reads
    their answer (`Tx.send`).

    The rows go in chunks whose sizes are powers of two (100 rows: 64, 32, 4), so a
    table has at most nine statement texts to prepare and cache, whatever the
    batch sizes it sees. With the columns' SQL `types`, a backend that takes arrays
    gets rows of more than one chunk as one statement of one array a column
    (`_arrays`).
    """
    if len(values) % width:
        raise ValueError(f"{len(values)} values do not make rows of {width}")
    rows = len(values) // width
    if types and tx.array_rows and (rows & (rows - 1) or rows > MAX_ROWS):
        # More than one chunk: one statement of arrays. One chunk stays VALUES,
        # which costs the writer's thread and its backend less than arrays do (a
        # row: about 50 and 40 µs against 140 and 90; bench/analysis.md, round
        # twenty-two, "PostgreSQL's rows in one statement").
        if len(types) != width:
            raise ValueError(f"{len(types)} types for rows of {width}")
        tx.send(_arrays(head, types, tail), [list(values[i::width]) for i in range(width)])
        return
    start = 0
    while start < rows:
        size = min(MAX_ROWS, 1 << ((rows - start).bit_length() - 1))
        statement = _statement(head, width, size, tail)
        tx.send(statement, values[start * width : (start + size) * width])
        start += size


@cache
def _statement(head: str, width: int, rows: int, tail: str) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return f"{head} VALUES " + ", ".join([row] * rows) + (f" {tail}" if tail else "")


@cache
def _arrays(head: str, types: tuple[str, ...], tail: str) -> str:
    """The rows as arrays, one a column, unnested in order: PostgreSQL's function
    scan yields the arrays' elements in their order, so identity ids (the outbox's)
    follow the rows as a multi-row VALUES's do."""
    columns = ", ".join(f"?::{type_}[]" for type_ in types)
    return f"{head} SELECT * FROM unnest({columns})" + (f" {tail}" if tail else "")
