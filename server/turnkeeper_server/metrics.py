"""Prometheus metrics, one registry per server (tests run several in a process).

Served on their own port (`--metrics-listen`) by prometheus-client's HTTP server.
Gauges that describe stored state (turns by state, outbox backlog) are read from
the store at scrape time on a connection of their own, so they are never stale.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from turnkeeper.states import STATE_NAMES

from turnkeeper_server.store import stats

STATES = STATE_NAMES


def _store_errors() -> tuple[type[Exception], ...]:
    """What a read of the stored state may raise: SQLite's errors, and PostgreSQL's
    once psycopg is loaded (the PostgreSQL store loads it; a SQLite service never
    pays its import)."""
    psycopg = sys.modules.get("psycopg")
    return (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


class _StoredState(Collector):
    """Turns by state and the outbox backlog, read at scrape time on a short-lived
    connection of the scraper's thread (the SQLite file read-only, or PostgreSQL)."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self.connect = connect

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_state = GaugeMetricFamily(
            "turnkeeper_turns", "Turns in the journal by state", labels=["state"]
        )
        backlog = GaugeMetricFamily(
            "turnkeeper_outbox_backlog", "Outbox messages not yet published"
        )
        try:
            conn = self.connect()
        except _store_errors():
            return
        try:
            counts = stats.state_counts(conn)
            pending = stats.outbox_backlog(conn)
        except _store_errors():
            return
        finally:
            conn.close()
        for state in STATES:
            by_state.add_metric([state], counts.get(state, 0))
        backlog.add_metric([], pending)
        yield by_state
        yield backlog


class _FileSizes(Collector):
    """Bytes on disk of each SQLite file with its WAL: what a backup has to copy."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.files = files

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sizes = GaugeMetricFamily(
            "turnkeeper_db_bytes", "Size of a database file and its WAL", labels=["file"]
        )
        for name, path in self.files.items():
            total = 0
            for part in (path, path.with_name(path.name + "-wal")):
                with contextlib.suppress(OSError):
                    total += part.stat().st_size
            sizes.add_metric([name], total)
        yield sizes


class Metrics:
    def __init__(
        self,
        turns_path: Path | None = None,
        sessions_path: Path | None = None,
        *,
        database_url: str | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns_started = Counter("turnkeeper_turns_started", "Turns journaled", registry=r)
        self.turns_finished = Counter(
            "turnkeeper_turns_finished", "Turns finished by an executor", ["state"], registry=r
        )
        self.redrives = Counter(
            "turnkeeper_redrives",
            "Re-drives of orphaned turns (attempts+1) by trigger: startup, operator, lease",
            ["trigger"],
            registry=r,
        )
        self.rewinds = Counter(
            "turnkeeper_rewinds",
            "Rewinds published: retained events past the checkpoint boundary dropped",
            registry=r,
        )
        self.failed_at_cap = Counter(
            "turnkeeper_turns_failed_at_cap", "Turns marked FAILED at the re-drive cap", registry=r
        )
        self.resumes = Counter("turnkeeper_resumes", "Parked turns resumed", registry=r)
        self.events_appended = Counter(
            "turnkeeper_events_appended",
            "Events written by executors (AppendEvents, ParkTurn, FinishTurn)",
            registry=r,
        )
        self.outbox_published = Counter(
            "turnkeeper_outbox_published", "Outbox messages published to NATS", registry=r
        )
        self.outbox_failures = Counter(
            "turnkeeper_outbox_publish_failures", "Failed outbox publish batches", registry=r
        )
        self.webhook_attempts = Counter(
            "turnkeeper_webhook_attempts",
            "Webhook delivery attempts by outcome (delivered, retry, refused, failed)",
            ["outcome"],
            registry=r,
        )
        self.checkpoint_bytes = Counter(
            "turnkeeper_checkpoint_bytes", "Bytes of checkpoints and writes stored", registry=r
        )
        self.watchers = Gauge("turnkeeper_watchers", "Open WatchTurn streams", registry=r)
        self.rpcs = Counter(
            "turnkeeper_rpcs",
            "RPCs handled by method and status code",
            ["method", "code"],
            registry=r,
        )
        self.rpc_seconds = Histogram(
            "turnkeeper_rpc_seconds",
            "RPC latency by method and status code",
            ["method", "code"],
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        if database_url is not None:
            import psycopg

            url = database_url
            r.register(
                _StoredState(lambda: psycopg.connect(url, autocommit=True, connect_timeout=2))
            )
        elif turns_path is not None:
            path = turns_path
            r.register(
                _StoredState(lambda: sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0))
            )
        files = {"turns": turns_path, "sessions": sessions_path}
        if any(files.values()):
            r.register(_FileSizes({k: v for k, v in files.items() if v is not None}))
