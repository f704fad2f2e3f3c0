"""End users, the LangGraph way: a langgraph.json's `auth` (end_users/auth.py, written
for LangGraph's server) decides who the user of each request is, stamps the owner on
what they make, and hides everyone else's threads and runs, through the official
langgraph-sdk over the real HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.langgraph_host import start_host
from tests.support.nats import NatsServer
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

CONFIG = Path(__file__).resolve().parent / "end_users" / "langgraph.json"
ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "whose thread is this?"}]}
ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}

Clients = Callable[[dict[str, str]], LangGraphClient]


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_config=CONFIG
    )


@pytest.fixture
async def host(service: TurnkeeperServer, nats_server: NatsServer) -> AsyncIterator[Agent]:
    agent = await start_host(
        CONFIG, service=service.address, nats_url=nats_server.url, replica="lg-users"
    )
    try:
        yield agent
    finally:
        await agent.close()


@pytest.fixture
async def clients(service: TurnkeeperServer, host: Agent) -> AsyncIterator[Clients]:
    assert service.web is not None
    url = service.web.url.rstrip("/")
    made: list[LangGraphClient] = []

    def client(headers: dict[str, str]) -> LangGraphClient:
        made.append(get_client(url=url, api_key=None, headers=headers))
        return made[-1]

    try:
        yield client
    finally:
        for c in made:
            await c.http.client.aclose()


def owner(thread: Any) -> Any:
    """Who a thread's metadata says owns it."""
    return thread["metadata"]["owner"]


def status_of(exc: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> int:
    return exc.value.response.status_code


async def test_a_request_without_a_known_user_is_answered_by_authenticate(
    clients: Clients,
) -> None:
    for headers in ({}, {"Authorization": "Bearer token-mallory"}):
        with pytest.raises(httpx.HTTPStatusError) as exc:
            await clients(headers).threads.search()
        assert status_of(exc) == 401
        assert "unknown user" in exc.value.response.text


async def test_each_user_sees_only_their_own_threads(clients: Clients) -> None:
    alice, bob = clients(ALICE), clients(BOB)
    mine = await alice.threads.create(metadata={"topic": "a"})
    theirs = await bob.threads.create(metadata={"topic": "a"})
    # The handler stamped the owner on create, over whatever the client sent.
    assert owner(mine) == "alice"
    assert owner(theirs) == "bob"
    forged = await bob.threads.create(metadata={"owner": "alice"})
    assert owner(forged) == "bob"

    alice_ids = {t["thread_id"] for t in await alice.threads.search(limit=100)}
    bob_ids = {t["thread_id"] for t in await bob.threads.search(limit=100)}
    assert alice_ids == {mine["thread_id"]}
    assert bob_ids == {theirs["thread_id"], forged["thread_id"]}
    assert await alice.threads.count() == 1
    assert await bob.threads.count(metadata={"topic": "a"}) == 1
    # Asking for another owner's threads finds none of theirs: the handler stamps
    # the search's metadata too (as on LangGraph's server, where the same auth.py
    # answers bob's own for this search).
    found = await bob.threads.search(metadata={"owner": "alice"}, limit=100)
    assert {owner(t) for t in found} == {"bob"}
    # The graphs are everyone's (auth.py allows assistants).
    assert [a["assistant_id"] for a in await bob.assistants.search()] == [ASSISTANT]


async def test_another_users_thread_is_not_found_for_every_operation(clients: Clients) -> None:
    alice, bob = clients(ALICE), clients(BOB)
    thread = await alice.threads.create()
    tid = thread["thread_id"]
    await alice.runs.wait(tid, ASSISTANT, input=QUESTION)
    run = (await alice.runs.list(tid))[0]

    refused: list[Any] = [
        bob.threads.get(tid),
        bob.threads.update(tid, metadata={"owner": "bob"}),
        bob.threads.get_state(tid),
        bob.threads.get_history(tid),
        bob.threads.copy(tid),
        bob.runs.create(tid, ASSISTANT, input=QUESTION),
        bob.runs.wait(tid, ASSISTANT, input=QUESTION),
        bob.runs.list(tid),
        bob.runs.get(tid, run["run_id"]),
        bob.runs.join(tid, run["run_id"]),
        bob.runs.cancel(tid, run["run_id"]),
        bob.runs.delete(tid, run["run_id"]),
        bob.threads.delete(tid),
    ]
    for call in refused:
        with pytest.raises(httpx.HTTPStatusError) as exc:
            await call
        assert status_of(exc) == 404, exc.value.response.text
    # Nor may bob take its id with a thread of his own.
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await bob.threads.create(thread_id=tid, if_exists="do_nothing")
    assert status_of(exc) == 409

    # All of it is still alice's, untouched.
    assert owner(await alice.threads.get(tid)) == "alice"
    assert [r["run_id"] for r in await alice.runs.list(tid)] == [run["run_id"]]
    assert (await alice.runs.get(tid, run["run_id"]))["status"] == "success"
    await alice.runs.delete(tid, run["run_id"])
    await alice.threads.delete(tid)
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await alice.threads.get(tid)
    assert status_of(exc) == 404


async def test_a_run_makes_its_thread_the_users(clients: Clients) -> None:
    alice, bob = clients(ALICE), clients(BOB)
    run = await bob.runs.create(None, ASSISTANT, input=QUESTION)
    tid = run["thread_id"]
    await bob.runs.join(tid, run["run_id"])
    assert owner(await bob.threads.get(tid)) == "bob"
    assert tid not in {t["thread_id"] for t in await alice.threads.search(limit=100)}
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await alice.runs.get(tid, run["run_id"])
    assert status_of(exc) == 404


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(
        tmp_path / "tokens.jsonl", {"panel": "panel", "agent": f"agent:{ASSISTANT}"}
    )


async def test_with_tokens_the_panels_token_rides_in_the_api_key_and_the_user_in_authorization(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path, tokens: dict[str, str]
) -> None:
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        langgraph_config=CONFIG,
    )
    assert service.web is not None
    url = service.web.url.rstrip("/")
    alice = get_client(url=url, api_key=tokens["panel"], headers=ALICE)
    stranger = get_client(url=url, api_key=None, headers=ALICE)
    try:
        thread = await alice.threads.create()
        assert owner(thread) == "alice"
        # The end user alone is no caller: the service's token still decides.
        with pytest.raises(httpx.HTTPStatusError) as exc:
            await stranger.threads.get(thread["thread_id"])
        assert status_of(exc) == 401
    finally:
        await alice.http.client.aclose()
        await stranger.http.client.aclose()
