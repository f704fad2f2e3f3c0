"""Runs' webhooks through LangGraph's own SDK, delivered to a receiver process that
counts deliveries by ``webhook-id``, applies each once and verifies signatures:
delivered signed, with the run's body; refused where the address is not allowed
(422 at creation, recorded refused at delivery); retried with back-off (read from
the attempts the service records); and every run delivered, none applied twice,
with the service SIGKILLed while it delivers. On both backends."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine.handoffs import Handoffs
from turnkeeper_server.errors import Unavailable
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store.contract import Tx
from turnkeeper_server.webhooks.addresses import AddressPolicy
from turnkeeper_server.webhooks.settings import WebhookSettings

from tests.support.langgraph_host import hosted, start_host
from tests.support.nats import NatsServer
from tests.support.procs import ServiceProcess
from tests.support.service import ServiceFactory
from tests.support.webhook_receiver import SECRET, Receiver, running, service_flags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180), pytest.mark.both_backends]

_HTTP_URL = re.compile(r"console and HTTP API on (\S+)")
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
ASSISTANT = "durable-execution"


def question(text: str) -> Any:
    return {"messages": [{"role": "user", "content": text, "id": "q-1"}]}


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running() as started:
        yield started


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "webhook-secret"
    path.write_text(f"# the deployment's webhook secret\n{SECRET}\n")
    return path


def settings(secret_file: Path, **overrides: Any) -> WebhookSettings:
    base = {
        "secret_file": secret_file,
        "allow": ("127.0.0.1",),
        "retry_base": 0.2,
        "timeout": 2.0,
        "poll": 0.1,
    }
    return WebhookSettings(**{**base, **overrides})


@pytest.fixture
async def service(
    make_service: ServiceFactory, nats_server: NatsServer, secret_file: Path
) -> TurnkeeperServer:
    return await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", webhooks=settings(secret_file)
    )


@pytest.fixture
async def sdk(service: TurnkeeperServer, nats_server: NatsServer) -> AsyncIterator[LangGraphClient]:
    assert service.web is not None
    async with (
        hosted(GRAPHS, service, nats_server, replica="wh-1", step_delay=0.0),
        get_client(url=service.web.url.rstrip("/")) as client,
    ):
        yield client


async def attempts_of(sdk: LangGraphClient, thread_id: str, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = await sdk.http.get(f"/threads/{thread_id}/runs/{run_id}/webhook")
    return found


async def test_a_run_is_delivered_signed_with_its_body_and_key(
    sdk: LangGraphClient, receiver: Receiver, outcomes: Outcomes
) -> None:
    thread = await sdk.threads.create()
    run = await sdk.runs.create(
        thread["thread_id"], ASSISTANT, input=question("hi"), webhook=f"{receiver.url}/hook"
    )
    counts = await receiver.wait_applied(1)
    assert counts["bad_signatures"] == 0
    assert list(counts["applied"]) == [run["run_id"]]
    body = counts["applied"][run["run_id"]]
    assert body["run_id"] == run["run_id"]
    assert body["thread_id"] == thread["thread_id"]
    assert body["status"] == "success"
    assert body["kwargs"]["webhook"] == f"{receiver.url}/hook"
    assert body["values"]["messages"][0]["type"] == "human"
    for name in ("run_started_at", "run_ended_at", "webhook_sent_at"):
        datetime.fromisoformat(body[name])
    assert await outcomes.until_settled(run["run_id"]) == "delivered"
    seen = await attempts_of(sdk, thread["thread_id"], run["run_id"])
    assert seen["webhook"]["state"] == "delivered"
    assert [(a["attempt"], a["outcome"], a["http_status"]) for a in seen["attempts"]] == [
        (1, "delivered", 200)
    ]


async def test_a_run_stopped_at_an_interrupt_and_its_answer_each_deliver_once(
    sdk: LangGraphClient, receiver: Receiver, outcomes: Outcomes
) -> None:
    # LangGraph's server: the run that stopped at the interrupt succeeded; the run
    # that answers it is a run of its own, with its own webhook.
    thread = await sdk.threads.create()
    hook = f"{receiver.url}/hook"
    asked = await sdk.runs.create(
        thread["thread_id"], "approval", input={"topic": "tea"}, webhook=hook
    )
    first = await receiver.wait_applied(1)
    assert first["applied"][asked["run_id"]]["status"] == "success"
    assert first["applied"][asked["run_id"]]["values"]["draft"] == "a draft about tea"
    answered = await sdk.runs.create(
        thread["thread_id"], "approval", command={"resume": "yes"}, webhook=hook
    )
    both = await receiver.wait_applied(2)
    assert both["applied"][answered["run_id"]]["values"]["verdict"] == "approved"
    # The first run's turn ended again (answered): no second delivery for it.
    assert await outcomes.until_settled(answered["run_id"]) == "delivered"
    assert (await receiver.get("/counts"))["deliveries"] == {
        asked["run_id"]: 1,
        answered["run_id"]: 1,
    }


async def test_a_run_its_record_and_its_webhook_are_one_commit(
    service: TurnkeeperServer,
    sdk: LangGraphClient,
    receiver: Receiver,
    outcomes: Outcomes,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The database goes away just after a run's start committed (the full PostgreSQL
    # campaign's restart, under a cron's tick): a write the request makes after its
    # turn was handed out fails. The run was journaled and will run; so were its
    # record and its webhook's delivery, in the same commit (decision 700).
    handed: set[asyncio.Task[Any] | None] = set()
    turns = service.engine.turns
    hand_with_claim_later = turns.hand_with_claim_later

    def handed_with_claim(turn: TurnRecord, claim: str, *, reason: str) -> None:
        handed.add(asyncio.current_task())
        hand_with_claim_later(turn, claim, reason=reason)

    monkeypatch.setattr(turns, "hand_with_claim_later", handed_with_claim)
    dispatch_later = Handoffs.dispatch_later

    def dispatched(self: Handoffs, turn: TurnRecord, *, reason: str) -> None:
        handed.add(asyncio.current_task())
        dispatch_later(self, turn, reason=reason)

    monkeypatch.setattr(Handoffs, "dispatch_later", dispatched)
    write = service.db.write

    async def gone_after_the_handoff(fn: Callable[[Tx], Any]) -> Any:
        if asyncio.current_task() in handed:
            raise Unavailable("the database went away after the run's start committed")
        return await write(fn)

    monkeypatch.setattr(service.db, "write", gone_after_the_handoff)
    hook = f"{receiver.url}/hook"
    await sdk.assistants.search()  # the graphs' default assistants, written first
    run = await sdk.runs.create(
        None, ASSISTANT, input=question("hi"), webhook=hook, metadata={"kept": "yes"}
    )
    assert handed, "the run was not handed out by the service"
    counts = await receiver.wait_applied(1)
    assert counts["applied"][run["run_id"]]["status"] == "success"
    assert await outcomes.until_settled(run["run_id"]) == "delivered"
    stored: Any = await sdk.runs.get(run["thread_id"], run["run_id"])
    assert stored["metadata"]["kept"] == "yes"
    assert stored["kwargs"]["webhook"] == hook


# What no webhook may reach by default, though the loopback 127.0.0.1 is allowed.
NOT_ALLOWED = [
    "http://169.254.169.254/latest/meta-data",  # the cloud metadata address
    "http://10.1.2.3/hook",  # a private network
    "http://[::ffff:192.168.0.1]/hook",  # a private IPv4 address written as IPv6
    "http://127.0.0.2/hook",  # loopback, but not the address allowed
    "http://[::1]/hook",  # IPv6 loopback
    "file:///etc/passwd",
    "http://user:pw@example.com/hook",
]


async def test_a_webhook_to_an_address_not_allowed_is_refused_at_creation(
    service: TurnkeeperServer,
) -> None:
    # Refused before an agent is asked for anything: no agent runs here.
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"))
    try:
        thread = await client.threads.create()
        for url in NOT_ALLOWED:
            with pytest.raises(UnprocessableEntityError) as refused:
                await client.runs.create(
                    thread["thread_id"], ASSISTANT, input=question("hi"), webhook=url
                )
            assert "webhook" in str(refused.value), url
        assert await client.runs.list(thread["thread_id"]) == []
    finally:
        await client.http.client.aclose()


async def test_an_address_refused_at_delivery_is_recorded_refused(
    service: TurnkeeperServer, sdk: LangGraphClient, receiver: Receiver, outcomes: Outcomes
) -> None:
    # The operator took the loopback address off the list after the run was made
    # (as a DNS answer may change): the delivery refuses it, once, and says so.
    assert service.webhooks is not None
    service.webhooks.policy = AddressPolicy()
    thread = await sdk.threads.create()
    run = await sdk.runs.wait(
        thread["thread_id"], ASSISTANT, input=question("hi"), webhook=f"{receiver.url}/hook"
    )
    assert run is not None
    run_id = (await sdk.runs.list(thread["thread_id"]))[0]["run_id"]
    assert await outcomes.until_settled(run_id) == "refused"
    seen = await attempts_of(sdk, thread["thread_id"], run_id)
    assert seen["webhook"]["state"] == "refused"
    assert [a["outcome"] for a in seen["attempts"]] == ["refused"]
    assert "--webhook-allow" in seen["attempts"][0]["detail"]
    assert (await receiver.get("/counts"))["deliveries"] == {}


class Outcomes:
    """The outcomes the service records, as it records them (its deliverer's hook)."""

    def __init__(self, service: TurnkeeperServer) -> None:
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        assert service.webhooks is not None
        service.webhooks.on_attempt.append(
            lambda run, outcome: self.queue.put_nowait((run, outcome))
        )

    async def until_settled(self, run_id: str) -> str:
        """The run's delivery's last outcome, once it is no longer retried."""
        while True:
            run, outcome = await self.queue.get()
            if run == run_id and outcome != "retry":
                return outcome


@pytest.fixture
def outcomes(service: TurnkeeperServer) -> Outcomes:
    return Outcomes(service)


async def test_retries_back_off_until_the_receiver_takes_it(
    service: TurnkeeperServer, sdk: LangGraphClient, receiver: Receiver, outcomes: Outcomes
) -> None:
    thread = await sdk.threads.create()
    run = await sdk.runs.create(
        thread["thread_id"], ASSISTANT, input=question("hi"), webhook=f"{receiver.url}/hook?fail=3"
    )
    counts = await receiver.wait_applied(1)
    assert counts["deliveries"] == {run["run_id"]: 4}
    assert await outcomes.until_settled(run["run_id"]) == "delivered"
    seen = await attempts_of(sdk, thread["thread_id"], run["run_id"])
    assert [(a["outcome"], a["http_status"]) for a in seen["attempts"]] == [
        ("retry", 500),
        ("retry", 500),
        ("retry", 500),
        ("delivered", 200),
    ]
    registry = service.metrics.registry
    counted = {
        outcome: registry.get_sample_value(
            "turnkeeper_webhook_attempts_total", {"outcome": outcome}
        )
        for outcome in ("retry", "delivered")
    }
    assert counted == {"retry": 3.0, "delivered": 1.0}
    # Each wait at least retry_base * 2**(n-1): 0.2, 0.4, 0.8 s.
    times = counts["times"][run["run_id"]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for n, gap in enumerate(gaps, 1):
        assert gap >= 0.2 * 2 ** (n - 1) * 0.95, gaps


async def test_a_webhook_without_a_secret_is_refused(
    make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    service = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"))
    try:
        with pytest.raises(UnprocessableEntityError) as refused:
            await client.runs.create(None, ASSISTANT, input={}, webhook="https://example.com/h")
        assert "--webhook-secret-file" in str(refused.value)
    finally:
        await client.http.client.aclose()


async def test_every_run_is_delivered_once_across_a_sigkill_of_the_service(
    tmp_path: Path,
    nats_server: NatsServer,
    database_url: str | None,
    secret_file: Path,
    receiver: Receiver,
) -> None:
    runs = 4
    (tmp_path / "data").mkdir()
    proc = ServiceProcess(
        tmp_path / "data",
        nats_url=nats_server.url,
        database_url=database_url,
        extra=["--http-port", "0", *service_flags(secret_file)],
    )
    address = proc.start()
    http = proc.wait_line(_HTTP_URL).group(1).rstrip("/")
    host = await start_host(
        GRAPHS, service=address, nats_url=nats_server.url, replica="wh-kill", step_delay=0.0
    )
    client = get_client(url=http)
    made: list[str] = []
    try:
        for i in range(runs):
            thread = await client.threads.create()
            # The last run's first delivery is held by the receiver, applied and not
            # answered: the SIGKILL falls while it is in flight. The runs before it
            # may be delivered, in flight or still due.
            last = i == runs - 1
            await client.runs.wait(
                thread["thread_id"],
                ASSISTANT,
                input=question(f"q{i}"),
                webhook=f"{receiver.url}/hook" + ("?hold=1" if last else ""),
            )
            made.append((await client.runs.list(thread["thread_id"]))[0]["run_id"])
        await receiver.get(f"/wait?seen={made[-1]}")
        proc.kill()
        await receiver.get("/release")
        proc.start()
        # The delivery cut short is made again once its claim passes.
        await receiver.get(f"/wait?seen={made[-1]}&n=2")
        counts = await receiver.wait_applied(runs)
    finally:
        await client.http.client.aclose()
        await host.close()
        proc.kill()
    # Every run delivered and applied once; the one cut short was delivered again
    # with the same key, and the receiver did not apply it twice.
    assert sorted(counts["applied"]) == sorted(made)
    assert counts["bad_signatures"] == 0
    assert counts["deliveries"][made[-1]] >= 2, counts["deliveries"]
    assert all(counts["deliveries"][run_id] >= 1 for run_id in made)
