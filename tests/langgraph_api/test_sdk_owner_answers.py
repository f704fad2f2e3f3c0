"""A thread's owner answers its interrupt; editing its state is the owner's only where
the deployment says so (decision 309), over the LangGraph API with the official SDK.

The payment gate of test_sdk_rights.py, made by a panel: that panel (the thread's
owner) answers the gate, another panel does not even see it, and the owner's
update_state, Command(update/goto) and fork are refused and audited unless the
service runs with ``owners_edit_state`` (``--owners-edit-state``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import TurnNotFound
from turnkeeper.v1 import operations_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.both_backends, pytest.mark.timeout(180)]

PAYMENT = "payment"
CONFIG = Path(__file__).resolve().parent / "graphs" / "payment.json"
ROLES = {
    "agent": f"agent:{PAYMENT}",
    "panel": "panel",
    "other-panel": "panel",
    "operator": "operator",
}


@pytest.fixture
def roles() -> dict[str, str]:
    return ROLES


@pytest.fixture(params=[False, True], ids=["owners-answer", "owners-edit"])
def owners_edit_state(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
async def service(
    make_service: ServiceFactory,
    nats_server: NatsServer,
    tmp_path: Path,
    tokens: dict[str, str],
    owners_edit_state: bool,
) -> TurnkeeperServer:
    return await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        owners_edit_state=owners_edit_state,
    )


@pytest.fixture
async def sdks(
    service: TurnkeeperServer, api_url: str, nats_server: NatsServer, tokens: dict[str, str]
) -> AsyncIterator[dict[str, LangGraphClient]]:
    async with hosted(CONFIG, service, nats_server, replica="lg-owner", token=tokens["agent"]):
        clients = {
            name: get_client(url=api_url, api_key=tokens[name])
            for name in ("panel", "other-panel", "operator")
        }
        try:
            yield clients
        finally:
            for sdk in clients.values():
                await sdk.http.client.aclose()


async def _status(call: Awaitable[Any]) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def _receipts(sdk: LangGraphClient, thread_id: str) -> list[Any]:
    made = []
    for run in await sdk.runs.list(thread_id):
        listed: Any = await sdk.http.get(f"/threads/{thread_id}/runs/{run['run_id']}/effects")
        made += listed["effects"]
    return made


async def _audit(service: TurnkeeperServer, token: str, thread_id: str) -> list[tuple[str, ...]]:
    options = ConnectionOptions(target=service.address, bearer_token=token)
    async with AsyncTurnkeeperClient(options) as client:
        audit = await client.list_audit(operations_pb2.ListAuditRequest())
    return [
        (r.action, r.actor.split(" via ")[0], r.outcome)
        for r in reversed(audit.records)
        if r.target == thread_id or r.action == "resume"
    ]


async def test_the_owner_answers_its_threads_interrupt_and_edits_only_where_allowed(
    service: TurnkeeperServer,
    tokens: dict[str, str],
    sdks: dict[str, LangGraphClient],
    owners_edit_state: bool,
) -> None:
    panel, other, operator = sdks["panel"], sdks["other-panel"], sdks["operator"]
    thread = await panel.threads.create()
    thread_id = thread["thread_id"]
    run = await panel.runs.create(thread_id, PAYMENT, input={"amount": 500})
    await panel.runs.join(thread_id, run["run_id"])
    parked: Any = await panel.threads.get_state(thread_id)
    assert parked["next"] == ["gate"]

    # Another panel neither answers nor edits it: to it the thread is not there.
    for call in (
        other.runs.wait(thread_id, PAYMENT, command={"resume": True}),
        other.runs.wait(thread_id, PAYMENT, command={"update": {"approved": True}, "goto": "act"}),
        other.threads.update_state(thread_id, {"approved": True}, as_node="gate"),
    ):
        assert await _status(call) == 404

    # The owner answers its gate: the payment runs once.
    approved: Any = await panel.runs.wait(thread_id, PAYMENT, command={"resume": True})
    assert approved["approved"] is True and len(approved["receipts"]) == 1
    assert len(await _receipts(operator, thread_id)) == 1
    done: Any = await panel.threads.get_state(thread_id)

    # Editing the (finished) thread's state: the owner's only where allowed.
    edit = panel.threads.update_state(thread_id, {"amount": 7}, as_node="gate")
    goto = panel.runs.wait(thread_id, PAYMENT, command={"update": {"amount": 9}, "goto": "act"})
    fork = panel.runs.wait(
        thread_id, PAYMENT, input={"amount": 1}, checkpoint_id=parked["checkpoint_id"]
    )
    statuses = [await _status(edit), await _status(goto), await _status(fork)]
    receipts = await _receipts(operator, thread_id)
    if owners_edit_state:
        assert statuses == [200, 200, 200]
        # The goto went past the gate to act: a second payment, of the edited amount.
        assert sorted(r["args"]["amount"] for r in receipts) == [9, 500], receipts
    else:
        assert statuses == [403, 403, 403]
        assert [r["args"]["amount"] for r in receipts] == [500], receipts
        after: Any = await panel.threads.get_state(thread_id)
        assert after["checkpoint_id"] == done["checkpoint_id"]
    # The other panel still cannot touch it.
    assert await _status(other.threads.update_state(thread_id, {"amount": 1})) == 404

    outcome = "ok" if owners_edit_state else "PERMISSION_DENIED"
    rows = await _audit(service, tokens["operator"], thread_id)
    assert rows == [
        ("resume", "panel (panel)", "ok"),
        ("edit_state", "panel (panel)", outcome),
        ("edit_state", "panel (panel)", outcome),
        ("fork", "panel (panel)", outcome),
    ], rows
    # A run that makes its thread, in its turn's commit (decision 580), with a
    # Command answering an interrupt: its maker owns the thread it makes.
    assert await _status(panel.runs.create(None, PAYMENT, command={"resume": True})) == 200


# With the default deployment alone (decision 712): `owners_edit_state` widens only what
# an owner may do to its thread (security/auth.py's `owner_may`: answering, editing),
# and this test edits nothing and answers nothing, so owners-edit ran the same path.
@pytest.mark.parametrize("owners_edit_state", [False], ids=["owners-answer"])
async def test_another_panel_cannot_read_join_or_stream_a_run_on_any_surface(
    service: TurnkeeperServer,
    tokens: dict[str, str],
    sdks: dict[str, LangGraphClient],
    owners_edit_state: bool,
) -> None:
    """A run read by id and its streams follow its thread's owner (decision 311):
    the LangGraph API's run, join and join_stream, the turn's /v1 SSE events, and
    WatchTurn over gRPC are not found for another panel; its owner reads them all."""
    panel, other = sdks["panel"], sdks["other-panel"]
    thread = await panel.threads.create()
    thread_id = thread["thread_id"]
    run = await panel.runs.create(thread_id, PAYMENT, input={"amount": 3})
    run_id = run["run_id"]
    await panel.runs.join(thread_id, run_id)

    async def streamed(sdk: LangGraphClient) -> list[str]:
        return [part.event async for part in sdk.runs.join_stream(thread_id, run_id)]

    for call in (
        other.runs.get(thread_id, run_id),
        other.runs.join(thread_id, run_id),
        streamed(other),
    ):
        assert await _status(call) == 404
    got: Any = await panel.runs.get(thread_id, run_id)
    assert got["run_id"] == run_id
    assert "values" in await streamed(panel)

    assert service.web is not None
    events = f"{service.web.url}v1/turns/{run_id}/events"
    async with httpx.AsyncClient() as http:
        for name, status in (("other-panel", 404), ("panel", 200)):
            headers = {"Authorization": f"Bearer {tokens[name]}"}
            async with http.stream("GET", events, headers=headers) as response:
                assert response.status_code == status, name

    for name, found in (("other-panel", False), ("panel", True)):
        options = ConnectionOptions(target=service.address, bearer_token=tokens[name])
        async with AsyncTurnkeeperClient(options) as client:
            watch = client.watch_turn(turns_pb2.WatchTurnRequest(turn_id=run_id))
            try:
                first = await anext(aiter(watch))
                assert found, first
            except TurnNotFound:
                assert not found, name


END_USERS_AUTH = Path(__file__).resolve().parent / "end_users" / "auth.py"


async def test_under_a_langgraph_auth_the_end_user_who_owns_the_thread_answers_it(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path, tokens: dict[str, str]
) -> None:
    """With a langgraph.json's auth, the owner is the end user (its filter): bob,
    behind the same panel token as alice, does not see alice's parked thread, so he
    neither answers nor edits it; alice answers it."""
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        langgraph_auth=f"{END_USERS_AUTH}:auth",
    )
    assert service.web is not None
    url = service.web.url.rstrip("/")
    async with (
        hosted(CONFIG, service, nats_server, replica="lg-users-pay", token=tokens["agent"]),
        get_client(
            url=url, api_key=tokens["panel"], headers={"Authorization": "Bearer token-alice"}
        ) as alice,
        get_client(
            url=url, api_key=tokens["panel"], headers={"Authorization": "Bearer token-bob"}
        ) as bob,
    ):
        thread: Any = await alice.threads.create()
        thread_id = thread["thread_id"]
        assert thread["metadata"]["owner"] == "alice"
        run = await alice.runs.create(thread_id, PAYMENT, input={"amount": 40})
        await alice.runs.join(thread_id, run["run_id"])
        for call in (
            bob.runs.wait(thread_id, PAYMENT, command={"resume": True}),
            bob.runs.get(thread_id, run["run_id"]),
            bob.threads.update_state(thread_id, {"approved": True}, as_node="gate"),
        ):
            assert await _status(call) == 404
        answered: Any = await alice.runs.wait(thread_id, PAYMENT, command={"resume": True})
        assert answered["approved"] is True and len(answered["receipts"]) == 1
