"""LangGraph's long-term memory (its `BaseStore`) kept in the journal: items of
JSON values under a namespace (a tuple of labels) and a key, as LangGraph's stores
keep them, on either backend.

A namespace is stored as its labels joined by "." (LangGraph refuses a label with a
period), so a namespace prefix is a string prefix: `ns = p OR substr(ns, 1, n) =
p || '.'`, which the primary key (namespace, key) serves on both backends. The
`filter` of a search is applied here to the items under the prefix, with
LangGraph's own rules (InMemoryStore's: nested equality, `$eq`, `$ne`, `$gt`,
`$gte`, `$lt`, `$lte`); so a search reads every item under its prefix, the way
InMemoryStore does (decision 315). Newest first (`updated_at`), as PostgresStore
and SqliteStore answer.

Semantic search (decision 350): where the langgraph.json configures `store.index`,
a put keeps a vector per embedded path in `store_vectors` (JSON text); a search
with a query scores each item under the prefix by the cosine similarity of its
best vector (max pooling, as InMemoryStore), computed here in Python (`scores`)
or, on PostgreSQL with pgvector installed, in SQL (`scores_pgvector`), and ranks
as InMemoryStore ranks (`ranked`).

TTL: an item put with `ttl` (minutes) expires that long after it was written, or
last read with refresh (`refresh_ttl`); an expired item is no longer read, listed
or searched, and is deleted by the next write (`sweep`). The SQL is plain:
PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.store.contract import Conn, Tx

SEPARATOR = "."
_COLUMNS = "namespace, key, value, created_at, updated_at, ttl_minutes, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"


@dataclass(frozen=True)
class StoreItem:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: float
    updated_at: float
    ttl_minutes: float | None = None
    expires_at: float | None = None


def joined(namespace: Sequence[str]) -> str:
    return SEPARATOR.join(namespace)


def _item(row: Any, value: Any = None) -> StoreItem:
    if value is None:
        value = json.loads(row[2])
    return StoreItem(
        namespace=tuple(row[0].split(SEPARATOR)) if row[0] else (),
        key=row[1],
        value=value if isinstance(value, dict) else {},
        created_at=row[3],
        updated_at=row[4],
        ttl_minutes=row[5],
        expires_at=row[6],
    )


def get(
    tx: Tx, namespace: Sequence[str], key: str, now: float, *, refresh: bool
) -> StoreItem | None:
    """The live item, its expiry moved `ttl_minutes` past `now` when `refresh`."""
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM main.store_items WHERE namespace = ? AND key = ? AND {_LIVE}",
        (joined(namespace), key, now),
    ).fetchone()
    if row is None:
        return None
    item = _item(row)
    if refresh and item.ttl_minutes is not None:
        _refresh(tx, [item], now)
    return item


def read(conn: Conn, namespace: Sequence[str], key: str, now: float) -> StoreItem | None:
    """As get without refresh, on a read connection."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.store_items WHERE namespace = ? AND key = ? AND {_LIVE}",
        (joined(namespace), key, now),
    ).fetchone()
    return None if row is None else _item(row)


def _refresh(tx: Tx, items: Sequence[StoreItem], now: float) -> None:
    for item in items:
        if item.ttl_minutes is not None:
            tx.execute(
                "UPDATE main.store_items SET expires_at = ? WHERE namespace = ? AND key = ?",
                (now + item.ttl_minutes * 60, joined(item.namespace), item.key),
            )


def put(
    tx: Tx,
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    now: float,
    ttl_minutes: float | None,
) -> None:
    """Write the item (created_at kept when it exists), expiring `ttl_minutes` after
    now (None: never)."""
    expires = None if ttl_minutes is None else now + ttl_minutes * 60
    tx.execute(
        f"INSERT INTO main.store_items ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
        "updated_at = excluded.updated_at, ttl_minutes = excluded.ttl_minutes, "
        "expires_at = excluded.expires_at, "
        # An expired row still there is a new item: its creation time is now.
        "created_at = CASE WHEN store_items.expires_at IS NOT NULL "
        "AND store_items.expires_at <= excluded.updated_at "
        "THEN excluded.created_at ELSE store_items.created_at END",
        (joined(namespace), key, json.dumps(dict(value)), now, now, ttl_minutes, expires),
    )


def delete(tx: Tx, namespace: Sequence[str], key: str) -> None:
    tx.execute(
        "DELETE FROM main.store_items WHERE namespace = ? AND key = ?", (joined(namespace), key)
    )
    tx.execute(
        "DELETE FROM main.store_vectors WHERE namespace = ? AND key = ?", (joined(namespace), key)
    )


def erase_under(tx: Tx, prefix: Sequence[str]) -> int:
    """Delete every item (and its vectors) whose namespace starts with `prefix`, a
    non-empty one; how many items."""
    where, params = _prefix_clause(prefix)
    if not where:
        raise ValueError("erase_under needs a namespace prefix")
    tx.execute(f"DELETE FROM main.store_vectors{where}", params)
    done = tx.execute(f"DELETE FROM main.store_items{where}", params)
    return int(done.rowcount or 0)


