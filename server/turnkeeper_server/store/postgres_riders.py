"""An operation's unread writes on PostgreSQL's writer, sent as one statement (decision 610).

A step's group was about a dozen statements (bench/analysis.md, round twenty): each
append its record's check with its `last_seq` move, its events' INSERT and its
outbox rows' INSERT; each checkpoint or task's writes its record's check and its
INSERT; the group's notification. Nobody reads their answers (`Tx.send`): a check
fails the group by raising, the rest only write. psycopg's Python per statement on
the writer thread (a cursor, the query's conversion, a pipeline round of the
generators) and PostgreSQL's bind and executor start per statement are what each
costs, not its rows. So the writer's fast path holds an operation's sends and sends
them as one statement of data-modifying WITH clauses: the INSERTs and the check's
UPDATE each a clause, the check's SELECT the statement's own query. The group's
notification rides on the last operation's (`Riders.flush`).

Only what keeps its meaning inside one statement rides together:
- one operation's sends only (what one operation wrote, the next may check: a WITH
  clause does not see what the statement's other clauses wrote);
- at most one check (a SELECT) and no table written twice: the clauses of one
  statement run in no set order, so the outbox's identity ids stay in message order
  only when a statement holds one INSERT of them, and no row is changed twice;
- INSERTs without RETURNING, and shapes parsed here (`_shape`); anything else goes
  alone, after what is held. One INSERT a statement may end in `RETURNING id` (the
  outbox's, decision 801): it rides as a clause, and the statement's query selects
  its ids as an array, in a column of its own (`Ids`).

Any other statement of the operation sends what is held first, so the order of
statements is the order they were made in. A database error anywhere fails the group,
which then runs carefully (store/postgres.py), every send a statement of its own
under the operation's savepoint, as before this: the errors and refusals an
operation sees are those of its own statements, one at a time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import psycopg

from turnkeeper_server.store.postgres_conn import RETURNING_IDS, Ids, translate
from turnkeeper_server.store.postgres_notify import CHANNEL

# The notification of a group's turns (store/postgres_notify.py), in the shared
# dialect, as one query of the statement it rides on.
NOTIFY_SELECT = "SELECT count(pg_notify(?, payload)) FROM unnest(?::text[]) AS payload"

_CTE = re.compile(r"(\w+) AS \(")
_WRITES = re.compile(r"\b(?:INSERT INTO|UPDATE) ([\w.]+)")


@dataclass(frozen=True, slots=True)
class _Shape:
    """A statement taken apart: its WITH clauses (name, text, parameters) and its
    own query (text, parameters); `check` when that query is a SELECT."""

    ctes: tuple[tuple[str, str, int], ...]
    main: str
    main_params: int
    check: bool
    tables: frozenset[str]
    # An INSERT that returns its rows' ids (the outbox's, decision 801).
    returning: bool = False

    @property
    def cte_params(self) -> int:
        return sum(n for _, _, n in self.ctes)


# Bounded: the statements sent are the store's and the journal's own texts, a few
# per row count.
@lru_cache(maxsize=1024)
def _shape(sql: str) -> _Shape | None:
    """`sql` taken apart, or None when it cannot ride with others (sent alone)."""
    if "'" in sql or ";" in sql:
        return None  # a literal could hold a parenthesis
    ctes: list[tuple[str, str, int]] = []
    at = 0
    if sql.startswith("WITH "):
        at = 5
        while True:
            found = _CTE.match(sql, at)
            if found is None:
                return None
            depth, end = 0, -1
            for i in range(found.end() - 1, len(sql)):
                if sql[i] == "(":
                    depth += 1
                elif sql[i] == ")":
                    depth -= 1
                    if depth == 0:
                        end = i + 1
                        break
            if end < 0:
                return None
            text = sql[at:end]
            ctes.append((found.group(1), text, text.count("?")))
            if sql.startswith(", ", end):
                at = end + 2
                continue
            if not sql.startswith(" ", end):
                return None
            at = end + 1
            break
    main = sql[at:]
    returning = False
    if main.startswith("SELECT "):
        check = True
    elif main.startswith("INSERT INTO ") and " RETURNING " not in main:
        check = False
    elif main.startswith("INSERT INTO ") and main.endswith(RETURNING_IDS) and not ctes:
        check, returning = False, True
        if " RETURNING " in main[: -len(RETURNING_IDS)]:
            return None
    else:
        return None
    return _Shape(
        tuple(ctes), main, main.count("?"), check, frozenset(_WRITES.findall(sql)), returning
    )


@dataclass(frozen=True, slots=True)
class _Plan:
    """A fused statement's text (PostgreSQL's dialect) and, per part, how its
    parameters are split between its WITH clauses and its query."""

    sql: str
    splits: tuple[int, ...]
    final: int
    # The query's column holding the returning part's ids, as an array; -1 if none.
    ids_column: int = -1


@lru_cache(maxsize=1024)
def _plan(sqls: tuple[str, ...], notify: bool) -> _Plan:
    """The statement of `sqls` held together (and the group's notification): every
    part's WITH clauses in order, every query but the last (or the check) as a
    clause of its own, and that one as the statement's query."""
    shapes = [_shape(sql) for sql in sqls]
    assert all(shape is not None for shape in shapes)
    parts: list[_Shape] = [shape for shape in shapes if shape is not None]
    returning = next((i for i, p in enumerate(parts) if p.returning), -1)
    final = next((i for i, p in enumerate(parts) if p.check), len(parts) - 1)
    if (notify or returning >= 0) and not parts[final].check:
        final = -1  # the query selects what is asked; every part's is a clause
    clauses: list[str] = []
    for i, part in enumerate(parts):
        clauses += (text for _, text, _ in part.ctes)
        if i != final:
            clauses.append(f"_r{i} AS ({part.main})")
    selects = [] if final < 0 else [parts[final].main]
    if notify:
        selects.append(NOTIFY_SELECT)
    if returning >= 0:
        selects.append(f"SELECT array_agg(id) FROM _r{returning}")
    if len(selects) == 1 and returning < 0:
        query = selects[0]
    else:
        query = "SELECT " + ", ".join(f"({select})" for select in selects)
    sql = f"WITH {', '.join(clauses)} {query}" if clauses else query
    ids_column = len(selects) - 1 if returning >= 0 else -1
    return _Plan(translate(sql), tuple(p.cte_params for p in parts), final, ids_column)


class Riders:
    """The sends held on the writer's connection for one transaction of a fast group
    (store/postgres.py): the current operation's, sent as one statement when that
    operation makes any other statement, when the next operation makes its first,
    or with the group's notification before its COMMIT."""

    __slots__ = ("_check", "_conn", "_ids", "_names", "_owner", "_parts", "_tables")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn
        self._owner: object = None
        self._parts: list[tuple[str, Sequence[Any]]] = []
        self._names: set[str] = set()
        self._tables: set[str] = set()
        self._check = False
        # Where the held INSERT that returns its ids gets them (at most one held).
        self._ids: Ids | None = None

    def send(self, owner: object, sql: str, params: Sequence[Any], ids: Ids | None = None) -> None:
        """Hold `sql` of operation `owner` (sending what no longer rides with it
        first), or send it now, alone, when its shape cannot ride; an INSERT that
        returns its ids gets them through `ids`."""
        shape = _shape(sql)
        if owner is not self._owner or shape is None or not self._fits(shape):
            self.flush()
        if shape is None:
            cursor = self._execute(translate(sql), params)
            if ids is not None:
                ids.cursor = cursor
            return
        self._owner = owner
        self._parts.append((sql, params))
        self._names.update(name for name, _, _ in shape.ctes)
        self._tables |= shape.tables
        self._check = self._check or shape.check
        if shape.returning:
            self._ids = ids

    def _fits(self, shape: _Shape) -> bool:
        return not (
            (shape.check and self._check)
            or (shape.returning and self._ids is not None)
            or not self._tables.isdisjoint(shape.tables)
            or any(name in self._names for name, _, _ in shape.ctes)
        )

    def flush(self, notify: Sequence[str] = ()) -> None:
        """Send what is held as one statement, with the group's notification
        payloads `notify` if any (alone when nothing is held)."""
        parts = self._parts
        if not parts:
            if notify:
                self._execute(translate(NOTIFY_SELECT), (CHANNEL, list(notify)))
            return
        ids = self._ids
        if len(parts) == 1 and not notify:
            sql, params = parts[0]
            cursor = self._execute(translate(sql), params)
            if ids is not None:
                ids.cursor = cursor  # its own rows
        else:
            plan = _plan(tuple(sql for sql, _ in parts), bool(notify))
            values: list[Any] = []
            finals: Sequence[Any] = ()
            for i, ((_, params), split) in enumerate(zip(parts, plan.splits, strict=True)):
                values += params[:split]
                if i == plan.final:
                    finals = params[split:]
                else:
                    values += params[split:]
            values += finals
            if notify:
                values += (CHANNEL, list(notify))
            cursor = self._execute(plan.sql, values)
            if ids is not None:
                ids.cursor, ids.column = cursor, plan.ids_column
        self._ids = None
        self._parts = []
        self._names = set()
        self._tables = set()
        self._check = False
        self._owner = None

    def _execute(self, sql: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
        return self._conn.execute(sql, params)
