"""The HTTP side without a browser: the Connect mapping of TurnService, SSE framing and
resumption, tokens and roles, the exposure rule, the agent relay's refusals.

A real service (grpc.aio and aiohttp in one loop, port 0), real NATS, SQLite under
tmp_path; turns are driven over gRPC the way an executor drives them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeAlias

import aiohttp
import nats
import pytest
from grpc import aio
from nats.aio.msg import Msg
from turnkeeper._caller_assertion import HEADER, AssertionRefused, key_of, token_digest, verify
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.messaging.link import agent_subject
from turnkeeper_server.security.transport import InsecureListen
from turnkeeper_server.web import connect, sse

from tests.support.http import Http
from tests.support.nats import NatsServer
from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory
from tests.support.sse_client import Frame, frames
from tests.support.turns import events, start, value

# The HTTP side goes through the same servicer, so it runs on either store.
pytestmark = [pytest.mark.both_backends, pytest.mark.unrenewed]

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"


@pytest.fixture
async def stub(web_service: TurnkeeperServer) -> AsyncIterator[Stub]:
    async with aio.insecure_channel(web_service.address) as channel:
        yield turns_pb2_grpc.TurnServiceStub(channel)


async def finished_turn(stub: Stub, turn_id: str = "t1") -> None:
    """A turn with three events, then `final` and the service's `turn.done`."""
    await start(stub, turn_id=turn_id, thread_id=f"th-{turn_id}")
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id=turn_id, events=events(1, "token", "token", "step"))
    )
    await stub.FinishTurn(
        turns_pb2.FinishTurnRequest(
            turn_id=turn_id, outcome=turns_pb2.OUTCOME_DONE, events=events(4, "final")
        )
    )


