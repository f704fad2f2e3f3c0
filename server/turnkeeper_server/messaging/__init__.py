"""NATS: the outbox that mirrors turn events, the link to agent replicas, the embedded server."""
