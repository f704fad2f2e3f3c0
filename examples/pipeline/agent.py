"""The pipeline agent: analyze -> plan -> generate, hosted by the turnkeeper bridge.

The graph's checkpoints go to the turnkeeper service (the bridge's ``RemoteSaver``),
its events too, so a run survives the death of this process: a new process of the
agent re-drives it from the last finished step. Run it with the service and NATS
up, from the repository root::

    TURNKEEPER_ADDRESS=127.0.0.1:50051 NATS_URL=nats://127.0.0.1:4222 \\
        python -m examples.pipeline.agent

A run's input is ``{"question": TEXT, "id": MESSAGE_ID}`` (``id`` optional).
Environment, besides the bridge's own (``turnkeeper.agent.bridge.BridgeConfig.from_env``;
the agent name defaults to ``pipeline``):

- ``STEP_LOG``: a file each model call appends ``model <step>`` to: how the
  walkthrough counts what ran;
- ``CRASH_WINDOW_STEP``: that step waits after streaming its reply, before the
  reply is complete (``CRASH_WINDOW_SECONDS``, default 30): the moment the
  walkthrough SIGKILLs us. The walkthrough starts the replacement process without it;
- ``CRASH_AFTER_REPLY_STEP``: that step's model call, once its reply is complete and
  journaled, prints ``replied <step>`` and waits (``CRASH_WINDOW_SECONDS``): the
  walkthrough's second SIGKILL, after a reply was paid for.

The model's completed replies are journaled as effects of the turn
(``turnkeeper.agent.effect.journal_replies``, docs/effects.md): a step re-run after a
crash gets a reply its lost run already received from the ledger, and the model is
not called for it again.

Prints ``ready <healthz url>`` once the bridge serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, LLMResult
from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.effect import journal_replies

from examples.pipeline.graph import PipelineState, build_graph, question_input
from examples.pipeline.model import ScriptedChatModel, scripted_reply, step_and_question

AGENT = "pipeline"


def log_step(line: str) -> None:
    """Append to STEP_LOG durably: the process may be SIGKILLed right after."""
    path = os.environ.get("STEP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


class StreamingScriptedModel(ScriptedChatModel):
    """The scripted model, streaming its reply word by word (a panel sees tokens as
    they come), with the walkthrough's crash window."""

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        step, question = step_and_question(messages)
        log_step(f"model {step}")
        words = scripted_reply(step, question).split(" ")
        for i, word in enumerate(words):
            text = word if i == 0 else f" {word}"
            # langchain hands each chunk to the callbacks (the bridge's token events).
            yield ChatGenerationChunk(message=AIMessageChunk(content=text))
        if os.environ.get("CRASH_WINDOW_STEP") == step:
            await asyncio.sleep(float(os.environ.get("CRASH_WINDOW_SECONDS", "30")))

    async def agenerate(
        self, messages: list[list[BaseMessage]], *args: Any, **kwargs: Any
    ) -> LLMResult:
        """The model's call, and after it (its reply complete, and journaled by the
        cache) the walkthrough's second crash window."""
        result = await super().agenerate(messages, *args, **kwargs)
        step, _ = step_and_question(messages[0])
        if os.environ.get("CRASH_AFTER_REPLY_STEP") == step:
            print(f"replied {step}", flush=True)
            await asyncio.sleep(float(os.environ.get("CRASH_WINDOW_SECONDS", "30")))
        return result


def graph_input(payload: Any) -> PipelineState:
    """``{"question": TEXT, "id": MESSAGE_ID}`` as the graph's input."""
    if not isinstance(payload, dict) or not isinstance(payload.get("question"), str):
        raise ValueError('the pipeline takes {"question": TEXT, "id": MESSAGE_ID}')
    message_id = payload.get("id")
    return question_input(payload["question"], message_id=str(message_id) if message_id else None)


async def main() -> None:
    config = BridgeConfig.from_env(os.environ.get("TURNKEEPER_AGENT", AGENT))
    model = journal_replies(StreamingScriptedModel())
    bridge = Bridge(build_graph(model), config, input_mapper=graph_input)

    async def announce() -> None:
        await bridge.wait_subscribed()
        print(f"ready {bridge.health_url}", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM (docker stop) or Ctrl-C
    announcing.cancel()


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main())
