"""Which effects each running task execution made, for the task's writes to say.

An effect (``turnkeeper.agent.effect``) notes its ledger key here against the task
execution that made it; when LangGraph stores that task's writes, RemoteSaver takes
the set and sends it with them (``PutWritesRequest.settle_effects``), and the
service supersedes any other recorded effect of the task: one an earlier, lost
execution made and this one did not make again (docs/effects.md, divergence).

A task execution is identified by an object of LangGraph's per-execution
scratchpad (new each time a task is prepared: a re-drive, a resume after
interrupt(); turnkeeper.agent.effect._key picks it); the entry is found by (turn,
attempt, task id), since put_writes sees only the task id. A RetryPolicy retry of a
node keeps that object, so its tries count as one execution and every try's calls
are kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from turnkeeper.agent.saver._identity import TurnIdentity

# Executions remembered at most: one per task in flight per turn is all that is
# needed; a task whose writes never come (its run was cancelled) is forgotten last.
_MAX_EXECUTIONS = 4096


@dataclass
class Execution:
    """One execution of a task: the counters its effects' keys are made from (per
    node try and effect name) and the ledger keys of the effects it made."""

    scratchpad: object
    counters: dict[tuple[int, str], int] = field(default_factory=dict)
    made: set[str] = field(default_factory=set)

    def next_index(self, node_attempt: int, name: str) -> int:
        index = self.counters.get((node_attempt, name), 0)
        self.counters[(node_attempt, name)] = index + 1
        return index


_lock = threading.Lock()
_executions: OrderedDict[tuple[str, int, str], Execution] = OrderedDict()


def execution(identity: TurnIdentity, task_id: str, scratchpad: object) -> Execution:
    """The execution of `task_id` that `scratchpad` (the preparation's identity)
    belongs to: a new one when the task was prepared again since."""
    key = (identity.turn_id, identity.attempt, task_id)
    with _lock:
        found = _executions.get(key)
        if found is None or found.scratchpad is not scratchpad:
            found = _executions[key] = Execution(scratchpad)
            while len(_executions) > _MAX_EXECUTIONS:
                _executions.popitem(last=False)
        return found


def take_made(identity: TurnIdentity, task_id: str) -> list[str]:
    """The keys the task's latest execution made (none if it made no effect), and
    forget it: its writes are being stored, so the execution is over."""
    with _lock:
        found = _executions.pop((identity.turn_id, identity.attempt, task_id), None)
    return sorted(found.made) if found is not None else []