# Where the store keeps a thread's own memory (decision 352): its items go with the
# thread when it is erased.
THREAD_LABEL = "threads"


def put_vectors(
    tx: Tx, namespace: Sequence[str], key: str, vectors: Sequence[tuple[str, Sequence[float]]]
) -> None:
    """Replace the item's vectors (path, embedding) with these (none: not indexed)."""
    text = joined(namespace)
    tx.execute("DELETE FROM main.store_vectors WHERE namespace = ? AND key = ?", (text, key))
    if vectors:
        tx.conn.executemany(
            "INSERT INTO main.store_vectors (namespace, key, path, embedding) VALUES (?, ?, ?, ?)",
            [(text, key, path, json.dumps(list(v))) for path, v in vectors],
        )


def sweep(tx: Tx, now: float) -> int:
    """Delete the expired items (and their vectors); how many."""
    tx.execute(
        "DELETE FROM main.store_vectors WHERE (namespace, key) IN (SELECT namespace, key "
        "FROM main.store_items WHERE expires_at IS NOT NULL AND expires_at <= ?)",
        (now,),
    )
    done = tx.execute(
        "DELETE FROM main.store_items WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
    )
    return int(done.rowcount or 0)


def _rows(conn: Conn, prefix: Sequence[str], now: float, page: tuple[int, int] | None) -> Any:
    """A cursor over the live items under `prefix`, newest first."""
    cut, paging = ("", ()) if page is None else (" LIMIT ? OFFSET ?", page)
    if not prefix:
        return conn.execute(
            f"SELECT {_COLUMNS} FROM main.store_items WHERE {_LIVE} "
            f"ORDER BY updated_at DESC, namespace, key{cut}",
            (now, *paging),
        )
    text = joined(prefix)
    return conn.execute(
        f"SELECT {_COLUMNS} FROM main.store_items WHERE {_LIVE} "
        "AND (namespace = ? OR substr(namespace, 1, ?) = ?) "
        f"ORDER BY updated_at DESC, namespace, key{cut}",
        (now, text, len(text) + 1, text + SEPARATOR, *paging),
    )


def under(
    conn: Conn, prefix: Sequence[str], now: float, page: tuple[int, int] | None = None
) -> list[StoreItem]:
    """The live items whose namespace starts with `prefix`, newest first; only
    `page` (limit, offset) of them when given."""
    return [_item(r) for r in _rows(conn, prefix, now, page).fetchall()]


def search(
    conn: Conn,
    prefix: Sequence[str],
    filters: Sequence[Mapping[str, Any]],
    limit: int,
    offset: int,
    now: float,
) -> list[StoreItem]:
    """The live items under `prefix` whose value matches every filter, newest first,
    paged: in SQL without a filter; with one, the items are read newest first
    until the page is full (all of them only when few match)."""
    wanted = [f for f in filters if f]
    if not wanted:
        return under(conn, prefix, now, (limit, offset))
    cursor = _rows(conn, prefix, now, None)
    found: list[StoreItem] = []
    skipped = 0
    while len(found) < limit and (row := cursor.fetchone()) is not None:
        value = json.loads(row[2])
        if not all(matches(value, f) for f in wanted):
            continue
        if skipped < offset:
            skipped += 1
            continue
        found.append(_item(row, value))
    return found


