"""The records every layer speaks in: a turn and its states, an event, an event
about to be appended, the fence a turn's writes carry, and the policy knobs from
the settings. The ground floor: it imports nothing of the service."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

from turnkeeper.states import STATE_NAMES, TERMINAL_EVENT_TYPES

RUNNING, PARKED, DONE, FAILED, CANCELLED, QUEUED = STATE_NAMES
# A live turn holds its thread: one at most per thread.
LIVE: Final = (RUNNING, PARKED)
# Over for good. QUEUED is neither: it waits behind the thread's live turn.
ENDED: Final = (DONE, FAILED, CANCELLED)
# Not over yet: live, or queued to run.
UNFINISHED: Final = (*LIVE, QUEUED)


def sql_list(states: tuple[str, ...]) -> str:
    """States as an SQL list for `state IN ...` (state names are plain words)."""
    return "(" + ", ".join(f"'{state}'" for state in states) + ")"


LIVE_SQL: Final = sql_list(LIVE)
UNFINISHED_SQL: Final = sql_list(UNFINISHED)
ENDED_SQL: Final = sql_list(ENDED)
TERMINAL_EVENTS: Final = TERMINAL_EVENT_TYPES


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
    # The graph version of the code that started the turn or last took it over
    # (journal/versions.py); '' when no versioned replica ran it.
    graph_fingerprint: str = ""
    graph_label: str = ""
    # What the turn's effect ledger holds that a checkpoint write must look at
    # (journal/effects.py's EFFECTS_LIVE, EFFECTS_UNANNOUNCED; decision 510).
    effects: int = 0
    # Its claim rode its hand-off (decision 590): HANDED until its owner takes it (a
    # heartbeat or a fenced write), REOFFERED once offered again untaken.
    handed: int = 0

    @property
    def owned(self) -> bool:
        return self.owner_replica is not None

    @property
    def taken(self) -> bool:
        """Its owner runs it: started it, or took its hand-off (a heartbeat or a
        fenced write cleared `handed`). Such a turn orphaned by its owner's death is
        an orphan of that crash; one owned but still handed never ran there
        (decision 590)."""
        return self.owned and not self.handed


TURN_COLUMNS = ", ".join(TurnRecord.__dataclass_fields__)

# TurnRecord.handed (decision 590).
HANDED, REOFFERED = 1, 2


@dataclass(frozen=True)
class EventRecord:
    turn_id: str
    seq: int
    attempt: int
    type: str
    data_json: str
    created_at: float


EVENT_COLUMNS = ", ".join(EventRecord.__dataclass_fields__)


# An effect's states in the ledger (journal/effects.py); RESOLVED is an uncertain
# one an operator said happened, SUPERSEDED one a re-execution did not make again.
EFFECT_INTENT, EFFECT_DONE, EFFECT_FAILED = "INTENT", "DONE", "FAILED"
EFFECT_RESOLVED, EFFECT_SUPERSEDED = "RESOLVED", "SUPERSEDED"
# States that carry an outcome: a later execution returns it and never calls again.
EFFECT_OUTCOMES: Final = (EFFECT_DONE, EFFECT_FAILED, EFFECT_RESOLVED)
EFFECT_POLICIES: Final = ("retry", "park", "fail")


@dataclass(frozen=True, slots=True)
class EffectCall:
    """One call of an effect as an executor describes it (BeginEffect, RecordEffect)."""

    turn_id: str
    attempt: int
    # The client's key: the same in every execution of the same logical call.
    key: str
    name: str
    # Canonical JSON (sorted keys), so that two executions' arguments compare as text.
    args_json: str
    policy: str
    task_id: str
    checkpoint_id: str
    call_index: int


@dataclass(frozen=True)
class EffectRecord:
    turn_id: str
    # The key the call runs with: `base_key`, or `base_key~N` after N were superseded.
    effect_key: str
    base_key: str
    name: str
    args_json: str
    policy: str
    state: str
    outcome_json: str
    attempt: int
    task_id: str
    checkpoint_id: str
    call_index: int
    detail: str
    # 1 once the turn's events said it was superseded.
    announced: int
    created_at: float
    updated_at: float


EFFECT_COLUMNS = ", ".join(EffectRecord.__dataclass_fields__)


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
    # The service passes its settings' (config.Settings holds the defaults); none here.
    max_run_seconds: float = 0.0
    park_expiry_seconds: float = 0.0

    def events_subject(self, turn_id: str) -> str:
        return f"{self.subject_prefix}.turn.events.{turn_id}"

    @property
    def rewind_subject(self) -> str:
        return f"{self.subject_prefix}.turn.rewind"


@dataclass(frozen=True, slots=True)
class Fence:
    """The turn attempt a write is made for: refused once that attempt is not the
    turn's current one (docs/architecture.md §4)."""

    turn_id: str
    attempt: int
