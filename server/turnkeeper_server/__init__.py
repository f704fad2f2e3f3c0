"""turnkeeper's gRPC service: the turn journal, the checkpoint store, the NATS outbox.

The service is the only writer of its store (the SQLite files turns.db and
sessions.db, or a PostgreSQL database its replicas share). It imports the client
core (`turnkeeper.v1`, `turnkeeper.states`) and nothing else from the client.

Its floors, top to bottom; each imports only the floors below it (an import-linter
`layers` contract in pyproject.toml; docs/architecture.md §10 has every module):

- main, app:   `turnkeeper serve` (flags, env, signals); the wiring and lifecycle
- config:      settings from flags and env, and the data-file paths
- web/, rpc/:  the HTTP side (Connect JSON, SSE, the relay, the console) and the
               gRPC servicers: validation and conversion over the engine
- engine/:     `turns` (every transition and what follows its commit), `checkpoints`
               (LangGraph's saver operations), `handoffs` (work for replicas over
               NATS), `watch` (WatchTurn)
- reaper, retention, audit: the lease reaper, the retention sweeper, the audit log
- journal/, messaging/, security/: the transactions of a turn's life (shared SQL);
               the outbox and NATS; tokens, rights and the transport rules
- metrics:     Prometheus metrics
- store/:      each backend's SQL behind one typed contract (`contract`, `records`)
- the ground floor: `records` (turns, events, states, the fence, the policy),
               `limits` (request validation), `periodic`, `logs`, `tracing`,
               `durations`; and under it `errors` (domain errors and their status codes)
"""
