"""RemoteSaver across process deaths.

A 4-node linear graph (tests/agents/saver_four_steps.py) runs in a real subprocess
through RemoteSaver with ``durability="sync"``, against the service as a real
subprocess too (``ServiceProcess``):

- SIGKILLed while step3 runs, a new process's ``invoke(None)`` re-runs step3 and
  step4 only; also with the service SIGKILLed and restarted on the same data dir and
  port between the crash and the resume;
- a thread parked by ``interrupt()`` in one process is resumed with
  ``Command(resume=...)`` by a fresh one; while parked, stock SqliteSaver on
  sessions.db sees the interrupt as a pending write;
- LangGraph issue #8039: SIGKILLed between step3's writes and the checkpoint after
  it, in either order, step3 is replayed on resume, never run again (decision 253).

Each node appends its name to a side file (fsynced), so the tests count executions.
Nothing is mocked and nothing sleeps: the tests wait on lines the processes print.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any
from uuid import uuid4

import pytest
from langgraph.checkpoint.serde.types import INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import StateSnapshot
from turnkeeper.agent.saver import RemoteSaver, durable_config

from tests.agents.saver_four_steps import PAYLOAD, QUESTION, build_graph
from tests.support.forkserver import ForkedProcess
from tests.support.procs import ServiceProcess, signal_child, spawn_python

# A bound on a hang, not on speed: a test starts the service and two or three graph
# processes (23 s of its then 60 on the loaded two cores; one timed out in a loaded
# CI run with nothing hung). The suite's default.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCRIPT = Path(__file__).resolve().parents[1] / "agents" / "saver_four_steps.py"


class GraphProcess:
    """One run of the graph script; stdout is read line by line, stderr goes to a
    file shown when something goes wrong."""

    def __init__(self, proc: asyncio.subprocess.Process | ForkedProcess, stderr_path: Path) -> None:
        self.proc = proc
        self.stderr_path = stderr_path
        self.lines: list[str] = []

    @classmethod
    async def spawn(
        cls,
        tmp_path: Path,
        address: str,
        thread: str,
        *args: str,
        step3: str = "plain",
        api: str = "sync",
    ) -> GraphProcess:
        stderr_path = tmp_path / f"graph-{uuid4().hex[:8]}.stderr"
        stderr = _open_for_writing(stderr_path)
        try:
            child = await spawn_python(
                str(SCRIPT),
                "--address",
                address,
                "--thread",
                thread,
                "--side-file",
                str(side_file(tmp_path)),
                "--step3",
                step3,
                "--api",
                api,
                *args,
                env=dict(os.environ),
                stderr=stderr,
            )
        finally:
            stderr.close()
        return cls(child.proc, stderr_path)

    def output(self) -> str:
        return "stdout:\n" + "\n".join(self.lines) + "\nstderr:\n" + _read(self.stderr_path)

    async def line(self, prefix: str) -> str:
        """The next stdout line starting with ``prefix``."""
        assert self.proc.stdout is not None
        while True:
            # No deadline: the line is the event, an exit ends the output at once.
            raw = await self.proc.stdout.readline()
            if not raw:
                await self.proc.wait()
                raise AssertionError(
                    f"exited {self.proc.returncode} before {prefix!r}\n{self.output()}"
                )
            line = raw.decode().rstrip("\n")
            self.lines.append(line)
            if line.startswith(prefix):
                return line

    async def result(self) -> dict[str, Any]:
        """The run's ``result`` line, after a clean exit."""
        line = await self.line("result ")
        code = await self.proc.wait()
        assert code == 0, self.output()
        value: dict[str, Any] = json.loads(line.removeprefix("result "))
        return value

    async def kill(self) -> int:
        """SIGKILL (if still running) and reap."""
        signal_child(self.proc, signal.SIGKILL)
        return await self.proc.wait()


def _open_for_writing(path: Path) -> IO[bytes]:
    return path.open("wb")


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def side_file(tmp_path: Path) -> Path:
    return tmp_path / "side.txt"


def runs(tmp_path: Path) -> list[str]:
    """The side file's lines: one per node execution (plus step3's resume note)."""
    return _read(side_file(tmp_path)).splitlines()


