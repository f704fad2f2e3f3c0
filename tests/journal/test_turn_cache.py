"""PostgreSQL's writer remembers the turns it wrote (decision 470): an append or a
checkpoint of a turn it wrote last reads no turn row mid-group; the record is checked
by a statement sent with the write, and a stale one (another replica wrote the turn,
re-drove it) rolls the group back, which runs again reading the row: the write is
then accepted or refused exactly as on a fresh read, and nothing of the first run
is left."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from turnkeeper_server.errors import StaleAttempt, WrongState
from turnkeeper_server.journal import effects, transitions
from turnkeeper_server.records import EFFECT_SUPERSEDED, EffectCall, Fence, TurnRecord
from turnkeeper_server.store import Store, Tx
from turnkeeper_server.store.postgres import PgTx, PostgresDatabase

from tests.journal.conftest import POLICY, REPLICA, Journal, opened_store
from tests.support.postgres import database_of

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(60)]


@pytest.fixture
async def other(tmp_path: Path, database_url: str) -> AsyncIterator[Journal]:
    """A second replica's store on the same database."""
    with opened_store(tmp_path, database_url, "other-") as db:
        yield Journal(db)


@pytest.fixture
def row_reads(monkeypatch: pytest.MonkeyPatch, database_url: str) -> list[str]:
    """The turns whose row an operation read with a lock (`lock_turn`), on this
    test's database alone (`database_of`)."""
    read: list[str] = []
    real = transitions.lock_turn
    ours = database_of(database_url)

    def counted(tx: Tx, turn_id: str) -> TurnRecord:
        if isinstance(tx, PgTx) and tx.raw.info.dbname == ours:
            read.append(turn_id)
        return real(tx, turn_id)

    monkeypatch.setattr(transitions, "lock_turn", counted)
    return read


def cached(journal: Journal) -> PostgresDatabase:
    assert isinstance(journal.db, PostgresDatabase)
    return journal.db


def events(journal: Journal, turn_id: str) -> list[tuple[int, int, str]]:
    return [
        (e.seq, e.attempt, e.type)
        for e in transitions.load_events(journal.db.read_conn(), turn_id, 0, 100)
    ]


def outbox_rows(journal: Journal) -> int:
    return int(journal.db.read_conn().execute("SELECT count(*) FROM outbox").fetchone()[0])


async def append(journal: Journal, turn_id: str, attempt: int, first: int, *types: str) -> int:
    batch = [(first + i, t, "{}") for i, t in enumerate(types)]
    return await journal.write(
        lambda tx: transitions.append_events(
            tx, turn_id=turn_id, attempt=attempt, events=batch, policy=POLICY
        )
    )


async def test_appends_and_checkpoints_of_a_turn_written_last_read_no_row(
    journal: Journal, row_reads: list[str]
) -> None:
    await journal.start("t1", "th1")
    assert await append(journal, "t1", 0, 1, "step") == 1
    assert row_reads == []  # the first too: its start remembered it (decision 662)
    assert await append(journal, "t1", 0, 2, "token", "token") == 3
    assert await journal.checkpoint("th1", "cp-1", Fence("t1", 0)) == "t1"
    assert await append(journal, "t1", 0, 4, "step") == 4
    assert row_reads == []
    assert journal.boundary("t1") == ("cp-1", 3)
    remembered = cached(journal).turn_cache.get("t1")
    assert remembered is not None and (remembered.attempts, remembered.last_seq) == (0, 4)
    assert remembered.input_json == ""  # what nobody relies on is not kept
    assert events(journal, "t1") == [
        (1, 0, "step"),
        (2, 0, "token"),
        (3, 0, "token"),
        (4, 0, "step"),
    ]


