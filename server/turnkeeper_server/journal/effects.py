"""The effect ledger's rules (docs/effects.md): per turn, each call of an effect that
acts on the world, keyed by its idempotency key, with its arguments, policy, state
and outcome.

- A call whose outcome is recorded (DONE, FAILED, RESOLVED) is answered RECORDED:
  the client returns or re-raises it and never calls the function again.
- A call whose intent an earlier execution recorded, with no outcome, is UNCERTAIN:
  the client applies the effect's policy (retry, park, fail).
- Otherwise RUN: the client calls the function, after the intent is recorded here
  when its policy needs one, and records the outcome with `record`.
- Divergence: a call made again with other arguments supersedes the recorded one
  (kept, marked SUPERSEDED) and runs under a new key (`key~N`); a recorded call
  that a re-executed task did not make again is superseded when that task's writes
  are stored (`settle`). Superseded calls are announced in the turn's events by the
  turn's next checkpoint (`announce`), before its boundary, so no rewind takes the
  announcement back.

Every write is fenced like the turn's other writes (transitions.fence): a stale
attempt is ABORTED. The rows go with the turn (journal/erasure.py, retention.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Collection
from typing import Final

from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal import transitions
from turnkeeper_server.records import (
    EFFECT_COLUMNS,
    EFFECT_INTENT,
    EFFECT_OUTCOMES,
    EFFECT_RESOLVED,
    EFFECT_SUPERSEDED,
    EffectCall,
    EffectRecord,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Conn, Tx

RUN, RECORDED, UNCERTAIN = "run", "recorded", "uncertain"
# What a turn's row says its ledger holds (TurnRecord.effects, decision 510): a
# checkpoint write reads the ledger only for what these bits say may be there. Set
# in the transaction that makes it so, so a write that read the bits (or, on
# PostgreSQL, checked the writer's record of them, transitions.fenced_turn) sees it.
# An effect not superseded: a task's writes settle it (`settle`). Never cleared.
EFFECTS_LIVE: Final = 1
# A superseded effect not yet announced (`announce` clears it).
EFFECTS_UNANNOUNCED: Final = 2
# The event a superseded call is announced with.
SUPERSEDED_EVENT: Final = "effect.superseded"
# The channels LangGraph writes for a task that did not finish: it parked at
# interrupt(), or it raised (its error), or what it was scheduled or resumed with.
# Such writes are not the task's result: they settle nothing. An execution that
# failed before it reached an effect must not supersede the effect an earlier one
# recorded; the next execution would make it again under a new key (the fault
# campaign found this: a BeginEffect refused while the disk was full).
NOT_A_RESULT: Final = frozenset({"__interrupt__", "__error__", "__scheduled__", "__resume__"})

_INSERT = (
    f"INSERT INTO main.effects ({EFFECT_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


# -- reads -----------------------------------------------------------------------------


def list_effects(conn: Conn, turn_id: str, offset: int, limit: int) -> list[EffectRecord]:
    """The turn's effects in the order they were first recorded."""
    rows = conn.execute(
        f"SELECT {EFFECT_COLUMNS} FROM main.effects WHERE turn_id = ? "
        "ORDER BY created_at, effect_key LIMIT ? OFFSET ?",
        (turn_id, limit, offset),
    ).fetchall()
    return [EffectRecord(*r) for r in rows]


def _by_key(conn: Conn, turn_id: str, key: str) -> EffectRecord | None:
    row = conn.execute(
        f"SELECT {EFFECT_COLUMNS} FROM main.effects WHERE turn_id = ? AND effect_key = ?",
        (turn_id, key),
    ).fetchone()
    return EffectRecord(*row) if row else None


def _under_base(conn: Conn, turn_id: str, base_key: str) -> list[EffectRecord]:
    rows = conn.execute(
        f"SELECT {EFFECT_COLUMNS} FROM main.effects WHERE turn_id = ? AND base_key = ?",
        (turn_id, base_key),
    ).fetchall()
    return [EffectRecord(*r) for r in rows]


# -- writes ----------------------------------------------------------------------------


