"""A test agent serving one version of the versioned graph
(tests/support/versioned_graphs.py), as a real subprocess: GRAPH_VARIANT names the
variant, whose label becomes the bridge's version label. The test puts the
repository on PYTHONPATH. Prints ``ready <healthz url>`` once the bridge serves."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from turnkeeper.agent.bridge import Bridge, BridgeConfig

from tests.support.versioned_graphs import build


async def main() -> None:
    builder, label = build(os.environ.get("GRAPH_VARIANT", "v1"))
    bridge = Bridge(builder, BridgeConfig.from_env(version_label=label))

    async def announce() -> None:
        await bridge.wait_subscribed()
        print(f"ready {bridge.health_url}", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM
    announcing.cancel()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main())
