"""Whether a thread's ensure made it (journal/threads.py `ensure_made`): of two
transactions that ensure the same new thread at once, only the one whose insert
commits says so; a run's start skips reading the turns of a thread only then
(web/langgraph/run_start.py, decision 570). And a start that makes its thread in
its own transaction (journal/start.py, `StartRequest.new_thread`, decision 580)."""

from __future__ import annotations

import asyncio
from functools import partial

import pytest
from turnkeeper_server.engine.threads import Threads
from turnkeeper_server.errors import AlreadyExists
from turnkeeper_server.journal import start, transitions
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import RUNNING
from turnkeeper_server.store import Store

from tests.journal.conftest import POLICY, Journal

pytestmark = pytest.mark.both_backends


async def test_only_the_insert_that_made_the_thread_says_so(store: Store) -> None:
    threads = Threads(store)
    racing = await asyncio.gather(
        *(threads.ensure_made("th-race", {"n": n}, "alice") for n in range(4))
    )
    assert sorted(made for _, made in racing) == [False, False, False, True]
    maker = next(n for n, (_, made) in enumerate(racing) if made)
    # Every one of them got the thread the maker's insert wrote.
    assert {(r.thread_id, r.metadata["n"], r.owner) for r, _ in racing} == {
        ("th-race", maker, "alice")
    }
    again, made = await threads.ensure_made("th-race", {"n": 9})
    assert not made and again.metadata == {"n": maker}


def _on_new_thread(turn_id: str, thread_id: str) -> start.StartRequest:
    return start.StartRequest(
        turn_id=turn_id,
        thread_id=thread_id,
        agent="agent",
        input_json="{}",
        thread_owner="alice",
        new_thread=start.NewThread({"graph_id": "agent"}),
    )


async def test_a_start_makes_its_thread_in_its_own_transaction(journal: Journal) -> None:
    threads = Threads(journal.db)
    # Made with the turn: the thread's row (its owner, its metadata) and the turn.
    started = await journal.write(
        lambda tx: start.start_turn(tx, _on_new_thread("t-1", "th-new"), POLICY)
    )
    assert started.created and started.turn.state == RUNNING
    assert started.turn == journal.turn("t-1")
    made = await threads.get("th-new")
    assert made is not None and (made.owner, made.metadata) == ("alice", {"graph_id": "agent"})
    # A thread that has a row, or only turns, now: refused as made meanwhile, and
    # nothing of the start is written.
    await threads.create("th-row", {}, if_exists="raise")
    await journal.start("t-other", "th-turns")
    for thread_id in ("th-row", "th-turns"):
        with pytest.raises(start.ThreadMadeMeanwhile):
            await journal.write(
                partial(start.start_turn, request=_on_new_thread("t-2", thread_id), policy=POLICY)
            )
        assert transitions.load_turn(journal.db.read_conn(), "t-2") is None
    assert await threads.get("th-turns") == ThreadRecord(
        "th-turns", {}, journal.turn("t-other").created_at, journal.turn("t-other").updated_at
    )
    # A turn_id another thread's turn has: refused, and the thread's row goes with it.
    with pytest.raises(AlreadyExists):
        await journal.write(
            lambda tx: start.start_turn(tx, _on_new_thread("t-1", "th-lost"), POLICY)
        )
    assert await threads.get("th-lost") is None