def begin(tx: Tx, call: EffectCall, *, record_intent: bool) -> tuple[str, EffectRecord]:
    """BeginEffect: (RUN | RECORDED | UNCERTAIN, the row). For RUN without an intent
    the row is the one the call will have once its outcome is recorded (not stored)."""
    turn = transitions.lock_turn(tx, call.turn_id)
    transitions.fence(turn, call.attempt)
    turn = transitions.taken(tx, turn)
    tx.remember_turn(turn)  # the effect rows change no column of the turn's but `effects`
    now = time.time()
    rows = _under_base(tx.conn, call.turn_id, call.key)
    live = next((r for r in rows if r.state != EFFECT_SUPERSEDED), None)
    if live is not None:
        if live.args_json == call.args_json:
            return (RECORDED if live.state in EFFECT_OUTCOMES else UNCERTAIN), live
        _supersede(
            tx,
            live,
            f"made again by attempt {call.attempt} with other arguments "
            f"(now under key {_revision(call.key, len(rows))})",
            now,
        )
        turn = _mark(tx, turn, EFFECTS_UNANNOUNCED)
    row = _new_row(call, _revision(call.key, len(rows)), EFFECT_INTENT, "", now)
    if record_intent:
        tx.execute(_INSERT, _values(row))
        _mark(tx, turn, EFFECTS_LIVE)
    return RUN, row


def peek(conn: Conn, call: EffectCall) -> tuple[str, EffectRecord] | None:
    """BeginEffect without an intent to record, as a read: the same answer as `begin`,
    or None when the call diverges (other arguments), which only `begin` may settle.
    No lock and no commit: a stale attempt told RUN here is refused when it records,
    exactly as one re-driven away just after a locked begin would be."""
    turn = transitions.require_turn(conn, call.turn_id)
    transitions.fence(turn, call.attempt)
    rows = _under_base(conn, call.turn_id, call.key)
    live = next((r for r in rows if r.state != EFFECT_SUPERSEDED), None)
    if live is None:
        return RUN, _new_row(call, _revision(call.key, len(rows)), EFFECT_INTENT, "", time.time())
    if live.args_json == call.args_json:
        return (RECORDED if live.state in EFFECT_OUTCOMES else UNCERTAIN), live
    return None


def record(tx: Tx, call: EffectCall, key: str, state: str, outcome_json: str) -> EffectRecord:
    """RecordEffect: the outcome of the call under `key` (what BeginEffect answered)."""
    turn = transitions.lock_turn(tx, call.turn_id)
    transitions.fence(turn, call.attempt)
    turn = transitions.taken(tx, turn)
    tx.remember_turn(turn)  # the effect rows change no column of the turn's but `effects`
    revision = key.removeprefix(call.key + "~")
    if key != call.key and (revision == key or not revision.isdigit()):
        raise WrongState(f"effect key {key!r} is not one BeginEffect gives for key {call.key!r}")
    now = time.time()
    row = _by_key(tx.conn, call.turn_id, key)
    if row is None:
        if state == EFFECT_RESOLVED:
            raise WrongState(
                f"effect {call.name!r} (key {key!r}) has no recorded intent: only an "
                "uncertain effect is resolved"
            )
        fresh = _new_row(call, key, state, outcome_json, now)
        tx.execute(_INSERT, _values(fresh))
        _mark(tx, turn, EFFECTS_LIVE)
        return fresh
    if row.state == EFFECT_SUPERSEDED:
        raise WrongState(
            f"effect {row.name!r} (key {key!r}) was superseded ({row.detail}); "
            "its outcome is no longer recorded"
        )
    if row.state in EFFECT_OUTCOMES:
        if (row.state, row.outcome_json) == (state, outcome_json):
            return row  # the same record again (a retried call): nothing changes
        raise WrongState(
            f"effect {row.name!r} (key {key!r}) already has its outcome recorded "
            f"({row.state}); an outcome is recorded once"
        )
    tx.execute(
        "UPDATE main.effects SET state = ?, outcome_json = ?, attempt = ?, updated_at = ? "
        "WHERE turn_id = ? AND effect_key = ?",
        (state, outcome_json, call.attempt, now, call.turn_id, key),
    )
    found = _by_key(tx.conn, call.turn_id, key)
    assert found is not None  # updated just above, in this transaction
    return found


def settle(tx: Tx, turn: TurnRecord, task_id: str, made: Collection[str]) -> int:
    """A fenced task's writes are stored, made by an execution that made the effects
    `made` (their keys): every other live effect of the task is superseded. Returns
    how many were. A turn whose row says it has no such effect reads none."""
    if not turn.effects & EFFECTS_LIVE:
        return 0
    rows = tx.execute(
        f"SELECT {EFFECT_COLUMNS} FROM main.effects WHERE turn_id = ? AND task_id = ? "
        "AND state <> ?",
        (turn.turn_id, task_id, EFFECT_SUPERSEDED),
    ).fetchall()
    now = time.time()
    superseded = 0
    for row in (EffectRecord(*r) for r in rows):
        if row.effect_key in made:
            continue
        _supersede(
            tx,
            row,
            f"not made again when attempt {turn.attempts} re-executed its task",
            now,
        )
        superseded += 1
    if superseded:
        _mark(tx, turn, EFFECTS_UNANNOUNCED)
    return superseded


