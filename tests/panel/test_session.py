"""The agent session's retry rules (docs/architecture.md §8), one test per rule.

Real NATS, a real turnkeeper service, the production NATS transport and follower;
the agent is the in-test responder (tests/support/agent_responder.py), which runs
the real pipeline graph. Nothing is mocked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import nats
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, FollowOptions, TurnState
from turnkeeper.panel.session import AgentSession, ErrorKind, SessionBusy, SessionError
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agent_responder import PipelineResponder
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, unrenewed

FOLLOW = FollowOptions(idle_gap=0.2, call_timeout=1.0, reconnect_initial=0.02)
QUESTION = {"question": "What is a turn?", "id": "q1"}
STEPS = ["analyze", "plan", "generate"]


@dataclass
class Stack:
    nats_url: str
    service: TurnkeeperServer
    nc: Client
    client: AsyncTurnkeeperClient
    responders: list[PipelineResponder]

    def session(self, *, deadline: float = 30.0, **kwargs: object) -> AgentSession:
        options = dataclasses.replace(FOLLOW, deadline=deadline)
        transport = NatsAgentTransport(
            self.nc, "pipeline", client=self.client, timeout=2.0, follow_options=options
        )
        return AgentSession(transport, **kwargs)  # type: ignore[arg-type]

    async def responder(self, *, fail_once: Sequence[str] = ()) -> PipelineResponder:
        responder = PipelineResponder(self.nats_url, self.service.address, fail_once=fail_once)
        await responder.start()
        self.responders.append(responder)
        return responder


@pytest.fixture
async def stack(make_service: ServiceFactory, nats_server: NatsServer) -> AsyncIterator[Stack]:
    # Leases longer than any test: the responder does not heartbeat.
    service = await make_service(nats_url=nats_server.url, **unrenewed(claims=True))
    nc = await nats.connect(nats_server.url)
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as client:
        stack = Stack(nats_server.url, service, nc, client, [])
        try:
            yield stack
        finally:
            for responder in stack.responders:
                await responder.stop()
            await nc.close()


def outcome(session: AgentSession) -> tuple[TurnState | None, SessionError | None]:
    """(state, error): a function, so the type checker does not carry narrowing
    from before an await over to after it."""
    return session.state, session.error


def steps_of(session: AgentSession) -> list[str]:
    return [
        e.data["node"]
        for e in session.transcript.events
        if isinstance(e, Event) and e.type == "step"
    ]


def answer_of(session: AgentSession) -> str:
    finals = [e.data["answer"] for e in session.transcript.events if e.type == "final"]
    assert len(finals) == 1
    return str(finals[0])


async def test_a_run_goes_out_and_its_events_come_back(stack: Stack) -> None:
    responder = await stack.responder()
    frames: list[object] = []
    session = stack.session(on_frame=frames.append)
    assert await session.submit(QUESTION), session.error
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert steps_of(session) == STEPS
    assert answer_of(session).startswith("Answer: What is a turn")
    assert session.transcript.events[-1].type == "turn.done"
    assert len(frames) == len(session.transcript.events) + 1  # and the Concluded frame
    [create] = responder.creates()
    assert create == {
        "input": QUESTION,
        "thread_id": session.thread_id,
        "turn_id": session.turn_id,
        "background": True,
    }


async def test_retry_after_a_connection_refusal_resubmits_once(stack: Stack) -> None:
    session = stack.session()
    # No agent is listening: NATS answers "no responders", the request reached nobody.
    assert not await session.submit(QUESTION)
    assert session.error is not None and session.error.kind is ErrorKind.CONNECTION
    assert session.error.retryable
    assert session.last_payload == QUESTION
    assert session.turn_id is None

    responder = await stack.responder()
    assert await session.retry()
    assert session.error is None  # retry clears it at once
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    # What never went out goes out as it was: the same turn id, so an agent that got
    # it after all runs it once.
    [create] = responder.creates()
    assert (create["input"], create["turn_id"]) == (QUESTION, session.turn_id)


async def test_reload_resubmits_but_keeps_the_error_until_the_outcome(stack: Stack) -> None:
    session = stack.session()
    assert not await session.submit(QUESTION)
    refused = session.error
    assert refused is not None and refused.retryable

    responder = await stack.responder()
    responder.gate.clear()
    assert await session.reload()
    assert session.error == refused  # still shown while the reloaded run goes on
    responder.gate.set()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert len(responder.creates()) == 1


async def test_a_connection_lost_before_dispatch_is_retryable(stack: Stack) -> None:
    await stack.nc.close()
    session = stack.session()
    assert not await session.submit(QUESTION)
    assert session.error is not None and session.error.kind is ErrorKind.CONNECTION


async def test_retry_during_a_run_does_nothing(stack: Stack) -> None:
    responder = await stack.responder()
    responder.gate.clear()
    session = stack.session()
    assert await session.submit(QUESTION)
    assert session.running
    assert not await session.retry()
    assert not await session.reload()
    with pytest.raises(SessionBusy):
        await session.submit({"question": "another"})
    assert len(responder.creates()) == 1

    responder.gate.set()
    await session.join()
    assert session.state is TurnState.DONE
    assert len(responder.creates()) == 1


async def test_retry_after_switch_thread_does_nothing(stack: Stack) -> None:
    session = stack.session()
    assert not await session.submit(QUESTION)
    first_thread = session.thread_id
    assert session.error is not None and session.error.retryable

    session.switch_thread()
    assert session.thread_id != first_thread
    assert session.last_payload is None and session.error is None
    responder = await stack.responder()
    assert not await session.retry()
    assert not await session.reload()
    assert responder.requests == []


async def test_retry_before_the_first_submit_does_nothing(stack: Stack) -> None:
    responder = await stack.responder()
    session = stack.session()
    assert not await session.retry()
    assert responder.requests == []


async def test_an_interrupted_stream_offers_check_status_not_retry(stack: Stack) -> None:
    responder = await stack.responder()
    responder.gate.clear()
    # The follow gives up (its deadline) while the run is still RUNNING: the stream
    # closed without a terminal event.
    session = stack.session(deadline=0.5)
    assert await session.submit(QUESTION)
    await session.join()
    assert session.error is not None and session.error.kind is ErrorKind.INTERRUPTED
    assert not session.error.retryable  # a banner offers check_status, not Retry
    assert len(responder.creates()) == 1

    # check_status is read-only: still running, the error stays.
    status = await session.check_status()
    assert status is not None and status.state is TurnState.RUNNING
    assert session.error is not None and session.error.kind is ErrorKind.INTERRUPTED

    responder.gate.set()
    assert session.turn_id is not None
    await responder.ended(session.turn_id)
    status = await session.check_status()
    assert status is not None and status.state is TurnState.DONE
    assert session.error is None  # the run turned out finished
    assert len(responder.creates()) == 1
    assert [m for m, _ in responder.requests].count("responses/turnStatus") == 2


async def test_submit_none_on_a_finished_thread_changes_nothing(stack: Stack) -> None:
    responder = await stack.responder()
    session = stack.session()
    assert await session.submit(QUESTION)
    await session.join()
    before = (session.turn_id, session.transcript.content(), len(responder.requests))

    assert not await session.submit(None)
    assert (session.turn_id, session.transcript.content(), len(responder.requests)) == before
    assert (session.state, session.error, session.last_payload) == (TurnState.DONE, None, QUESTION)

    # A session that knows nothing of the thread asks the agent, which has nothing
    # pending there: no run.
    other = stack.session(thread_id=session.thread_id)
    assert not await other.submit(None)
    assert other.turn_id is None and other.error is None
    assert responder.creates()[-1]["input"] is None
    assert len(responder.creates()) == 2


async def test_submit_none_resumes_pending_work(stack: Stack) -> None:
    # The model fails during plan: the run FAILS with analyze done and plan pending.
    responder = await stack.responder(fail_once=["plan"])
    session = stack.session()
    assert await session.submit(QUESTION)
    await session.join()
    assert session.state is TurnState.FAILED
    assert session.error is not None and session.error.kind is ErrorKind.FAILED
    assert "the model is down during plan" in session.error.message
    assert steps_of(session) == ["analyze"]

    # submit(None) continues from the checkpoint: plan and generate, not analyze.
    assert await session.submit(None)
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert steps_of(session) == ["plan", "generate"]
    assert [c["input"] for c in responder.creates()] == [QUESTION, None]


async def test_submit_none_reattaches_to_a_run_still_going(stack: Stack) -> None:
    responder = await stack.responder()
    responder.gate.clear()
    session = stack.session(deadline=0.5)
    assert await session.submit(QUESTION)
    await session.join()
    assert session.error is not None and session.error.kind is ErrorKind.INTERRUPTED
    turn_id = session.turn_id

    # The second follow gets a deadline that a loaded machine cannot run out.
    transport = session.transport
    assert isinstance(transport, NatsAgentTransport)
    transport.follow_options = dataclasses.replace(FOLLOW, deadline=30.0)
    responder.gate.set()
    assert await session.submit(None)  # RUNNING: follow it again, send nothing new
    await session.join()
    assert (session.turn_id, *outcome(session)) == (turn_id, TurnState.DONE, None)
    assert steps_of(session) == STEPS
    assert len(responder.creates()) == 1


async def test_regenerate_reruns_from_the_entry_node(stack: Stack) -> None:
    responder = await stack.responder()
    session = stack.session()
    assert await session.submit(QUESTION)
    await session.join()
    first_turn, first_answer = session.turn_id, answer_of(session)
    assert await session.submit({"question": "Why does it matter?", "id": "q2"})
    await session.join()

    assert await session.regenerate()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert session.turn_id not in (first_turn, None)
    # The whole pipeline ran again, from its entry node, for the newest question.
    assert steps_of(session) == STEPS
    assert answer_of(session).startswith("Answer: Why does it matter")
    assert first_answer.startswith("Answer: What is a turn")
    regenerate = responder.creates()[-1]
    assert (regenerate["input"], regenerate["regenerate"]) == (None, True)
    # The thread still holds one exchange: the newest question and its (new) answer.
    state = await responder.graph.aget_state({"configurable": {"thread_id": session.thread_id}})
    assert [m.id for m in state.values["messages"]] == ["q2", "q2-answer"]
    # The last payload is still the question, for a retry.
    assert session.last_payload == {"question": "Why does it matter?", "id": "q2"}


async def test_a_rejected_request_is_not_retryable(stack: Stack) -> None:
    await stack.responder()
    session = stack.session()
    # Nothing was ever run on this thread: there is no entry to go back to, and the
    # run fails (the responder's answer to an impossible regenerate).
    assert await session.regenerate()
    await session.join()
    assert session.error is not None and session.error.kind is ErrorKind.FAILED
    assert not await session.retry()


# -- retry has two guards; which errors offer it is the banner's decision ----------


async def test_retry_resubmits_a_failed_runs_payload_as_a_new_run(stack: Stack) -> None:
    responder = await stack.responder(fail_once=["plan"])
    session = stack.session()
    assert await session.submit(QUESTION)
    await session.join()
    failed_turn = session.turn_id
    assert session.error is not None and session.error.kind is ErrorKind.FAILED
    assert not session.error.retryable  # not safe to resend as it was: a new run

    assert await session.retry()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert session.turn_id not in (failed_turn, None)
    assert steps_of(session) == STEPS
    assert [c["input"] for c in responder.creates()] == [QUESTION, QUESTION]


async def test_reload_resubmits_a_failed_runs_payload_and_keeps_the_error_until_the_outcome(
    stack: Stack,
) -> None:
    responder = await stack.responder(fail_once=["plan"])
    session = stack.session()
    assert await session.submit(QUESTION)
    await session.join()
    failed = session.error
    assert failed is not None and failed.kind is ErrorKind.FAILED

    responder.gate.clear()
    assert await session.reload()
    assert session.error == failed  # shown until the new run's outcome replaces it
    responder.gate.set()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert [c["input"] for c in responder.creates()] == [QUESTION, QUESTION]


async def test_retry_resubmits_after_an_interrupted_run_when_asked(stack: Stack) -> None:
    responder = await stack.responder()
    responder.gate.clear()
    session = stack.session(deadline=0.5)
    assert await session.submit(QUESTION)
    await session.join()
    assert session.error is not None and session.error.kind is ErrorKind.INTERRUPTED
    first_turn = session.turn_id
    # A banner offers check_status here; a panel that offers Retry anyway gets it.
    responder.gate.set()
    assert first_turn is not None
    await responder.ended(first_turn)

    transport = session.transport
    assert isinstance(transport, NatsAgentTransport)
    transport.follow_options = dataclasses.replace(FOLLOW, deadline=30.0)
    assert await session.retry()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert session.turn_id != first_turn
    assert len(responder.creates()) == 2
