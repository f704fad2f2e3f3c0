"""The journal's records as the state machine reads and writes them: a turn, an
event, an event about to be appended, and the policy knobs from the settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True)
class TurnRecord:
    turn_id: str
    thread_id: str
    agent: str
    state: str
    attempts: int
    last_seq: int
    rewinds: int
    input_json: str
    request_hash: str
    owner_replica: str | None
    owner_incarnation: str | None
    lease_expires_at: float | None
    interrupt_json: str | None
    resume_json: str | None
    error: str
    created_at: float
    updated_at: float
    # Why the service ended the turn (cancelled, max_run_time, park_expired), or "".
    end_reason: str = ""
    # The turn's deadlines (0: none) and when they fall due (journal/lifecycle.py).
    max_run_seconds: float = 0.0
    park_expiry_seconds: float = 0.0
    run_deadline_at: float | None = None
    park_deadline_at: float | None = None
    # 1 once retention has pruned the finished turn's events (retention.py).
    pruned: int = 0
    # Crashes charged against the re-drive cap, and whether the turn is a suspect
    # held to run alone (journal/containment.py).
    charged: int = 0
    suspect: int = 0

    @property
    def owned(self) -> bool:
        return self.owner_replica is not None


TURN_COLUMNS = ", ".join(TurnRecord.__dataclass_fields__)


@dataclass(frozen=True)
class EventRecord:
    turn_id: str
    seq: int
    attempt: int
    type: str
    data_json: str
    created_at: float


EVENT_COLUMNS = ", ".join(EventRecord.__dataclass_fields__)


# An event to append: (seq, type, data_json). A bare tuple, not a class: one is
# built per appended event, and a NamedTuple's constructor showed in the ingest
# profile (bench/ingest.py) as a dataclass's had before it.
NewEvent: TypeAlias = tuple[int, str, str]


@dataclass(frozen=True)
class Policy:
    """The knobs the state machine needs, from Settings."""

    subject_prefix: str = "vystak"
    lease_seconds: float = 15.0
    claim_seconds: float = 5.0
    max_redrives: int = 3
    # Defaults of the per-turn deadlines (journal/lifecycle.py); 0 switches one off.
    max_run_seconds: float = 3600.0
    park_expiry_seconds: float = 7 * 24 * 3600.0

    def events_subject(self, turn_id: str) -> str:
        return f"{self.subject_prefix}.turn.events.{turn_id}"

    @property
    def rewind_subject(self) -> str:
        return f"{self.subject_prefix}.turn.rewind"