def announce(tx: Tx, turn: TurnRecord, policy: Policy) -> TurnRecord:
    """Append an `effect.superseded` event for each superseded effect of the turn not
    yet announced; returns the turn as it is after them (its last_seq moved). A turn
    whose row says none waits reads none."""
    if not turn.effects & EFFECTS_UNANNOUNCED:
        return turn
    rows = [
        EffectRecord(*r)
        for r in tx.execute(
            f"SELECT {EFFECT_COLUMNS} FROM main.effects WHERE turn_id = ? AND state = ? "
            "AND announced = 0 ORDER BY updated_at, effect_key",
            (turn.turn_id, EFFECT_SUPERSEDED),
        ).fetchall()
    ]
    if rows:
        events = [(SUPERSEDED_EVENT, json.dumps(_announcement(row))) for row in rows]
        transitions.append_service_events(tx, turn, events, policy, time.time())
        marks = ", ".join("?" for _ in rows)
        tx.execute(
            f"UPDATE main.effects SET announced = 1 WHERE turn_id = ? AND effect_key IN ({marks})",
            (turn.turn_id, *(r.effect_key for r in rows)),
        )
        turn = transitions.reload_turn(tx, turn.turn_id)
    cleared = turn.effects & ~EFFECTS_UNANNOUNCED
    tx.execute("UPDATE main.turns SET effects = ? WHERE turn_id = ?", (cleared, turn.turn_id))
    return dataclasses.replace(turn, effects=cleared)


def delete_for_turns(tx: Tx, turn_ids: list[str]) -> int:
    """Every effect of these turns (erasure, retention)."""
    marks = ", ".join("?" for _ in turn_ids)
    return int(
        tx.execute(f"DELETE FROM main.effects WHERE turn_id IN ({marks})", turn_ids).rowcount
    )


# -- helpers ---------------------------------------------------------------------------


def _revision(base_key: str, earlier: int) -> str:
    """The key of a call under `base_key` after `earlier` rows were recorded under it
    (all superseded by then): the base key first, then `~1`, `~2` ..."""
    return base_key if earlier == 0 else f"{base_key}~{earlier}"


def _new_row(call: EffectCall, key: str, state: str, outcome_json: str, now: float) -> EffectRecord:
    return EffectRecord(
        turn_id=call.turn_id,
        effect_key=key,
        base_key=call.key,
        name=call.name,
        args_json=call.args_json,
        policy=call.policy,
        state=state,
        outcome_json=outcome_json,
        attempt=call.attempt,
        task_id=call.task_id,
        checkpoint_id=call.checkpoint_id,
        call_index=call.call_index,
        detail="",
        announced=0,
        created_at=now,
        updated_at=now,
    )


def _values(row: EffectRecord) -> tuple[object, ...]:
    return tuple(getattr(row, name) for name in EffectRecord.__dataclass_fields__)


def _mark(tx: Tx, turn: TurnRecord, bits: int) -> TurnRecord:
    """The turn's row (locked: read by lock_turn or checked by fenced_turn in this
    transaction, so `turn.effects` is its value) with `bits` set, and the writer's
    record of it."""
    if turn.effects & bits == bits:
        return turn
    turn = dataclasses.replace(turn, effects=turn.effects | bits)
    # On PostgreSQL a trigger on the ledger set them already (a replica of before
    # decision 510 sets none): then this changes nothing.
    tx.execute(
        "UPDATE main.turns SET effects = ? WHERE turn_id = ? AND effects <> ?",
        (turn.effects, turn.turn_id, turn.effects),
    )
    tx.remember_turn(turn)
    return turn


def _supersede(tx: Tx, row: EffectRecord, detail: str, now: float) -> None:
    tx.execute(
        "UPDATE main.effects SET state = ?, detail = ?, announced = 0, updated_at = ? "
        "WHERE turn_id = ? AND effect_key = ?",
        (
            EFFECT_SUPERSEDED,
            f"{row.state.lower()} then superseded: {detail}",
            now,
            row.turn_id,
            row.effect_key,
        ),
    )


def _announcement(row: EffectRecord) -> dict[str, object]:
    return {
        "key": row.effect_key,
        "name": row.name,
        "args": json.loads(row.args_json),
        "task_id": row.task_id,
        "attempt": row.attempt,
        "detail": row.detail,
        "outcome": json.loads(row.outcome_json) if row.outcome_json else None,
    }
