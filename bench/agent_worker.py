"""One agent process of the many-agents benchmark (bench/agents.py).

`python -m bench.agent_worker ADDRESS TURNS CALLERS`: warms up, prints `ready`,
waits for a line on stdin, runs TURNS async turns through RemoteSaver with CALLERS
at once, and prints its wall and CPU seconds as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from turnkeeper.agent.saver import RemoteSaver

from bench import turns


async def _run(address: str, count: int, callers: int) -> dict[str, float]:
    async with RemoteSaver(address) as saver:
        turn = turns.async_graph_turn(turns.build(saver))
        await asyncio.gather(*(turn() for _ in range(callers)))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu = time.process_time()
        rate = await turns.async_concurrent(turn, count, callers)
        return {"seconds": count / rate, "cpu": time.process_time() - cpu}


def main() -> None:
    address, count, callers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(asyncio.run(_run(address, count, callers))), flush=True)


if __name__ == "__main__":
    main()
