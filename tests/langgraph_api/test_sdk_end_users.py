"""End users, the LangGraph way: a langgraph.json's `auth` (end_users/auth.py, written
for LangGraph's server) decides who the user of each request is, stamps the owner on
what they make, and hides everyone else's threads and runs, through the official
langgraph-sdk over the real HTTP API."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support import reference
from tests.support.agents import Agent
from tests.support.langgraph_host import hosted
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
    async with hosted(CONFIG, service, nats_server, replica="lg-users") as agent:
        yield agent


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
    assert [a["graph_id"] for a in await bob.assistants.search()] == [ASSISTANT]


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


# -- the same auth.py and client script under `langgraph dev`, the reference --------------

THREADPLANE_GRAPH = Path(__file__).resolve().parents[2] / "examples" / "threadplane" / "graph.py"


@pytest.fixture
async def langgraph_dev(tmp_path: Path) -> AsyncIterator[str]:
    """`langgraph dev` serving the same graph with the same auth.py, on a copy (it
    writes its in-memory state's flushes beside the config)."""
    reference.require_reference()
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(THREADPLANE_GRAPH, app / "graph.py")
    shutil.copy(CONFIG.parent / "auth.py", app / "auth.py")
    config = json.loads(CONFIG.read_text())
    config["graphs"] = {ASSISTANT: "./graph.py:graph"}
    (app / "langgraph.json").write_text(json.dumps(config))
    async with reference.langgraph_dev(app) as url:
        yield url


async def answer_of(call: Awaitable[Any]) -> int:
    """The HTTP status a call is answered with (200 for any success)."""
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def observe(url: str) -> dict[str, Any]:
    """Two end users through langgraph-sdk; what each is shown and answered, with
    ids replaced by what they stand for, so two servers can be compared."""
    made = [get_client(url=url, api_key=None, headers=h) for h in (ALICE, BOB, {})]
    alice, bob, nobody = made
    seen: dict[str, Any] = {}
    try:
        seen["nobody"] = await answer_of(nobody.threads.search())
        mine = await alice.threads.create(metadata={"topic": "a"})
        theirs = await bob.threads.create(metadata={"topic": "a"})
        forged = await bob.threads.create(metadata={"owner": "alice"})
        seen["owners"] = [owner(mine), owner(theirs), owner(forged)]
        names = {
            t["thread_id"]: n for t, n in ((mine, "mine"), (theirs, "theirs"), (forged, "forged"))
        }
        for who, client in (("alice", alice), ("bob", bob)):
            found = await client.threads.search(limit=100)
            seen[f"{who} sees"] = sorted(names.get(t["thread_id"], "other") for t in found)
        seen["counts"] = [
            await alice.threads.count(),
            await bob.threads.count(metadata={"topic": "a"}),
        ]
        asked = await bob.threads.search(metadata={"owner": "alice"}, limit=100)
        seen["bob asks for alice's"] = sorted(owner(t) for t in asked)
        seen["bob's graphs"] = [a["graph_id"] for a in await bob.assistants.search()]
        # The handler stamps an update's metadata too: no one gives a thread away.
        given = await alice.threads.update(mine["thread_id"], metadata={"owner": "bob", "x": 1})
        seen["alice gives hers away"] = [owner(given), (given["metadata"] or {}).get("x")]

        tid = mine["thread_id"]
        await alice.runs.wait(tid, ASSISTANT, input=QUESTION)
        run = (await alice.runs.list(tid))[0]
        rid = run["run_id"]
        calls: dict[str, Awaitable[Any]] = {
            "get": bob.threads.get(tid),
            "update": bob.threads.update(tid, metadata={"owner": "bob"}),
            "state": bob.threads.get_state(tid),
            "history": bob.threads.get_history(tid),
            "copy": bob.threads.copy(tid),
            "run": bob.runs.create(tid, ASSISTANT, input=QUESTION),
            "wait": bob.runs.wait(tid, ASSISTANT, input=QUESTION),
            "list runs": bob.runs.list(tid),
            "get run": bob.runs.get(tid, rid),
            "join run": bob.runs.join(tid, rid),
            "cancel run": bob.runs.cancel(tid, rid),
            "delete run": bob.runs.delete(tid, rid),
            "delete": bob.threads.delete(tid),
            "take its id": bob.threads.create(thread_id=tid, if_exists="do_nothing"),
        }
        seen["bob on alice's thread"] = {name: await answer_of(c) for name, c in calls.items()}
        seen["alice's after"] = [
            owner(await alice.threads.get(tid)),
            [r["run_id"] == rid for r in await alice.runs.list(tid)],
            (await alice.runs.get(tid, rid))["status"],
        ]

        # Pruning: the handler's filter hides alice's thread from bob, so a list that
        # names it erases nothing; his own are erased.
        seen["bob prunes"] = [
            await answer_of(bob.threads.prune([tid, theirs["thread_id"]])),
            await bob.threads.prune([theirs["thread_id"], forged["thread_id"]]),
            await bob.threads.count(),
            await alice.threads.count(),
        ]

        # LangGraph's server deletes a thread-less run's thread when it ends unless
        # told to keep it (turnkeeper always keeps it; docs/langgraph-api.md).
        threadless = await bob.runs.create(None, ASSISTANT, input=QUESTION, on_completion="keep")
        await bob.runs.join(threadless["thread_id"], threadless["run_id"])
        seen["thread-less run"] = [
            owner(await bob.threads.get(threadless["thread_id"])),
            await answer_of(alice.runs.get(threadless["thread_id"], threadless["run_id"])),
        ]
    finally:
        for c in made:
            await c.http.client.aclose()
    return seen


async def test_the_same_auth_py_answers_the_same_on_turnkeeper_and_langgraph_dev(
    service: TurnkeeperServer, host: Agent, langgraph_dev: str
) -> None:
    assert service.web is not None
    reference = await observe(langgraph_dev)
    ours = await observe(service.web.url.rstrip("/"))
    # One known difference (decision 282): LangGraph's server answers a copy of a
    # thread it does not find, or whose filter hides it, with 409; turnkeeper answers
    # 404, as for any thread a caller cannot see.
    refused = reference["bob on alice's thread"]
    assert refused["copy"] == 409
    refused["copy"] = 404
    assert ours == reference
    assert ours["bob prunes"] == [404, {"pruned_count": 2}, 0, 1]


async def test_each_user_sees_only_their_own_crons(clients: Clients) -> None:
    """The `crons` resource asked as LangGraph's server asks it: the handler stamps
    the owner on a cron made and hides the others' from get, update, delete and
    search; a cron on a thread the user cannot see is not found."""
    alice, bob = clients(ALICE), clients(BOB)
    thread: Any = await alice.threads.create()
    on_thread: Any = await alice.crons.create_for_thread(
        thread["thread_id"], ASSISTANT, schedule="0 4 * * *"
    )
    cron: Any = await alice.crons.create(ASSISTANT, schedule="0 5 * * *", metadata={"k": 1})
    assert cron["metadata"] == {"k": 1, "owner": "alice"}
    assert cron["user_id"] == "alice"
    assert await alice.crons.count() == 2
    assert await bob.crons.search() == [] and await bob.crons.count() == 0
    for call in (
        bob.crons.update(cron["cron_id"], enabled=False),
        bob.crons.delete(on_thread["cron_id"]),
        bob.crons.create_for_thread(thread["thread_id"], ASSISTANT, schedule="* * * * *"),
    ):
        with pytest.raises(httpx.HTTPStatusError) as exc:
            await call
        assert status_of(exc) == 404
    await alice.crons.delete(cron["cron_id"])
    assert await alice.crons.count() == 1


async def test_cancel_many_takes_only_the_users_own_runs(clients: Clients) -> None:
    """`runs.cancel_many` asked as LangGraph's server asks it (`threads:update`, each
    run's thread under the handler's filter): another user's run ids are not found,
    and a status cancels the user's own runs alone. The runs are due later: pending
    until cancelled, whatever the machine's pace."""
    alice, bob = clients(ALICE), clients(BOB)
    made: dict[str, tuple[str, str]] = {}
    for name, sdk in (("alice", alice), ("bob", bob)):
        thread: Any = await sdk.threads.create()
        run: Any = await sdk.runs.create(
            thread["thread_id"], ASSISTANT, input=QUESTION, after_seconds=3600
        )
        made[name] = (thread["thread_id"], run["run_id"])
    bobs_thread, bobs_run = made["bob"]
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await alice.runs.cancel_many(thread_id=bobs_thread, run_ids=[bobs_run])
    assert status_of(exc) == 404
    await alice.runs.cancel_many(status="pending")
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await alice.runs.get(*made["alice"])
    assert status_of(exc) == 404
    assert (await bob.runs.get(bobs_thread, bobs_run))["status"] == "pending"
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await alice.runs.cancel_many(status="all")  # none of hers is left
    assert status_of(exc) == 404
    await bob.runs.cancel_many(thread_id=bobs_thread, run_ids=[bobs_run])
    with pytest.raises(httpx.HTTPStatusError) as exc:
        await bob.runs.get(bobs_thread, bobs_run)
    assert status_of(exc) == 404
