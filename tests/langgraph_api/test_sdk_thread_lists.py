"""Thread lists as LangGraph's server answers them, through its own client: counts
past a page, every `threads.search` option the SDK sends (sort_by, sort_order,
select, extract, ids, status, values), and `threads.prune`, which is erasure:
DeleteThread's right, each thread audited (decision 298)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, PermissionDeniedError, UnprocessableEntityError
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import operations_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.langgraph import thread_lists

from tests.support.nats import NatsServer
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.both_backends

ASSISTANT = "durable-execution"


@pytest.fixture
async def bare(api_url: str) -> AsyncIterator[LangGraphClient]:
    """LangGraph's client on a service with no agent: thread lists need none."""
    client = get_client(url=api_url)
    try:
        yield client
    finally:
        await client.http.client.aclose()


async def _made(sdk: LangGraphClient, n: int, tag: str) -> list[str]:
    ids = []
    for i in range(n):
        thread = await sdk.threads.create(metadata={"tag": tag, "i": i})
        ids.append(thread["thread_id"])
    return ids


async def test_count_is_every_match_not_a_page(bare: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    await _made(bare, 13, tag)
    await _made(bare, 2, "other")
    assert await bare.threads.count(metadata={"tag": tag}) == 13
    assert await bare.threads.count() == 15
    assert await bare.threads.count(status="idle") == 15
    assert await bare.threads.count(status="busy") == 0
    page = await bare.threads.search(metadata={"tag": tag}, limit=5, offset=10)
    assert len(page) == 3
    # The reference's paging headers (langgraph-api's get_pagination_headers).
    async with httpx.AsyncClient(base_url=bare.http.client.base_url) as http:
        first = await http.post("/threads/search", json={"metadata": {"tag": tag}, "limit": 5})
        last = await http.post(
            "/threads/search", json={"metadata": {"tag": tag}, "limit": 5, "offset": 10}
        )
    assert first.headers["X-Pagination-Next"] == "5"
    assert first.headers["X-Pagination-Total"] == "6"
    assert "X-Pagination-Next" not in last.headers
    assert last.headers["X-Pagination-Total"] == "13"


async def test_search_sorts_selects_extracts_and_narrows(bare: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    made = await _made(bare, 4, tag)
    by_id = await bare.threads.search(metadata={"tag": tag}, sort_by="thread_id", sort_order="asc")
    assert [t["thread_id"] for t in by_id] == sorted(made)
    down = await bare.threads.search(metadata={"tag": tag}, sort_by="thread_id", sort_order="desc")
    assert [t["thread_id"] for t in down] == sorted(made, reverse=True)
    oldest = await bare.threads.search(
        metadata={"tag": tag}, sort_by="created_at", sort_order="asc"
    )
    assert [t["thread_id"] for t in oldest] == made
    # The default: updated_at, newest first; a metadata update moves a thread up.
    await bare.threads.update(made[1], metadata={"seen": True})
    newest = await bare.threads.search(metadata={"tag": tag})
    assert newest[0]["thread_id"] == made[1]
    assert [t["thread_id"] for t in newest[1:]] == [made[3], made[2], made[0]]

    selected = await bare.threads.search(
        metadata={"tag": tag}, select=["thread_id", "status"], sort_by="thread_id"
    )
    assert all(set(t) == {"thread_id", "status"} for t in selected)
    extracted: Any = await bare.threads.search(
        ids=[made[2]], select=["thread_id"], extract={"i": "metadata.i", "none": "values.x[0]"}
    )
    assert extracted == [{"thread_id": made[2], "extracted": {"i": 2, "none": None}}]

    two = await bare.threads.search(ids=[made[0], made[3]], sort_by="thread_id")
    assert {t["thread_id"] for t in two} == {made[0], made[3]}
    assert await bare.threads.search(metadata={"tag": tag}, status="interrupted") == []

    sdk: Any = bare.threads  # the SDK's types refuse these before sending them
    with pytest.raises(UnprocessableEntityError, match="sort_by"):
        await sdk.search(sort_by="size")
    with pytest.raises(UnprocessableEntityError, match="sort_order"):
        await sdk.search(sort_order="sideways")
    with pytest.raises(UnprocessableEntityError, match="select"):
        await sdk.search(select=["thread_id", "secrets"])
    with pytest.raises(UnprocessableEntityError, match="status"):
        await sdk.search(status="sleeping")
    with pytest.raises(UnprocessableEntityError, match="extract"):
        await sdk.search(extract={"x": "owner.name"})


async def test_search_by_values_and_status_of_runs(sdk: LangGraphClient) -> None:
    tag = uuid.uuid4().hex
    ran = await sdk.threads.create(metadata={"tag": tag})
    idle = await sdk.threads.create(metadata={"tag": tag})
    question: Any = {"messages": [{"role": "user", "content": "hi"}]}
    await sdk.runs.wait(ran["thread_id"], ASSISTANT, input=question)
    found = await sdk.threads.search(
        metadata={"tag": tag}, values={"messages": [{"content": "hi"}]}
    )
    assert [t["thread_id"] for t in found] == [ran["thread_id"]]
    assert await sdk.threads.count(metadata={"tag": tag}, values={"messages": []}) == 1
    by_state = await sdk.threads.search(
        metadata={"tag": tag}, sort_by="state_updated_at", sort_order="desc"
    )
    assert [t["thread_id"] for t in by_state] == [ran["thread_id"], idle["thread_id"]]


async def test_prune_erases_the_threads_named(bare: LangGraphClient) -> None:
    made = await _made(bare, 3, uuid.uuid4().hex)
    nobody = str(uuid.uuid4())
    # A thread named twice is erased once; one that is not is skipped.
    answer: Any = await bare.threads.prune([made[0], made[1], nobody, made[0]])
    assert answer == {"pruned_count": 2}
    for gone in made[:2]:
        with pytest.raises(NotFoundError):
            await bare.threads.get(gone)
    assert (await bare.threads.get(made[2]))["thread_id"] == made[2]
    assert await bare.threads.prune([]) == {"pruned_count": 0}
    with pytest.raises(UnprocessableEntityError, match="keep_latest"):
        await bare.threads.prune([made[2]], strategy="keep_latest")
    with pytest.raises(UnprocessableEntityError, match="thread_id"):
        await bare.threads.prune(["x" * 5000])
    assert (await bare.threads.get(made[2]))["thread_id"] == made[2]


ROLES = {"panel": "panel", "operator": "operator", "admin": "admin"}


@pytest.fixture
def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(tmp_path / "tokens.jsonl", ROLES)


async def test_prune_is_erasure_an_admins_right_audited(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path, tokens: dict[str, str]
) -> None:
    service: TurnkeeperServer = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl"
    )
    assert service.web is not None
    url = service.web.url.rstrip("/")
    clients = {name: get_client(url=url, api_key=token) for name, token in tokens.items()}
    try:
        panel, operator, admin = clients["panel"], clients["operator"], clients["admin"]
        mine = (await panel.threads.create())["thread_id"]
        theirs = (await admin.threads.create())["thread_id"]
        # A panel erases nothing, not even its own threads; nor does an operator,
        # who inspects and resumes but does not destroy history (as DeleteThread).
        with pytest.raises(PermissionDeniedError):
            await panel.threads.prune([mine])
        with pytest.raises(PermissionDeniedError):
            await operator.threads.prune([mine, theirs])
        assert (await admin.threads.get(mine))["thread_id"] == mine
        assert await admin.threads.prune([mine, theirs]) == {"pruned_count": 2}
        with pytest.raises(NotFoundError):
            await admin.threads.get(mine)

        options = ConnectionOptions(target=service.address, bearer_token=tokens["operator"])
        async with AsyncTurnkeeperClient(options) as grpc_client:
            audit = await grpc_client.list_audit(operations_pb2.ListAuditRequest())
        records = [
            (r.action, r.target.split(" ")[0], r.actor.split(" via ")[0], r.outcome)
            for r in reversed(audit.records)
            if r.action == "delete_thread"
        ]
        assert records == [
            ("delete_thread", "prune", "panel (panel)", "PERMISSION_DENIED"),
            ("delete_thread", "prune", "operator (operator)", "PERMISSION_DENIED"),
            ("delete_thread", mine, "admin (admin)", "ok"),
            ("delete_thread", theirs, "admin (admin)", "ok"),
        ]
    finally:
        for sdk in clients.values():
            await sdk.http.client.aclose()


async def test_ttl_and_include_are_refused_and_return_minimal_is_honoured(
    bare: LangGraphClient,
) -> None:
    with pytest.raises(UnprocessableEntityError, match="ttl"):
        await bare.threads.create(ttl=60)
    thread = await bare.threads.create(metadata={"a": 1})
    with pytest.raises(UnprocessableEntityError, match="ttl"):
        await bare.threads.update(thread["thread_id"], metadata={"b": 2}, ttl=60)
    with pytest.raises(UnprocessableEntityError, match="ttl"):
        await bare.threads.get(thread["thread_id"], include=["ttl"])
    assert (await bare.threads.get(thread["thread_id"]))["metadata"] == {"a": 1}
    # Prefer: return=minimal, as the SDK sends it: no body, the change made.
    untyped: Any = bare.threads  # typed to return None: what came back is checked
    minimal = await untyped.update(thread["thread_id"], metadata={"b": 2}, return_minimal=True)
    assert minimal is None
    assert (await bare.threads.get(thread["thread_id"]))["metadata"] == {"a": 1, "b": 2}


@pytest.mark.shared_deployment
async def test_state_and_history_select(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    question: Any = {"messages": [{"role": "user", "content": "hi"}]}
    await sdk.runs.wait(thread_id, ASSISTANT, input=question)
    full: Any = await sdk.threads.get_state(thread_id)
    assert len(full["values"]) > 1 and "messages" in full["values"]
    state: Any = await sdk.threads.get_state(thread_id, select=["values.messages", "next"])
    assert set(state) == {"values", "next"} and set(state["values"]) == {"messages"}
    assert state["values"]["messages"] == full["values"]["messages"]
    at: Any = await sdk.threads.get_state(
        thread_id, checkpoint_id=full["checkpoint"]["checkpoint_id"], select=["checkpoint"]
    )
    assert at == {"checkpoint": full["checkpoint"]}
    history: Any = await sdk.threads.get_history(thread_id, limit=3, select=["checkpoint"])
    assert len(history) == 3 and all(set(h) == {"checkpoint"} for h in history)
    states: Any = sdk.threads  # the SDK's types refuse this before sending it
    with pytest.raises(UnprocessableEntityError, match="select"):
        await states.get_state(thread_id, select=["secrets"])


async def test_more_threads_than_one_list_reads_is_a_422_not_part_of_them(
    bare: LangGraphClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(thread_lists, "MAX_SCAN", 3)
    tag = uuid.uuid4().hex
    await _made(bare, 4, tag)
    with pytest.raises(UnprocessableEntityError, match="more than 3 threads match"):
        await bare.threads.count(metadata={"tag": tag})
    with pytest.raises(UnprocessableEntityError, match="narrow the search"):
        await bare.threads.search(metadata={"tag": tag}, limit=1)
    assert len(await bare.threads.search(metadata={"tag": tag, "i": 0})) == 1


async def test_a_panel_on_another_origin_reads_the_paging_headers(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(
        http_listen="127.0.0.1:0", http_cors_origins=("https://panel.example",)
    )
    assert service.web is not None
    async with httpx.AsyncClient(base_url=service.web.url) as http:
        for _ in range(2):
            await http.post("/threads", json={})
        found = await http.post(
            "/threads/search", json={"limit": 1}, headers={"Origin": "https://panel.example"}
        )
    assert found.status_code == 200 and found.headers["X-Pagination-Next"] == "1"
    exposed = {h.strip().lower() for h in found.headers["Access-Control-Expose-Headers"].split(",")}
    assert {"x-pagination-next", "x-pagination-total", "content-location"} <= exposed
