"""PostgreSQL's writer sends an operation's unread writes as one statement (decision
610, store/postgres_riders.py): a remembered turn's append, checkpoint and task's
writes are each one statement, the group's notification riding on the last; what
they store, the outbox's order and the refusals are those of one statement each.
A run's record rides with its start's notification (decision 660), a finish reads its
row once and its queue in one look (661), and a started turn is remembered, a handed
one checked and taken by its first write's statement (662)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from turnkeeper_server.errors import StaleAttempt
from turnkeeper_server.journal import containment, lifecycle, start, transitions
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.records import HANDED, REOFFERED, Fence
from turnkeeper_server.store import Tx

from tests.journal.conftest import POLICY, REPLICA, Journal, opened_store
from tests.journal.test_turn_cache import append, events
from tests.service.storage.test_group_commit import in_one_group
from tests.support.postgres import writer_statements

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(60)]


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch, database_url: str) -> list[str]:
    """The statements the writer's connection was given (BEGIN and COMMIT aside), on
    this test's database alone."""
    return writer_statements(monkeypatch, database_url)


async def test_a_remembered_turns_writes_are_one_statement_each(
    journal: Journal, statements: list[str]
) -> None:
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")  # remembered from here
    counts, first = [], ""

    def announced(tx: Tx) -> int:
        tx.announce(["t1"])  # as the engine's append does
        return transitions.append_events(
            tx, turn_id="t1", attempt=0, events=[(2, "token", "{}")], policy=POLICY
        )

    for write in (
        lambda: journal.write(announced),
        lambda: journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), None),
        lambda: journal.checkpoint("th1", "cp-1", Fence("t1", 0)),
    ):
        del statements[:]
        await write()
        counts.append(len(statements))
        first = first or statements[0]
    # main: the check with its move, the events, the outbox rows, the notification;
    # the check and the task's writes; the check and the checkpoint.
    assert counts == [1, 1, 1]
    assert "pg_notify" in first  # the append's announcement rode on it
    assert "SELECT * FROM unnest" not in first  # one row stays VALUES: cheaper (780)
    assert events(journal, "t1") == [(1, 0, "step"), (2, 0, "token")]
    assert journal.boundary("t1") == ("cp-1", 2)


async def test_many_events_keep_their_outbox_rows_in_seq_order(
    journal: Journal, statements: list[str]
) -> None:
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    del statements[:]
    # 300 rows go as one INSERT a table, of one array a column (store/rows.py,
    # decision 780): the check, the events and the outbox rows are one statement,
    # and the outbox's ids follow the messages.
    assert await append(journal, "t1", 0, 2, *["token"] * 300) == 301
    assert len(statements) == 1  # main: chunks of 256, 32, 8 and 4 a table, 7 statements
    payloads = journal.db.read_conn().execute("SELECT payload FROM outbox ORDER BY id").fetchall()
    assert [json.loads(bytes(p[0]))["seq"] for p in payloads] == list(range(1, 302))
    stored = transitions.load_events(journal.db.read_conn(), "t1", 0, 400)
    assert [(e.seq, e.type) for e in stored] == [
        (1, "step"),
        *((n, "token") for n in range(2, 302)),
    ]


async def test_a_refusal_reasoned_from_a_stale_record_waits_for_its_check(
    journal: Journal, tmp_path: Path, database_url: str
) -> None:
    # The record says last_seq 1; another replica appended 2. An append of 3 is a gap
    # to the record: that refusal is given only once the record's held check has
    # gone out and passed. It fails, and the group runs again on the row: accepted.
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    with opened_store(tmp_path, database_url, "other-") as db:
        await append(Journal(db), "t1", 0, 2, "token")
    assert await append(journal, "t1", 0, 3, "step") == 3
    assert [seq for seq, _, _ in events(journal, "t1")] == [1, 2, 3]


async def test_a_stale_heartbeat_leaves_its_group_running(journal: Journal) -> None:
    # Decision 670: a heartbeat refused after its row's read (an agent's of a turn
    # re-driven or just finished) only read; the group's other operations run once
    # and commit, not rolled back and run again without it as on main.
    await journal.start("t1", "th1")
    await journal.start("t2", "th2")
    await journal.redrive("t1")  # attempt 0 is stale now
    runs: list[str] = []

    def beat(tx: Tx) -> float:
        runs.append("beat")
        return transitions.heartbeat(
            tx, turn_id="t1", attempt=0, replica=REPLICA[0], incarnation=REPLICA[1], policy=POLICY
        )

    def step(seq: int) -> Callable[[Tx], int]:
        def op(tx: Tx) -> int:
            runs.append(f"step {seq}")
            return transitions.append_events(
                tx, turn_id="t2", attempt=0, events=[(seq, "step", "{}")], policy=POLICY
            )

        return op

    done = await in_one_group(journal.db, [step(1), beat, step(2)])
    assert isinstance(done[1], StaleAttempt)
    assert (done[0], done[2]) == (1, 2)
    assert runs == ["step 1", "beat", "step 2"]  # main: step 1 ran again after the beat
    assert [seq for seq, _, _ in events(journal, "t2")] == [1, 2]


