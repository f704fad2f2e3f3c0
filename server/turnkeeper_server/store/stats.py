"""Counts of stored state for the metrics: turns by state, and the outbox backlog.

They run on a connection the caller owns: the Prometheus scrape happens on the
HTTP server's thread, and the engine's reader belongs to the event loop. The SQL is
the same on both backends (the SQLite file read-only, or a PostgreSQL connection).
"""

from __future__ import annotations

from turnkeeper_server.store.contract import Conn


def state_counts(conn: Conn) -> dict[str, int]:
    """Stored turns by state name; a state with no turn is absent."""
    return dict(conn.execute("SELECT state, count(*) FROM turns GROUP BY state").fetchall())


def outbox_backlog(conn: Conn) -> int:
    """Outbox messages not yet published to NATS. On SQLite it also counts, for
    about one group commit, the rows the publisher has just published and whose
    delete waits in the writer's queue (decision 153)."""
    count = conn.execute("SELECT coalesce(sum(messages), 0) FROM outbox").fetchone()[0]
    return int(count)