@asynccontextmanager
async def service_process(data_dir: Path) -> AsyncIterator[ServiceProcess]:
    service = ServiceProcess(data_dir)
    service.start()
    try:
        yield service
    finally:
        service.kill()


async def state_of(address: str, thread: str, tmp_path: Path) -> list[StateSnapshot]:
    """The thread's history, newest first, read through RemoteSaver from here."""
    async with RemoteSaver(address) as saver:
        graph = build_graph(saver, str(side_file(tmp_path)))
        return [s async for s in graph.aget_state_history(durable_config(thread))]


def steps(history: list[StateSnapshot]) -> list[int]:
    return [s.metadata["step"] if s.metadata else -99 for s in history]


@pytest.mark.parametrize("kill_service", [False, True], ids=["executor", "executor+service"])
async def test_sigkill_in_step3_then_invoke_none_runs_only_step3_and_step4(
    tmp_path: Path, kill_service: bool
) -> None:
    thread = f"crash-{uuid4().hex[:8]}"
    async with service_process(tmp_path) as service:
        address = service.address
        first = await GraphProcess.spawn(tmp_path, address, thread, "start", step3="block")
        try:
            await first.line("step3 running")
            assert runs(tmp_path) == ["step1", "step2", "step3"]
        finally:
            code = await first.kill()
        assert code == -signal.SIGKILL, first.output()

        if kill_service:
            service.kill()
            # Same data dir, same port: the new executor dials the old address.
            assert service.start() == address

        # What the crash left: the checkpoint after step2, step3 next.
        parked = await state_of(address, thread, tmp_path)
        assert parked, "no checkpoint survived the crash"
        assert parked[0].next == ("step3",)
        assert parked[0].values == {"log": ["in", "step1", "step2"], "payload": PAYLOAD}
        assert steps(parked) == [2, 1, 0, -1]

        second = await GraphProcess.spawn(tmp_path, address, thread, "continue")
        result = await second.result()

        assert result == {
            "log": ["in", "step1", "step2", "step3", "step4"],
            "payload_len": len(PAYLOAD),
            "interrupts": [],
        }
        # steps 1 and 2 once; step3 twice (the killed run and the resume); step4 once.
        assert runs(tmp_path) == ["step1", "step2", "step3", "step3", "step4"]
        history = await state_of(address, thread, tmp_path)
        assert history[0].next == ()
        assert history[0].values == {
            "log": ["in", "step1", "step2", "step3", "step4"],
            "payload": PAYLOAD,
        }
        # One checkpoint per step: nothing before step3 was written twice.
        assert steps(history) == [4, 3, 2, 1, 0, -1]


def _parked_in_sessions_db(sessions_db: Path, thread: str, tmp_path: Path) -> tuple[Any, ...]:
    """What stock SqliteSaver sees on the service's live sessions.db (WAL)."""
    with SqliteSaver.from_conn_string(str(sessions_db)) as reference:
        latest = reference.get_tuple(durable_config(thread))
        assert latest is not None
        interrupt_writes = [
            value for _, channel, value in latest.pending_writes or [] if channel == INTERRUPT
        ]
        state = build_graph(reference, str(side_file(tmp_path))).get_state(durable_config(thread))
        return (
            [[i.value for i in w] for w in interrupt_writes],
            state.next,
            [i.value for i in state.interrupts],
        )


