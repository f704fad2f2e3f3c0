"""Whether a thread's ensure made it (journal/threads.py `ensure_made`): of two
transactions that ensure the same new thread at once, only the one whose insert
commits says so; a run's start skips reading the turns of a thread only then
(web/langgraph/run_start.py, decision 570)."""

from __future__ import annotations

import asyncio

import pytest
from turnkeeper_server.engine.threads import Threads
from turnkeeper_server.store import Store

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