async def read_stream(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> list[Frame]:
    async with session.get(url, headers=headers or {}) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == "text/event-stream"
        return [f async for f in frames(response)]


async def read_until(stream: AsyncIterator[Frame], frame_id: str) -> list[Frame]:
    """The frames of `stream` up to the one of id `frame_id`, that one included; the
    stream stays open for the rest."""
    seen: list[Frame] = []
    async for frame in stream:
        seen.append(frame)
        if frame.id == frame_id:
            break
    return seen


def test_routes_are_the_browser_methods_of_the_service_descriptor() -> None:
    class Servicer:
        def __getattr__(self, name: str) -> Any:
            return name

    routes = connect.routes(Servicer())
    assert {r.path for r in routes} == {
        f"/turnkeeper.v1.TurnService/{m}" for m in connect.BROWSER_METHODS
    }
    for route in routes:
        # Bound to the servicer's method of the same name, typed from the descriptor.
        assert route.call == route.name  # type: ignore[comparison-overlap]
        assert route.request_type.DESCRIPTOR.name == f"{route.name}Request"


def test_sse_frames_are_one_line_of_json_with_the_seq_as_id() -> None:
    event = turns_pb2.Event(seq=7, attempt=1, type="token", data_json='{"text": "a\\nb"}')
    framed = sse.watch_frame(turns_pb2.WatchTurnResponse(event=event)).decode()
    lines = framed.split("\n")
    assert lines[:2] == ["id: 7", "event: event"]
    assert lines[3:] == ["", ""]  # one data line, then the blank line that ends a frame
    data = json.loads(lines[2].removeprefix("data: "))
    assert (data["seq"], data["attempt"], data["type"], data["data"]) == (
        7,
        1,
        "token",
        {"text": "a\nb"},
    )
    reset = sse.watch_frame(
        turns_pb2.WatchTurnResponse(reset=turns_pb2.Reset(seq=3, attempt=2, checkpoint_id="c"))
    ).decode()
    assert reset.startswith("id: 0\nevent: reset\ndata: ")
    assert json.loads(reset.split("data: ", 1)[1]) == {
        "seq": 3,
        "attempt": 2,
        "checkpointId": "c",
        "local": False,
    }


async def test_get_turn_over_http_is_the_grpc_answer_in_json(stub: Stub, http: Http) -> None:
    await finished_turn(stub)
    status, body = await http.call("GetTurn", {"turnId": "t1"})
    assert status == 200
    grpc_answer = await stub.GetTurn(turns_pb2.GetTurnRequest(turn_id="t1"))
    assert body == connect.to_json(grpc_answer)
    assert body["turn"]["state"] == "TURN_STATE_DONE" and body["turn"]["lastSeq"] == "5"
    # The proto's own field names are accepted too (protobuf's JSON mapping).
    status, listed = await http.call("ListEvents", {"turn_id": "t1", "after_seq": 3})
    assert status == 200
    assert [e["type"] for e in listed["events"]] == ["final", "turn.done"]


async def test_cancel_turn_over_http_cancels_and_refuses_a_finished_turn(
    stub: Stub, http: Http
) -> None:
    await start(stub, turn_id="t-cancel", thread_id="th-cancel")
    status, body = await http.call("CancelTurn", {"turnId": "t-cancel", "reason": "by hand"})
    assert status == 200, body
    assert body["turn"]["state"] == "TURN_STATE_CANCELLED"
    got = await stub.GetTurn(turns_pb2.GetTurnRequest(turn_id="t-cancel"))
    assert got.turn.state == turns_pb2.TURN_STATE_CANCELLED
    await finished_turn(stub, "t-done")
    status, body = await http.call("CancelTurn", {"turnId": "t-done"})
    assert (status, body["code"]) == (400, "failed_precondition"), body


async def test_errors_are_connect_errors_with_the_grpc_message(stub: Stub, http: Http) -> None:
    await start(stub, turn_id="t-run", thread_id="th-run")
    status, body = await http.call("GetTurn", {"turnId": "t-missing"})
    assert (status, body["code"]) == (404, "not_found")
    assert body["message"] == "turn 't-missing' is not in the journal"
    status, body = await http.call("ResumeDetached", {"turnId": "t-run", "resume": True})
    assert (status, body["code"]) == (400, "failed_precondition")
    status, body = await http.call("TurnStatus", {"turnId": "t-run", "nope": 1})
    assert (status, body["code"]) == (400, "invalid_argument")
    assert "nope" in body["message"]
    status, body = await http.call("GetTurn", {"turnId": "bad.id"})
    assert (status, body["code"]) == (400, "invalid_argument")
    # Executor writes are not offered over HTTP.
    async with http.session.post(
        f"{http.base}turnkeeper.v1.TurnService/StartTurn", json={}
    ) as response:
        assert response.status in (404, 405)
    # A form post (what another site could make a browser send) is refused.
    async with http.session.post(
        f"{http.base}turnkeeper.v1.TurnService/TurnStatus",
        data="turnId=t-run",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    ) as response:
        assert response.status == 400
        assert (await response.json())["code"] == "invalid_argument"


async def test_sse_replays_then_ends_and_resumes_after_last_event_id(
    stub: Stub, http: Http
) -> None:
    await finished_turn(stub)
    url = f"{http.base}v1/turns/t1/events"
    whole = await read_stream(http.session, url)
    assert [(f.event, f.id) for f in whole] == [
        *(("event", str(seq)) for seq in range(1, 6)),
        ("end", None),
    ]
    assert [f.data["type"] for f in whole[:-1]] == ["token", "token", "step", "final", "turn.done"]
    assert whole[-1].data == {"turnId": "t1", "state": "DONE", "seq": 5}
    after_header = await read_stream(http.session, url, {"Last-Event-ID": "3"})
    assert [f.id for f in after_header] == ["4", "5", None]
    # EventSource reconnects cannot set headers: the query parameter does the same.
    after_query = await read_stream(http.session, url + "?lastEventId=4&attempt=0")
    assert [f.id for f in after_query] == ["5", None]


async def test_sse_sends_a_reset_and_the_replay_when_the_turn_is_rewound(
    stub: Stub, http: Http, web_service: TurnkeeperServer
) -> None:
    await start(stub, turn_id="t-rw", thread_id="th-rw")
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id="t-rw", events=events(1, "token", "token", "token"))
    )
    url = f"{http.base}v1/turns/t-rw/events"
    async with http.session.get(url) as response:
        stream = frames(response)
        seen = await read_until(stream, "3")
        # An operator re-drives it: no checkpoint, so it rewinds to seq 0.
        await stub.Redrive(turns_pb2.RedriveRequest(turn_id="t-rw", force=True))
        await stub.ClaimTurn(
            turns_pb2.ClaimTurnRequest(turn_id="t-rw", attempt=1, replica="r2", incarnation="i2")
        )
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-rw", attempt=1, events=events(1, "token"))
        )
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(
                turn_id="t-rw", attempt=1, outcome=turns_pb2.OUTCOME_DONE, events=events(2, "final")
            )
        )
        seen += [frame async for frame in stream]
    assert [(f.event, f.id) for f in seen] == [
        ("event", "1"),
        ("event", "2"),
        ("event", "3"),
        ("reset", "0"),
        ("event", "1"),
        ("event", "2"),
        ("event", "3"),
        ("end", None),
    ]
    assert seen[3].data == {"seq": 0, "attempt": 1, "checkpointId": "", "local": False}
    assert [f.data["attempt"] for f in seen[4:7]] == [1, 1, 1]

    # A page that saw seq 3 of attempt 0 and comes back now gets a reset of the
    # service's own first: its seq 3 is not the retained seq 3 any more.
    back = await read_stream(http.session, url + "?attempt=0", {"Last-Event-ID": "3"})
    assert back[0].event == "reset" and back[0].data["local"] is True
    assert [f.id for f in back[1:]] == ["1", "2", "3", None]
    # Coming back with the attempt it really saw continues where it was.
    back = await read_stream(http.session, url + "?attempt=1", {"Last-Event-ID": "2"})
    assert [(f.event, f.id) for f in back] == [("event", "3"), ("end", None)]