async def test_a_claimed_turns_first_append_reads_no_row(
    journal: Journal, row_reads: list[str]
) -> None:
    await journal.start("t1", "th1")
    await journal.write(
        lambda tx: transitions.claim_turn(
            tx,
            turn_id="t1",
            attempt=0,
            replica=REPLICA[0],
            incarnation=REPLICA[1],
            policy=POLICY,
        )
    )
    del row_reads[:]
    assert await append(journal, "t1", 0, 1, "step") == 1
    assert row_reads == []


async def test_a_cached_append_after_another_replica_appended_runs_again_on_the_row(
    journal: Journal, other: Journal, row_reads: list[str]
) -> None:
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    await append(journal, "t1", 0, 2, "step")  # remembered: last_seq 2
    await append(other, "t1", 0, 3, "token")
    del row_reads[:]
    # Reasoned from the record, seq 3 is the next; on the row it holds another event.
    with pytest.raises(WrongState, match="seq 3 already holds a different event"):
        await append(journal, "t1", 0, 3, "other")
    assert row_reads == ["t1"]  # run again, reading the row
    assert await append(journal, "t1", 0, 4, "step") == 4  # remembered: last_seq 4
    await append(other, "t1", 0, 5, "token")
    del row_reads[:]
    # Reasoned from the record, seq 6 leaves a gap: that refusal is not given; the
    # group runs again on the row and the append is accepted.
    assert await append(journal, "t1", 0, 6, "step") == 6
    assert row_reads == ["t1"]
    assert [seq_type[::2] for seq_type in events(journal, "t1")] == [
        (1, "step"),
        (2, "step"),
        (3, "token"),
        (4, "step"),
        (5, "token"),
        (6, "step"),
    ]
    assert transitions.require_turn(journal.db.read_conn(), "t1").last_seq == 6


async def test_a_zombie_is_refused_after_another_replica_re_drove_its_turn(
    journal: Journal, other: Journal
) -> None:
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await other.redrive("t1")  # attempt 1 now, on the other replica
    outbox = outbox_rows(journal)
    # This replica still remembers attempt 0 RUNNING at last_seq 1.
    assert cached(journal).turn_cache.get("t1") is not None
    with pytest.raises(StaleAttempt, match="attempt 0 was re-driven away"):
        await append(journal, "t1", 0, 2, "step")
    with pytest.raises(StaleAttempt, match="attempt 0 was re-driven away"):
        await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    assert events(journal, "t1") == [(1, 0, "step")]
    assert journal.boundary("t1") == ("cp-1", 1)
    assert outbox_rows(journal) == outbox
    # The current attempt writes on.
    assert await append(journal, "t1", 1, 2, "step") == 2


async def _one_group(journal: Journal, ops: list[Callable[[Tx], Any]]) -> list[object]:
    """`ops` as one group: the writer is held busy while they are queued."""
    release = threading.Event()
    db: Store = journal.db
    held = db.queue_write(lambda tx: release.wait(10))
    futures: list[Awaitable[Any]] = [db.queue_write(op) for op in ops]
    release.set()
    await held
    done: list[object] = await asyncio.gather(*futures, return_exceptions=True)
    return done


def appending(turn_id: str, attempt: int, seq: int, type_: str) -> Callable[[Tx], int]:
    return lambda tx: transitions.append_events(
        tx, turn_id=turn_id, attempt=attempt, events=[(seq, type_, "{}")], policy=POLICY
    )


async def test_a_group_with_a_stale_record_runs_again_and_leaves_nothing_half_written(
    journal: Journal, other: Journal
) -> None:
    await journal.start("t1", "th1")
    await journal.start("t2", "th2")
    await append(journal, "t1", 0, 1, "step")
    await append(journal, "t2", 0, 1, "step")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await other.redrive("t1")  # to attempt 1, its boundary at seq 1
    outbox = outbox_rows(journal)
    done = await _one_group(
        journal,
        [
            appending("t2", 0, 2, "before"),
            appending("t1", 0, 2, "zombie"),  # its record is stale: attempt 0
            appending("t2", 0, 3, "after"),
            appending("t1", 1, 2, "current"),
        ],
    )
    assert done[0] == 2 and done[2] == 3 and done[3] == 2, done
    assert isinstance(done[1], StaleAttempt), done[1]
    assert events(journal, "t2") == [(1, 0, "step"), (2, 0, "before"), (3, 0, "after")]
    assert events(journal, "t1") == [(1, 0, "step"), (2, 1, "current")]
    assert outbox_rows(journal) == outbox + 3  # each accepted event's message once
    # The records committed are the rows': the next appends read none and agree.
    assert await append(journal, "t2", 0, 4, "step") == 4
    assert await append(journal, "t1", 1, 3, "step") == 3