def _prefix_clause(prefix: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
    if not prefix:
        return "", ()
    text = joined(prefix)
    return " WHERE (namespace = ? OR substr(namespace, 1, ?) = ?)", (
        text,
        len(text) + 1,
        text + SEPARATOR,
    )


def scores(
    conn: Conn, prefix: Sequence[str], query: Sequence[float]
) -> dict[tuple[str, str], float]:
    """Each embedded item under `prefix` (by joined namespace and key): the cosine
    similarity of its closest vector to `query`, computed here (a plain scan)."""
    where, params = _prefix_clause(prefix)
    rows = conn.execute(
        f"SELECT namespace, key, embedding FROM main.store_vectors{where}", params
    ).fetchall()
    norm = math.sqrt(sum(x * x for x in query))
    best: dict[tuple[str, str], float] = {}
    for namespace, key, embedding in rows:
        vector = json.loads(embedding)
        size = math.sqrt(sum(x * x for x in vector))
        score = (
            sum(a * b for a, b in zip(query, vector, strict=False)) / (norm * size)
            if norm and size
            else 0.0
        )
        if score > best.get((namespace, key), -math.inf):
            best[(namespace, key)] = score
    return best


def scores_pgvector(
    conn: Conn, prefix: Sequence[str], query: Sequence[float]
) -> dict[tuple[str, str], float]:
    """As `scores`, computed by PostgreSQL with pgvector (its cosine distance `<=>`
    over the embeddings cast to `vector`)."""
    where, params = _prefix_clause(prefix)
    rows = conn.execute(
        "SELECT namespace, key, MAX(1 - (embedding::vector <=> ?::vector)) "
        f"FROM main.store_vectors{where} GROUP BY namespace, key",
        (json.dumps(list(query)), *params),
    ).fetchall()
    return {(r[0], r[1]): 0.0 if math.isnan(r[2]) else float(r[2]) for r in rows}


def ranked(
    items: Sequence[StoreItem], found: Mapping[tuple[str, str], float], limit: int, offset: int
) -> list[tuple[StoreItem, float | None]]:
    """InMemoryStore's answer to a query: the embedded items by score, best first,
    paged; then, if the page is not full, items without a vector (score None) fill
    it, newest first."""
    scored = [
        (i, found[(joined(i.namespace), i.key)])
        for i in items
        if (joined(i.namespace), i.key) in found
    ]
    scored.sort(key=lambda pair: pair[1], reverse=True)
    kept: list[tuple[StoreItem, float | None]] = list(scored[offset : offset + limit])
    if len(kept) < limit:
        scoreless = [i for i in items if (joined(i.namespace), i.key) not in found]
        kept.extend((i, None) for i in scoreless[: limit - len(kept)])
    return kept


def ranked_by_key(
    conn: Conn,
    prefix: Sequence[str],
    found: Mapping[tuple[str, str], float],
    limit: int,
    offset: int,
    now: float,
) -> list[tuple[StoreItem, float | None]]:
    """As `ranked` over every live item under `prefix`, reading only the items on
    the page (by key, best score first; an expired one is passed over), and the
    items under the prefix without a vector only when the page is not full."""
    kept: list[tuple[StoreItem, float | None]] = []
    skipped = 0
    for (namespace, key), score in sorted(found.items(), key=lambda pair: -pair[1]):
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM main.store_items WHERE namespace = ? AND key = ? AND {_LIVE}",
            (namespace, key, now),
        ).fetchone()
        if row is None:
            continue
        if skipped < offset:
            skipped += 1
            continue
        kept.append((_item(row), score))
        if len(kept) == limit:
            return kept
    scoreless = [i for i in under(conn, prefix, now) if (joined(i.namespace), i.key) not in found]
    kept.extend((i, None) for i in scoreless[: limit - len(kept)])
    return kept


def matching(
    conn: Conn, prefix: Sequence[str], filters: Sequence[Mapping[str, Any]], now: float
) -> list[StoreItem]:
    """Every live item under `prefix` matching every filter, newest first."""
    return [
        item
        for item in under(conn, prefix, now)
        if all(matches(item.value, f) for f in filters if f)
    ]


def refresh(tx: Tx, items: Sequence[StoreItem], now: float) -> None:
    """Move the expiry of each item that has a ttl to `ttl_minutes` past now."""
    _refresh(tx, items, now)


def namespaces(conn: Conn, now: float) -> list[tuple[str, ...]]:
    """Every namespace that holds a live item."""
    rows = conn.execute(
        f"SELECT DISTINCT namespace FROM main.store_items WHERE {_LIVE}", (now,)
    ).fetchall()
    return [tuple(r[0].split(SEPARATOR)) for r in rows]


def list_namespaces(
    conn: Conn,
    conditions: Sequence[tuple[str, Sequence[str]]],
    max_depth: int | None,
    limit: int,
    offset: int,
    now: float,
) -> list[tuple[str, ...]]:
    """LangGraph's list_namespaces: the namespaces matching every condition
    ("prefix" or "suffix", "*" matching any label), cut to `max_depth`, sorted,
    paged."""
    for kind, _ in conditions:
        if kind not in ("prefix", "suffix"):
            raise InvalidArgument(f"match_type must be 'prefix' or 'suffix', not {kind!r}")
    found = [
        ns
        for ns in namespaces(conn, now)
        if all(
            _fits(ns, path) if kind == "prefix" else _fits(ns[::-1], tuple(path)[::-1])
            for kind, path in conditions
        )
    ]
    cut = {ns[:max_depth] for ns in found} if max_depth is not None else set(found)
    return sorted(cut)[offset : offset + limit]


def _fits(namespace: Sequence[str], path: Sequence[str]) -> bool:
    if len(namespace) < len(path):
        return False
    return all(p == "*" or n == p for n, p in zip(namespace, path, strict=False))


def matches(value: Any, condition: Mapping[str, Any]) -> bool:
    """Whether an item's value matches a search filter (LangGraph's rules)."""
    if not isinstance(value, Mapping):
        return False
    return all(_compare(value.get(k), v) for k, v in condition.items())


def _compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in wanted):
            return all(_operator(value, k, v) for k, v in wanted.items())
        if not isinstance(value, Mapping):
            return False
        return all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(wanted)
            and all(_compare(a, b) for a, b in zip(value, wanted, strict=False))
        )
    return bool(value == wanted)


def _operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator not in ("$gt", "$gte", "$lt", "$lte"):
        raise InvalidArgument(
            f"unsupported filter operator {operator!r}: use $eq, $ne, $gt, $gte, $lt or $lte"
        )
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[operator]
