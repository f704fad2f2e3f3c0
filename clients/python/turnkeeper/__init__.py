"""turnkeeper's Python client.

The core needs grpcio and protobuf only: the generated stubs (`turnkeeper.v1`, made
by `python protos/generate.py`), the typed client (`client`), the errors (`errors`)
and the turn states (`states`). Beside it, each subpackage is named for who uses it:

- `panel/`:    following turns (`follower`, core only) and NATS sessions with agents
               (`session`, `agent_rpc`; the `panel` extra)
- `agent/`:    `RemoteSaver`, repositioning, and the NATS bridge (the `agent` extra)
- `operator/`: the `turnkeeper` command line

The server (distribution `turnkeeper-server`) depends on this core; nothing here
imports the server.
"""
