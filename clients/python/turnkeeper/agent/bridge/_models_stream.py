"""What makes a run's chat models stream for the host's own capture
(:class:`~turnkeeper.agent.bridge._capture.EventCapture`), without LangGraph's
``messages`` stream mode (decision 680)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar, cast
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.runnables import RunnableConfig

T = TypeVar("T")


class ModelsStream(BaseCallbackHandler):
    """What makes a run's chat models stream, so that their tokens reach
    :class:`EventCapture`, without LangGraph's ``messages`` stream mode (decision 680).

    LangChain streams a chat model's call when one of its handlers answers
    LangChain's streaming-handler protocol (``tap_output_aiter`` and
    ``tap_output_iter``, checked by shape). LangGraph's own handler of that mode did
    this and also made a ``messages`` part of every token, handed from the model's
    thread to the loop and through ``astream`` to the host, which dropped it. This
    one does nothing else: it takes no callback (every ``ignore_*``), passes a
    runnable's output through untouched, and is not of LangGraph's streaming
    handler class, so LangGraph does not run its nodes as ``astream_log`` does.
    Put it after every other handler: LangChain taps the output of the first
    handler of that protocol it finds (the ``events`` mode's, when asked)."""

    run_inline = True
    ignore_llm = True
    ignore_chain = True
    ignore_agent = True
    ignore_retriever = True
    ignore_chat_model = True
    ignore_retry = True
    ignore_custom_event = True

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        return output


def with_models_streaming(config: RunnableConfig) -> RunnableConfig:
    """``config`` with :class:`ModelsStream` as its last callback handler."""
    configured: Any = dict(config)
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        callbacks = callbacks.copy()
        callbacks.add_handler(ModelsStream(), inherit=True)
        configured["callbacks"] = callbacks
    else:
        configured["callbacks"] = [*(callbacks or []), ModelsStream()]
    return cast(RunnableConfig, configured)
