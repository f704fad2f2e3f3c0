"""journal/effects.py, the effect ledger: a recorded outcome is returned, never run
again; an intent without an outcome is uncertain; a call made again with other
arguments supersedes the recorded one and runs under a new key; a task's stored
writes settle its other effects (superseded), which the turn's next checkpoint
announces before its boundary; every write is fenced."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import pytest
from turnkeeper_server.errors import StaleAttempt, WrongState
from turnkeeper_server.journal import checkpoints, effects, transitions
from turnkeeper_server.records import (
    EFFECT_DONE,
    EFFECT_INTENT,
    EFFECT_SUPERSEDED,
    EffectCall,
    EffectRecord,
    Fence,
)
from turnkeeper_server.store import Tx
from turnkeeper_server.store.records import WritesPut

from tests.journal.conftest import POLICY, Journal

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]


def call(
    key: str, *, attempt: int = 0, task_id: str = "task-a", args: str = '{"to": "ada"}'
) -> EffectCall:
    return EffectCall(
        turn_id="t1",
        attempt=attempt,
        key=key,
        name="send_email",
        args_json=args,
        policy="park",
        task_id=task_id,
        checkpoint_id="cp-1",
        call_index=0,
    )


def ledger(journal: Journal) -> dict[str, EffectRecord]:
    rows = effects.list_effects(journal.db.read_conn(), "t1", 0, 100)
    return {row.effect_key: row for row in rows}


async def begin(journal: Journal, effect: EffectCall, *, intent: bool = True) -> tuple[str, str]:
    """(answer, the key the call runs or ran under)."""
    answer, row = await journal.write(lambda tx: effects.begin(tx, effect, record_intent=intent))
    return answer, row.effect_key


async def record(journal: Journal, effect: EffectCall, key: str, outcome: str) -> EffectRecord:
    return await journal.write(lambda tx: effects.record(tx, effect, key, EFFECT_DONE, outcome))


async def test_a_recorded_outcome_is_returned_not_run_again(journal: Journal) -> None:
    await journal.start("t1", "th1")
    assert await begin(journal, call("k1")) == (effects.RUN, "k1")
    await record(journal, call("k1"), "k1", '"sent"')
    await journal.redrive("t1")
    # The re-executed task makes the same call: the ledger answers with its outcome.
    answer, row = await journal.write(
        lambda tx: effects.begin(tx, call("k1", attempt=1), record_intent=True)
    )
    assert answer == effects.RECORDED
    assert (row.state, row.outcome_json) == (EFFECT_DONE, '"sent"')
    assert list(ledger(journal)) == ["k1"]  # no second row, no new intent


async def test_an_intent_without_an_outcome_is_uncertain(journal: Journal) -> None:
    await journal.start("t1", "th1")
    assert await begin(journal, call("k1")) == (effects.RUN, "k1")
    await journal.redrive("t1")  # died between the intent and the outcome
    assert await begin(journal, call("k1", attempt=1)) == (effects.UNCERTAIN, "k1")
    assert ledger(journal)["k1"].state == EFFECT_INTENT


async def test_a_call_without_an_intent_leaves_no_row_until_its_outcome(journal: Journal) -> None:
    await journal.start("t1", "th1")
    assert await begin(journal, call("k1"), intent=False) == (effects.RUN, "k1")
    assert ledger(journal) == {}
    await journal.redrive("t1")  # nothing recorded: the next execution runs it again
    assert await begin(journal, call("k1", attempt=1), intent=False) == (effects.RUN, "k1")


async def test_other_arguments_supersede_the_recorded_call_under_a_new_key(
    journal: Journal,
) -> None:
    await journal.start("t1", "th1")
    await begin(journal, call("k1"))
    await record(journal, call("k1"), "k1", '"sent"')
    await journal.redrive("t1")
    again = call("k1", attempt=1, args='{"to": "grace"}')
    assert await begin(journal, again) == (effects.RUN, "k1~1")
    rows = ledger(journal)
    assert rows["k1"].state == EFFECT_SUPERSEDED
    assert "with other arguments" in rows["k1"].detail
    assert rows["k1~1"].state == EFFECT_INTENT


async def test_an_outcome_is_recorded_once(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await begin(journal, call("k1"))
    first = await record(journal, call("k1"), "k1", '"sent"')
    assert await record(journal, call("k1"), "k1", '"sent"') == first  # a retried record
    with pytest.raises(WrongState, match="an outcome is recorded once"):
        await record(journal, call("k1"), "k1", '"sent twice"')
    assert ledger(journal)["k1"].outcome_json == '"sent"'


async def test_a_stale_attempt_neither_begins_nor_records(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await begin(journal, call("k1"))
    await journal.redrive("t1")
    with pytest.raises(StaleAttempt):
        await record(journal, call("k1"), "k1", '"sent"')
    with pytest.raises(StaleAttempt):
        await begin(journal, call("k2"))
    rows = ledger(journal)
    assert list(rows) == ["k1"]
    assert rows["k1"].state == EFFECT_INTENT


async def test_settle_supersedes_the_tasks_effects_its_execution_did_not_make(
    journal: Journal,
) -> None:
    await journal.start("t1", "th1")
    for key, task in (("k1", "task-a"), ("k2", "task-a"), ("k3", "task-b")):
        await begin(journal, call(key, task_id=task))
        await record(journal, call(key, task_id=task), key, '"ok"')
    turn = journal.turn("t1")
    # task-a's writes, from an execution that made k1 only.
    count = await journal.write(lambda tx: effects.settle(tx, turn, "task-a", {"k1"}))
    assert count == 1
    rows = ledger(journal)
    assert (rows["k1"].state, rows["k2"].state, rows["k3"].state) == (
        EFFECT_DONE,
        EFFECT_SUPERSEDED,
        EFFECT_DONE,  # another task's effect is not this execution's to settle
    )
    assert "not made again" in rows["k2"].detail
    # Settling again changes nothing.
    assert await journal.write(lambda tx: effects.settle(tx, turn, "task-a", {"k1"})) == 0


async def test_a_tasks_fenced_writes_settle_it_unless_they_are_not_its_result(
    journal: Journal,
) -> None:
    await journal.start("t1", "th1")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await begin(journal, call("k1"))
    # The task raised (its writes are its error): k1 is not settled.
    await journal.task_writes(
        "th1", "cp-1", "task-a", Fence("t1", 0), frozenset(), channel="__error__"
    )
    assert ledger(journal)["k1"].state == EFFECT_INTENT
    # A client that says nothing about effects settles nothing either.
    await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), None)
    assert ledger(journal)["k1"].state == EFFECT_INTENT
    # The task's result, from an execution that made no effect: k1 is superseded.
    await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), frozenset())
    assert ledger(journal)["k1"].state == EFFECT_SUPERSEDED


async def test_the_next_checkpoint_announces_superseded_effects_before_its_boundary(
    journal: Journal,
) -> None:
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await begin(journal, call("k1"))
    await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), frozenset())
    await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    events = transitions.load_events(journal.db.read_conn(), "t1", 0, 100)
    assert [e.type for e in events] == ["step", effects.SUPERSEDED_EVENT]
    assert json.loads(events[1].data_json)["key"] == "k1"
    # The announcement is inside the checkpoint's boundary: no rewind takes it back.
    assert journal.boundary("t1") == ("cp-2", 2)
    assert ledger(journal)["k1"].announced == 1
    # Announced once: the checkpoint after appends nothing.
    await journal.checkpoint("th1", "cp-3", Fence("t1", 0))
    assert journal.turn("t1").last_seq == 2


class LedgerReads:
    """A transaction that counts the statements its operation sent to the ledger."""

    def __init__(self, tx: Tx) -> None:
        self._tx = tx
        self.statements = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if "main.effects" in sql:
            self.statements += 1
        return self._tx.execute(sql, params)


async def ledger_statements(journal: Journal, write: checkpoints.CheckpointWrite) -> int:
    def counted(tx: Tx) -> int:
        reads = LedgerReads(tx)
        checkpoints.write(cast(Tx, reads), write, POLICY)
        return reads.statements

    return await journal.write(counted)


async def test_checkpoint_writes_look_at_the_ledger_only_for_what_the_turns_row_says_it_holds(
    journal: Journal,
) -> None:
    # Decision 510: a task's writes read its live effects, and a checkpoint the
    # superseded ones to announce, only when the turn's row says there may be some.
    await journal.start("t1", "th1")
    writes = checkpoints.CheckpointWrite(
        WritesPut("th1", "", "cp-1", "task-a", "", [(0, "messages", "json", b'"x"')], False),
        Fence("t1", 0),
        frozenset(),
    )
    assert await ledger_statements(journal, writes) == 0
    put = checkpoints.CheckpointWrite(journal.put("th1", "cp-1"), Fence("t1", 0))
    assert await ledger_statements(journal, put) == 0
    assert journal.turn("t1").effects == 0

    await begin(journal, call("k1"))
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE
    # The task's writes from an execution that did not make k1: read, superseded.
    assert await ledger_statements(journal, writes) == 2
    assert ledger(journal)["k1"].state == EFFECT_SUPERSEDED
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE | effects.EFFECTS_UNANNOUNCED
    # The next checkpoint reads and announces it; the one after reads nothing.
    put = checkpoints.CheckpointWrite(journal.put("th1", "cp-2"), Fence("t1", 0))
    assert await ledger_statements(journal, put) == 2
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE
    put = checkpoints.CheckpointWrite(journal.put("th1", "cp-3"), Fence("t1", 0))
    assert await ledger_statements(journal, put) == 0
    events = transitions.load_events(journal.db.read_conn(), "t1", 0, 100)
    assert [e.type for e in events] == [effects.SUPERSEDED_EVENT]
