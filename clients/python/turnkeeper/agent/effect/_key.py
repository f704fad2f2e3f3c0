"""An effect call's identity: its idempotency key, derived from what LangGraph makes
deterministic, so it is the same in every execution of the same logical call and
different for different calls.

The parts, all read from the running task's config:

- the thread and the turn (``configurable["thread_id"]``, ``["turn_id"]``): a
  re-drive or a resume continues the same turn; a new turn replaying an old
  checkpoint (a fork, time travel) makes new calls, with new keys;
- the task: LangGraph's task id, a hash of the checkpoint the step started from,
  the namespace, the step, the node and its trigger (pregel's task id is computed,
  not drawn at random, so a re-drive from the same checkpoint, here or on another
  replica, prepares the same task ids); and the task's namespace
  (``configurable["checkpoint_ns"]``), for tasks of subgraphs;
- the node's try when a LangGraph RetryPolicy runs it again (from the second try
  on): a retry is a new call, as RetryPolicy means it to be;
- the effect's name, and the call's position among the task's calls of that
  effect (0, 1, 2 ... in the order they are made).

What breaks it (docs/effects.md): calls of one effect made in a different order
within one task from one execution to the next (concurrent calls racing, a loop
over an unordered collection), a change of the graph's code between executions,
or a re-drive that does not start from the step's checkpoint.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from turnkeeper.agent.saver import _executions as executions
from turnkeeper.agent.saver._identity import TurnIdentity, turn_identity

# LangGraph's configurable keys for the running task (langgraph._internal._constants).
_TASK_ID = "__pregel_task_id"
_SCRATCHPAD = "__pregel_scratchpad"
_RUNTIME = "__pregel_runtime"
_CHECKPOINT_MAP = "checkpoint_map"
_CHECKPOINTER = "__pregel_checkpointer"

# The prefix of every key: a receiver's logs show where it came from.
KEY_PREFIX = "fx-"


@dataclass(frozen=True)
class CallSite:
    """Where an effect is called: the turn, the task and the call's position."""

    identity: TurnIdentity
    thread_id: str
    task_id: str
    checkpoint_ns: str
    # The checkpoint the task's step started from.
    checkpoint_id: str
    node_attempt: int
    name: str
    call_index: int
    execution: executions.Execution
    checkpointer: Any

    @property
    def key(self) -> str:
        parts = [self.thread_id, self.identity.turn_id, self.checkpoint_ns, self.task_id]
        if self.node_attempt > 1:
            parts.append(f"try-{self.node_attempt}")
        parts += [self.name, str(self.call_index)]
        digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()
        return f"{KEY_PREFIX}{digest[:40]}"


def call_site(config: RunnableConfig, name: str) -> CallSite | None:
    """The call site of the next call of effect `name` in the running task, counted;
    None outside a turn (no turn identity, or not inside a LangGraph task)."""
    identity = turn_identity(config)
    configurable = config.get("configurable") or {}
    task_id = configurable.get(_TASK_ID)
    scratchpad = configurable.get(_SCRATCHPAD)
    if identity is None or not task_id or scratchpad is None:
        return None
    checkpoint_ns = str(configurable.get("checkpoint_ns", ""))
    # The task's namespace is "<parent ns>|node:task_id"; the checkpoint map names
    # the checkpoint each enclosing graph's step started from.
    parent_ns = checkpoint_ns.rpartition("|")[0]
    checkpoint_map = configurable.get(_CHECKPOINT_MAP) or {}
    checkpoint_id = str(checkpoint_map.get(parent_ns, ""))
    runtime = configurable.get(_RUNTIME)
    info = getattr(runtime, "execution_info", None)
    node_attempt = int(getattr(info, "node_attempt", 1) or 1)
    # A RetryPolicy retry replaces the scratchpad with a copy (its interrupt counter
    # reset) that keeps the other fields' objects: its call counter is the identity
    # of the task's preparation, the same for every try, new for each re-drive.
    execution = executions.execution(
        identity, str(task_id), getattr(scratchpad, "call_counter", scratchpad)
    )
    return CallSite(
        identity=identity,
        thread_id=str(configurable.get("thread_id", "")),
        task_id=str(task_id),
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint_id,
        node_attempt=node_attempt,
        name=name,
        call_index=execution.next_index(node_attempt, name),
        execution=execution,
        checkpointer=configurable.get(_CHECKPOINTER),
    )
