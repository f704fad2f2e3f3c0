"""The chat model the pipeline calls: a deterministic stand-in unless one is configured.

By default every step talks to :class:`ScriptedChatModel`, whose reply is a pure
function of the prompt. That matters for durable execution: when an agent dies
mid-turn, the node that was running runs again (at-least-once, docs/architecture.md §5), and a
re-run must say what the first run said for the transcripts to match. (langchain's
``GenericFakeChatModel`` replays a fixed iterator instead, so a re-run node would get
the *next* canned reply.)

A real model is used only when asked for: ``PIPELINE_MODEL=provider:model`` (for
instance ``openai:gpt-4o-mini``) goes through ``langchain.chat_models.init_chat_model``.
Neither ``langchain`` nor any provider package is a dependency of this project:
install them yourself to use one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Final

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult

MODEL_ENV: Final = "PIPELINE_MODEL"


def text_of(message: BaseMessage) -> str:
    """A message's text, whether its content is a string or a list of blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text":
            parts.append(str(block.get("text", "")))
    return "".join(parts)


def scripted_reply(step: str, question: str) -> str:
    """What the stand-in model answers for `step` about `question` (its first line:
    the steps after the first append their context below it)."""
    question = question.splitlines()[0] if question else ""
    words = len(question.split())
    if step == "analyze":
        return f"Analysis: {question!r} is a question of {words} word{'s' * (words != 1)}."
    if step == "plan":
        return "Plan: restate the question, then answer it in one sentence."
    if step == "generate":
        return (
            f"Answer: {question.rstrip('?')} - a stand-in reply (set {MODEL_ENV} for a real model)."
        )
    return f"{step}: {question}"


class ScriptedChatModel(BaseChatModel):
    """A chat model whose reply depends only on the prompt.

    The step is read from the system prompt's first line (``step: NAME``), the
    question from the last human message; see :func:`scripted_reply`.
    """

    @property
    def _llm_type(self) -> str:
        return "pipeline-scripted"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = AIMessage(content=scripted_reply(*step_and_question(messages)))
        return ChatResult(generations=[ChatGeneration(message=reply)])


def step_and_question(messages: Sequence[BaseMessage]) -> tuple[str, str]:
    """(step, question) of a pipeline prompt: the step from the system prompt's first
    line (``step: NAME``), the question from the last human message."""
    step = ""
    question = ""
    for message in messages:
        if isinstance(message, SystemMessage):
            first = text_of(message).splitlines()[0] if text_of(message) else ""
            step = first.removeprefix("step:").strip()
        elif isinstance(message, HumanMessage):
            question = text_of(message)
    return step, question


def configured_model(env: dict[str, str] | None = None) -> BaseChatModel:
    """The model ``PIPELINE_MODEL`` names, else the scripted stand-in."""
    spec = (os.environ if env is None else env).get(MODEL_ENV, "").strip()
    if not spec:
        return ScriptedChatModel()
    try:
        from langchain.chat_models import init_chat_model  # type: ignore[import-not-found]
    except ImportError as err:
        raise RuntimeError(
            f"{MODEL_ENV}={spec!r} needs the `langchain` package and the provider's "
            "(for instance `pip install langchain langchain-openai`)"
        ) from err
    model: BaseChatModel = init_chat_model(spec)
    return model


def newest_human(messages: Sequence[BaseMessage]) -> HumanMessage | None:
    """The newest human message, or None."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message
    return None
