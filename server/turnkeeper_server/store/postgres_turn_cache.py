"""The PostgreSQL writer's records of the turns it wrote last (decision 470)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from turnkeeper_server.records import TurnRecord

# Turns whose record the writer keeps (`TurnCache`): the running turns of one
# replica's agents are far fewer; the oldest goes first.
TURN_CACHE_SIZE = 4096


class TurnCache:
    """The writer's record of the turns it wrote last (decision 470): their
    attempts, state, last_seq and rewinds as its own commits left them, so that an
    append or a checkpoint write of a turn this replica's agent is running needs no
    read of the turn row mid-group. Each use is checked by a statement sent with the
    operation's others (journal/transitions.py's `fenced_turn`), which fails the
    group when the row holds other values (another replica, a re-drive, a cancel);
    the group then runs again carefully, without the cache, and the cache is
    emptied. What a group's operations remember is pending until it commits. The
    writer thread alone uses it."""

    def __init__(self, size: int = TURN_CACHE_SIZE) -> None:
        self.size = size
        self._turns: OrderedDict[str, TurnRecord] = OrderedDict()
        # This transaction's: a record, or None for a turn it changed otherwise.
        self._pending: dict[str, TurnRecord | None] = {}

    def get(self, turn_id: str) -> TurnRecord | None:
        if turn_id in self._pending:
            return self._pending[turn_id]
        return self._turns.get(turn_id)

    def put(self, turn: TurnRecord) -> None:
        if turn.input_json or turn.interrupt_json or turn.resume_json or turn.error:
            # Nobody relies on these (`Tx.known_turn`), and an input may be large.
            turn = dataclasses.replace(
                turn, input_json="", interrupt_json=None, resume_json=None, error=""
            )
        self._pending[turn.turn_id] = turn

    def drop(self, turn_id: str) -> None:
        self._pending[turn_id] = None

    def commit(self) -> None:
        for turn_id, turn in self._pending.items():
            if turn is None:
                self._turns.pop(turn_id, None)
            else:
                self._turns[turn_id] = turn
                self._turns.move_to_end(turn_id)
        self._pending.clear()
        while len(self._turns) > self.size:
            self._turns.popitem(last=False)

    def discard(self) -> None:
        """The transaction rolled back: what it remembered goes."""
        self._pending.clear()

    def clear(self) -> None:
        self._turns.clear()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._turns)
