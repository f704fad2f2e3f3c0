"""A chat model's completed replies as effects (opt-in): a re-driven step reuses every
reply the lost execution already paid for, and calls the model only from where it
died.

It is a LangChain cache (``BaseCache``) whose store is the turn's effect ledger, so
it works with any chat model and with ``bind_tools``: ``journal_replies(model)``
returns a copy of the model that uses it. Before each call the model asks the
ledger (BeginEffect): a reply recorded for this call is returned without calling
the model; otherwise the model is called and its completed reply recorded
(RecordEffect). The policy is ``retry``, with no intent recorded: a model call that
died unrecorded is simply made again, as before.

Each call is keyed like any effect (turnkeeper.agent.effect._key), under the name
``model:<the model's type>``; its arguments in the ledger are a SHA-256 of the
prompt, not the prompt itself (a conversation can be
large, and may hold what the ledger should not), so a re-execution that sends the
model another prompt reads as divergence and is called afresh.

What was streamed of a reply that had not finished is handled by the rewind as
before; a reply taken from the ledger is not streamed again token by token (the
rewind removed its tokens' events, and the step's output carries the reply).
Outside a turn the cache finds nothing and records nothing: the model is called.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import warnings
from collections.abc import Sequence
from typing import Any, Final, TypeVar

from langchain_core._api import LangChainBetaWarning
from langchain_core.caches import BaseCache
from langchain_core.language_models import BaseChatModel
from langchain_core.load import dumps, loads
from langchain_core.outputs import Generation
from langgraph.config import get_config

from turnkeeper.agent.effect._key import call_site
from turnkeeper.agent.saver._executions import Execution
from turnkeeper.agent.saver._remote import RemoteSaver
from turnkeeper.v1 import turns_pb2

M = TypeVar("M", bound=BaseChatModel)

# The reply a lookup began, for the update of the same call (same task, same coroutine).
_PENDING: contextvars.ContextVar[dict[tuple[str, str], turns_pb2.RecordEffectRequest] | None] = (
    contextvars.ContextVar("turnkeeper_model_pending", default=None)
)
RETURN_TYPE: Final = "return_val"


def journal_replies(model: M) -> M:
    """A copy of `model` whose completed replies are journaled as effects of the
    running turn (see the module docstring)."""
    return model.model_copy(update={"cache": ModelReplies(f"model:{type(model).__name__}")})


class ModelReplies(BaseCache):
    """The turn's effect ledger as a LangChain cache of chat replies."""

    def __init__(self, name: str = "model") -> None:
        self.name = name

    # -- the blocking path --------------------------------------------------------

    def lookup(self, prompt: str, llm_string: str) -> Sequence[Generation] | None:
        begun = self._begin(prompt, llm_string)
        if begun is None:
            return None
        saver, request, execution = begun
        answer = saver.begin_effect(request)
        return self._answered(prompt, llm_string, answer, request, execution)

    def update(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        recorded = self._recorded(prompt, llm_string, return_val)
        if recorded is not None:
            saver, request = recorded
            saver.record_effect(request)

    # -- the async path -------------------------------------------------------------

    async def alookup(self, prompt: str, llm_string: str) -> Sequence[Generation] | None:
        begun = self._begin(prompt, llm_string)
        if begun is None:
            return None
        saver, request, execution = begun
        answer = await saver.abegin_effect(request)
        return self._answered(prompt, llm_string, answer, request, execution)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Sequence[Generation]) -> None:
        recorded = self._recorded(prompt, llm_string, return_val)
        if recorded is not None:
            saver, request = recorded
            await saver.arecord_effect(request)

    def clear(self, **kwargs: Any) -> None:
        """Nothing to clear: the replies are the turn's, and go with it."""

    # -- shared -----------------------------------------------------------------------

    def _begin(
        self, prompt: str, llm_string: str
    ) -> tuple[RemoteSaver, turns_pb2.BeginEffectRequest, Execution] | None:
        try:
            config = get_config()
        except RuntimeError:
            return None
        site = call_site(config, self.name)
        if site is None or not isinstance(site.checkpointer, RemoteSaver):
            return None
        # The prompt alone: a model's parameter string may hold what differs between
        # processes (an object's address), which would read as divergence.
        digest = hashlib.sha256(prompt.encode()).hexdigest()
        call = turns_pb2.EffectCall(
            turn_id=site.identity.turn_id,
            attempt=site.identity.attempt,
            key=site.key,
            name=self.name,
            args_json=json.dumps({"prompt_sha256": digest}),
            policy=turns_pb2.EFFECT_POLICY_RETRY,
            task_id=site.task_id,
            checkpoint_id=site.checkpoint_id,
            call_index=site.call_index,
        )
        return site.checkpointer, turns_pb2.BeginEffectRequest(call=call), site.execution

    def _answered(
        self,
        prompt: str,
        llm_string: str,
        answer: turns_pb2.BeginEffectResponse,
        request: turns_pb2.BeginEffectRequest,
        execution: Execution,
    ) -> Sequence[Generation] | None:
        key = answer.effect.key or request.call.key
        execution.made.add(key)
        if answer.decision == turns_pb2.EFFECT_DECISION_RECORDED:
            return _generations(answer.effect.outcome_json)
        pending = dict(_PENDING.get() or {})
        pending[(prompt, llm_string)] = turns_pb2.RecordEffectRequest(call=request.call, key=key)
        _PENDING.set(pending)
        return None

    def _recorded(
        self, prompt: str, llm_string: str, return_val: Sequence[Generation]
    ) -> tuple[RemoteSaver, turns_pb2.RecordEffectRequest] | None:
        pending = dict(_PENDING.get() or {})
        request = pending.pop((prompt, llm_string), None)
        _PENDING.set(pending)
        if request is None:
            return None
        request.state = turns_pb2.EFFECT_STATE_DONE
        request.outcome_json = json.dumps([json.loads(dumps(g)) for g in return_val])
        saver = get_config()["configurable"]["__pregel_checkpointer"]
        assert isinstance(saver, RemoteSaver)  # _begin found it there
        return saver, request


def _generations(outcome_json: str) -> list[Generation]:
    with warnings.catch_warnings():
        # langchain_core.load is marked beta; the payload is our own ledger's.
        warnings.simplefilter("ignore", LangChainBetaWarning)
        return [loads(json.dumps(g), allowed_objects="core") for g in json.loads(outcome_json)]
