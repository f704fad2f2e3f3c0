"""TurnService's transitions and refusals, fast and without a network.

`grpc_testing` drives the real servicer (the real engine, over a real SQLite store
in tmp_path) in-process: no port, no NATS. The servicer is asynchronous and
grpc_testing calls handlers synchronously, so each call is run on an event loop in
a thread of its own, and an escaping domain error becomes its status through the
same `status_for` the service's interceptor uses.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc_testing
import pytest
from google.protobuf import struct_pb2
from turnkeeper.states import TurnState
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.engine import Engine, TurnNotifier
from turnkeeper_server.errors import status_for
from turnkeeper_server.limits import DEFAULT_LIMITS
from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import Policy
from turnkeeper_server.rpc.turn_service import TurnServicer
from turnkeeper_server.store.sqlite import Database

SERVICE = turns_pb2.DESCRIPTOR.services_by_name["TurnService"]
CALL_TIMEOUT = 30.0


class _OnLoop:
    """Runs the async servicer's unary methods on a loop thread, for grpc_testing."""

    def __init__(self, servicer: TurnServicer, loop: asyncio.AbstractEventLoop) -> None:
        self._servicer = servicer
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)

        def call(request: Any, context: Any) -> Any:
            future = asyncio.run_coroutine_threadsafe(method(request, context), self._loop)
            try:
                return future.result(CALL_TIMEOUT)
            except Exception as exc:
                code, message = status_for(exc)
                context.abort(code, message)

        return call


