"""The panel side: following turns and talking to agents.

`follower` needs only the client core (grpcio, protobuf), so a panel that only
follows turns installs nothing more. `session` and `agent_rpc` speak to agents over
NATS and need the `panel` extra. The names below are imported on first use (PEP 562),
never here, so importing `turnkeeper.panel.follower` (or `turnkeeper.panel.TurnFollower`)
never loads NATS.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from turnkeeper import _lazy

if TYPE_CHECKING:
    from turnkeeper.panel.agent_rpc import NatsAgentTransport
    from turnkeeper.panel.follower import (
        Concluded,
        Event,
        FollowOptions,
        Frame,
        Reset,
        Transcript,
        TurnFollower,
    )
    from turnkeeper.panel.session import AgentSession

__all__ = [
    "AgentSession",
    "Concluded",
    "Event",
    "FollowOptions",
    "Frame",
    "NatsAgentTransport",
    "Reset",
    "Transcript",
    "TurnFollower",
]

_LAZY: dict[str, str] = {
    "NatsAgentTransport": "turnkeeper.panel.agent_rpc",
    "Concluded": "turnkeeper.panel.follower",
    "Event": "turnkeeper.panel.follower",
    "FollowOptions": "turnkeeper.panel.follower",
    "Frame": "turnkeeper.panel.follower",
    "Reset": "turnkeeper.panel.follower",
    "Transcript": "turnkeeper.panel.follower",
    "TurnFollower": "turnkeeper.panel.follower",
    "AgentSession": "turnkeeper.panel.session",
}


__getattr__, __dir__ = _lazy.exports(globals(), _LAZY, __all__)