async def test_a_finish_reads_its_row_once_and_its_queue_in_one_statement(
    journal: Journal, statements: list[str]
) -> None:
    # Decision 662: the finish answers the row it locked as its update left it (no
    # read after the update), and the thread's queue is one look (no live turn,
    # else the oldest queued), not a look for a live turn and then for a queued one.
    await journal.start("t1", "th1")
    await append(journal, "t1", 0, 1, "step")
    del statements[:]

    def finish(tx: Tx) -> tuple[transitions.Closed, lifecycle.Ended]:
        closed = transitions.finish_turn(
            tx, turn_id="t1", attempt=0, failed=False, error="", events=[], policy=POLICY
        )
        return closed, lifecycle.after_end(tx, closed.turn, POLICY)

    closed, ended = await journal.write(finish)
    reads = [s for s in statements if s.startswith("SELECT") and "pg_notify" not in s]
    # main: the lock, the read after the update, the live turn's look, the queue's.
    assert len(reads) == 2
    # Decision 781: the terminal event is in the rows of the finish's events, one
    # INSERT a table, riding as one statement: the lock, the rows, the webhook's
    # update, the turn's, the queue's look.
    assert len(statements) == 5  # main: 6, the terminal's INSERT and outbox row alone
    assert "INSERT INTO events" in statements[1] and "INSERT INTO outbox" in statements[1]
    assert events(journal, "t1")[-1][2] == "turn.done"
    assert ended.promoted is None
    assert closed.turn == journal.turn("t1")
    # A turn queued behind the next one is promoted by that one's finish.
    await journal.start("t2", "th1")
    queued = start.StartRequest(
        turn_id="t3", thread_id="th1", agent="agent", input_json="{}", strategy="enqueue"
    )
    assert (await journal.write(lambda tx: start.start_turn(tx, queued, POLICY))).turn.state == (
        "QUEUED"
    )

    def finish_t2(tx: Tx) -> lifecycle.Ended:
        closed = transitions.finish_turn(
            tx, turn_id="t2", attempt=0, failed=True, error="x", events=[], policy=POLICY
        )
        assert closed.turn.state == "FAILED"
        return lifecycle.after_end(tx, closed.turn, POLICY)

    promoted = (await journal.write(finish_t2)).promoted
    assert promoted is not None and promoted.turn_id == "t3" and promoted.state == "RUNNING"


async def _start_handed(journal: Journal) -> None:
    """A turn started claimed for a replica, its claim riding the hand-off (590)."""
    request = start.StartRequest(
        turn_id="t1",
        thread_id="th1",
        agent="agent",
        input_json="{}",
        replica=REPLICA[0],
        incarnation=REPLICA[1],
        handed=True,
    )
    started = await journal.write(lambda tx: start.start_turn(tx, request, POLICY))
    assert started.turn.handed == HANDED


async def test_a_handed_turns_first_write_is_checked_and_taken_in_one_statement(
    journal: Journal, statements: list[str]
) -> None:
    # Decision 662: the start remembers the row it inserted; the owner's first fenced
    # write (the input checkpoint) sends its check and the take as one statement
    # with the put, where it read the row, then cleared the mark, then put.
    await _start_handed(journal)
    del statements[:]
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    assert len(statements) == 1  # 3 on main
    assert journal.turn("t1").handed == 0
    # From then on its appends are the remembered turn's one statement each.
    del statements[:]
    await append(journal, "t1", 0, 1, "step")
    assert len(statements) == 1


async def test_a_handed_turn_offered_again_refuses_the_remembered_write(
    journal: Journal, tmp_path: Path, database_url: str
) -> None:
    # Another replica offers the untaken hand-off again (REOFFERED, same attempt):
    # the write of the execution it was handed to, checked against the record its
    # start left, fails its check and is refused from the row, as it was from a read.
    await _start_handed(journal)
    with opened_store(tmp_path, database_url, "other-") as db:
        turn = Journal(db).turn("t1")
        await db.write(lambda tx: containment.reoffer(tx, turn, POLICY))
        assert Journal(db).turn("t1").handed == REOFFERED
    with pytest.raises(StaleAttempt, match="offered again"):
        await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    assert journal.turn("t1").handed == REOFFERED


async def test_a_runs_record_rides_with_its_starts_notification(
    journal: Journal, statements: list[str]
) -> None:
    # Decision 660: the record's INSERT (written in the turn's commit, decision 700)
    # is an unread write, sent with the group's notification as one statement.
    request = start.StartRequest(
        turn_id="t1",
        thread_id="th1",
        agent="agent",
        input_json="{}",
        run=RunRecord("t1", {"graph_id": "agent"}, {"input": None}, "reject"),
    )

    def started(tx: Tx) -> start.Started:
        tx.announce(["t1"])  # as the engine's start does
        return start.start_turn(tx, request, POLICY)

    await journal.write(started)
    tail = [s for s in statements if "langgraph_runs" in s or "pg_notify" in s]
    assert len(tail) == 1  # the INSERT, then the notification, on main
    assert "langgraph_runs" in tail[0] and "pg_notify" in tail[0]
    runs_of = journal.db.read_conn().execute("SELECT metadata FROM langgraph_runs").fetchall()
    assert [json.loads(row[0]) for row in runs_of] == [{"graph_id": "agent"}]
