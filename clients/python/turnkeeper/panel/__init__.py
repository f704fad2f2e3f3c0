"""The panel side: following turns and talking to agents.

`follower` needs only the client core (grpcio, protobuf), so a panel that only
follows turns installs nothing more. `session` and `agent_rpc` speak to agents over
NATS and need the `panel` extra; they are not imported here, so importing
`turnkeeper.panel.follower` never loads NATS.
"""