class Harness:
    def __init__(self, data_dir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.db = Database(data_dir / "turns.db", data_dir / "sessions.db", "FULL")
        self.engine = self._on_loop(self._build())
        servicer = _OnLoop(TurnServicer(self.engine, DEFAULT_LIMITS), self.loop)
        self.server = grpc_testing.server_from_dictionary(
            {SERVICE: servicer}, grpc_testing.strict_real_time()
        )

    def _on_loop(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(CALL_TIMEOUT)

    async def _build(self) -> Engine:
        # The Database's reader belongs to the thread that opens it: the loop thread.
        self.db.open()
        link = NatsLink(None)
        metrics = Metrics()
        return Engine(
            self.db,
            Policy(subject_prefix="test", lease_seconds=30.0, claim_seconds=5.0, max_redrives=3),
            TurnNotifier(),
            OutboxPublisher(self.db, link, metrics=metrics),
            link,
            metrics,
        )

    def call(self, method: str, request: Any) -> tuple[Any, grpc.StatusCode, str]:
        rpc = self.server.invoke_unary_unary(
            SERVICE.methods_by_name[method], (), request, CALL_TIMEOUT
        )
        response, _, code, details = rpc.termination()
        return response, code, details

    def ok(self, method: str, request: Any) -> Any:
        response, code, details = self.call(method, request)
        assert code == grpc.StatusCode.OK, f"{method}: {code} {details}"
        return response

    def refused(self, method: str, request: Any, code: grpc.StatusCode) -> str:
        _, got, details = self.call(method, request)
        assert got == code, f"{method}: {got} {details}"
        return details

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.db.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CALL_TIMEOUT)
        self.loop.close()


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.close()


def start(
    turn_id: str = "t1", thread_id: str = "th1", text: str = "hi"
) -> turns_pb2.StartTurnRequest:
    return turns_pb2.StartTurnRequest(
        turn_id=turn_id,
        thread_id=thread_id,
        agent="a",
        input=struct_pb2.Value(string_value=text),
        replica="r1",
        incarnation="i1",
    )


def status(svc: Harness, turn_id: str = "t1") -> TurnState:
    response = svc.ok("TurnStatus", turns_pb2.TurnStatusRequest(turn_id=turn_id))
    return TurnState.from_proto(response.state)


def event(seq: int, type_: str = "token") -> turns_pb2.EventInput:
    return turns_pb2.EventInput(seq=seq, type=type_, data_json="{}")


def test_start_journals_a_running_turn_once(svc: Harness) -> None:
    assert status(svc) is TurnState.UNKNOWN
    first = svc.ok("StartTurn", start())
    assert first.created
    assert first.turn.state == turns_pb2.TURN_STATE_RUNNING
    assert first.turn.attempts == 0
    again = svc.ok("StartTurn", start())
    assert not again.created, "the same StartTurn again is idempotent"
    assert status(svc) is TurnState.RUNNING


def test_start_refusals(svc: Harness) -> None:
    svc.ok("StartTurn", start())
    svc.refused("StartTurn", start(text="other"), grpc.StatusCode.ALREADY_EXISTS)
    details = svc.refused("StartTurn", start(turn_id="t2"), grpc.StatusCode.FAILED_PRECONDITION)
    assert "t1" in details, details
    svc.refused("StartTurn", start(turn_id=""), grpc.StatusCode.INVALID_ARGUMENT)


def test_park_then_resume_once(svc: Harness) -> None:
    svc.ok("StartTurn", start())
    parked = svc.ok("ParkTurn", turns_pb2.ParkTurnRequest(turn_id="t1", attempt=0))
    assert parked.turn.state == turns_pb2.TURN_STATE_PARKED
    assert status(svc) is TurnState.PARKED
    svc.refused(
        "ParkTurn",
        turns_pb2.ParkTurnRequest(turn_id="t1", attempt=0),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    resume = turns_pb2.ResumeDetachedRequest(turn_id="t1", resume=struct_pb2.Value(bool_value=True))
    resumed = svc.ok("ResumeDetached", resume)
    assert resumed.turn.state == turns_pb2.TURN_STATE_RUNNING
    assert not resumed.dispatched, "no NATS: no replica can take it"
    svc.refused("ResumeDetached", resume, grpc.StatusCode.FAILED_PRECONDITION)
    svc.refused(
        "ResumeDetached",
        turns_pb2.ResumeDetachedRequest(turn_id="nope"),
        grpc.StatusCode.NOT_FOUND,
    )


def test_stale_attempt_is_fenced(svc: Harness) -> None:
    svc.ok("StartTurn", start())
    appended = svc.ok(
        "AppendEvents", turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=[event(1)])
    )
    assert appended.last_seq == 1
    for method, request in (
        ("AppendEvents", turns_pb2.AppendEventsRequest(turn_id="t1", attempt=1, events=[event(2)])),
        ("ParkTurn", turns_pb2.ParkTurnRequest(turn_id="t1", attempt=1)),
        (
            "FinishTurn",
            turns_pb2.FinishTurnRequest(turn_id="t1", attempt=1, outcome=turns_pb2.OUTCOME_DONE),
        ),
    ):
        svc.refused(method, request, grpc.StatusCode.ABORTED)
    assert status(svc) is TurnState.RUNNING, "a fenced write changes nothing"


def test_finish_is_terminal(svc: Harness) -> None:
    svc.ok("StartTurn", start())
    done = svc.ok(
        "FinishTurn",
        turns_pb2.FinishTurnRequest(
            turn_id="t1", attempt=0, outcome=turns_pb2.OUTCOME_DONE, events=[event(1, "final")]
        ),
    )
    assert done.turn.state == turns_pb2.TURN_STATE_DONE
    assert status(svc) is TurnState.DONE
    svc.refused(
        "FinishTurn",
        turns_pb2.FinishTurnRequest(
            turn_id="t1", attempt=0, outcome=turns_pb2.OUTCOME_FAILED, error="late"
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    svc.refused(
        "AppendEvents",
        turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=[event(2)]),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    # The thread is free again: a new turn on it starts.
    assert svc.ok("StartTurn", start(turn_id="t2")).created


def test_failed_outcome_and_lookups(svc: Harness) -> None:
    svc.ok("StartTurn", start())
    failed = svc.ok(
        "FinishTurn",
        turns_pb2.FinishTurnRequest(
            turn_id="t1", attempt=0, outcome=turns_pb2.OUTCOME_FAILED, error="boom"
        ),
    )
    assert failed.turn.state == turns_pb2.TURN_STATE_FAILED
    assert svc.ok("TurnStatus", turns_pb2.TurnStatusRequest(turn_id="t1")).error == "boom"
    svc.refused("GetTurn", turns_pb2.GetTurnRequest(turn_id="missing"), grpc.StatusCode.NOT_FOUND)
    svc.refused(
        "FinishTurn",
        turns_pb2.FinishTurnRequest(turn_id="missing", attempt=0, outcome=turns_pb2.OUTCOME_DONE),
        grpc.StatusCode.NOT_FOUND,
    )
