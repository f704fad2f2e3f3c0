"""What a run knows of its turn's effect ledger, so that a `retry` effect costs one
round trip, its outcome's, instead of two (docs/effects.md, decision 260).

A `retry` effect's BeginEffect is a read: it answers RUN unless the ledger holds a
row under the call's key. The bridge gives each run of a turn a :class:`LedgerSnapshot`
(under :data:`CONFIG_KEY` in the run's ``configurable``). At the first `retry`
effect of the run it reads the turn's ledger once (ListEffects); from then on a
call whose key has no row there runs without asking. That is sound because nobody
else can add a row for one of this run's keys while it runs: an effect's key names
its task, and only the execution that owns the turn's attempt may record (every
other is fenced), so a row under one of its keys is either older than the run (in
the snapshot) or its own (noted here as it records it). A key with a row, any row,
still asks the service, which applies the recorded outcome, the uncertain policy
and divergence as before. Runs that are not the bridge's (a hand-written loop with
RemoteSaver) have no snapshot, and ask every time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import Final

from turnkeeper.v1 import turns_pb2

# The run's configurable key (a dunder key: LangGraph keeps it out of checkpoint
# metadata).
CONFIG_KEY: Final = "__turnkeeper_effects"


def base_key(key: str) -> str:
    """The client's key of a ledger key (``key~N`` after a supersede)."""
    return key.split("~", 1)[0]


class LedgerSnapshot:
    def __init__(self) -> None:
        self._keys: set[str] | None = None
        self._lock = threading.Lock()
        self._loading: asyncio.Lock | None = None

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    def load(self, effects: Iterable[turns_pb2.Effect]) -> None:
        with self._lock:
            if self._keys is None:
                self._keys = {base_key(e.key) for e in effects}

    def unknown(self, key: str) -> bool:
        """True when the ledger has no row under this client key: the call runs."""
        with self._lock:
            return self._keys is not None and base_key(key) not in self._keys

    def note(self, key: str) -> None:
        """A row this run recorded (an intent, an outcome)."""
        with self._lock:
            if self._keys is not None:
                self._keys.add(base_key(key))

    def loading(self) -> asyncio.Lock:
        """Held while the snapshot is read, so concurrent effects read it once."""
        if self._loading is None:
            self._loading = asyncio.Lock()
        return self._loading


def run_answer(call: turns_pb2.EffectCall) -> turns_pb2.BeginEffectResponse:
    """BeginEffect's answer for a call the ledger has no row for: RUN, under its key."""
    return turns_pb2.BeginEffectResponse(
        decision=turns_pb2.EFFECT_DECISION_RUN,
        effect=turns_pb2.Effect(
            turn_id=call.turn_id,
            key=call.key,
            name=call.name,
            args_json=call.args_json,
            policy=call.policy,
            state=turns_pb2.EFFECT_STATE_INTENT,
            attempt=call.attempt,
            task_id=call.task_id,
            checkpoint_id=call.checkpoint_id,
            call_index=call.call_index,
        ),
    )