async def test_sse_across_a_park_and_its_resume_ends_with_the_resumed_runs_end(
    stub: Stub, http: Http
) -> None:
    # The chat page's path after Approve (decision 640): the stream it kept open across
    # the park, and one that comes back after the resume but before a replica took the
    # turn, both get the resumed run's events and its end.
    await start(stub, turn_id="t-ap", thread_id="th-ap")
    await stub.AppendEvents(turns_pb2.AppendEventsRequest(turn_id="t-ap", events=events(1, "step")))
    await stub.ParkTurn(
        turns_pb2.ParkTurnRequest(
            turn_id="t-ap",
            attempt=0,
            interrupt=value({"ask": "ok?"}),
            events=events(2, "interrupt"),
        )
    )
    url = f"{http.base}v1/turns/t-ap/events"
    async with http.session.get(url) as response:
        stream = frames(response)
        kept = await read_until(stream, "2")
        await stub.ResumeDetached(
            turns_pb2.ResumeDetachedRequest(turn_id="t-ap", resume=value({"approved": True}))
        )
        async with http.session.get(url + "?attempt=0", headers={"Last-Event-ID": "2"}) as back:
            assert back.status == 200
            await stub.ClaimTurn(
                turns_pb2.ClaimTurnRequest(turn_id="t-ap", attempt=0, replica="r2", incarnation="x")
            )
            await stub.AppendEvents(
                turns_pb2.AppendEventsRequest(turn_id="t-ap", attempt=0, events=events(3, "step"))
            )
            await stub.FinishTurn(
                turns_pb2.FinishTurnRequest(
                    turn_id="t-ap",
                    attempt=0,
                    outcome=turns_pb2.OUTCOME_DONE,
                    events=events(4, "final"),
                )
            )
            came_back = [frame async for frame in frames(back)]
        kept += [frame async for frame in stream]
    end = {"turnId": "t-ap", "state": "DONE", "seq": 5}
    assert [(f.event, f.id) for f in kept] == [
        *(("event", str(seq)) for seq in range(1, 6)),
        ("end", None),
    ]
    assert [f.data["type"] for f in kept[:-1]] == [
        "step",
        "interrupt",
        "step",
        "final",
        "turn.done",
    ]
    assert kept[-1].data == end
    assert [(f.event, f.id) for f in came_back] == [
        ("event", "3"),
        ("event", "4"),
        ("event", "5"),
        ("end", None),
    ]
    assert came_back[-1].data == end


@pytest.fixture
async def secured(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[tuple[TurnkeeperServer, dict[str, str], Http]]:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
    )
    assert service.web is not None
    async with aiohttp.ClientSession() as session:
        yield service, tokens, Http(session, service.web.url)


