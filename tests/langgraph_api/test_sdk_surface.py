"""The API's surface as LangGraph's server has it, through LangGraph's own client:
every error is `{"detail": ...}` JSON (no route, a method a route does not take),
`/ok` and `/info` answer in the reference's keys, and `/openapi.json` (with `/docs`)
is made from the routes the service serves: each is in it, and nothing else."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, get_args

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import APIStatusError, NotFoundError
from langgraph_sdk.schema import SortOrder, ThreadSortBy, ThreadStatus
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.langgraph.openapi import DECLARED

# Paths served in the document that are not the API's (the console's pages).
CONSOLE = re.compile(r"^/$|^/console/")


@pytest.fixture
async def bare(api_url: str) -> AsyncIterator[LangGraphClient]:
    """LangGraph's client on a service with no agent: the surface needs none."""
    client = get_client(url=api_url)
    try:
        yield client
    finally:
        await client.http.client.aclose()


@pytest.mark.shared_deployment
async def test_no_route_and_a_wrong_method_answer_json(bare: LangGraphClient) -> None:
    with pytest.raises(NotFoundError) as missing:
        await bare.http.get("/no/such/route")
    assert isinstance(missing.value.body, dict)
    assert "/no/such/route" in missing.value.body["detail"]
    # A wrong method on a LangGraph path: 405 with the methods it takes.
    with pytest.raises(APIStatusError) as wrong:
        await bare.http.put("/threads/search", json={})
    assert wrong.value.status_code == 405
    assert isinstance(wrong.value.body, dict) and "POST" in wrong.value.body["detail"]
    # (the path is also /threads/{thread_id}'s, which takes GET, PATCH and DELETE)
    assert "POST" in wrong.value.response.headers["Allow"].split(",")
    with pytest.raises(APIStatusError) as get_wait:
        await bare.http.get("/runs/wait")
    assert get_wait.value.status_code == 405
    assert get_wait.value.response.headers["Allow"] == "POST"
    assert get_wait.value.response.headers["Content-Type"].startswith("application/json")
    # The console's own 404 page stays a page.
    async with httpx.AsyncClient(base_url=bare.http.client.base_url) as http:
        page = await http.get("/console/nothing-here")
    assert page.status_code == 404 and page.headers["Content-Type"].startswith("text/html")


@pytest.mark.shared_deployment
async def test_ok_and_info_in_the_references_keys(bare: LangGraphClient) -> None:
    ok: Any = await bare.http.get("/ok")
    assert ok == {"ok": True, "services": {}}
    info: Any = await bare.http.get("/info")
    # The keys `langgraph dev` (langgraph-api 0.16) answers.
    assert set(info) == {"version", "langgraph_py_version", "flags", "host"}
    assert set(info["flags"]) == {
        "assistants",
        "crons",
        "langsmith",
        "langsmith_tracing_replicas",
        "langsmith_tracing_session_on_runs",
    }
    assert info["flags"]["assistants"] is True and info["flags"]["crons"] is True
    assert set(info["host"]) == {
        "kind",
        "project_id",
        "host_revision_id",
        "revision_id",
        "tenant_id",
    }
    assert isinstance(info["version"], str) and info["version"]


def _served(service: TurnkeeperServer) -> set[tuple[str, str]]:
    assert service.web is not None
    return {
        (route.method.lower(), route.resource.canonical)
        for route in service.web.app.router.routes()
        if route.resource is not None
        and route.method != "HEAD"
        and not CONSOLE.match(route.resource.canonical)
    }


def _example(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "00000000-0000-4000-8000-000000000000", path)


async def test_the_openapi_document_is_every_route_served(
    service: TurnkeeperServer, bare: LangGraphClient
) -> None:
    spec: Any = await bare.http.get("/openapi.json")
    assert spec["openapi"].startswith("3.")
    documented = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert documented == _served(service)
    # Nothing is declared for a route that is not served (a stale declaration).
    assert {(m.lower(), p) for m, p in DECLARED} <= documented
    operations = [op for ops in spec["paths"].values() for op in ops.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids)) and all(op["responses"] for op in operations)
    # Each path parameter of a template is declared.
    for path, ops in spec["paths"].items():
        for op in ops.values():
            named = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert named == set(re.findall(r"\{([^}]+)\}", path)), path
    # The LangGraph API's routes, the new ones among them.
    for method, path in [
        ("post", "/threads/search"),
        ("post", "/threads/count"),
        ("post", "/threads/prune"),
        ("get", "/threads/{thread_id}/runs/{run_id}/stream"),
        ("get", "/ok"),
        ("get", "/info"),
        ("get", "/openapi.json"),
        ("get", "/docs"),
    ]:
        assert (method, path) in documented
    # Each path of the document is served: none answers "no route" or 405.
    async with httpx.AsyncClient(base_url=bare.http.client.base_url) as http:
        for method, path in sorted(documented):
            if path.endswith("/stream") or path.endswith("/wait") or path.endswith("/join"):
                continue  # served, as the set above shows; a call would wait for a run
            answer = await http.request(method.upper(), _example(path), json={})
            assert answer.status_code != 405, (method, path)
            if answer.status_code == 404:
                assert "no route" not in answer.text, (method, path)


@pytest.mark.shared_deployment
async def test_the_documents_schemas_are_the_handlers(bare: LangGraphClient) -> None:
    spec: Any = await bare.http.get("/openapi.json")
    schemas = spec["components"]["schemas"]
    search = spec["paths"]["/threads/search"]["post"]
    assert search["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ThreadSearchRequest"
    }
    options = schemas["ThreadSearchRequest"]["properties"]
    # What the SDK may send, the document takes.
    assert set(options["sort_by"]["enum"]) == set(get_args(ThreadSortBy))
    assert set(options["sort_order"]["enum"]) == set(get_args(SortOrder))
    assert set(options["status"]["enum"]) == set(get_args(ThreadStatus))
    prune = schemas["ThreadPruneRequest"]
    assert prune["required"] == ["thread_ids"]
    assert prune["properties"]["strategy"]["enum"] == ["delete", "keep_latest"]
    # A thread's schema names the fields a real thread has.
    thread: Any = await bare.threads.create(metadata={"n": 1})
    assert set(schemas["Thread"]["properties"]) == set(thread)
    for error in ("ErrorResponse",):
        assert schemas[error]["required"] == ["detail"]


@pytest.mark.shared_deployment
async def test_docs_is_a_page_of_every_documented_route(bare: LangGraphClient) -> None:
    spec: Any = await bare.http.get("/openapi.json")
    async with httpx.AsyncClient(base_url=bare.http.client.base_url) as http:
        page = await http.get("/docs")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    # Nothing loaded from elsewhere: the service may be offline.
    assert "http://" not in page.text and "https://" not in page.text
    assert "<script" not in page.text
    for path in spec["paths"]:
        assert path.replace("&", "&amp;") in page.text
