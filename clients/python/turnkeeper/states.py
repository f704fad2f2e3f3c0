"""Turn states, defined once: the journal, the servers' conversions, the metrics, the
follower and the CLI all take them from here (docs/architecture.md §2).

A turn the journal holds is QUEUED (waiting behind its thread's live turn), RUNNING,
PARKED, DONE, FAILED or CANCELLED; UNKNOWN is what a client reads for a turn the
service never saw. The names are the enum's values
(upper case, as stored in turns.db and printed by the CLI); `word` is the lower-case
form used on JSON wires (`running|parked|done|failed|cancelled|queued|unknown`), and
`from_wire` reads it back through the one table, `WIRE_WORDS`.

On the contract's NATS methods (``responses/turnStatus``, ``responses/resumeDetached``)
``status`` is the `contract_word`: a panel written to the contract knows
`running|parked|done|failed|unknown` and concludes on anything else, so a QUEUED turn,
which will run, answers `running`; CANCELLED answers `cancelled`, which concludes it.
The exact `word` is beside it in ``state``, for clients that know the whole lifecycle;
`from_answer` reads ``state`` first (decision 192).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from turnkeeper.v1 import turns_pb2

__all__ = [
    "JOURNAL_STATES",
    "STATE_NAMES",
    "TERMINAL_EVENT_TYPES",
    "WIRE_WORDS",
    "TurnState",
]


class TurnState(enum.Enum):
    """The seven states a client can read for a turn."""

    RUNNING = "RUNNING"
    PARKED = "PARKED"
    DONE = "DONE"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    QUEUED = "QUEUED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def from_proto(cls, state: int) -> TurnState:
        """The state of a TurnStatusResponse; UNSPECIFIED (never sent) reads UNKNOWN."""
        return _FROM_PROTO.get(state, cls.UNKNOWN)

    @classmethod
    def from_word(cls, word: str) -> TurnState:
        """A name in any case (`running`, `RUNNING`); ValueError for anything else."""
        return cls(word.upper())

    @classmethod
    def from_wire(cls, word: object) -> TurnState:
        """The state a JSON-RPC ``status`` word names; anything else reads UNKNOWN.
        Upper-case words are read too: bridges before the contract's words sent them."""
        return WIRE_WORDS.get(str(word).lower(), cls.UNKNOWN)

    @classmethod
    def from_answer(cls, answer: Mapping[str, Any]) -> TurnState:
        """The state of a ``responses/turnStatus`` or ``responses/resumeDetached``
        answer: its ``state``, or its ``status`` from an agent that sends none."""
        return cls.from_wire(answer.get("state", answer.get("status")))

    @property
    def proto(self) -> turns_pb2.TurnState.ValueType:
        """The generated enum's value (`turns_pb2.TURN_STATE_*`)."""
        return _TO_PROTO[self]

    @property
    def word(self) -> str:
        """The lower-case name used on JSON wires."""
        return self.value.lower()

    @property
    def contract_word(self) -> str:
        """The word for ``status`` on the contract's NATS methods: one a five-word
        panel reads right (QUEUED, which will run, is `running`)."""
        return "running" if self is TurnState.QUEUED else self.word

    @property
    def live(self) -> bool:
        """RUNNING, PARKED or QUEUED (it will run): the turn is not over, a watcher
        keeps waiting."""
        return self in (TurnState.RUNNING, TurnState.PARKED, TurnState.QUEUED)

    @property
    def terminal(self) -> bool:
        """DONE, FAILED or CANCELLED: the turn is over and never changes again."""
        return self in (TurnState.DONE, TurnState.FAILED, TurnState.CANCELLED)


_TO_PROTO: Final[dict[TurnState, turns_pb2.TurnState.ValueType]] = {
    TurnState.RUNNING: turns_pb2.TURN_STATE_RUNNING,
    TurnState.PARKED: turns_pb2.TURN_STATE_PARKED,
    TurnState.DONE: turns_pb2.TURN_STATE_DONE,
    TurnState.FAILED: turns_pb2.TURN_STATE_FAILED,
    TurnState.CANCELLED: turns_pb2.TURN_STATE_CANCELLED,
    TurnState.QUEUED: turns_pb2.TURN_STATE_QUEUED,
    TurnState.UNKNOWN: turns_pb2.TURN_STATE_UNKNOWN,
}
_FROM_PROTO: Final[dict[int, TurnState]] = {int(v): k for k, v in _TO_PROTO.items()}

#: The wire words (``TurnState.word``) and the state each names.
WIRE_WORDS: Final[dict[str, TurnState]] = {state.word: state for state in TurnState}

#: The states a turn in the journal can be in (UNKNOWN is a reader's word only).
JOURNAL_STATES: Final = (
    TurnState.RUNNING,
    TurnState.PARKED,
    TurnState.DONE,
    TurnState.FAILED,
    TurnState.CANCELLED,
    TurnState.QUEUED,
)
#: Their names, as stored in turns.db.
STATE_NAMES: Final = tuple(state.value for state in JOURNAL_STATES)
#: The event types that end a turn; after one, a turn's event log is complete.
TERMINAL_EVENT_TYPES: Final = frozenset({"turn.done", "turn.failed", "turn.cancelled"})