async def test_tokens_and_roles_are_the_grpc_ones(
    secured: tuple[TurnkeeperServer, dict[str, str], Http],
) -> None:
    service, tokens, http = secured
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-alpha", thread_id="th-a", agent="alpha", input=value({})
            ),
            metadata=bearer(tokens["alpha"]),
        )
    status, body = await http.call("TurnStatus", {"turnId": "t-alpha"})
    assert (status, body["code"]) == (401, "unauthenticated")
    status, body = await http.call("TurnStatus", {"turnId": "t-alpha"}, "not-a-token")
    assert (status, body["code"]) == (401, "unauthenticated")
    status, body = await http.call("ListTurns", {}, tokens["panel"])
    assert (status, body["code"]) == (403, "permission_denied")
    status, body = await http.call("ListTurns", {}, tokens["operator"])
    assert status == 200 and [t["turnId"] for t in body["turns"]] == ["t-alpha"]
    status, body = await http.call("ResumeDetached", {"turnId": "t-alpha"}, tokens["panel"])
    assert (status, body["code"]) == (403, "permission_denied")
    # Another agent's turn does not exist for an agent token, over SSE too.
    status, unknown = await http.call("GetTurn", {"turnId": "t-none"}, tokens["beta"])
    status2, other = await http.call("GetTurn", {"turnId": "t-alpha"}, tokens["beta"])
    assert status == status2 == 404
    assert other["message"] == unknown["message"].replace("t-none", "t-alpha")
    status, body = await http.call("TurnStatus", {"turnId": "t-alpha"}, tokens["beta"])
    assert body["state"] == "TURN_STATE_UNKNOWN"
    url = f"{http.base}v1/turns/t-alpha/events"
    async with http.session.get(url, headers={"Authorization": f"Bearer {tokens['beta']}"}) as r:
        assert r.status == 404
    async with http.session.get(url) as r:
        assert r.status == 401
    # A panel reads the turns of its own threads only (decision 311): th-a is
    # alpha's, so t-alpha is not found for it, as over gRPC, over SSE too.
    status, body = await http.call("GetTurn", {"turnId": "t-alpha"}, tokens["panel"])
    assert (status, body["code"]) == (404, "not_found")
    status, body = await http.call("ListEvents", {"turnId": "t-alpha"}, tokens["panel"])
    assert (status, body["code"]) == (404, "not_found")
    async with http.session.get(url, headers={"Authorization": f"Bearer {tokens['panel']}"}) as r:
        assert r.status == 404
    # The relay: a panel may not cancel through an agent what it may not cancel
    # itself (resumeDetached it may send: the service answers it on its own threads).
    relay = f"{http.base}v1/agents/alpha/rpc"
    body_json = {"method": "responses/cancel", "params": {"turn_id": "t-alpha"}}
    async with http.session.post(
        relay, json=body_json, headers={"Authorization": f"Bearer {tokens['panel']}"}
    ) as r:
        assert r.status == 403
    async with http.session.post(
        relay,
        json={"method": "turnkeeper/execute", "params": {}},
        headers={"Authorization": f"Bearer {tokens['admin']}"},
    ) as r:
        assert r.status == 400 and "not relayed" in (await r.json())["message"]
    async with http.session.post(
        f"{http.base}v1/agents/beta/rpc",
        json={"method": "responses/create", "params": {}},
        headers={"Authorization": f"Bearer {tokens['alpha']}"},
    ) as r:
        assert r.status == 403
    async with http.session.get(f"{http.base}v1/metrics") as r:
        assert r.status == 401
    async with http.session.get(
        f"{http.base}v1/metrics", headers={"Authorization": f"Bearer {tokens['operator']}"}
    ) as r:
        assert r.status == 200 and (await r.json())["turnkeeper_turns_started"] == 1


