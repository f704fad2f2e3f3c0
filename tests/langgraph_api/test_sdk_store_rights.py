"""Who may use the store over the LangGraph API with the service's tokens (decision
351): agents, operators and admins the whole store; a panel token only for an end
user whom a langgraph.json's `@auth.on.store` handler confines. A panel without
end users, or under an auth with no handler for the store, is refused (403) and
told what to configure; nothing it asked is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from langgraph_sdk import get_client
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

STORE_AUTH = Path(__file__).resolve().parent / "end_users" / "store_auth.py"
ALICE = {"Authorization": "Bearer token-alice"}
# An auth with end users and a handler for threads only: nothing confines the store.
NO_STORE_HANDLER = """
from langgraph_sdk import Auth

auth = Auth()


@auth.authenticate
async def authenticate(authorization: str | None) -> Auth.types.MinimalUserDict:
    return {"identity": "alice", "permissions": []}


@auth.on.threads
async def threads(ctx, value):
    return None
"""


async def _status(call: Any) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def _every_call(url: str, api_key: str, headers: dict[str, str]) -> list[int]:
    client = get_client(url=url, api_key=api_key, headers=headers)
    try:
        return [
            await _status(client.store.put_item(("notes",), "k", {"v": 1})),
            await _status(client.store.get_item(("notes",), "k")),
            await _status(client.store.search_items(("notes",))),
            await _status(client.store.list_namespaces()),
            await _status(client.store.delete_item(("notes",), "k")),
        ]
    finally:
        await client.http.client.aclose()


async def _service(
    make_service: ServiceFactory, nats_url: str, tmp_path: Path, **options: Any
) -> tuple[str, dict[str, str]]:
    tokens = write_tokens(
        tmp_path / "tokens.jsonl",
        {"panel": "panel", "operator": "operator", "agent": "agent:memory"},
    )
    service: TurnkeeperServer = await make_service(
        nats_url=nats_url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        **options,
    )
    assert service.web is not None
    return service.web.url.rstrip("/"), tokens


async def test_a_panel_without_end_users_is_refused_the_store(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    url, tokens = await _service(make_service, nats_server.url, tmp_path)
    assert await _every_call(url, tokens["panel"], {}) == [403] * 5
    async with httpx.AsyncClient(base_url=url, headers={"x-api-key": tokens["panel"]}) as http:
        refused = await http.get("/store/items", params={"namespace": "notes", "key": "k"})
    assert refused.status_code == 403 and "without end users" in refused.text
    # Nothing the panel asked was stored; operators and agents use the whole store.
    operator = get_client(url=url, api_key=tokens["operator"])
    try:
        assert await operator.store.get_item(("notes",), "k") is None
    finally:
        await operator.http.client.aclose()
    assert await _every_call(url, tokens["operator"], {}) == [200] * 5
    assert await _every_call(url, tokens["agent"], {}) == [200] * 5


async def test_a_panel_is_confined_by_the_store_handler(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    url, tokens = await _service(
        make_service, nats_server.url, tmp_path, langgraph_auth=f"{STORE_AUTH}:auth"
    )
    assert await _every_call(url, tokens["panel"], ALICE) == [200] * 5
    alice = get_client(url=url, api_key=tokens["panel"], headers=ALICE)
    try:
        await alice.store.put_item(("notes",), "k", {"v": 2})
        assert (await alice.store.list_namespaces())["namespaces"] == [["alice", "notes"]]
    finally:
        await alice.http.client.aclose()


async def test_a_panel_under_an_auth_without_a_store_handler_is_refused(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    auth_file = tmp_path / "auth.py"
    auth_file.write_text(NO_STORE_HANDLER)
    url, tokens = await _service(
        make_service, nats_server.url, tmp_path, langgraph_auth=f"{auth_file}:auth"
    )
    assert await _every_call(url, tokens["panel"], ALICE) == [403] * 5
    async with httpx.AsyncClient(
        base_url=url, headers={"x-api-key": tokens["panel"], **ALICE}
    ) as http:
        refused = await http.post("/store/items/search", json={"namespace_prefix": []})
    assert refused.status_code == 403 and "no @auth.on.store handler" in refused.text
    assert await _every_call(url, tokens["operator"], ALICE) == [200] * 5
