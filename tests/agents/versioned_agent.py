"""A test agent serving one version of the versioned graph
(tests/support/versioned_graphs.py), as a real subprocess: GRAPH_VARIANT names the
variant, whose label becomes the bridge's version label. The test puts the
repository on PYTHONPATH. Prints ``ready <healthz url>`` once the bridge serves."""

from __future__ import annotations

import os

from turnkeeper.agent.bridge import Bridge, BridgeConfig

from tests.agents.serving import run, serve
from tests.support.versioned_graphs import build


async def main() -> None:
    builder, label = build(os.environ.get("GRAPH_VARIANT", "v1"))
    bridge = Bridge(builder, BridgeConfig.from_env(version_label=label))
    await serve(bridge)


if __name__ == "__main__":
    run(main)
