"""A web page of another site cannot drive the token-less service on loopback
(web/cross_site.py, decision 273): what a browser sends for a page (a `text/plain`
body, a foreign `Origin`, `Sec-Fetch-Site: cross-site`) is refused before any run
starts, while LangGraph's own SDK (JSON, no `Origin`) works as before, and an origin
given with `--cors-origin` is served. `--cors-origin '*'` without tokens refuses to
start. Raw HTTP requests show the refusals, as a browser would send them."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.service import ServiceFactory

ASSISTANT = "durable-execution"
RUN: Any = {
    "assistant_id": ASSISTANT,
    "input": {"messages": [{"role": "user", "content": "what is a turn?"}]},
}


async def post(
    url: str, body: bytes, headers: dict[str, str], method: str = "POST"
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, data=body, headers=headers) as r,
    ):
        return r.status, await r.json(content_type=None)


@pytest.mark.shared_deployment
async def test_a_page_of_another_site_cannot_start_a_run(
    sdk: LangGraphClient, api_url: str
) -> None:
    thread = (await sdk.threads.create())["thread_id"]
    body = json.dumps(RUN).encode()
    runs = f"{api_url}/threads/{thread}/runs"
    # A "simple request" a page sends without asking: JSON inside text/plain.
    for url in (runs, f"{api_url}/runs", f"{runs}/wait"):
        status, answer = await post(url, body, {"Content-Type": "text/plain"})
        assert status == 415, (url, answer)
        assert "application/json" in answer["detail"]
    # JSON from a page of another origin (fetch sends it only after a preflight,
    # but the service refuses it itself rather than count on the browser).
    status, answer = await post(
        runs, body, {"Content-Type": "application/json", "Origin": "https://evil.example"}
    )
    assert status == 403
    assert "--cors-origin https://evil.example" in answer["detail"]
    status, _ = await post(runs, body, {"Content-Type": "application/json", "Origin": "null"})
    assert status == 403
    # A browser that sends no Origin but says where the request comes from.
    status, _ = await post(
        runs, body, {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403
    # Erasing the thread from another site: refused too, and the thread stays.
    status, _ = await post(
        f"{api_url}/threads/{thread}", b"", {"Origin": "https://evil.example"}, "DELETE"
    )
    assert status == 403
    assert (await sdk.threads.get(thread))["thread_id"] == thread
    # No run started on the thread.
    assert await sdk.runs.list(thread) == []
    # The SDK (JSON, no Origin) still runs the graph; the console's own origin
    # (the Host it was sent to) passes too.
    done = await sdk.runs.wait(thread, ASSISTANT, input=RUN["input"])
    assert isinstance(done, dict) and done["messages"]
    own = api_url.split("://", 1)[1]
    status, answer = await post(
        f"{api_url}/threads/search",
        b"{}",
        {"Content-Type": "application/json", "Origin": f"http://{own}"},
    )
    assert status == 200, answer


async def test_a_configured_origin_may_call_and_a_connect_route_refuses_others(
    make_service: ServiceFactory,
) -> None:
    service = await make_service(
        http_listen="127.0.0.1:0", http_cors_origins=("https://panel.example",)
    )
    assert service.web is not None
    base = service.web.url.rstrip("/")
    headers = {"Content-Type": "application/json", "Origin": "https://panel.example"}
    status, answer = await post(f"{base}/threads", b"{}", headers)
    assert status == 200, answer
    # Another origin is refused on the Connect routes too, in their error shape.
    status, answer = await post(
        f"{base}/turnkeeper.v1.TurnService/TurnStatus",
        b'{"turnId": "t1"}',
        {**headers, "Origin": "https://evil.example"},
    )
    assert status == 403
    assert answer["code"] == "permission_denied"
    assert "--cors-origin" in answer["message"]


async def test_any_origin_without_tokens_refuses_to_start(make_service: ServiceFactory) -> None:
    with pytest.raises(ValueError, match="--tokens-file") as info:
        await make_service(http_listen="127.0.0.1:0", http_cors_origins=("*",))
    assert "--cors-origin https://" in str(info.value)


async def test_any_origin_with_tokens_starts(make_service: ServiceFactory, tmp_path: Any) -> None:
    from tests.support.security import write_tokens

    write_tokens(tmp_path / "tokens.jsonl")
    service: TurnkeeperServer = await make_service(
        http_listen="127.0.0.1:0",
        http_cors_origins=("*",),
        tokens_file=tmp_path / "tokens.jsonl",
    )
    assert service.web is not None
