"""Graphs from a ``langgraph.json``, hosted durably: ``turnkeeper agent langgraph.json``.

Every graph the file names is served under the bridge as the agent (and the
LangGraph API's assistant) of the graph's name, with a durable checkpointer in
place of whatever it was compiled with (none, usually: LangGraph's server brings
persistence, and so does this). Replicas started from the same file serve the same
graphs; re-drive, park, cancel, containment and fencing are the bridge's.
(docs/langgraph-api.md)
"""

from turnkeeper.agent.host._config import GraphSpec, HostConfig, read_config
from turnkeeper.agent.host._loader import load_graph
from turnkeeper.agent.host._run import host

__all__ = ["GraphSpec", "HostConfig", "host", "load_graph", "read_config"]