async def test_relay_forwards_cancel_with_the_rights_of_cancel_turn(
    secured: tuple[TurnkeeperServer, dict[str, str], Http], nats_server: NatsServer
) -> None:
    service, tokens, http = secured
    assert await service.link.wait_connected(10)
    nc = await nats.connect(nats_server.url)
    heard: list[tuple[dict[str, Any], str]] = []

    async def answer(msg: Msg) -> None:
        request = json.loads(msg.data)
        headers = msg.headers or {}
        # The caller's token stays in the service: the agent gets a signed assertion.
        assert "Authorization" not in headers, headers
        assert not any(token in str(headers) for token in tokens.values()), headers
        heard.append((request, headers.get(HEADER, "")))
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": {"status": "cancelled"}}
        await msg.respond(json.dumps(reply).encode())

    try:
        subject = agent_subject(
            service.settings.subject_prefix, service.settings.namespace, "alpha"
        )
        await nc.subscribe(subject, cb=answer)
        await nc.flush()
        relay = f"{http.base}v1/agents/alpha/rpc"
        body = {"method": "responses/cancel", "params": {"turn_id": "t-x"}}
        async with http.session.post(
            relay, json=body, headers={"Authorization": f"Bearer {tokens['panel']}"}
        ) as r:
            assert r.status == 403
            assert "may not call responses/cancel" in (await r.json())["message"]
        async with http.session.post(
            f"{http.base}v1/agents/beta/rpc",
            json=body,
            headers={"Authorization": f"Bearer {tokens['alpha']}"},
        ) as r:
            assert r.status == 403
        assert heard == []
        for who in ("operator", "alpha"):
            async with http.session.post(
                relay, json=body, headers={"Authorization": f"Bearer {tokens[who]}"}
            ) as r:
                assert r.status == 200
                assert (await r.json())["result"] == {"status": "cancelled"}
        assert [(h[0]["method"], h[0]["params"]) for h in heard] == [
            ("responses/cancel", {"turn_id": "t-x"})
        ] * 2
        alpha_key = [key_of(token_digest(tokens["alpha"]))]
        callers = [
            verify(value, alpha_key, agent="alpha", method="responses/cancel", request_id=r["id"])
            for r, value in heard
        ]
        assert [c.who for c in callers] == ["operator (operator)", "alpha (agent:alpha)"]
        # Signed for alpha's tokens only: beta's key does not verify it.
        with pytest.raises(AssertionRefused, match="not signed for agent 'alpha'"):
            verify(heard[0][1], [key_of(token_digest(tokens["beta"]))], agent="alpha")
    finally:
        await nc.close()


async def test_relay_says_a_request_that_reached_no_agent_was_not_dispatched(
    http: Http, web_service: TurnkeeperServer
) -> None:
    assert await web_service.link.wait_connected(10)
    async with http.session.post(
        f"{http.base}v1/agents/nobody/rpc",
        json={"method": "responses/create", "params": {"input": {}, "background": True}},
    ) as response:
        assert response.status == 503
        body = await response.json()
    assert body["code"] == "unavailable" and body["dispatched"] is False
    assert "no replica of agent 'nobody'" in body["message"]


async def test_an_exposed_http_port_without_tls_and_auth_is_refused(
    make_service: ServiceFactory,
) -> None:
    with pytest.raises(InsecureListen, match=r"refusing to listen on 0\.0\.0\.0:0"):
        await make_service(http_listen="0.0.0.0:0")


async def test_pages_are_served_from_the_package_with_a_strict_policy(
    stub: Stub, http: Http, web_service: TurnkeeperServer
) -> None:
    async with http.session.get(http.base) as response:
        assert str(response.url).endswith("/console/")  # / redirects to the console
        assert "<title>turnkeeper console</title>" in await response.text()
        policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    for page in ("chat", "turn.html", "common.js", "console.css"):
        async with http.session.get(f"{http.base}console/{page}") as response:
            assert response.status == 200, page
            assert response.headers["X-Content-Type-Options"] == "nosniff"
    await finished_turn(stub)
    async with http.session.get(f"{http.base}v1/turns/t1/events") as response:
        assert response.headers["Cache-Control"] == "no-store"
        assert "Content-Security-Policy" in response.headers
    async with http.session.get(f"{http.base}v1/whoami") as response:
        assert await response.json() == {"role": None, "name": None, "agent": None}
    assert await web_service.link.wait_connected(10)
    async with http.session.get(f"{http.base}v1/health") as response:
        assert await response.json() == {"status": "SERVING", "nats": "up"}


async def test_the_agent_list_is_the_announced_agents_and_an_agent_token_sees_its_own(
    secured: tuple[TurnkeeperServer, dict[str, str], Http],
) -> None:
    service, tokens, http = secured
    for agent in ("alpha", "beta"):
        async with aio.insecure_channel(service.address) as channel:
            stub = turns_pb2_grpc.TurnServiceStub(channel)
            await stub.Redrive(
                turns_pb2.RedriveRequest(agent=agent, replica=f"{agent}-1", incarnation="i1"),
                metadata=bearer(tokens[agent]),
            )

    async def listed(token: str | None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with http.session.get(f"{http.base}v1/agents", headers=headers) as r:
            return r.status, await r.json()

    assert await listed(tokens["panel"]) == (200, {"agents": ["alpha", "beta"]})
    assert await listed(tokens["alpha"]) == (200, {"agents": ["alpha"]})
    status, _ = await listed(None)
    assert status == 401