async def test_interrupt_then_command_resume_from_a_fresh_process(tmp_path: Path) -> None:
    thread = f"park-{uuid4().hex[:8]}"
    question = {"question": QUESTION, "seen": ["in", "step1", "step2"]}
    answer = {"approved": True, "by": "zoë", "n": 3}
    async with service_process(tmp_path) as service:
        address = service.address

        # Process A runs until the interrupt and exits.
        first = await GraphProcess.spawn(tmp_path, address, thread, "start", step3="interrupt")
        assert await first.result() == {
            "log": ["in", "step1", "step2"],
            "payload_len": len(PAYLOAD),
            "interrupts": [question],
        }

        # Parked, with both processes of this test's graph gone: through the service...
        parked = await state_of(address, thread, tmp_path)
        assert parked[0].next == ("step3",)
        assert [i.value for i in parked[0].interrupts] == [question]
        # ...and for stock SqliteSaver on the service's file.
        assert await asyncio.to_thread(
            _parked_in_sessions_db, tmp_path / "sessions.db", thread, tmp_path
        ) == ([[question]], ("step3",), [question])

        # Process B, fresh, resumes with Command(resume=...) on the async path.
        second = await GraphProcess.spawn(
            tmp_path,
            address,
            thread,
            "answer",
            json.dumps(answer),
            step3="interrupt",
            api="async",
        )
        result = await second.result()

        answered = json.dumps(answer, sort_keys=True)
        assert result == {
            "log": ["in", "step1", "step2", f"step3:{answered}", "step4"],
            "payload_len": len(PAYLOAD),
            "interrupts": [],
        }
        # step3 runs again on resume (LangGraph re-enters the interrupted node); the
        # resume value reached it once; nothing else re-ran.
        assert runs(tmp_path) == [
            "step1",
            "step2",
            "step3",
            "step3",
            f"step3 resumed with {answered}",
            "step4",
        ]
        history = await state_of(address, thread, tmp_path)
        assert history[0].next == ()
        assert history[0].interrupts == ()


# Transport x order x api, pairwise in the default run (decision 710): each
# transport, each order and each api runs, and each pair of them (unary with
# writes-first, stream with async, ...) once. The four other combinations add no code
# path of their own (the transport carries the saver's calls, the order is the
# saver's, the api is LangGraph's call into the saver) and run with `pytest --full`.
CROSSED = [
    ("unary", "writes-first", "sync"),
    ("unary", "checkpoint-first", "async"),
    ("stream", "writes-first", "async"),
    ("stream", "checkpoint-first", "sync"),
]


@pytest.mark.parametrize(
    ("saver_transport", "order", "api"),
    [
        *(pytest.param(*case, id="-".join(case)) for case in CROSSED),
        *(
            pytest.param(t, o, a, id=f"{t}-{o}-{a}", marks=pytest.mark.full)
            for t in ("unary", "stream")
            for o in ("writes-first", "checkpoint-first")
            for a in ("sync", "async")
            if (t, o, a) not in CROSSED
        ),
    ],
    indirect=["saver_transport"],
)
async def test_a_completed_task_is_replayed_never_re_executed_whichever_store_lands_first(
    tmp_path: Path, saver_transport: str, order: str, api: str
) -> None:
    """LangGraph issue #8039: under ``durability="sync"`` a finished task's writes and
    the checkpoint after its step go to a thread pool in no enforced order, so with
    a saver that stores them as they come, whether a crash between them replays the
    task or re-runs it depends on the scheduler. Both orders are forced here, with a
    SIGKILL between the two stores: under RemoteSaver step3, once finished, never
    runs again. Its writes stored first, the resume replays them onto the
    checkpoint after step2; the checkpoint stored first, the resume starts after it."""
    thread = f"order-{order}-{api}-{uuid4().hex[:6]}"
    async with service_process(tmp_path) as service:
        first = await GraphProcess.spawn(
            tmp_path, service.address, thread, "--crash-between", order, "start", api=api
        )
        code = await first.proc.wait()
        assert code == -signal.SIGKILL, first.output()
        killed = "before the checkpoint" if order == "writes-first" else "before the writes"
        assert runs(tmp_path) == ["step1", "step2", "step3", f"killed {killed}"]

        # What the crash left: step3's writes pending on the checkpoint after step2,
        # or the checkpoint after step3.
        left = await state_of(service.address, thread, tmp_path)
        if order == "writes-first":
            assert left[0].next == ("step3",)
            assert left[0].tasks[0].result == {"log": ["step3"]}
        else:
            assert left[0].next == ("step4",)

        second = await GraphProcess.spawn(tmp_path, service.address, thread, "continue", api=api)
        result = await second.result()

    assert result["log"] == ["in", "step1", "step2", "step3", "step4"]
    # step3 ran once, in the process that was killed: replayed, not re-executed.
    assert runs(tmp_path) == ["step1", "step2", "step3", f"killed {killed}", "step4"]
