"""The store's named records: what goes into and comes out of a backend.

Checkpoints (a put, a task's writes, the boundary a turn's checkpoint records, a
list query, the rows read back), TurnStatus's columns, and outbox rows. Values stay
opaque `(type, bytes)`: the service never deserialises application objects. The
rules above the rows (a write is fenced to its turn's attempt; a checkpoint of a
turn records the turn's boundary) are the journal's (journal/checkpoints.py).

Plain data, importing nothing of the service: `contract` (the interfaces) and every
backend build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class CheckpointPut:
    """One checkpoint to store (PutCheckpoint); `metadata_json` is the client's JSON."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str
    type: str
    blob: bytes
    metadata_json: str


# One pending write of a task: (idx, channel, type, value).
PendingWrite = tuple[int, str, str, bytes]


@dataclass(frozen=True, slots=True)
class WritesPut:
    """A task's pending writes against a checkpoint (PutWrites). `replace`: the
    writes replace stored ones with the same key (LangGraph's special channels);
    otherwise the first stored stays."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: Sequence[PendingWrite]
    replace: bool


@dataclass(frozen=True, slots=True)
class Boundary:
    """The turn a checkpoint was written for and its last_seq then: where a rewind
    of that turn goes back to (docs/architecture.md §3)."""

    turn_id: str
    attempt: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class CheckpointQuery:
    """ListCheckpoints' filters, LangGraph's `list` semantics; "" and 0 mean none,
    `checkpoint_ns` None means every namespace."""

    thread_id: str = ""
    checkpoint_ns: str | None = None
    checkpoint_id: str = ""
    filter_json: str = ""
    before_checkpoint_id: str = ""
    limit: int = 0


@dataclass(frozen=True)
class WriteRow:
    task_id: str
    channel: str
    type: str | None
    value: bytes | None
    task_path: str
    idx: int


@dataclass(frozen=True)
class CheckpointRow:
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str | None
    checkpoint: bytes | None
    metadata: bytes | None
    writes: list[WriteRow]


class TurnStatusRow(NamedTuple):
    """What TurnStatus answers with: columns of one turn (store/status_cache.py).
    `owner_replica` is for its detail: a RUNNING turn nobody owns (journal/agents.py)."""

    agent: str
    state: str
    attempts: int
    last_seq: int
    error: str
    end_reason: str
    owner_replica: str | None


class OutboxRow(NamedTuple):
    """An outbox row as the publisher gets it. `traceparent` is None unless tracing
    was on when the row was written; a row of several `messages` is
    store/outbox_rows.py's (its id is the last of its messages' ids)."""

    id: int
    subject: str
    payload: bytes
    traceparent: str | None
    messages: int
