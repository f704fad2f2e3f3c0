"""The multitask strategies: what starting a turn does when its thread is busy (it has a
RUNNING or PARKED turn), in LangGraph Platform's words and on the wire (decision 106).

    reject     the new turn is refused (FAILED_PRECONDITION); the default
    enqueue    it is QUEUED behind the live turn (and behind turns already queued)
    interrupt  the live turn is cancelled and this one runs
    rollback   the live turn is cancelled, its checkpoints removed, and this one runs

The one table of them: the service's journal, its gRPC and HTTP doors and the bridge's
``responses/create`` all parse a strategy here.
"""

from __future__ import annotations

from typing import Any, Final

from turnkeeper.v1 import turns_pb2

REJECT: Final = "reject"
ENQUEUE: Final = "enqueue"
INTERRUPT: Final = "interrupt"
ROLLBACK: Final = "rollback"

# Each strategy's word and its value on the wire; the default first.
_WIRE: Final[dict[str, turns_pb2.MultitaskStrategy.ValueType]] = {
    REJECT: turns_pb2.MULTITASK_STRATEGY_REJECT,
    ENQUEUE: turns_pb2.MULTITASK_STRATEGY_ENQUEUE,
    INTERRUPT: turns_pb2.MULTITASK_STRATEGY_INTERRUPT,
    ROLLBACK: turns_pb2.MULTITASK_STRATEGY_ROLLBACK,
}
#: Every strategy's word, the default first.
STRATEGIES: Final = tuple(_WIRE)
# Unset on the wire is the default.
_WORDS: Final = {turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED: REJECT} | {
    wire: word for word, wire in _WIRE.items()
}


def parse(value: Any) -> str:
    """A strategy as a JSON request gives it: one of the words, or None (the default,
    ``reject``). ValueError names the words."""
    if value is None:
        return REJECT
    if not isinstance(value, str) or value not in _WIRE:
        raise ValueError(f"multitask_strategy must be one of {', '.join(STRATEGIES)}")
    return value


def to_wire(word: str) -> turns_pb2.MultitaskStrategy.ValueType:
    """A parsed strategy's value in a StartTurnRequest."""
    return _WIRE[word]


def from_wire(value: turns_pb2.MultitaskStrategy.ValueType) -> str:
    """A StartTurnRequest's strategy as its word (unset: the default). ValueError for
    a value this version does not know."""
    word = _WORDS.get(value)
    if word is None:
        names = [word.upper() for word in STRATEGIES]
        raise ValueError(
            f"multitask_strategy must be {', '.join(names[:-1])} or {names[-1]} (or unset)"
        )
    return word
