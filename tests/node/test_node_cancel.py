"""A LangGraph.js agent under the TypeScript TurnRunner stops a cancelled turn's graph
mid-node, as the Python bridge does: `responses/cancel` on NATS (answered by the
runner through CancelTurn), the service's `turnkeeper/cancel` on the control subject,
the graph's AbortSignal, and nothing written after."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

from tests.support.agents import result
from tests.support.contract_panel import ContractPanel
from tests.support.nats import Collector
from tests.support.node import NodeAgents, Watcher, hold_turn
from tests.support.turns import value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-cancel"


async def test_a_cancelled_js_turn_stops_its_graph_mid_node(
    js_agents: NodeAgents, bus: tuple[Client, Collector], client: AsyncTurnkeeperClient
) -> None:
    nc, _seen = bus
    agent = await js_agents.start("js-replica-cancel", hold_work=True)
    watcher: Watcher | None = None
    try:
        watcher = await hold_turn(nc, client, "hold-cancel", agent=AGENT)

        answer = await result(
            nc, "responses/cancel", {"turn_id": "hold-cancel", "reason": "stop"}, agent=AGENT
        )
        assert answer["status"] == "cancelled"
        # The notification reached this replica and the abort reached the node.
        await agent.wait_line(
            lambda line: "hold-cancel" in line and "the service ended the turn" in line
        )
        await agent.wait_line(lambda line: line == "aborted in work hold-cancel")

        transcript = await watcher.finished()
        assert [e.type for e in transcript.events][-1] == "turn.cancelled"
        turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="hold-cancel"))).turn
        assert (turn.state, turn.end_reason) == (turns_pb2.TURN_STATE_CANCELLED, "cancelled")
        events = (
            await client.list_events(turns_pb2.ListEventsRequest(turn_id="hold-cancel"))
        ).events
        assert [e.type for e in events].count("turn.cancelled") == 1
        assert events[-1].type == "turn.cancelled"
        assert agent.proc.returncode is None, "the agent process itself goes on"
        runs = [r for r in js_agents.side_log.read_text().splitlines() if "hold-cancel" in r]
        assert runs == ["plan hold-cancel 0", "work hold-cancel 0", "holding hold-cancel"]
    finally:
        if watcher is not None:
            await watcher.close()


async def test_a_queued_js_turn_keeps_a_five_word_panel_waiting_and_cancelled_concludes_it(
    js_agents: NodeAgents, bus: tuple[Client, Collector], client: AsyncTurnkeeperClient
) -> None:
    nc, _seen = bus
    await js_agents.start("js-replica-words", hold_work=True)
    watcher: Watcher | None = None
    panel: ContractPanel | None = None
    try:
        watcher = await hold_turn(nc, client, "hold-first", agent=AGENT, thread_id="th-js-q")
        # A turn queued behind it on the thread (StartTurn's enqueue, as a client asks).
        queued = await client.start_turn(
            turns_pb2.StartTurnRequest(
                turn_id="js-queued",
                thread_id="th-js-q",
                agent=AGENT,
                input=value("report"),
                multitask_strategy=turns_pb2.MULTITASK_STRATEGY_ENQUEUE,
            )
        )
        assert queued.turn.state == turns_pb2.TURN_STATE_QUEUED
        panel = ContractPanel(nc, AGENT, "js-queued")
        await panel.polled(3)
        # A panel that knows only the five words keeps waiting on a queued turn.
        assert panel.concluded is None, panel.words
        assert set(panel.words) == {"running"}
        assert {a["state"] for a in panel.answers} == {"queued"}
        await result(nc, "responses/cancel", {"turn_id": "js-queued"}, agent=AGENT)
        assert await panel.conclusion() == "cancelled"
        assert panel.answers[-1]["state"] == "cancelled"
        await result(nc, "responses/cancel", {"turn_id": "hold-first"}, agent=AGENT)
        await watcher.finished()
    finally:
        if panel is not None:
            await panel.close()
        if watcher is not None:
            await watcher.close()
