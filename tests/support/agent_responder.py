"""A tiny in-test agent: a JSON-RPC responder on real NATS that journals its turns in a
real turnkeeper service and runs the real pipeline graph (examples/pipeline).

It stands in for the bridge in the session client's tests, speaking the same
methods (``responses/create``, ``responses/turnStatus``, ``responses/resumeDetached``)
and what the session needs of them (the bridge does the same, see
tests/bridge/test_bridge_regenerate.py):

- ``responses/create`` with ``input: null`` on a thread with nothing pending answers
  ``{turn_id: null, status: "completed"}`` and starts no turn;
- ``responses/create`` with ``regenerate: true`` (and ``input: null``) repositions the
  thread to the entry node of its latest run before running
  (:mod:`turnkeeper.agent._reposition`).

No heartbeats and no checkpoints in the service: the graph's checkpointer is in
memory, so tests give the service leases longer than they last.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import nats
from grpc import aio
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from nats.aio.client import Client
from nats.aio.msg import Msg
from turnkeeper.agent._reposition import at_checkpoint, entry_checkpoint_id
from turnkeeper.panel.agent_rpc import CREATE, RESUME_DETACHED, TURN_STATUS, agent_subject
from turnkeeper.states import TurnState
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc

from examples.pipeline.graph import build_graph, question_input
from examples.pipeline.model import ScriptedChatModel, step_and_question
from tests.support.turns import value

# Not a method of the bridge: start() sends it to itself (see there).
PROBE = "test/probe"


class FlakyModel(ScriptedChatModel):
    """The scripted model, raising once for each step named in ``fail_once``."""

    fail_once: list[str] = []

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        step, _ = step_and_question(messages)
        if step in self.fail_once:
            self.fail_once.remove(step)
            raise RuntimeError(f"the model is down during {step}")
        return super()._generate(messages, stop, run_manager, **kwargs)


class PipelineResponder:
    def __init__(
        self,
        nats_url: str,
        service_address: str,
        *,
        agent: str = "pipeline",
        fail_once: Sequence[str] = (),
    ) -> None:
        self.nats_url = nats_url
        self.service_address = service_address
        self.agent = agent
        self.graph = build_graph(
            FlakyModel(fail_once=list(fail_once)), checkpointer=InMemorySaver()
        )
        #: Every request received: (method, params).
        self.requests: list[tuple[str, dict[str, Any]]] = []
        #: Closed: runs wait before their first step (a run "in flight").
        self.gate = asyncio.Event()
        self.gate.set()
        self._ended: dict[str, asyncio.Event] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._nc: Client | None = None
        self._channel: aio.Channel | None = None
        self._stub: Any = None

    def creates(self) -> list[dict[str, Any]]:
        return [params for method, params in self.requests if method == CREATE]

    async def start(self) -> None:
        self._channel = aio.insecure_channel(self.service_address)
        self._stub = turns_pb2_grpc.TurnServiceStub(self._channel)
        self._nc = await nats.connect(self.nats_url)
        subject = agent_subject(self.agent)
        await self._nc.subscribe(subject, queue=f"agents.{self.agent}", cb=self._on_message)
        # Listening only once the server has the SUB. nats-py's flush() is no proof:
        # it writes its PING ahead of commands still queued (the SUB among them). A
        # request to ourselves is: the server handles one connection's commands in
        # order, so it saw the SUB before this request.
        probe = {"jsonrpc": "2.0", "id": 0, "method": PROBE}
        await self._nc.request(subject, json.dumps(probe).encode(), timeout=5)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._nc is not None:
            await self._nc.close()
        if self._channel is not None:
            await self._channel.close(None)

    async def ended(self, turn_id: str) -> None:
        """Wait until the run of ``turn_id`` has finished (DONE or FAILED)."""
        await self._ended.setdefault(turn_id, asyncio.Event()).wait()

    # -- JSON-RPC ----------------------------------------------------------------------

    async def _on_message(self, msg: Msg) -> None:
        request = json.loads(msg.data)
        method, params = request["method"], request.get("params") or {}
        if method == PROBE:
            await msg.respond(json.dumps({"jsonrpc": "2.0", "id": 0, "result": {}}).encode())
            return
        self.requests.append((method, params))
        handler = {
            CREATE: self._create,
            TURN_STATUS: self._turn_status,
            RESUME_DETACHED: self._resume,
        }[method]
        result = await handler(params)
        await msg.respond(
            json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode()
        )

    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id, turn_id = params["thread_id"], params["turn_id"]
        payload, regenerate = params["input"], bool(params.get("regenerate"))
        config: Any = {"configurable": {"thread_id": thread_id}}
        if payload is None and not regenerate and not (await self.graph.aget_state(config)).next:
            return {"turn_id": None, "thread_id": thread_id, "status": "completed"}
        started = await self._stub.StartTurn(
            pb.StartTurnRequest(
                turn_id=turn_id,
                thread_id=thread_id,
                agent=self.agent,
                input=value({"input": payload, "regenerate": regenerate}),
                replica="responder",
                incarnation="1",
            )
        )
        if started.created:
            task = asyncio.create_task(self._run(turn_id, config, payload, regenerate))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return {"turn_id": turn_id, "thread_id": thread_id, "status": "in_progress"}

    async def _turn_status(self, params: dict[str, Any]) -> dict[str, Any]:
        status = await self._stub.TurnStatus(pb.TurnStatusRequest(turn_id=params["turn_id"]))
        return {
            "turn_id": params["turn_id"],
            "status": TurnState.from_proto(status.state).word,
            "attempts": status.attempts,
            "last_seq": status.last_seq,
            "error": status.error,
        }

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        response = await self._stub.ResumeDetached(
            pb.ResumeDetachedRequest(turn_id=params["turn_id"], resume=value(params["resume"]))
        )
        return {
            "turn_id": params["turn_id"],
            "status": TurnState.RUNNING.word,
            "dispatched": response.dispatched,
        }

    # -- running a turn ------------------------------------------------------------------

    async def _run(self, turn_id: str, config: Any, payload: Any, regenerate: bool) -> None:
        seq = 0

        def event(type_: str, data: Any) -> pb.EventInput:
            nonlocal seq
            seq += 1
            return pb.EventInput(seq=seq, type=type_, data_json=json.dumps(data))

        try:
            await self.gate.wait()
            if regenerate:
                checkpoint_id = await entry_checkpoint_id(self.graph, config)
                if checkpoint_id is None:
                    raise RuntimeError("nothing to regenerate on this thread")
                config = at_checkpoint(config, checkpoint_id)
            graph_input = (
                question_input(payload["question"], message_id=payload.get("id"))
                if payload is not None
                else None
            )
            async for update in self.graph.astream(graph_input, config, stream_mode="updates"):
                for node, out in update.items():
                    step = {"node": node, "step": (out or {}).get("step")}
                    await self._stub.AppendEvents(
                        pb.AppendEventsRequest(
                            turn_id=turn_id, attempt=0, events=[event("step", step)]
                        )
                    )
            thread: Any = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
            state = await self.graph.aget_state(thread)
            answer = state.values["messages"][-1].content
            await self._stub.FinishTurn(
                pb.FinishTurnRequest(
                    turn_id=turn_id,
                    attempt=0,
                    outcome=pb.OUTCOME_DONE,
                    events=[event("final", {"answer": answer})],
                )
            )
        except Exception as exc:
            await self._stub.FinishTurn(
                pb.FinishTurnRequest(
                    turn_id=turn_id,
                    attempt=0,
                    outcome=pb.OUTCOME_FAILED,
                    error=str(exc),
                    events=[event("error", {"message": str(exc)})],
                )
            )
        finally:
            self._ended.setdefault(turn_id, asyncio.Event()).set()
