"""The pipeline example (analyze -> plan -> generate) hosted by the bridge as agent
`pipeline` (or TURNKEEPER_AGENT), for the chat page's tests and the console screenshots.

Input from the chat page: {"question": str, "id": str}; `id` becomes the question's
message id, so a re-run of a step says what the first run said. PIPELINE_DELAY
seconds are slept at the start of each step; PIPELINE_APPROVE=1 parks each run for a
person's approval of the plan before generate. Prints ``ready <healthz url>``.
"""

from __future__ import annotations

import os
from typing import Any

from turnkeeper.agent.bridge import Bridge, BridgeConfig

from examples.pipeline.graph import build_graph, question_input
from tests.agents.serving import run, serve


def to_graph_input(payload: Any) -> Any:
    if not isinstance(payload, dict) or not isinstance(payload.get("question"), str):
        raise ValueError('the pipeline takes {"question": "...", "id": "..."}')
    message_id = payload.get("id")
    return question_input(
        payload["question"], message_id=message_id if isinstance(message_id, str) else None
    )


async def main() -> None:
    graph = build_graph(
        delay=float(os.environ.get("PIPELINE_DELAY", "0")),
        approve_plan=os.environ.get("PIPELINE_APPROVE") == "1",
    )
    agent = os.environ.get("TURNKEEPER_AGENT") or "pipeline"
    bridge = Bridge(graph, BridgeConfig.from_env(agent), input_mapper=to_graph_input)
    await serve(bridge)


if __name__ == "__main__":
    run(main)
