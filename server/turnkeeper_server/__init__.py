"""turnkeeper's gRPC service: the turn journal, the checkpoint store, the NATS outbox.

The service is the only writer of both SQLite files (turns.db and sessions.db).
It imports the client core (`turnkeeper.v1`, `turnkeeper.states`) and nothing else
from the client. `app.create_server` wires the pieces together; each module below
is one concern:

- main:        `turnkeeper serve` (flags and env, signals); found by the client's CLI
               through the `turnkeeper.commands` entry point
- app:         wiring and lifecycle (start, graceful stop)
- config:      settings from flags and env, and the data-file paths (docs/architecture.md §7)
- engine:      the layer servicers, reaper and metrics go through: commits through the
               store, wakes watchers and the outbox, hands work to replicas
- store/:      the store contract both backends meet: `sqlite` (connections, PRAGMAs,
               group-commit writer), `sqlite_schema` (migrations), `lockfile` (one
               writer per data directory); `postgres` (`--database-url`: replicas on
               one database)
- journal/:    `transitions` (the turn state machine: compare-and-set, fencing),
               `records` (turn, event, policy),
               `redrive` (orphaned turns run again: attempts+1, rewind, the cap),
               `checkpoints` (LangGraph checkpoints in langgraph-checkpoint-sqlite's
               schema), `stats` (counts for the metrics)
- messaging/:  `outbox` (NATS mirroring through a table in turns.db), `link` (the NATS
               connection, hand-offs to agent replicas), `embedded` (a bundled nats-server)
- rpc/:        `turn_service`, `checkpoint_service` (thin glue over the engine),
               `interceptors`, `limits` (request validation), `convert` (records to protos)
- security/:   `auth` (bearer tokens, roles), `transport` (TLS, the exposed-port rule)
- web/:        the HTTP side on the same event loop: `connect` (TurnService as Connect
               JSON), `sse` (a turn's events as Server-Sent Events), `relay` (the chat
               page's calls to agents over NATS), `auth` (tokens on HTTP), `app` (the
               aiohttp server, the console's static pages)
- watch:       wake-ups for WatchTurn streams
- reaper:      re-drives turns whose owner stopped heartbeating
- errors:      domain errors and their one mapping to gRPC status codes
- metrics, logs: Prometheus metrics, log setup
"""
