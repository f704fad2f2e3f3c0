"""One graph process of the PostgreSQL section's multi-process rows
(bench/postgres_section.py).

`python -m bench.postgres_worker SIDE TARGET TURNS CALLERS`: SIDE is `turnkeeper`
(TARGET a service address: RemoteSaver on its checkpoint stream) or `stock` (TARGET
a database URL: AsyncPostgresSaver on a pool of its own). Warms up with one turn per
caller, prints `ready`, waits for a line on stdin, runs TURNS async turns with
CALLERS tasks on its event loop, and prints its wall and CPU seconds as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from turnkeeper.agent.saver import RemoteSaver

from bench import turns

# The pool LangGraph's Postgres how-to gives AsyncPostgresSaver (decision 261).
STOCK_POOL_SIZE = 20


@asynccontextmanager
async def stock_saver(database_url: str) -> AsyncIterator[object]:
    """AsyncPostgresSaver as langgraph-checkpoint-postgres's docs set it up: an
    AsyncConnectionPool with autocommit, no prepared statements and dict rows, and
    `setup()` run once."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncConnectionPool(
        database_url,
        max_size=STOCK_POOL_SIZE,
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        open=False,
    ) as pool:
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        await saver.setup()
        yield saver


@asynccontextmanager
async def side_turn(side: str, target: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """The async 4-step turn on one side's checkpointer."""
    if side == "turnkeeper":
        async with RemoteSaver(target, stream=True) as saver:
            yield turns.async_graph_turn(turns.build(saver))
    elif side == "stock":
        async with stock_saver(target) as stock:
            yield turns.async_graph_turn(turns.build(stock))  # type: ignore[arg-type]
    else:
        raise ValueError(f"unknown side {side!r}: turnkeeper or stock")


async def _run(side: str, target: str, count: int, callers: int) -> dict[str, float]:
    async with side_turn(side, target) as turn:
        await asyncio.gather(*(turn() for _ in range(callers)))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu = time.process_time()
        seconds = await turns.async_callers(turn, count, callers)
        return {"seconds": seconds, "cpu": time.process_time() - cpu}


def main() -> None:
    side, target, count, callers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(asyncio.run(_run(side, target, count, callers))), flush=True)


if __name__ == "__main__":
    main()
