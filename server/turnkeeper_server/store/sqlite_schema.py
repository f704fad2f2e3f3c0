"""The two files' schemas, as numbered migrations recorded in a version table.

turns.db is ours. sessions.db keeps langgraph-checkpoint-sqlite's tables exactly
(same DDL as `SqliteSaver.setup()`), so stock SqliteSaver opens it; what turnkeeper
adds there lives in tables prefixed `turnkeeper_`, which SqliteSaver never reads.
"""

from __future__ import annotations

import sqlite3

TURNS_MIGRATIONS: list[str] = [
    # 1: the journal, its retained events and the NATS outbox.
    """
    CREATE TABLE turns (
        turn_id            TEXT PRIMARY KEY,
        thread_id          TEXT NOT NULL,
        agent              TEXT NOT NULL,
        state              TEXT NOT NULL CHECK (state IN ('RUNNING','PARKED','DONE','FAILED')),
        attempts           INTEGER NOT NULL DEFAULT 0,
        last_seq           INTEGER NOT NULL DEFAULT 0,
        rewinds            INTEGER NOT NULL DEFAULT 0,
        input_json         TEXT NOT NULL,
        request_hash       TEXT NOT NULL,
        owner_replica      TEXT,
        owner_incarnation  TEXT,
        lease_expires_at   REAL,
        interrupt_json     TEXT,
        resume_json        TEXT,
        error              TEXT NOT NULL DEFAULT '',
        created_at         REAL NOT NULL,
        updated_at         REAL NOT NULL
    );
    -- One live turn per thread, enforced by the database itself.
    CREATE UNIQUE INDEX turns_one_live_per_thread ON turns (thread_id)
        WHERE state IN ('RUNNING', 'PARKED');
    CREATE INDEX turns_by_lease ON turns (state, lease_expires_at);
    CREATE INDEX turns_by_owner ON turns (agent, owner_replica) WHERE state = 'RUNNING';
    CREATE INDEX turns_by_thread ON turns (thread_id);
    CREATE TABLE events (
        turn_id    TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        attempt    INTEGER NOT NULL,
        type       TEXT NOT NULL,
        data_json  TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (turn_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE outbox (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        subject    TEXT NOT NULL,
        payload    BLOB NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 2: the audit log of operator actions (audit.py), beside the journal, and the
    # outbox rows' trace context (tracing.py). Plain SQL
    # that PostgreSQL accepts as well (its backend gives id an identity default).
    """
    CREATE TABLE audit (
        id       INTEGER PRIMARY KEY,
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
    # 3: the whole life of a turn. Two more states (CANCELLED, terminal; QUEUED,
    # behind a thread's live turn), why the service ended a turn, and the per-turn
    # deadlines. A CHECK constraint cannot be altered in place, so the table is
    # rebuilt with plain SQL that PostgreSQL accepts as well; rowid is carried over
    # because ListTurns' page tokens are rowids.
    """
    CREATE TABLE turns_v2 (
        turn_id            TEXT PRIMARY KEY,
        thread_id          TEXT NOT NULL,
        agent              TEXT NOT NULL,
        state              TEXT NOT NULL CHECK (state IN
                               ('RUNNING','PARKED','DONE','FAILED','CANCELLED','QUEUED')),
        attempts           INTEGER NOT NULL DEFAULT 0,
        last_seq           INTEGER NOT NULL DEFAULT 0,
        rewinds            INTEGER NOT NULL DEFAULT 0,
        input_json         TEXT NOT NULL,
        request_hash       TEXT NOT NULL,
        owner_replica      TEXT,
        owner_incarnation  TEXT,
        lease_expires_at   REAL,
        interrupt_json     TEXT,
        resume_json        TEXT,
        error              TEXT NOT NULL DEFAULT '',
        created_at         REAL NOT NULL,
        updated_at         REAL NOT NULL,
        end_reason         TEXT NOT NULL DEFAULT '',
        max_run_seconds    REAL NOT NULL DEFAULT 0,
        park_expiry_seconds REAL NOT NULL DEFAULT 0,
        run_deadline_at    REAL,
        park_deadline_at   REAL,
        -- 1 once retention deleted the finished turn's events.
        pruned             INTEGER NOT NULL DEFAULT 0,
        -- Crashes counted against the re-drive cap (journal/containment.py), and
        -- where the turn stands in poison containment (0 none, 1 suspect, 2 held,
        -- 3 on probation).
        charged            INTEGER NOT NULL DEFAULT 0,
        suspect            INTEGER NOT NULL DEFAULT 0
    );
    INSERT INTO turns_v2 (rowid, turn_id, thread_id, agent, state, attempts, charged,
        last_seq, rewinds, input_json, request_hash, owner_replica, owner_incarnation,
        lease_expires_at, interrupt_json, resume_json, error, created_at, updated_at)
    SELECT rowid, turn_id, thread_id, agent, state, attempts, attempts, last_seq, rewinds,
        input_json, request_hash, owner_replica, owner_incarnation, lease_expires_at,
        interrupt_json, resume_json, error, created_at, updated_at FROM turns;
    DROP TABLE turns;
    ALTER TABLE turns_v2 RENAME TO turns;
    CREATE UNIQUE INDEX turns_one_live_per_thread ON turns (thread_id)
        WHERE state IN ('RUNNING', 'PARKED');
    CREATE INDEX turns_by_lease ON turns (state, lease_expires_at);
    CREATE INDEX turns_by_owner ON turns (agent, owner_replica) WHERE state = 'RUNNING';
    CREATE INDEX turns_by_thread ON turns (thread_id);
    -- The reaper's deadline passes and the queue's next turn per thread.
    CREATE INDEX turns_by_run_deadline ON turns (run_deadline_at) WHERE state = 'RUNNING';
    CREATE INDEX turns_by_park_deadline ON turns (park_deadline_at) WHERE state = 'PARKED';
    CREATE INDEX turns_queued ON turns (thread_id, created_at) WHERE state = 'QUEUED';
    -- Poison containment's held and probation turns of an agent.
    CREATE INDEX turns_suspects ON turns (agent, suspect) WHERE suspect >= 2;
    -- Retention's next finished turns.
    CREATE INDEX turns_to_prune ON turns (updated_at)
        WHERE pruned = 0 AND state IN ('DONE', 'FAILED', 'CANCELLED')
    """,
    # 4: the turn horizon's next finished turns (retention.py), pruned or not: the
    # rows themselves are deleted once they are old enough.
    """
    CREATE INDEX turns_to_delete ON turns (updated_at)
        WHERE state IN ('DONE', 'FAILED', 'CANCELLED')
    """,
    # 5: at most one turn of an agent on probation (journal/containment.py), as on
    # PostgreSQL, where replicas releasing held turns at the same moment could each
    # release one. The one writer here never does; the schemas stay alike. Any
    # extra probation turn is a plain suspect again.
    """
    UPDATE turns SET suspect = 1
        WHERE suspect = 3 AND state = 'RUNNING' AND turn_id NOT IN (
            SELECT min(turn_id) FROM turns WHERE suspect = 3 AND state = 'RUNNING'
            GROUP BY agent);
    CREATE UNIQUE INDEX turns_one_probation ON turns (agent)
        WHERE suspect = 3 AND state = 'RUNNING'
    """,
    # 6: an outbox row may carry a batch's run of messages, its id the run's last
    # (store/outbox_rows.py); every row before this one carries one.
    """
    ALTER TABLE outbox ADD COLUMN messages INTEGER NOT NULL DEFAULT 1
    """,
    # 7: the agents replicas announced with their startup Redrive (journal/agents.py),
    # so a turn for an agent nobody serves can say so.
    """
    CREATE TABLE agents (
        agent        TEXT PRIMARY KEY,
        announced_at REAL NOT NULL
    )
    """,
    # 8: threads as the LangGraph API knows them (journal/threads.py): a thread made
    # by threads.create, with its metadata, before or without any turn on it.
    """
    CREATE TABLE threads (
        thread_id  TEXT PRIMARY KEY,
        metadata   TEXT NOT NULL DEFAULT '{}',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )
    """,
    # 9: the effect ledger (journal/effects.py): per turn, each call of an effect with
    # its arguments, policy, state and outcome, keyed by its idempotency key.
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
        created_at     REAL NOT NULL,
        updated_at     REAL NOT NULL,
        PRIMARY KEY (turn_id, effect_key)
    ) WITHOUT ROWID;
    -- The live call under a client's key: what BeginEffect looks up.
    CREATE INDEX effects_by_base ON effects (turn_id, base_key);
    -- A task's effects: what its writes settle.
    CREATE INDEX effects_by_task ON effects (turn_id, task_id)
    """,
    # The graph version (docs/versions.md) of the code that started the turn or last
    # took it over; '' for a turn no versioned replica ran.
    """
    ALTER TABLE turns ADD COLUMN graph_fingerprint TEXT NOT NULL DEFAULT '';
    ALTER TABLE turns ADD COLUMN graph_label TEXT NOT NULL DEFAULT ''
    """,
    # Who made a thread (auth.identity, issue 47): '' for a thread made before owners
    # were recorded, or named only by its turns.
    """
    ALTER TABLE threads ADD COLUMN owner TEXT NOT NULL DEFAULT ''
    """,
    # Assistants as the LangGraph API knows them (journal/assistants.py): a stored
    # configuration of a graph, its latest version here, every version beside it.
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
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL
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
        created_at   REAL NOT NULL,
        PRIMARY KEY (assistant_id, version)
    ) WITHOUT ROWID
    """,
    # A LangGraph API run's own record beside its turn (journal/runs.py): the
    # metadata, kwargs and multitask strategy it was created with.
    """
    CREATE TABLE langgraph_runs (
        turn_id            TEXT PRIMARY KEY,
        metadata           TEXT NOT NULL DEFAULT '{}',
        kwargs             TEXT NOT NULL DEFAULT '{}',
        multitask_strategy TEXT NOT NULL DEFAULT ''
    )
    """,
    # LangGraph's long-term memory, its BaseStore (journal/store_items.py): an item
    # per namespace (labels joined by ".") and key; ttl in minutes, and when it
    # expires (NULL: never).
    """
    CREATE TABLE store_items (
        namespace    TEXT NOT NULL,
        key          TEXT NOT NULL,
        value        TEXT NOT NULL,
        created_at   REAL NOT NULL,
        updated_at   REAL NOT NULL,
        ttl_minutes  REAL,
        expires_at   REAL,
        PRIMARY KEY (namespace, key)
    );
    CREATE INDEX store_items_expiry ON store_items (expires_at) WHERE expires_at IS NOT NULL
    """,
    # The store's semantic index (journal/store_items.py, engine/store_index.py): a
    # vector per embedded path of an item, as JSON text (a list of numbers, which
    # pgvector reads as its own text form on PostgreSQL).
    """
    CREATE TABLE store_vectors (
        namespace  TEXT NOT NULL,
        key        TEXT NOT NULL,
        path       TEXT NOT NULL,
        embedding  TEXT NOT NULL,
        PRIMARY KEY (namespace, key, path)
    )
    """,
    # Webhooks of LangGraph API runs (journal/webhooks.py): a delivery per run,
    # 'waiting' while the run goes on and made 'pending' in the transaction that ends
    # it (the outbox pattern), claimed by a replica until claim_expires_at; and each
    # attempt to deliver it, for the console and the back-off.
    """
    CREATE TABLE webhook_deliveries (
        turn_id          TEXT PRIMARY KEY,
        thread_id        TEXT NOT NULL,
        url              TEXT NOT NULL,
        state            TEXT NOT NULL,
        run_state        TEXT NOT NULL DEFAULT '',
        attempts         INTEGER NOT NULL DEFAULT 0,
        next_attempt_at  REAL,
        claimed_by       TEXT,
        claim_expires_at REAL,
        payload          TEXT,
        last_error       TEXT NOT NULL DEFAULT '',
        created_at       REAL NOT NULL,
        ended_at         REAL,
        updated_at       REAL NOT NULL
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
        WHERE state = 'pending';
    CREATE INDEX webhook_deliveries_by_thread ON webhook_deliveries (thread_id);
    CREATE TABLE webhook_attempts (
        turn_id      TEXT NOT NULL,
        attempt      INTEGER NOT NULL,
        replica      TEXT NOT NULL DEFAULT '',
        started_at   REAL NOT NULL,
        finished_at  REAL,
        outcome      TEXT NOT NULL DEFAULT '',
        http_status  INTEGER,
        detail       TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (turn_id, attempt)
    ) WITHOUT ROWID
    """,
    # Crons and after_seconds runs as the LangGraph API knows them (journal/crons.py):
    # a schedule (kind 'cron') or one run due later (kind 'once'), the run body it
    # starts, the tick it owes (next_run_at) and the replica that claimed that tick
    # until when (claimed_by, claim_expires_at: the fence of its firing).
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
        end_time         REAL,
        enabled          INTEGER NOT NULL DEFAULT 1,
        owner            TEXT NOT NULL DEFAULT '',
        acts_as          TEXT NOT NULL DEFAULT '',
        user_id          TEXT,
        next_run_at      REAL,
        claimed_by       TEXT,
        claim_expires_at REAL,
        fired            INTEGER NOT NULL DEFAULT 0,
        last_error       TEXT NOT NULL DEFAULT '',
        created_at       REAL NOT NULL,
        updated_at       REAL NOT NULL
    );
    CREATE INDEX crons_due ON crons (next_run_at) WHERE enabled = 1
    """,
    # What a turn's effect ledger holds that its checkpoint writes must look at
    # (journal/effects.py, decision 510): bit 1 once it has an effect that is not
    # superseded (a task's writes settle it), bit 2 while a superseded effect waits
    # for its announcement. Without either bit a checkpoint write reads no effects.
    """
    ALTER TABLE turns ADD COLUMN effects INTEGER NOT NULL DEFAULT 0;
    UPDATE turns SET effects =
        (CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.turn_id = turns.turn_id
            AND e.state <> 'SUPERSEDED') THEN 1 ELSE 0 END)
        | (CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.turn_id = turns.turn_id
            AND e.state = 'SUPERSEDED' AND e.announced = 0) THEN 2 ELSE 0 END)
        WHERE turn_id IN (SELECT turn_id FROM effects)
    """,
    # A turn whose claim rode its hand-off (journal/start.py, decision 590): 1 while
    # its owner has not taken it (no heartbeat, no fenced write yet), 2 once the
    # reaper offered it again untaken (its next claim spends an uncharged attempt).
    """
    ALTER TABLE turns ADD COLUMN handed INTEGER NOT NULL DEFAULT 0
    """,
]

SESSIONS_MIGRATIONS: list[str] = [
    # 1: langgraph-checkpoint-sqlite's schema, verbatim, plus turn boundaries.
    """
    CREATE TABLE IF NOT EXISTS checkpoints (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        parent_checkpoint_id TEXT,
        type TEXT,
        checkpoint BLOB,
        metadata BLOB,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
    );
    CREATE TABLE IF NOT EXISTS writes (
        thread_id TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL DEFAULT '',
        checkpoint_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        task_path TEXT NOT NULL DEFAULT '',
        idx INTEGER NOT NULL,
        channel TEXT NOT NULL,
        type TEXT,
        value BLOB,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    );
    -- The turn's last_seq when each of its checkpoints was written: where a
    -- re-drive rewinds the event stream to.
    CREATE TABLE turnkeeper_boundaries (
        turn_id       TEXT NOT NULL,
        checkpoint_id TEXT NOT NULL,
        thread_id     TEXT NOT NULL,
        checkpoint_ns TEXT NOT NULL,
        attempt       INTEGER NOT NULL,
        last_seq      INTEGER NOT NULL,
        PRIMARY KEY (turn_id, checkpoint_ns, checkpoint_id)
    ) WITHOUT ROWID;
    """,
]


def migrate(conn: sqlite3.Connection, schema: str, migrations: list[str]) -> int:
    """Apply the migrations `schema` (a database name: main, sessions) lacks.

    Runs inside the caller's transaction. Returns the version reached.
    """
    table = f"{schema}.turnkeeper_schema_version"
    conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER NOT NULL)")
    row = conn.execute(f"SELECT max(version) FROM {table}").fetchone()
    current = row[0] or 0
    if current > len(migrations):
        raise RuntimeError(
            f"{schema} is at schema version {current}, newer than this turnkeeper "
            f"({len(migrations)}): upgrade turnkeeper instead of downgrading"
        )
    for version, script in enumerate(migrations[current:], start=current + 1):
        for statement in _statements(script):
            conn.execute(_qualify(statement, schema))
        conn.execute(f"INSERT INTO {table} (version) VALUES (?)", (version,))
    return len(migrations)


def _statements(script: str) -> list[str]:
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _qualify(statement: str, schema: str) -> str:
    """Put the CREATE into database `schema` (ATTACHed files need the prefix)."""
    for prefix in (
        "CREATE TABLE IF NOT EXISTS ",
        "CREATE TABLE ",
        "CREATE UNIQUE INDEX ",
        "CREATE INDEX ",
        "ALTER TABLE ",
    ):
        if statement.startswith(prefix):
            return prefix + f"{schema}." + statement[len(prefix) :]
    return statement
