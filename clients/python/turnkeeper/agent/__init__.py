"""The agent side (extra `agent`): RemoteSaver, repositioning, and the NATS bridge."""
