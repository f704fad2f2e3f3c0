"""The key a tool passes on so that a re-run step does not act twice."""

from __future__ import annotations

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config

from turnkeeper.agent.saver._identity import ATTEMPT_KEY, TURN_ID_KEY, turn_identity


def idempotency_key(config: RunnableConfig | None = None) -> str:
    """``turn_id:step:attempt`` for the step that is running, for a tool to pass to
    the system it calls (a payment API, an e-mail sender ...).

    Steps are at-least-once: the step that was running when an execution died runs
    again in the next attempt, with the same ``turn_id`` and ``step`` and the next
    ``attempt``. A tool that must act once looks for an earlier
    ``turn_id:step:`` key before acting. Inside a node or a tool, call it with no
    argument (it reads the running config) or pass the ``config`` LangGraph gave
    you; the parts are ``config["configurable"]["turn_id"]``,
    ``config["metadata"]["langgraph_step"]`` and ``config["configurable"]["attempt"]``.
    """
    config = get_config() if config is None else config
    identity = turn_identity(config)
    metadata = config.get("metadata") or {}
    if identity is None:
        configurable = config.get("configurable") or {}
        raise _missing(TURN_ID_KEY if not configurable.get(TURN_ID_KEY) else ATTEMPT_KEY)
    if "langgraph_step" not in metadata:
        raise _missing("langgraph_step")
    return f"{identity.turn_id}:{metadata['langgraph_step']}:{identity.attempt}"


def _missing(key: str) -> RuntimeError:
    return RuntimeError(
        f"no {key!r} in the config: idempotency_key() works inside a node or "
        "a tool of a turn run by the bridge"
    )
