"""Commands other distributions add to `turnkeeper`: the server registers `serve`
under the `turnkeeper.commands` entry-point group, so the client never imports it."""

from __future__ import annotations

from importlib import metadata
from typing import Any, Final

COMMAND_GROUP: Final = "turnkeeper.commands"
SERVER_INSTALL: Final = "pip install turnkeeper-server (from a clone: pip install -e ./server)"


def server_command(name: str = "serve") -> Any:
    """The module behind `turnkeeper serve` (or `turnkeeper dev`): `add_arguments(parser)`,
    `run(args)`; None when the server distribution is not installed."""
    for entry in metadata.entry_points(group=COMMAND_GROUP, name=name):
        return entry.load()
    return None
