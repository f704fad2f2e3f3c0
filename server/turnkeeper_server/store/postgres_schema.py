"""The PostgreSQL schema, as numbered migrations recorded in a version table.

One database holds everything, so a state change, its events, its checkpoint
fence and its outbox rows commit in one transaction. The checkpoint tables are
langgraph-checkpoint-postgres's own (`PostgresSaver.setup()` creates the same
ones, and records its steps in `checkpoint_migrations`), so stock PostgresSaver
reads and writes them beside the service. What turnkeeper adds is in tables of
its own, never read by PostgresSaver.

Migrations run under an advisory lock: replicas starting together apply each
step once.
"""

from __future__ import annotations

import time
from typing import Any

from langgraph.checkpoint.postgres.base import MIGRATIONS as SAVER_MIGRATIONS

# Any fixed number: held while migrating, so concurrent starts take turns.
MIGRATION_LOCK = 0x7475726E  # "turn"
# How often a replica asks again for the migration lock another replica holds.
MIGRATION_LOCK_RETRY_SECONDS = 0.05

TURNKEEPER_MIGRATIONS: list[str] = [
    # 1: the journal, its retained events, the NATS outbox and turn boundaries.
    """
    CREATE TABLE turns (
        turn_id            TEXT PRIMARY KEY,
        thread_id          TEXT NOT NULL,
        agent              TEXT NOT NULL,
        state              TEXT NOT NULL CHECK (state IN ('RUNNING','PARKED','DONE','FAILED')),
        attempts           INTEGER NOT NULL DEFAULT 0,
        last_seq           BIGINT NOT NULL DEFAULT 0,
        rewinds            INTEGER NOT NULL DEFAULT 0,
        input_json         TEXT NOT NULL,
        request_hash       TEXT NOT NULL,
        owner_replica      TEXT,
        owner_incarnation  TEXT,
        lease_expires_at   DOUBLE PRECISION,
        interrupt_json     TEXT,
        resume_json        TEXT,
        error              TEXT NOT NULL DEFAULT '',
        created_at         DOUBLE PRECISION NOT NULL,
        updated_at         DOUBLE PRECISION NOT NULL,
        -- ListTurns pages by insertion order, as by SQLite's rowid.
        rowid              BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE
    );
    -- One live turn per thread, enforced by the database itself: two replicas
    -- starting turns on one thread at once cannot both commit.
    CREATE UNIQUE INDEX turns_one_live_per_thread ON turns (thread_id)
        WHERE state IN ('RUNNING', 'PARKED');
    CREATE INDEX turns_by_lease ON turns (state, lease_expires_at);
    CREATE INDEX turns_by_owner ON turns (agent, owner_replica) WHERE state = 'RUNNING';
    CREATE INDEX turns_by_thread ON turns (thread_id);
    CREATE TABLE events (
        turn_id    TEXT NOT NULL,
        seq        BIGINT NOT NULL,
        attempt    INTEGER NOT NULL,
        type       TEXT NOT NULL,
        data_json  TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (turn_id, seq)
    );
    CREATE TABLE outbox (
        id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        subject    TEXT NOT NULL,
        payload    BYTEA NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
    -- The turn's last_seq when each of its checkpoints was written: where a
    -- re-drive rewinds the event stream to.
    CREATE TABLE turnkeeper_boundaries (
        turn_id       TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        thread_id     TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        attempt       INTEGER NOT NULL,
        last_seq      BIGINT NOT NULL,
        PRIMARY KEY (turn_id, checkpoint_ns, checkpoint_id)
    );
    CREATE INDEX turnkeeper_boundaries_by_thread ON turnkeeper_boundaries (thread_id);
    """,
    # 2: the audit log of operator actions (audit.py) and the outbox rows' trace
    # context (tracing.py), as SQLite's migration 2 of turns.db.
    """
    CREATE TABLE audit (
        id       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at       DOUBLE PRECISION NOT NULL,
        actor    TEXT NOT NULL,
        action   TEXT NOT NULL,
        target   TEXT NOT NULL,
        outcome  TEXT NOT NULL,
        detail   TEXT NOT NULL
    );
    -- The W3C trace context of the call that wrote an outbox row (tracing on only),
    -- sent as the NATS message's traceparent header.
    ALTER TABLE outbox ADD COLUMN traceparent TEXT;
    """,
    # 3: the whole life of a turn, as SQLite's turns.db migration 3. Two more states
    # (CANCELLED, terminal; QUEUED, behind a thread's live turn: not in the one-live
    # partial index, so any number may wait), why the service ended a turn, the
    # per-turn deadlines, retention's mark and poison containment's counters.
    # PostgreSQL alters in place: rowid (ListTurns' page tokens) is untouched.
    """
    ALTER TABLE turns DROP CONSTRAINT turns_state_check;
    ALTER TABLE turns ADD CONSTRAINT turns_state_check
        CHECK (state IN ('RUNNING','PARKED','DONE','FAILED','CANCELLED','QUEUED'));
    ALTER TABLE turns
        ADD COLUMN end_reason          TEXT NOT NULL DEFAULT '',
        ADD COLUMN max_run_seconds     DOUBLE PRECISION NOT NULL DEFAULT 0,
        ADD COLUMN park_expiry_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
        ADD COLUMN run_deadline_at     DOUBLE PRECISION,
        ADD COLUMN park_deadline_at    DOUBLE PRECISION,
        ADD COLUMN pruned              INTEGER NOT NULL DEFAULT 0,
        ADD COLUMN charged             INTEGER NOT NULL DEFAULT 0,
        ADD COLUMN suspect             INTEGER NOT NULL DEFAULT 0;
    -- Crashes so far were all charged: the cap counted attempts.
    UPDATE turns SET charged = attempts;
    CREATE INDEX turns_by_run_deadline ON turns (run_deadline_at) WHERE state = 'RUNNING';
    CREATE INDEX turns_by_park_deadline ON turns (park_deadline_at) WHERE state = 'PARKED';
    CREATE INDEX turns_queued ON turns (thread_id, created_at) WHERE state = 'QUEUED';
    CREATE INDEX turns_suspects ON turns (agent, suspect) WHERE suspect >= 2;
    CREATE INDEX turns_to_prune ON turns (updated_at)
        WHERE pruned = 0 AND state IN ('DONE', 'FAILED', 'CANCELLED');
    """,
    # 4: the turn horizon's next finished turns, as SQLite's turns.db migration 4.
    """
    CREATE INDEX turns_to_delete ON turns (updated_at)
        WHERE state IN ('DONE', 'FAILED', 'CANCELLED');
    """,
    # 5: at most one turn of an agent on probation (journal/containment.py). Every
    # replica's reaper, and each agent's startup Redrive, releases the agent's next
    # held turn when none is on probation; two transactions at once each saw none
    # and released one each, and the healthy one then ran beside the poison one and
    # was blamed with it. With this index the second waits for the first, fails on
    # its commit, and runs again (a lost race, see store/postgres.py), seeing the
    # first's probation turn. Any extra probation turn is a plain suspect again.
    """
    UPDATE turns SET suspect = 1
        WHERE suspect = 3 AND state = 'RUNNING' AND turn_id NOT IN (
            SELECT min(turn_id) FROM turns WHERE suspect = 3 AND state = 'RUNNING'
            GROUP BY agent);
    CREATE UNIQUE INDEX turns_one_probation ON turns (agent)
        WHERE suspect = 3 AND state = 'RUNNING';
    """,
    # 6: as SQLite's turns.db migration 6, so both backends' rows read alike; here
    # every row carries one message (store/outbox_rows.py).
    """
    ALTER TABLE outbox ADD COLUMN messages INTEGER NOT NULL DEFAULT 1;
    """,
    # 7: as SQLite's turns.db migration 7: the agents replicas announced.
    """
    CREATE TABLE agents (
        agent        TEXT PRIMARY KEY,
        announced_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 8: threads as the LangGraph API knows them, as SQLite's turns.db migration 8.
    """
    CREATE TABLE threads (
        thread_id  TEXT PRIMARY KEY,
        metadata   TEXT NOT NULL DEFAULT '{}',
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 9: the effect ledger, as SQLite's turns.db migration 9.
    """
    CREATE TABLE effects (
        turn_id        TEXT NOT NULL,
        effect_key     TEXT NOT NULL,
        base_key       TEXT NOT NULL,
        name           TEXT NOT NULL,
        args_json      TEXT NOT NULL,
        policy         TEXT NOT NULL,
        state          TEXT NOT NULL
            CHECK (state IN ('INTENT','DONE','FAILED','RESOLVED','SUPERSEDED')),
        outcome_json   TEXT NOT NULL DEFAULT '',
        attempt        INTEGER NOT NULL,
        task_id        TEXT NOT NULL,
        checkpoint_id  TEXT NOT NULL,
        call_index     INTEGER NOT NULL,
        detail         TEXT NOT NULL DEFAULT '',
        announced      INTEGER NOT NULL DEFAULT 0,
        created_at     DOUBLE PRECISION NOT NULL,
        updated_at     DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (turn_id, effect_key)
    );
    -- The live call under a client's key: what BeginEffect looks up.
    CREATE INDEX effects_by_base ON effects (turn_id, base_key);
    -- A task's effects: what its writes settle.
    CREATE INDEX effects_by_task ON effects (turn_id, task_id);
    """,
    # As SQLite's turns.db migration of the same place: each turn's graph version.
    """
    ALTER TABLE turns ADD COLUMN graph_fingerprint TEXT NOT NULL DEFAULT '';
    ALTER TABLE turns ADD COLUMN graph_label TEXT NOT NULL DEFAULT '';
    """,
    # As SQLite's turns.db migration of the same place: who made each thread.
    """
    ALTER TABLE threads ADD COLUMN owner TEXT NOT NULL DEFAULT '';
    """,
    # As SQLite's turns.db migration of the same place: assistants and their versions.
    """
    CREATE TABLE assistants (
        assistant_id TEXT PRIMARY KEY,
        graph_id     TEXT NOT NULL,
        name         TEXT NOT NULL,
        description  TEXT,
        config       TEXT NOT NULL DEFAULT '{}',
        context      TEXT NOT NULL DEFAULT '{}',
        metadata     TEXT NOT NULL DEFAULT '{}',
        version      INTEGER NOT NULL,
        created_at   DOUBLE PRECISION NOT NULL,
        updated_at   DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE assistant_versions (
        assistant_id TEXT NOT NULL,
        version      INTEGER NOT NULL,
        graph_id     TEXT NOT NULL,
        name         TEXT NOT NULL,
        description  TEXT,
        config       TEXT NOT NULL DEFAULT '{}',
        context      TEXT NOT NULL DEFAULT '{}',
        metadata     TEXT NOT NULL DEFAULT '{}',
        created_at   DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (assistant_id, version)
    );
    """,
    # As SQLite's turns.db migration of the same place: a LangGraph API run's record.
    """
    CREATE TABLE langgraph_runs (
        turn_id            TEXT PRIMARY KEY,
        metadata           TEXT NOT NULL DEFAULT '{}',
        kwargs             TEXT NOT NULL DEFAULT '{}',
        multitask_strategy TEXT NOT NULL DEFAULT ''
    );
    """,
    # As SQLite's turns.db migration of the same place: LangGraph's store items.
    """
    CREATE TABLE store_items (
        namespace    TEXT NOT NULL,
        key          TEXT NOT NULL,
        value        TEXT NOT NULL,
        created_at   DOUBLE PRECISION NOT NULL,
        updated_at   DOUBLE PRECISION NOT NULL,
        ttl_minutes  DOUBLE PRECISION,
        expires_at   DOUBLE PRECISION,
        PRIMARY KEY (namespace, key)
    );
    CREATE INDEX store_items_expiry ON store_items (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # As SQLite's turns.db migration of the same place: the store's semantic index.
    # The embedding is text ('[0.1, 0.2]'), which pgvector casts (::vector) where
    # the extension is installed; no column of its type, so the schema is the same
    # with or without it.
    """
    CREATE TABLE store_vectors (
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        path       TEXT NOT NULL,
        embedding  TEXT NOT NULL,
        PRIMARY KEY (namespace, key, path)
    );
    """,
    # As SQLite's turns.db migration of the same place: webhook deliveries and attempts.
    """
    CREATE TABLE webhook_deliveries (
        turn_id          TEXT PRIMARY KEY,
        thread_id        TEXT NOT NULL,
        url              TEXT NOT NULL,
        state            TEXT NOT NULL,
        run_state        TEXT NOT NULL DEFAULT '',
        attempts         INTEGER NOT NULL DEFAULT 0,
        next_attempt_at  DOUBLE PRECISION,
        claimed_by       TEXT,
        claim_expires_at DOUBLE PRECISION,
        payload          TEXT,
        last_error       TEXT NOT NULL DEFAULT '',
        created_at       DOUBLE PRECISION NOT NULL,
        ended_at         DOUBLE PRECISION,
        updated_at       DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
        WHERE state = 'pending';
    CREATE INDEX webhook_deliveries_by_thread ON webhook_deliveries (thread_id);
    CREATE TABLE webhook_attempts (
        turn_id      TEXT NOT NULL,
        attempt      INTEGER NOT NULL,
        replica      TEXT NOT NULL DEFAULT '',
        started_at   DOUBLE PRECISION NOT NULL,
        finished_at  DOUBLE PRECISION,
        outcome      TEXT NOT NULL DEFAULT '',
        http_status  INTEGER,
        detail       TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (turn_id, attempt)
    );
    """,
    # As SQLite's turns.db migration of the same place: crons and after_seconds runs.
    """
    CREATE TABLE crons (
        cron_id          TEXT PRIMARY KEY,
        kind             TEXT NOT NULL CHECK (kind IN ('cron', 'once')),
        assistant_id     TEXT NOT NULL,
        thread_id        TEXT,
        run_id           TEXT,
        schedule         TEXT NOT NULL DEFAULT '',
        timezone         TEXT,
        payload          TEXT NOT NULL DEFAULT '{}',
        metadata         TEXT NOT NULL DEFAULT '{}',
        webhook          TEXT,
        on_run_completed TEXT,
        end_time         DOUBLE PRECISION,
        enabled          INTEGER NOT NULL DEFAULT 1,
        owner            TEXT NOT NULL DEFAULT '',
        acts_as          TEXT NOT NULL DEFAULT '',
        user_id          TEXT,
        next_run_at      DOUBLE PRECISION,
        claimed_by       TEXT,
        claim_expires_at DOUBLE PRECISION,
        fired            INTEGER NOT NULL DEFAULT 0,
        last_error       TEXT NOT NULL DEFAULT '',
        created_at       DOUBLE PRECISION NOT NULL,
        updated_at       DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX crons_due ON crons (next_run_at) WHERE enabled = 1;
    """,
    # As SQLite's turns.db migration of the same place: what a turn's effect ledger
    # holds that its checkpoint writes must look at (decision 510). Here a trigger
    # sets the bits too: a replica of before this migration, beside the others on
    # the same database until its upgrade, writes effects without setting them, and
    # a writer's record of the turn (decision 470) would pass its check.
    """
    CREATE FUNCTION turnkeeper_effects_mark() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        bits INTEGER := CASE WHEN NEW.state <> 'SUPERSEDED' THEN 1
                             WHEN NEW.announced = 0 THEN 2 ELSE 0 END;
    BEGIN
        UPDATE turns SET effects = effects | bits
            WHERE turn_id = NEW.turn_id AND effects & bits <> bits;
        RETURN NULL;
    END $$;
    ALTER TABLE turns ADD COLUMN effects INTEGER NOT NULL DEFAULT 0;
    CREATE TRIGGER effects_mark_turn AFTER INSERT OR UPDATE OF state, announced ON effects
        FOR EACH ROW EXECUTE FUNCTION turnkeeper_effects_mark();
    UPDATE turns SET effects =
        (CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.turn_id = turns.turn_id
            AND e.state <> 'SUPERSEDED') THEN 1 ELSE 0 END)
        | (CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.turn_id = turns.turn_id
            AND e.state = 'SUPERSEDED' AND e.announced = 0) THEN 2 ELSE 0 END)
        WHERE turn_id IN (SELECT turn_id FROM effects);
    """,
    # As SQLite's: a turn whose claim rode its hand-off, not yet taken (decision 590).
    """
    ALTER TABLE turns ADD COLUMN handed INTEGER NOT NULL DEFAULT 0;
    """,
]


def migrate(conn: Any) -> int:
    """Bring the database to this turnkeeper's schema; returns its version.

    `conn` is a psycopg connection in autocommit mode (PostgresSaver's index
    migrations use CREATE INDEX CONCURRENTLY, which refuses a transaction).
    """
    # Taken with try-and-retry, not pg_advisory_lock: a replica waiting inside that
    # call holds a transaction open, and the migrating replica's CREATE INDEX
    # CONCURRENTLY waits for every open transaction, so replicas starting together on
    # an empty database deadlocked and one failed to start. Between tries no
    # transaction is open.
    while not conn.execute("SELECT pg_try_advisory_lock(%s)", (MIGRATION_LOCK,)).fetchone()[0]:
        time.sleep(MIGRATION_LOCK_RETRY_SECONDS)
    try:
        _saver_tables(conn)
        return _turnkeeper_tables(conn)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))


def _saver_tables(conn: Any) -> None:
    """PostgresSaver.setup(), step for step, in its own version table."""
    conn.execute(SAVER_MIGRATIONS[0])
    row = conn.execute("SELECT v FROM checkpoint_migrations ORDER BY v DESC LIMIT 1").fetchone()
    current = -1 if row is None else row[0]
    for version in range(current + 1, len(SAVER_MIGRATIONS)):
        conn.execute(SAVER_MIGRATIONS[version])
        conn.execute("INSERT INTO checkpoint_migrations (v) VALUES (%s)", (version,))


def _turnkeeper_tables(conn: Any) -> int:
    conn.execute("CREATE TABLE IF NOT EXISTS turnkeeper_schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT max(version) FROM turnkeeper_schema_version").fetchone()
    current = row[0] or 0
    if current > len(TURNKEEPER_MIGRATIONS):
        raise RuntimeError(
            f"the database is at turnkeeper schema version {current}, newer than this "
            f"turnkeeper ({len(TURNKEEPER_MIGRATIONS)}): upgrade turnkeeper instead of downgrading"
        )
    for version, script in enumerate(TURNKEEPER_MIGRATIONS[current:], start=current + 1):
        with conn.transaction():
            conn.execute(script)
            conn.execute("INSERT INTO turnkeeper_schema_version (version) VALUES (%s)", (version,))
    return len(TURNKEEPER_MIGRATIONS)
