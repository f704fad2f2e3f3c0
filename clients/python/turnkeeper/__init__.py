"""turnkeeper's Python client.

The public API is what the packages and modules without a leading underscore export
(their ``__all__``; tests/packaging/test_public_api.py pins every list, so a rename is
a decision):

- ``turnkeeper``:          the client and the turn states (below, imported lazily)
- ``turnkeeper.client``:   ``TurnkeeperClient``, ``AsyncTurnkeeperClient``,
                           ``ConnectionOptions``
- ``turnkeeper.errors``:   the one status code → exception map
- ``turnkeeper.states``:   turn states and their names
- ``turnkeeper.v1``:       the generated stubs (made by ``python protos/generate.py``)

The core above needs grpcio and protobuf only. Beside it, each subpackage is named for
who uses it:

- ``panel/``:    following turns (``follower``, core only) and NATS sessions with
                 agents (``session``, ``agent_rpc``; the ``panel`` extra)
- ``agent/``:    ``RemoteSaver``, exactly-once effects, the NATS bridge and the host
                 of a ``langgraph.json`` (the ``agent`` extra)
- ``operator/``: the ``turnkeeper`` command line (``python -m turnkeeper.operator``)

Modules whose name starts with ``_`` are private. Some of the core's are shared with
the server (distribution ``turnkeeper-server``, which depends on this core):
``_caller_assertion``, ``_graph_versions``, ``_io_engine``, ``_multitask``,
``_nats_auth``, ``_nats_identity``, ``_run_request``, ``_thread_state``, ``_tracing``.
They are not public API and change with the server. Nothing here imports the server.

The names below are imported on first use (PEP 562), so ``import turnkeeper`` loads
nothing: ``turnkeeper._io_engine.prefer_iomgr`` must run before grpc is first imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnkeeper import _lazy

if TYPE_CHECKING:
    from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient
    from turnkeeper.errors import TurnkeeperError
    from turnkeeper.states import TurnState

__all__ = [
    "AsyncTurnkeeperClient",
    "ConnectionOptions",
    "TurnState",
    "TurnkeeperClient",
    "TurnkeeperError",
]

_LAZY: dict[str, str] = {
    "AsyncTurnkeeperClient": "turnkeeper.client",
    "ConnectionOptions": "turnkeeper.client",
    "TurnkeeperClient": "turnkeeper.client",
    "TurnkeeperError": "turnkeeper.errors",
    "TurnState": "turnkeeper.states",
}


__getattr__, __dir__ = _lazy.exports(globals(), _LAZY, __all__)