async def test_an_effect_begun_through_another_replica_is_settled_and_announced_here(
    journal: Journal, other: Journal, row_reads: list[str]
) -> None:
    # Decision 510: this writer's record says the turn's ledger holds nothing, so a
    # task's writes would read no effects; the effect another replica began changed
    # the row's `effects`, so the record's check fails and the writes run again on
    # the row, which settles (supersedes) it; the next checkpoint announces it.
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    del row_reads[:]
    call = EffectCall("t1", 0, "k1", "send", "{}", "park", "task-a", "cp-1", 0)
    await other.write(lambda tx: effects.begin(tx, call, record_intent=True))
    del row_reads[:]
    await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), frozenset())
    assert row_reads == ["t1"]  # the record was stale: the row was read
    (k1,) = effects.list_effects(journal.db.read_conn(), "t1", 0, 10)
    assert k1.state == EFFECT_SUPERSEDED
    await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    assert events(journal, "t1") == [(1, 0, "step"), (2, 0, effects.SUPERSEDED_EVENT)]


async def test_an_effect_a_replica_of_before_decision_510_wrote_still_fails_the_record(
    journal: Journal, other: Journal
) -> None:
    # That replica's code writes the ledger row and no bit of the turn's `effects`:
    # the database's trigger sets it, so this writer's record fails its check.
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    await other.write(
        lambda tx: tx.execute(
            "INSERT INTO main.effects (turn_id, effect_key, base_key, name, args_json, "
            "policy, state, attempt, task_id, checkpoint_id, call_index, created_at, "
            "updated_at) VALUES ('t1', 'k1', 'k1', 'send', '{}', 'park', 'INTENT', 0, "
            "'task-a', 'cp-1', 0, 1.0, 1.0)"
        )
    )
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE
    await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), frozenset())
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE | effects.EFFECTS_UNANNOUNCED
    await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    assert events(journal, "t1") == [(1, 0, "step"), (2, 0, effects.SUPERSEDED_EVENT)]
    assert journal.turn("t1").effects == effects.EFFECTS_LIVE


async def test_a_remembered_turns_append_checks_and_moves_its_row_in_one_statement(
    journal: Journal, other: Journal
) -> None:
    # Decision 511: the record's check and last_seq's move are one statement, sent
    # unawaited; a stale record still fails it and the append runs again on the row.
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")  # remembered from here

    def counted(tx: Tx) -> int:
        sent: list[str] = []
        real, real_send = tx.execute, tx.send

        def execute(sql: str, params: Any = ()) -> Any:
            sent.append(sql)
            return real(sql, params)

        def send(sql: str, params: Any = ()) -> None:
            sent.append(sql)
            real_send(sql, params)

        tx.execute = execute  # type: ignore[method-assign]
        tx.send = send  # type: ignore[method-assign]
        transitions.append_events(
            tx, turn_id="t1", attempt=0, events=[(2, "token", "{}")], policy=POLICY
        )
        return sum("main.turns" in sql for sql in sent)

    assert await journal.write(counted) == 1
    assert journal.turn("t1").last_seq == 2
    await append(other, "t1", 0, 3, "token")  # the record says 2; the row says 3
    assert await append(journal, "t1", 0, 4, "step") == 4
    assert [seq for seq, _, _ in events(journal, "t1")] == [1, 2, 3, 4]
