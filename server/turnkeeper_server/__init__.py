"""turnkeeper's gRPC service: the turn journal, the checkpoint store, the NATS outbox.

The service is the only writer of both SQLite files (turns.db and sessions.db).
`app.create_server` wires the pieces together; each module below is one concern:

- config:      settings from flags and env, and the data-file paths (DESIGN.md §7)
- db, schema:  SQLite connections, PRAGMAs, group-commit writer, migrations
- store/:      the store contract both backends meet, the PostgreSQL backend
               (`--database-url`: replicas on one database), SQLite's lock file
- journal:     the turn state machine (compare-and-set transitions, fencing)
- redrive:     orphaned turns run again: attempts+1, rewind, the cap
- checkpoints: LangGraph checkpoints in langgraph-checkpoint-sqlite's schema
- outbox:      NATS mirroring of turn events and rewinds through a table in turns.db
- nats_link:   the NATS connection and hand-offs of work to agent replicas
- watch:       wake-ups for WatchTurn streams
- reaper:      re-drives turns whose owner stopped heartbeating
- errors:      domain errors and their one mapping to gRPC status codes
- limits:      request validation and size limits
- servicers/:  the gRPC servicers, thin glue over journal and checkpoints
"""
